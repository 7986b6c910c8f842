"""Selection strategies by the name used in ``pbt.selection``, and the entry points that run the
configured one.

Adding a strategy: a module in ``pbt/selection/`` with its :class:`~pbt.selection.base.Strategy`
subclass and settings dataclass, and one entry in ``STRATEGIES``. Its flat keys are then accepted by
``PbtConfig`` (each strategy's keys must be unique across the ``pbt`` group).
"""
import logging
import random
from typing import TYPE_CHECKING, AbstractSet, Any, Dict, Mapping, Protocol, Sequence, Tuple, Type

from pbt.mutation.explore import ExploreConfig
from pbt.mutation.scheme import mutate_params
from pbt.sections import Section, choice_error
from pbt.selection.base import Context, Decision, MemberState, SelectionGates, Strategy
from pbt.selection.dexpbt import DexPbt
from pbt.selection.population import check_policy_idx
from pbt.selection.threshold import Threshold

if TYPE_CHECKING:
    from pbt.storage.record import Record


class SelectionSettings(Protocol):
    """The parts of :class:`pbt.config.PbtConfig` that selection reads."""

    selection: str
    num_policies: int
    restarted: bool
    gates: SelectionGates
    explore: ExploreConfig
    strategies: Mapping[str, Section]


logger = logging.getLogger(__name__)

STRATEGIES: Dict[str, Type[Strategy]] = {
    "dexpbt": DexPbt,
    "threshold": Threshold,
}
"""Every selection strategy by name: the one list of valid ``pbt.selection`` values."""


def strategy_names() -> Tuple[str, ...]:
    """The valid values of ``pbt.selection``, sorted."""
    return tuple(sorted(STRATEGIES))


def get_strategy(name: str) -> Type[Strategy]:
    """The strategy registered as ``name``; ConfigError with a did-you-mean and the valid names."""
    strategy = STRATEGIES.get(name) if isinstance(name, str) else None
    if strategy is None:
        raise choice_error("selection", str(name), strategy_names(), noun="rules", what="selection rule ")
    return strategy


def default_settings() -> Dict[str, Section]:
    """Every strategy's settings at their defaults, by strategy name."""
    return {name: strategy.config_class() for name, strategy in STRATEGIES.items()}


def decide(own: MemberState, peers: Sequence["Record"], cfg: SelectionSettings, rng: random.Random,
           *, banned_donors: AbstractSet[int] = frozenset()) -> Decision:
    """Decide what this member does at this PBT iteration, by the strategy ``cfg.selection``.

    ``banned_donors``: members that stay in the ranking (counts, groups, spread unchanged) but are
    never taken as donors (e.g. members whose heartbeat went stale).
    """
    strategy_class = get_strategy(cfg.selection)
    check_policy_idx(own.record.policy_idx, cfg.num_policies)
    explore = cfg.explore

    def mutate(params: Mapping[str, Any], rng: random.Random) -> Dict[str, Any]:
        return mutate_params(params, explore, rng)

    context = Context(cfg.num_policies, cfg.gates, mutate, frozenset(banned_donors))
    strategy = strategy_class(cfg.strategies[cfg.selection], context)
    decision = strategy.decide(own, peers, rng)
    logger.debug("PBT policy %d: %s (%s)", own.record.policy_idx, decision.action, decision.reason)
    return decision


def initial_mutation(params: Mapping[str, Any], cfg: SelectionSettings, rng: random.Random) -> Dict[str, Any]:
    """The one mutation of a fresh member's hyperparameters, so the population starts diverse.

    Returns the params unchanged for a restarted member (``cfg.restarted``), with
    ``pbt.initial_mutation=false``, and for strategies that declare no initial mutation.
    """
    if cfg.restarted or not cfg.explore.initial_mutation or not get_strategy(cfg.selection).initial_mutation:
        return dict(params)
    return mutate_params(params, cfg.explore, rng)
