"""OmegaConf resolvers used by the YAML configs (registered once, idempotently; no torch), and where
those configs are."""
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf



def _config_dir() -> Path:
    """``pbt/configs`` in an installed wheel, else ``configs/`` next to the ``pbt`` package (a checkout)."""
    package = Path(__file__).resolve().parent
    installed = package / "configs"
    return installed if (installed / "config.yaml").is_file() else package.parent / "configs"


#: The Hydra config directory, as an absolute path: a relative one would make Hydra look for a
#: ``configs`` Python package when the entry point is imported rather than run as ``__main__``
#: (``python -m pbt.play`` runs ``pbt.tools.play``).
CONFIG_DIR = str(_config_dir())


def resolve_default(default: Any, arg: Any) -> Any:
    """``${resolve_default:512,${num_envs}}``: ``arg`` unless it is empty, else ``default``."""
    return default if arg in ("", None) else arg


def register_resolvers() -> None:
    """Register the project's resolvers with OmegaConf (safe to call more than once)."""
    if not OmegaConf.has_resolver("resolve_default"):
        OmegaConf.register_new_resolver("resolve_default", resolve_default)
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a).lower() == str(b).lower())
