"""Equal-experience comparison: records as of the compared iteration, for every strategy; the
decision says which iterations were compared; records carry the history it needs."""
import random
from typing import Any, Dict, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.selection import KEEP, REPLACE, STRATEGIES, MemberState, decide, population_view, rank
from pbt.selection.experience import Pair, align, describe, fitness, known, pair
from pbt.storage.record import MAX_HISTORY, Record, parse_record, plain_history, record_to_yaml

LR = "train.params.config.learning_rate"
FRAME = 50_000_000


def rec(idx: int, iteration: int, objective: Optional[float], history: Optional[Dict[int, Optional[float]]] = None,
        frames_since_replace: int = FRAME) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=FRAME, objective=objective, params={LR: 3e-4},
                  checkpoint=f"{iteration:06d}.pth", checksum="0" * 64, frames_since_replace=frames_since_replace,
                  history=dict(history or {}))


def test_known_reads_the_history_and_the_record_objective() -> None:
    record = rec(0, 10, 9.0, {4: 1.0, 5: None, 6: float("nan"), 10: 3.0, 11: 5.0})
    assert known(record) == {4: 1.0, 10: 9.0}  # the record's objective is the word at its iteration
    assert known(rec(0, 10, None, {4: 1.0})) == {4: 1.0}
    assert known(rec(0, 3, 2.0)) == {3: 2.0}  # an older record without history


def test_pair_takes_the_newest_common_iteration_else_own_at_or_after_the_peer() -> None:
    assert pair({3: 0.5, 5: 0.7, 10: 1.0}, {1: 4.0, 3: 5.0, 4: 6.0}) == Pair(3, 3, 5.0, 0.5)
    # no common iteration (own took weights at 6): the peer at its newest, own at its next known
    assert pair({7: 2.0, 10: 3.0}, {1: 4.0, 4: 6.0}) == Pair(4, 7, 6.0, 2.0)
    assert pair({10: 3.0}, {4: 6.0}) == Pair(4, 10, 6.0, 3.0)
    assert pair({10: 3.0}, {}) is None and pair({}, {4: 6.0}) is None


def test_align_translates_each_peer_by_own_progress_since_its_pair() -> None:
    own = rec(0, 10, 1.0, {3: 0.5, 8: 0.9, 10: 1.0})
    view = {0: own, 1: rec(1, 3, 5.0, {2: 1.0, 3: 5.0}, ), 2: rec(2, 8, 6.0), 3: None,
            4: rec(4, 9, None), 5: rec(5, 9, float("nan"), {8: 2.0})}
    peers, pairs = align(own, view)
    by_idx = {p.policy_idx: p for p in peers}
    assert pairs == {1: Pair(3, 3, 5.0, 0.5), 2: Pair(8, 8, 6.0, 0.9)}
    assert by_idx[1].objective == 5.0 + (1.0 - 0.5) and by_idx[1].history == {2: 1.5, 3: 5.5}
    assert by_idx[1].iteration == 3 and by_idx[1].checkpoint == view[1].checkpoint
    assert by_idx[2].objective == 6.0 + (1.0 - 0.9)
    assert by_idx[4] is view[4] and by_idx[5] is view[5]  # unknown and diverged peers stay as they are
    assert describe(own, pairs) == ("; compared at equal experience (own newest 10): at iteration 3 with 1; "
                                    "at iteration 8 with 2")
    assert align(rec(0, 10, None), view) == ([view[i] for i in (1, 2, 4, 5)], {})  # unknown own: as it is


def test_align_translates_the_window_a_strategy_averages() -> None:
    own = rec(0, 6, 6.0, {3: 1.0, 4: 2.0, 5: 4.0, 6: 6.0})
    peer = rec(1, 4, 3.0, {3: 2.0, 4: 3.0})
    peers, pairs = align(own, {0: own, 1: peer}, window=2)
    # own's 2-mean now (5.0) minus own's 2-mean at iteration 4 (1.5): the peer's 2-mean 2.5 moves to 6.0
    assert pairs[1] == Pair(4, 4, 3.0, 2.0) and fitness(peers[0], 2) == 6.0 and fitness(own, 2) == 5.0


def cfg_for(selection: str, **kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies=4, policy_idx=0, selection=selection,
                                  mutation={LR: "mutate_float"}, start_after=0, initial_delay=0, ready_after=0,
                                  significance=None, mutation_rate=1.0, replace_fraction_worst=0.25,
                                  replace_fraction_best=0.25, threshold_abs_relative=False)
    values.update(kwargs)
    return pbt_config(values)


def fast_bad_population() -> Dict[int, Record]:
    """Member 0 is fast (iteration 10) and bad: at iteration 3 it had 0.2 where the slow members
    (newest record: iteration 3) had 4-6. Its newest objective (6.5) beats their early ones."""
    return {0: rec(0, 10, 6.5, {3: 0.2, 6: 1.0, 10: 6.5}),
            1: rec(1, 3, 6.0, {1: 1.0, 2: 3.0, 3: 6.0}),
            2: rec(2, 3, 5.0, {1: 1.0, 3: 5.0}),
            3: rec(3, 3, 4.0, {3: 4.0})}


@pytest.mark.parametrize("selection", sorted(STRATEGIES))
def test_a_fast_bad_member_is_judged_at_equal_experience(selection: str) -> None:
    population = fast_bad_population()
    own = MemberState(population[0], 6.5, FRAME)
    peers = [population[i] for i in (1, 2, 3)]
    kwargs: Dict[str, Any] = {"elitism": True, "tournament_size": 4}
    fair = decide(own, peers, cfg_for(selection, **kwargs), random.Random(0))
    assert fair.action == REPLACE and fair.donor_idx in ((1, 2) if selection in ("threshold", "mfpbt") else (1,)), fair.reason
    assert fair.compared == {1: (3, 3), 2: (3, 3), 3: (3, 3)}
    assert "compared at equal experience (own newest 10): at iteration 3 with 1, 2, 3" in fair.reason
    assert fair.donor is population[fair.donor_idx]  # the donor's newest record (its weights)
    unfair = decide(own, peers, cfg_for(selection, equal_experience=False, **kwargs), random.Random(0))
    assert unfair.action != REPLACE and unfair.compared == {} and "equal experience" not in unfair.reason


def test_without_lag_nothing_is_aligned() -> None:
    population = {i: rec(i, 5, o, {4: o, 5: o}) for i, o in {0: 1.0, 1: 9.0, 2: 8.0, 3: 7.0}.items()}
    decision = decide(MemberState(population[0], None, FRAME), [population[i] for i in (1, 2, 3)],
                      cfg_for("threshold"), random.Random(0))
    assert decision.compared == {1: (5, 5), 2: (5, 5), 3: (5, 5)} and "compared at" not in decision.reason


def test_a_keep_reports_the_compared_iterations_too() -> None:
    population = fast_bad_population()
    decision = decide(MemberState(population[1], None, FRAME), [population[i] for i in (0, 2, 3)],
                      cfg_for("threshold", policy_idx=1), random.Random(0))
    assert decision.action == KEEP and decision.compared == {2: (3, 3), 3: (3, 3)}


def late_separation_population() -> Dict[int, Record]:
    """The issue's population at member 0's iteration 5: member 1 is slow (iteration 1), member 2
    just took weights (objective unknown), member 3 separated from iteration 3 on. Compared at the
    slowest peer's iteration (1), everyone looked alike."""
    return {0: rec(0, 5, -1.6, {i: -1.6 for i in range(1, 6)}),
            1: rec(1, 1, -1.5, {1: -1.5}),
            2: rec(2, 4, None, {4: None}, frames_since_replace=0),
            3: rec(3, 5, 6.6, {1: -1.5, 2: -1.5, 3: 1.35, 4: 3.0, 5: 6.6})}


@pytest.mark.parametrize("selection", sorted(STRATEGIES))
def test_a_slow_or_unscored_peer_does_not_hold_back_the_others(selection: str) -> None:
    population = late_separation_population()
    kwargs: Dict[str, Any] = {"tournament_size": 4, "replace_fraction_worst": 0.5}
    decision = decide(MemberState(population[0], None, FRAME), [population[i] for i in (1, 2, 3)],
                      cfg_for(selection, **kwargs), random.Random(0))
    assert decision.action == REPLACE and decision.donor_idx == 3, decision.reason
    assert decision.compared == {1: (1, 1), 3: (5, 5)}
    assert "compared at equal experience (own newest 5): at iteration 1 with 1; at iteration 5 with 3" in decision.reason


# -- properties over synthetic histories ------------------------------------------------------------

VALUE = st.one_of(st.none(), st.integers(-20, 20).map(float))


@st.composite
def histories(draw: Any, newest: int) -> Dict[int, Optional[float]]:
    """A member's objective by iteration: from some start (its last replacement) to ``newest``,
    unknown at some iterations."""
    start = draw(st.integers(0, newest))
    return {i: draw(VALUE) for i in range(start, newest + 1)}


@st.composite
def populations(draw: Any) -> Dict[int, Record]:
    """Member 0 at its newest iteration with a known objective, and 1-5 peers at or before it."""
    newest = draw(st.integers(0, 12))
    own = draw(histories(newest))
    own[newest] = float(draw(st.integers(-20, 20)))
    population = {0: rec(0, newest, own[newest], own)}
    for idx in range(1, draw(st.integers(2, 6))):
        their_newest = draw(st.integers(0, newest))
        history = draw(histories(their_newest))
        population[idx] = rec(idx, their_newest, history[their_newest], history)
    return population


def common_order(own: Record, peer: Record) -> Optional[int]:
    """-1: own worse at every iteration both know, 1: better at every one, 0: mixed; None: no common one."""
    mine, theirs = known(own), known(peer)
    common = set(mine) & set(theirs)
    if not common:
        return None
    if all(mine[i] < theirs[i] for i in common):
        return -1
    if all(mine[i] > theirs[i] for i in common):
        return 1
    return 0


@settings(max_examples=300, deadline=None)
@given(populations(), st.sampled_from(sorted(STRATEGIES)), st.integers(0, 2 ** 16))
def test_a_member_worse_at_every_common_iteration_is_never_ranked_above(
        population: Dict[int, Record], selection: str, seed: int) -> None:
    own = population[0]
    peers = [population[i] for i in sorted(population) if i]
    view = population_view(own, peers, len(population))
    aligned, pairs = align(own, view)
    ranking = rank(population_view(own, aligned, len(population)), 0)
    decision = decide(MemberState(own, None, FRAME), peers,
                      cfg_for(selection, num_policies=len(population), tournament_size=2, elitism=True),
                      random.Random(seed))
    for peer in peers:
        order = common_order(own, peer)
        if order == -1:
            assert ranking.index(peer.policy_idx) < ranking.index(0)
        if order == 1:  # the peer is worse at every common iteration: never ranked above, never copied
            assert ranking.index(peer.policy_idx) > ranking.index(0)
            assert decision.donor_idx != peer.policy_idx, decision.reason


@settings(max_examples=300, deadline=None)
@given(populations())
def test_no_comparison_takes_a_peer_at_more_frames_than_own(population: Dict[int, Record]) -> None:
    own = population[0]
    peers = [population[i] for i in sorted(population) if i]
    decision = decide(MemberState(own, None, FRAME), peers, cfg_for("threshold", num_policies=len(population)),
                      random.Random(0))
    mine = known(own)
    for idx, (theirs, ours) in decision.compared.items():
        assert theirs <= ours <= own.iteration
        assert theirs in known(population[idx]) and ours in mine  # both known there: real evidence
    compared_or_not = {i for i, r in population.items() if i and known(r)}
    assert set(decision.compared) == compared_or_not  # every peer with a known objective is compared


def test_history_round_trips_through_the_record_and_stays_bounded() -> None:
    record = rec(2, 7, 1.5, {5: 1.0, 6: None, 7: 1.5})
    back = parse_record(record_to_yaml(record), "t")
    assert back.history == {5: 1.0, 6: None, 7: 1.5}
    legacy = record_to_yaml(record).decode().replace(',\n "history": {"5": 1.0, "6": null, "7": 1.5}', "")
    assert "history" not in legacy and parse_record(legacy.encode(), "t").history == {}  # older records
    many = plain_history({i: float(i) for i in range(MAX_HISTORY + 50)})
    assert len(many) == MAX_HISTORY and min(many) == 50
    assert plain_history({1: float("nan"), 2: float("inf"), 3: 2}) == {1: None, 2: None, 3: 2.0}
