"""All glue to rl_games: the agent adapter (:mod:`~pbt.rl_games.agent`, :mod:`~pbt.rl_games.a2c`,
:mod:`~pbt.rl_games.registry`), carrying out a PBT decision (:mod:`~pbt.rl_games.exploit`), the
observer's hooks (:mod:`~pbt.rl_games.observer`), building a Runner (:mod:`~pbt.rl_games.runner`), the
task as an rl_games env (:mod:`~pbt.rl_games.vecenv`) and TensorBoard / W&B
(:mod:`~pbt.rl_games.tensorboard`). See docs/rl_games.md.

Importing this package (and :mod:`~pbt.rl_games.runner`) does not import torch or rl_games: Isaac Gym
must be imported before torch. The observer, exploit and vecenv modules import them.
"""

from pbt.rl_games.a2c import ContinuousPpoAdapter, DiscretePpoAdapter, PpoAdapter
from pbt.rl_games.agent import CONFIG, AgentAdapter, nonfinite_tensors
from pbt.rl_games.registry import ADAPTERS, adapter_class, algo_name, make_adapter, register_adapter

__all__ = [
    "ADAPTERS",
    "CONFIG",
    "AgentAdapter",
    "ContinuousPpoAdapter",
    "DiscretePpoAdapter",
    "PpoAdapter",
    "adapter_class",
    "algo_name",
    "make_adapter",
    "nonfinite_tensors",
    "register_adapter",
]
