"""Where members run: ``processes`` (this machine) and ``slurm`` (sbatch job arrays).

Each backend module declares its own command-line options and runs the members (the interface is
in ``base.py``). To add a backend: write ``launcher/backends/<name>.py`` and add it to ``BACKENDS``.
"""

from typing import Dict

from pbt.errors import ConfigError, did_you_mean
from pbt.launcher.backends import processes, slurm
from pbt.launcher.backends.base import Backend

BACKENDS: Dict[str, Backend] = {"processes": processes, "slurm": slurm}
DEFAULT_BACKEND = "processes"


def get_backend(name: str) -> Backend:
    """The backend module called ``name``."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(
            f"unknown launcher backend {name!r}; choose one of {sorted(BACKENDS)}.{did_you_mean(name, BACKENDS)}"
        ) from None
