"""Config group choices on the command line (``pbt/selection=<name>``), checked before Hydra.

Hydra answers an unknown group option with a stack of its own; this says which option was meant
("did you mean") and where the options live. Standard library only (Python 3.8).
"""

from pathlib import Path
from typing import Mapping, Sequence

from pbt.errors import ConfigError, did_you_mean

CHECKED_GROUPS = ("pbt/selection", "pbt/search_space", "pbt/mutation")
"""The groups whose command-line choices are checked."""


def check_group_choices(
    overrides: Sequence[str], config_dir: Path, registered: Mapping[str, Sequence[str]] = {}
) -> None:
    """ConfigError for an override choosing an option of a checked group that has no config file
    and is not among the ``registered`` (generated) options of that group."""
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in CHECKED_GROUPS or value in ("", "null"):
            continue
        files = [path.stem for path in (Path(config_dir) / key).glob("*.yaml")]
        options = sorted({*files, *registered.get(key, ())})
        if value not in options:
            where = f"the files in configs/{key}/" if files else "built in"
            raise ConfigError(
                f"{key}={value}: there is no such option.{did_you_mean(value, options)} "
                f"Options: {', '.join(options)} ({where})."
            )
