"""What a backend module provides, and the command-line helpers the backends share.

A backend is a module with three functions (see ``processes.py`` and ``slurm.py``)::

    add_cli_args(parser)                 # its own option group of ``python -m launcher.run``
    options_from_args(args) -> options   # validated options (raises ConfigError)
    run(run_name, members, options)      # start the members; returns the exit status

and one entry in ``launcher.backends.BACKENDS``.
"""

import argparse
from typing import Any, List, Protocol

from pbt.launcher.run_description import Member


class Backend(Protocol):
    """The interface of a backend module."""

    def add_cli_args(self, parser: argparse.ArgumentParser) -> None:
        """Add the backend's option group to the launcher's parser."""

    def options_from_args(self, args: argparse.Namespace) -> Any:
        """The backend's options from the parsed command line; raises ConfigError when invalid."""

    def run(self, run_name: str, members: List[Member], options: Any) -> int:
        """Run ``members`` and return the launcher's exit status."""


def str2bool(value: str) -> bool:
    """``--flag=False`` style booleans for argparse."""
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {value!r}")
