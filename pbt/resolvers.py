"""OmegaConf resolvers used by the YAML configs (registered once, idempotently; no torch)."""
from typing import Any

from omegaconf import OmegaConf


def resolve_default(default: Any, arg: Any) -> Any:
    """``${resolve_default:512,${num_envs}}``: ``arg`` unless it is empty, else ``default``."""
    return default if arg in ("", None) else arg


def register_resolvers() -> None:
    """Register the project's resolvers with OmegaConf (safe to call more than once)."""
    if not OmegaConf.has_resolver("resolve_default"):
        OmegaConf.register_new_resolver("resolve_default", resolve_default)
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a).lower() == str(b).lower())
