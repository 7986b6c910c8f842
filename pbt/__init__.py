"""Decentralized, filesystem-coordinated Population-Based Training for rl_games PPO.

Importing ``pbt`` does not import torch: the core modules (config, mutation, selection, workspace
records, restart, launcher) run on Python 3.8 without it.
"""

from pbt.errors import ConfigError, PbtError, TaskError, WorkspaceError

__version__ = "0.1.0"

__all__ = ["ConfigError", "PbtError", "TaskError", "WorkspaceError", "__version__"]
