"""Issue 26 moved the network change of an explore step into the Decision (drawn and planned
inside ``selection.decide``) and changed how decide is organised. Behaviour must not change: on
thousands of random populations (every strategy, gates, invalid donors, banned donors, network
mutations on and off) the new ``decide`` returns what the code before it returned: the same Decision,
the same network change, the same refusals, and the rng left in the same state.

The code before is frozen below (``old_decide`` and ``old_member_decide``: ``PbtMember.iterate``'s
``explore_settings`` + ``decide`` + ``plan_network``), copied from the commit before issue 26."""
import dataclasses
import logging
import math
import random
from typing import AbstractSet, Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pytest

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.mutation.network import (HYPERPARAMETERS, NetworkChange, NetworkMutationConfig, NetworkSpec, NetworkTracker,
                                  draw_kind, network_of, plan_change)
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.scheme import checked_params, mutate_params
from pbt.mutation.scheme import perturb as perturb_params
from pbt.selection import KEEP, STRATEGIES, Context, Decision, MemberState, decide
from pbt.selection.experience import Pair, align, describe
from pbt.selection.population import population_view
from pbt.selection.population import refused_for_params as invalid_donors  # renamed by issue 26
from pbt.storage.record import check_policy_idx
from pbt.selection.registry import SelectionSettings, get_strategy
from pbt.storage.record import Record

logger = logging.getLogger("frozen")

# -- the code before issue 26, frozen ------------------------------------------------------------------


def old_decide(
    own: MemberState,
    peers: Sequence[Record],
    cfg: SelectionSettings,
    rng: random.Random,
    *,
    banned_donors: AbstractSet[int] = frozenset(),
    on_refused: Optional[Callable[[int, str], None]] = None,
    members: Optional[Collection[int]] = None,
) -> Decision:
    """``pbt.selection.decide`` before issue 26, verbatim but for this docstring."""
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

    def mutate(params: Mapping[str, Any], rng: random.Random) -> Dict[str, Any]:
        return mutate_params(params, explore, rng)

    def check(params: Any) -> List[str]:
        return checked_params(params, own.record.params, explore.mutation, explore.bounds, explore.search_space)[1]

    view = population_view(own.record, peers, population)
    refused = invalid_donors(view, own.record.policy_idx, check)
    for idx, why in refused.items():
        if on_refused is not None:
            on_refused(idx, why)
        else:
            logger.warning("PBT policy %d: member %d is no donor: %s", own.record.policy_idx, idx, why)

    def perturb(
        params: Mapping[str, Any],
        rng: random.Random,
        factors: Sequence[float],
        resample_probability: float,
        perturb_probability: float,  # truncation's per-key probability, added later; 1.0 (every key) by default
    ) -> Dict[str, Any]:
        return perturb_params(params, explore, rng, factors, resample_probability, perturb_probability)

    context = Context(
        size,
        cfg.gates,
        mutate,
        frozenset(banned_donors) | frozenset(refused),
        perturb,
        None if isinstance(population, int) else population,
        explore.search_space,
    )
    strategy = strategy_class(cfg.strategies[cfg.selection], context)
    pairs: Dict[int, Pair] = {}
    if cfg.gates.equal_experience:
        peers, pairs = align(own.record, view, strategy.window)
    else:
        peers = [r for i, r in sorted(view.items()) if r is not None and i != own.record.policy_idx]
    decision = strategy.decide(own, peers, rng)
    if decision.donor is not None:  # the donor's newest record (its weights), not the copy ranked
        decision = dataclasses.replace(decision, donor=view.get(decision.donor.policy_idx) or decision.donor)
    elastic = "" if isinstance(population, int) else f"; elastic population: members {list(population)} ranked"
    compared = {i: (p.peer_iteration, p.own_iteration) for i, p in pairs.items()}
    decision = dataclasses.replace(
        decision, compared=compared, reason=decision.reason + describe(own.record, pairs) + elastic
    )
    decision = _old_checked(decision, explore)
    logger.debug("PBT policy %d: %s (%s)", own.record.policy_idx, decision.action, decision.reason)
    return decision


def _old_checked(decision: Decision, explore: ExploreConfig) -> Decision:
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




def old_member_decide(
    own: MemberState, peers: List[Record], cfg: PbtConfig, rng: random.Random, tracker: Optional[NetworkTracker],
    banned: AbstractSet[int], on_refused: Callable[[int, str], None],
) -> Tuple[Decision, Optional[NetworkChange]]:
    """PbtMember.iterate before issue 26: explore_settings (the tracker draws a kind; unless it is
    hyperparameters the config is copied with mutation_rate 0), decide, plan_network."""
    kind = None
    settings: Any = cfg
    if tracker is not None:
        kind = draw_kind(tracker.settings, rng)
        if kind != HYPERPARAMETERS:
            explore = dataclasses.replace(cfg.explore, mutation_rate=0.0, min_mutations=0)
            settings = dataclasses.replace(cfg, explore=explore)
    decision = old_decide(own, peers, settings, rng, banned_donors=banned, on_refused=on_refused)
    change = None
    if tracker is not None and kind is not None and decision.action != KEEP:
        donor_network = None if decision.donor is None else decision.donor.network
        base = tracker.within_limits(network_of(donor_network), "the donor's network") or tracker.spec
        change = plan_change(base, kind, tracker.settings, rng)
    return decision, change


# -- random populations ------------------------------------------------------------------------------

P = "train.params.config."
SCHEME = {P + "learning_rate": "mutate_float", P + "gamma": "mutate_discount", P + "mini_epochs": "mutate_mini_epochs"}
SPACE = {P + "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2}}
UNITS = (16, 32, 48, 64)


def random_params(rng: random.Random, junk: bool) -> Dict[str, Any]:
    params: Dict[str, Any] = {P + "learning_rate": 10 ** rng.uniform(-4.5, -2.5), P + "gamma": rng.uniform(0.9, 0.999),
                              P + "mini_epochs": rng.randint(1, 8)}
    if junk and rng.random() < 0.08:  # a peer's junk: refused as a donor
        params[rng.choice(sorted(params))] = rng.choice([math.nan, -1.0, "x", 1e30])
    return params


def random_objective(rng: random.Random) -> Optional[float]:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.15:
        return math.nan
    return rng.gauss(0.0, 10.0)


def random_network(rng: random.Random) -> Optional[Dict[str, Any]]:
    if rng.random() < 0.3:
        return None
    units = [rng.choice(UNITS + (512,)) for _ in range(rng.randint(1, 3))]
    return {"units": units, "activation": rng.choice(["elu", "relu", "tanh"])}


def random_record(rng: random.Random, idx: int, iteration: int, own: bool = False) -> Record:
    history = {i: random_objective(rng) for i in range(max(0, iteration - rng.randint(0, 4)), iteration)}
    frame = iteration * 1000
    return Record(policy_idx=idx, iteration=iteration, frame=frame, objective=random_objective(rng),
                  params=random_params(rng, junk=not own), checkpoint=f"{iteration:06d}.pth", checksum=f"{idx:02d}{iteration:062d}",
                  time=float(iteration + rng.random()), episode_returns=[rng.gauss(0, 10) for _ in range(rng.randint(0, 12))],
                  frames_since_replace=rng.randint(0, frame), history=history, network=random_network(rng))


def random_config(rng: random.Random, selection: str, size: int, own_idx: int) -> PbtConfig:
    values: Dict[str, Any] = dict(
        enabled=True, num_policies=size, policy_idx=own_idx, selection=selection, mutation=dict(SCHEME),
        mutation_rate=rng.choice([0.0, 0.3, 1.0]), start_after=rng.choice([0, 0, 1000]),
        initial_delay=rng.choice([0, 0, 5000]), ready_after=rng.choice([0, 0, 2000]),
        significance=rng.choice([None, 0.05, 0.5]), equal_experience=rng.random() < 0.7,
        dbg_mode=selection == "dexpbt" and rng.random() < 0.1)
    if selection in ("pb2", "mfpbt") or rng.random() < 0.2:
        values["search_space"] = dict(SPACE)
    return pbt_config(values)


def random_tracker(rng: random.Random) -> Optional[NetworkTracker]:
    if rng.random() < 0.4:
        return None
    weights = [rng.random() for _ in range(5)]
    total = sum(weights)
    none, architecture, parameters, activation = (w / total for w in weights[:4])
    settings = NetworkMutationConfig(none=none, architecture=architecture, parameters=parameters,
                                     activation=activation, hyperparameters=1.0 - none - architecture - parameters - activation,
                                     max_units=64, new_layer=rng.random())
    return NetworkTracker(settings, NetworkSpec(tuple(rng.choice(UNITS) for _ in range(rng.randint(1, 3))), "elu"))


def random_case(seed: int) -> Tuple[MemberState, List[Record], PbtConfig, Optional[NetworkTracker], AbstractSet[int]]:
    rng = random.Random(seed)
    selection = sorted(STRATEGIES)[seed % len(STRATEGIES)]
    size = rng.randint(2, 8)
    own_idx = rng.randrange(size)
    own_iteration = rng.randint(1, 12)
    own = random_record(rng, own_idx, own_iteration, own=True)
    peers = [random_record(rng, idx, rng.randint(0, own_iteration + 1))
             for idx in range(size + 1) if idx != own_idx for _ in range(rng.randint(0, 2))]
    banned = {idx for idx in range(size) if rng.random() < 0.15}
    frames = rng.choice([500, 50_000, 50_000])
    member = MemberState(own, rng.choice([None, rng.gauss(0, 10)]), frames)
    return member, peers, random_config(rng, selection, size, own_idx), random_tracker(rng), banned


SEEDS = 3000


@pytest.mark.parametrize("block", range(6))
def test_decide_matches_the_code_before_on_random_populations(block: int) -> None:
    pytest.importorskip("sklearn")  # PB2's GP
    acted = changed_network = refused = 0
    for seed in range(block * SEEDS // 6, (block + 1) * SEEDS // 6):
        own, peers, cfg, tracker, banned = random_case(seed)
        old_refusals: List[Tuple[int, str]] = []
        new_refusals: List[Tuple[int, str]] = []
        old_rng, new_rng = random.Random(seed), random.Random(seed)
        before, change = old_member_decide(own, list(peers), cfg, old_rng, tracker, banned,
                                           lambda i, why: old_refusals.append((i, why)))
        after = decide(own, list(peers), cfg, new_rng, refused_donors=banned, network=tracker)
        new_refusals.extend(after.refused.items())
        expected = dataclasses.replace(before, network=change, refused=dict(old_refusals))
        assert repr(after) == repr(expected), f"seed {seed}"
        assert new_refusals == old_refusals and new_rng.getstate() == old_rng.getstate(), f"seed {seed}"
        acted += after.action != KEEP
        changed_network += after.network is not None and after.network.changes_network
        refused += bool(new_refusals)
    # the random populations exercise what they are meant to: acting, network changes, refusals
    assert acted > SEEDS // 6 // 10 and changed_network > 0 and refused > 0, (acted, changed_network, refused)
