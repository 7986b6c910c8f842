"""What every Hydra entry point (train, play, replay) does to its ``key=value`` overrides before
Hydra composes: register the generated config nodes, rewrite the forms Hydra cannot compose, check
group choices, and refuse a key that the chosen selection strategy would ignore, saying where it
belongs (Hydra alone would only say "not in struct").
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from pbt.config import STRATEGY_ONLY_GATES, misplaced_key_error, strategy_of
from pbt.errors import ConfigError
from pbt.groups import check_group_choices
from pbt.resolvers import CONFIG_DIR, register_resolvers
from pbt.selection.registry import strategy_names
from pbt.tasks.registry import rewrite_task_overrides

SELECTION_GROUP = "pbt/selection"
NETWORK_MUTATION = "pbt.network_mutation"
AGILERL = "agilerl"


def rewrite_selection(overrides: Sequence[str]) -> List[str]:
    """``pbt.selection=<name>`` -> ``pbt/selection=<name>``: choosing the strategy's node brings its keys."""
    out = []
    for arg in overrides:
        key, sep, value = arg.partition("=")
        out.append(f"{SELECTION_GROUP}={value}" if sep and key.lstrip("+") == "pbt.selection" else arg)
    return out


def prepare(overrides: Sequence[str]) -> List[str]:
    """The overrides Hydra gets; ConfigError for a bad group choice or a misplaced key."""
    register_resolvers()
    out = rewrite_selection(rewrite_task_overrides(overrides))
    check_group_choices(out, Path(CONFIG_DIR), registered={SELECTION_GROUP: strategy_names()})
    check_placement(out)
    return out


def _pbt_key(arg: str) -> str:
    key, sep, _ = arg.partition("=")
    key = key.lstrip("+~")
    return key[len("pbt.") :] if sep and key.startswith("pbt.") else ""


def check_placement(overrides: Sequence[str]) -> None:
    """Refuse ``pbt.<key>=`` overrides of another strategy's settings and ``pbt.network_mutation.*``
    without a network-mutation scheme. Composes the config (without those keys) only when such a
    key is given, to learn the strategy in effect."""
    suspects = [
        arg
        for arg in overrides
        if strategy_of(_pbt_key(arg))
        or _pbt_key(arg) in STRATEGY_ONLY_GATES
        or _pbt_key(arg).startswith("network_mutation")
    ]
    if not suspects:
        return
    rest = [arg for arg in overrides if arg not in suspects and "=" in arg and not arg.startswith("-")]
    pbt = _compose_pbt(rest)
    if pbt is None:
        return  # Hydra reports what is wrong with the rest
    selection = str(pbt.get("selection", "threshold"))
    for arg in suspects:
        key = _pbt_key(arg)
        if key.startswith("network_mutation") and pbt.get("network_mutation") is None:
            raise ConfigError(
                f"pbt.{key} is a setting of network mutation (pbt/mutation={AGILERL}); the mutation scheme "
                f"mutates hyperparameters only: add pbt/mutation={AGILERL} or remove the key."
            )
        error = misplaced_key_error(key, arg.partition("=")[2] not in ("false", "False", "null"), selection)
        if error is not None:
            raise error


def _compose_pbt(overrides: Sequence[str]) -> Optional[Dict[Any, Any]]:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
    except (HydraException, ValueError):
        return None
    pbt = OmegaConf.to_container(cfg.pbt, resolve=False)
    return pbt if isinstance(pbt, dict) else None
