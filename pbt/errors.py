"""The project's exception hierarchy: every error the project raises derives from ``PbtError``.

Messages follow one rule: say what failed, then how to fix it (and "did you mean ...?" where a
close match exists).
"""

from difflib import get_close_matches
from typing import Iterable


class PbtError(Exception):
    """Root of every error raised by this project."""


class ConfigError(PbtError, ValueError):
    """A configuration value is missing, misspelt or out of range. Raised before training starts."""


class TaskError(ConfigError):
    """A task cannot be resolved or built (unknown name, missing optional dependency, bad class)."""


class WorkspaceError(PbtError):
    """Reading or writing the shared PBT workspace failed."""


class CorruptRecordError(WorkspaceError):
    """A record or checkpoint in the workspace is torn, truncated, foreign or fails its checksum."""


class UnsafeCheckpointError(CorruptRecordError):
    """A checkpoint would need to execute code to load (a pickle carrying objects, not tensors)."""


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """Return ' Did you mean X?' (or '') for the closest candidates to ``name``."""
    matches = get_close_matches(name, list(candidates), n=n, cutoff=0.6)
    if not matches:
        return ""
    if len(matches) == 1:
        return f" Did you mean '{matches[0]}'?"
    return " Did you mean one of: " + ", ".join(f"'{m}'" for m in matches) + "?"
