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


KEYS_NODE = "pbt_keys"
"""Name of the generated node with every ``pbt.*`` key every strategy uses (``/pbt_keys`` in
``configs/pbt/pbt_default.yaml``'s defaults list)."""


def register_configs() -> None:
    """Store the ``pbt`` group's generated nodes (:func:`pbt.config.hydra_nodes`, defaults taken
    from the section dataclasses) in Hydra's ConfigStore: ``pbt_keys``, ``pbt_network_mutation`` and
    ``pbt/selection/<name>``."""
    from hydra.core.config_store import ConfigStore

    from pbt.config import hydra_nodes

    store = ConfigStore.instance()
    for name, node in hydra_nodes().items():
        group, _, option = name.rpartition("/")
        if group:
            store.store(group=f"pbt/{group}", name=option, node=node, package="pbt")
        elif name == "keys":
            store.store(name=KEYS_NODE, node=node, package="pbt")
        else:  # network_mutation
            store.store(name=f"pbt_{name}", node=node, package=f"pbt.{name}")


def register_resolvers() -> None:
    """Register the project's resolvers with OmegaConf and its generated config nodes with Hydra
    (safe to call more than once): what every entry point does before Hydra composes."""
    register_configs()
    if not OmegaConf.has_resolver("resolve_default"):
        OmegaConf.register_new_resolver("resolve_default", resolve_default)
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a).lower() == str(b).lower())
