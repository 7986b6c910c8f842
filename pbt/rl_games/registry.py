"""rl_games algo name (``train.params.algo.name``) -> the learner's :class:`AgentAdapter` (no torch).

An algo without a registered adapter falls back to the exec-only :class:`AgentAdapter` (logged once):
PBT still exchanges weights and hyperparameters, but every hyperparameter change re-executes the
process. A new learner registers its adapter here (docs/rl_games.md).
"""

import importlib
import logging
from typing import Any, Dict, Mapping, Set, Tuple, Type

from pbt.errors import ConfigError
from pbt.rl_games.a2c import ContinuousPpoAdapter, DiscretePpoAdapter
from pbt.rl_games.agent import AgentAdapter
from pbt.rl_games.trpo.adapter import TrpoAdapter

log = logging.getLogger(__name__)

ADAPTERS: Dict[str, Type[AgentAdapter]] = {
    "a2c_continuous": ContinuousPpoAdapter,
    "a2c_discrete": DiscretePpoAdapter,
    "trpo": TrpoAdapter,
}
#: Learners this project adds to rl_games' factories: algo name -> (agent, player), as "module:Class"
#: imported when a Runner is built (rl_games' factories are per Runner).
LEARNERS: Dict[str, Tuple[str, str]] = {
    "trpo": ("pbt.rl_games.trpo.agent:TrpoAgent", "rl_games.algos_torch.players:PpoPlayerContinuous")
}
_warned: Set[str] = set()  # algo names already warned about


def register_adapter(algo_name: str, adapter: Type[AgentAdapter]) -> None:
    """Use ``adapter`` for agents of ``algo_name`` (a learner added to rl_games' algo factory)."""
    if not (isinstance(adapter, type) and issubclass(adapter, AgentAdapter)):
        raise ConfigError(f"register_adapter({algo_name!r}, {adapter!r}): the adapter must subclass AgentAdapter.")
    ADAPTERS[algo_name] = adapter


def register_learners(runner: Any) -> None:
    """Add this project's learners (:data:`LEARNERS`) to an rl_games Runner's agent and player factories."""
    for name, (agent, player) in LEARNERS.items():
        runner.algo_factory.register_builder(name, _builder(agent))
        runner.player_factory.register_builder(name, _builder(player))


def _builder(target: str) -> Any:
    def build(**kwargs: Any) -> Any:
        module, cls = target.split(":")
        return getattr(importlib.import_module(module), cls)(**kwargs)

    return build


def algo_name(config: Mapping[str, Any]) -> str:
    """``train.params.algo.name`` of a composed (plain) config."""
    try:
        return str(config["train"]["params"]["algo"]["name"])
    except (KeyError, TypeError):
        raise ConfigError(
            "the config has no train.params.algo.name: pick an rl_games learner, e.g. "
            "train.params.algo.name=a2c_continuous."
        ) from None


def adapter_class(name: str) -> Type[AgentAdapter]:
    """The adapter class of the algo ``name``; the exec-only base for an unregistered algo."""
    adapter = ADAPTERS.get(name)
    if adapter is not None:
        return adapter
    if name not in _warned:
        _warned.add(name)
        log.warning(
            "no PBT adapter for rl_games algo '%s' (known: %s): every hyperparameter change will "
            "restart the process. Register one with pbt.rl_games.register_adapter to change them in "
            "place.",
            name,
            ", ".join(sorted(ADAPTERS)),
        )
    return AgentAdapter


def make_adapter(algo: Any, name: str) -> AgentAdapter:
    """Wrap a live agent of the algo ``name``; ConfigError when it cannot save and load its state."""
    missing = [m for m in ("get_full_state_weights", "set_full_state_weights") if not hasattr(algo, m)]
    if missing:
        raise ConfigError(
            f"the rl_games agent of algo '{name}' ({type(algo).__name__}) lacks {', '.join(missing)}: "
            "PBT cannot exchange its weights. Use a learner that saves its full state."
        )
    return adapter_class(name)(algo)
