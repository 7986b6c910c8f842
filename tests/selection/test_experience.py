"""Equal-experience comparison: records as of the compared iteration, for every strategy; the
decision says which iterations were compared; records carry the history it needs."""
import random
from typing import Any, Dict, Optional

import pytest

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.selection import KEEP, REPLACE, STRATEGIES, MemberState, decide
from pbt.selection.experience import align, at_iteration, compared_iteration, objective_at
from pbt.storage.record import MAX_HISTORY, Record, parse_record, plain_history, record_to_yaml

LR = "train.params.config.learning_rate"
FRAME = 50_000_000


def rec(idx: int, iteration: int, objective: Optional[float], history: Optional[Dict[int, Optional[float]]] = None,
        frames_since_replace: int = FRAME) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=FRAME, objective=objective, params={LR: 3e-4},
                  checkpoint=f"{iteration:06d}.pth", checksum="0" * 64, frames_since_replace=frames_since_replace,
                  history=dict(history or {}))


def test_objective_at_reads_the_history() -> None:
    record = rec(0, 10, 9.0, {4: 1.0, 6: 2.0, 10: 9.0})
    assert objective_at(record, 10) == 9.0 and objective_at(record, 12) == 9.0
    assert objective_at(record, 4) == 1.0
    assert objective_at(record, 5) == 1.0  # newest entry before
    assert objective_at(record, 2) == 1.0  # history starts later (replaced since): oldest entry after
    assert objective_at(rec(0, 10, 9.0), 3) == 9.0  # no history (an older record): as it is
    # replaced at 7: its first entries are unknown (episodes still running); the first known one counts
    assert objective_at(rec(0, 10, 9.0, {8: None, 9: 4.0, 10: 9.0}), 6) == 4.0
    assert objective_at(rec(0, 10, 9.0, {3: 1.0, 4: None, 10: 9.0}), 4) == 1.0  # unknown at 4: the one before


def test_at_iteration_keeps_the_newest_checkpoint_and_cuts_the_history() -> None:
    record = rec(0, 10, 9.0, {4: 1.0, 6: 2.0, 10: 9.0})
    old = at_iteration(record, 6)
    assert (old.objective, old.history, old.checkpoint, old.iteration) == (2.0, {4: 1.0, 6: 2.0}, record.checkpoint, 10)
    assert at_iteration(record, 10) is record


def test_compared_iteration_is_the_slowest_live_peer() -> None:
    own = rec(0, 10, 1.0, {3: 0.5, 10: 1.0})
    view = {0: own, 1: rec(1, 3, 5.0), 2: rec(2, 8, 6.0), 3: None}
    assert compared_iteration(own, view, frozenset()) == 3
    assert compared_iteration(own, view, frozenset({1})) == 8  # a stale member does not hold it back
    assert compared_iteration(rec(0, 10, None), view, frozenset()) == 10  # unknown own: judged as it is
    assert compared_iteration(rec(0, 10, float("nan")), view, frozenset()) == 10
    aligned, peers, iteration = align(own, view)
    assert iteration == 3 and aligned.objective == 0.5 and [p.policy_idx for p in peers] == [1, 2]


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
    assert fair.compared_iteration == 3
    assert "compared at iteration 3 (own newest 10): equal experience" in fair.reason
    assert fair.donor is population[fair.donor_idx]  # the donor's newest record (its weights)
    unfair = decide(own, peers, cfg_for(selection, equal_experience=False, **kwargs), random.Random(0))
    assert unfair.action != REPLACE and unfair.compared_iteration == 10 and "equal experience" not in unfair.reason


def test_without_lag_nothing_is_aligned() -> None:
    population = {i: rec(i, 5, o, {4: o, 5: o}) for i, o in {0: 1.0, 1: 9.0, 2: 8.0, 3: 7.0}.items()}
    decision = decide(MemberState(population[0], None, FRAME), [population[i] for i in (1, 2, 3)],
                      cfg_for("threshold"), random.Random(0))
    assert decision.compared_iteration == 5 and "compared at" not in decision.reason


def test_a_keep_reports_the_compared_iteration_too() -> None:
    population = fast_bad_population()
    decision = decide(MemberState(population[1], None, FRAME), [population[i] for i in (0, 2, 3)],
                      cfg_for("threshold", policy_idx=1), random.Random(0))
    assert decision.action == KEEP and decision.compared_iteration == 3


def test_history_round_trips_through_the_record_and_stays_bounded() -> None:
    record = rec(2, 7, 1.5, {5: 1.0, 6: None, 7: 1.5})
    back = parse_record(record_to_yaml(record), "t")
    assert back.history == {5: 1.0, 6: None, 7: 1.5}
    legacy = record_to_yaml(record).decode().replace(',\n "history": {"5": 1.0, "6": null, "7": 1.5}', "")
    assert "history" not in legacy and parse_record(legacy.encode(), "t").history == {}  # older records
    many = plain_history({i: float(i) for i in range(MAX_HISTORY + 50)})
    assert len(many) == MAX_HISTORY and min(many) == 50
    assert plain_history({1: float("nan"), 2: float("inf"), 3: 2}) == {1: None, 2: None, 3: 2.0}
