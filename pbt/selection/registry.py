"""Selection strategies by the name used in ``pbt.selection``, and the entry points that run the
configured one.

Adding a strategy: a module in ``pbt/selection/`` with its :class:`~pbt.selection.base.Strategy`
subclass and settings dataclass, and one entry in ``STRATEGIES``. Its flat keys are then accepted by
``PbtConfig`` (each strategy's keys must be unique across the ``pbt`` group).
"""

import dataclasses
import logging
import random
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Collection,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    Union,
)

from pbt.errors import ConfigError
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.network import HYPERPARAMETERS
from pbt.mutation.scheme import checked_params, mutate_params
from pbt.mutation.scheme import perturb as perturb_params
from pbt.sections import Section, choice_error
from pbt.selection.base import KEEP, Context, Decision, MemberState, SelectionGates, Strategy
from pbt.selection.dexpbt import DexPbt
from pbt.selection.experience import Pair, align, describe
from pbt.selection.mfpbt import MfPbt
from pbt.selection.pb2 import PB2
from pbt.selection.population import population_view, refused_for_params
from pbt.selection.threshold import Threshold
from pbt.selection.tournament import Tournament
from pbt.selection.truncation import Truncation
from pbt.storage.record import check_policy_idx

if TYPE_CHECKING:
    from pbt.mutation.network import NetworkTracker
    from pbt.storage.record import Record


class SelectionSettings(Protocol):
    """The parts of :class:`pbt.config.PbtConfig` that selection reads (read-only, so a dataclass
    field or a property of a narrower type satisfies it)."""

    @property
    def selection(self) -> str: ...
    @property
    def population_size(self) -> Optional[int]: ...
    @property
    def gates(self) -> SelectionGates: ...
    @property
    def explore(self) -> ExploreConfig: ...
    @property
    def strategies(self) -> Mapping[str, Section]: ...
    @property
    def eval_episodes(self) -> int: ...


logger = logging.getLogger(__name__)

STRATEGIES: Dict[str, Type[Strategy]] = {
    "dexpbt": DexPbt,
    "threshold": Threshold,
    "truncation": Truncation,
    "tournament": Tournament,
    "pb2": PB2,
    "mfpbt": MfPbt,
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


def decide(
    own: MemberState,
    peers: Sequence["Record"],
    cfg: SelectionSettings,
    rng: random.Random,
    *,
    refused_donors: AbstractSet[int] = frozenset(),
    members: Optional[Collection[int]] = None,
    network: Optional["NetworkTracker"] = None,
) -> Decision:
    """Decide what this member does at this PBT iteration, by the strategy ``cfg.selection``.

    ``refused_donors``: members that stay in the ranking (counts, groups, spread unchanged) but are
    never taken as donors (e.g. members whose heartbeat went stale). Members whose record carries
    hyperparameters no member may train with (``pbt.mutation.checked_params``: not a number, not
    finite, outside the function's range or ``pbt.bounds``) are refused the same way, and named in
    ``Decision.refused``. Never raises for a peer's junk, and never returns a changed hyperparameter
    that fails that check.

    With ``gates.equal_experience`` each peer's record is first taken at equal experience with
    this member's, pairwise (:mod:`pbt.selection.experience`): no peer holds back the others.

    ``members``: the policy indices ranked in an elastic population (``cfg.population_size`` None,
    :func:`pbt.selection.membership.ranked_members`); this member is always one of them.

    ``network``: this member's network when it is evolved (``pbt.network_mutation``): one kind is
    drawn first, before the strategy decides; unless it is ``hyperparameters`` the scheme mutates
    nothing. A decision that acts then carries the network change (``Decision.network``).
    """
    strategy_class = get_strategy(cfg.selection)
    size = cfg.population_size
    population: Union[int, Tuple[int, ...]]
    if size is None:
        if members is None:
            raise ConfigError("an elastic population (pbt.num_policies=auto) decides among given members")
        population = tuple(sorted(set(members) | {own.record.policy_idx}))
        size = len(population)
    else:
        check_policy_idx(own.record.policy_idx, size)
        population = size
    explore = cfg.explore
    kind = None if network is None else network.draw(rng)
    if kind not in (None, HYPERPARAMETERS):  # one kind per explore step: this one leaves hyperparameters alone
        explore = dataclasses.replace(explore, mutation_rate=0.0, min_mutations=0)

    def mutate(params: Mapping[str, Any], rng: random.Random) -> Dict[str, Any]:
        return mutate_params(params, explore, rng)

    def check(params: Any) -> List[str]:
        return checked_params(params, own.record.params, explore.mutation, explore.bounds, explore.search_space)[1]

    view = population_view(own.record, peers, population)
    refused = refused_for_params(view, own.record.policy_idx, check)

    def perturb(
        params: Mapping[str, Any],
        rng: random.Random,
        factors: Sequence[float],
        resample_probability: float,
        perturb_probability: float,
    ) -> Dict[str, Any]:
        return perturb_params(params, explore, rng, factors, resample_probability, perturb_probability)

    context = Context(
        size,
        cfg.gates,
        mutate,
        frozenset(refused_donors) | frozenset(refused),
        perturb,
        None if isinstance(population, int) else population,
        explore.search_space,
        evaluation_episodes=cfg.eval_episodes,
    )
    settings = cfg.strategies[cfg.selection]
    pairs: Dict[int, Pair] = {}
    if cfg.gates.equal_experience:
        peers, pairs = align(own.record, view, strategy_class(settings, context).window)
    else:
        peers = [r for i, r in sorted(view.items()) if r is not None and i != own.record.policy_idx]
    ranked: Dict[int, Optional[Record]] = {i: None for i in view}  # the view the strategy ranks: peers as aligned
    ranked.update({r.policy_idx: r for r in peers})
    ranked[own.record.policy_idx] = own.record
    strategy = strategy_class(settings, dataclasses.replace(context, view=ranked))
    decision = strategy.decide(own, peers, rng)
    if decision.donor is not None:  # the donor's newest record (its weights), not the copy ranked
        decision = dataclasses.replace(decision, donor=view.get(decision.donor.policy_idx) or decision.donor)
    elastic = "" if isinstance(population, int) else f"; elastic population: members {list(population)} ranked"
    compared = {i: (p.peer_iteration, p.own_iteration) for i, p in pairs.items()}
    decision = dataclasses.replace(
        decision, compared=compared, reason=decision.reason + describe(own.record, pairs) + elastic
    )
    decision = dataclasses.replace(_checked(decision, explore), refused=refused)
    if network is not None and kind is not None and decision.action != KEEP:
        donor_network = None if decision.donor is None else decision.donor.network
        decision = dataclasses.replace(decision, network=network.plan(kind, donor_network, rng))
    logger.debug("PBT policy %d: %s (%s)", own.record.policy_idx, decision.action, decision.reason)
    return decision


def _checked(decision: Decision, explore: ExploreConfig) -> Decision:
    """``decision`` with its changed hyperparameters in their checked form (a whole float of an int
    key becomes an int); a keep when one fails the check (a guard: donors and mutations are checked
    already)."""
    changed = {key: after for key, (_, after) in decision.changed_params.items()}
    clean, problems = checked_params(changed, changed, explore.mutation, explore.bounds, explore.search_space)
    if problems:
        why = "; ".join(problems)
        logger.error("PBT: refusing a decision with invalid hyperparameters (%s); keeping", why)
        params = dict(decision.params_before)
        return Decision(
            KEEP, None, f"{decision.reason}; not acted on, invalid hyperparameters: {why}", params, dict(params)
        )
    return dataclasses.replace(decision, params_after={**decision.params_after, **clean})


def initial_mutation(
    params: Mapping[str, Any], cfg: SelectionSettings, rng: random.Random, restarted: bool = False
) -> Dict[str, Any]:
    """A fresh member's starting hyperparameters, so the population starts diverse: a sample of
    the search space when there is one (every key of the space drawn), else one mutation when its
    strategy declares it.

    Returns the params unchanged for a re-executed member (``restarted``), with
    ``pbt.initial_mutation=false`` (start from the values given), and for strategies that declare
    no initial mutation when there is no search space.
    """
    if restarted or not cfg.explore.initial_mutation:
        return dict(params)
    if cfg.explore.search_space:
        return cfg.explore.search_space.sample(params, rng)
    if not get_strategy(cfg.selection).initial_mutation:
        return dict(params)
    return mutate_params(params, cfg.explore, rng)
