"""MF-PBT: sub-population membership, evolution frequencies and the asymmetric migration."""
import random
from typing import Any, Dict, List, Optional

import pytest
from conftest import pbt_config
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.selection import KEEP, MUTATE, REPLACE, MemberState, decide
from pbt.selection.mfpbt import (
    MfPbtConfig,
    brackets,
    default_layout,
    layout,
    subpopulation_of,
)
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
FRAME = 10_000_000


def rec(idx: int, objective: Optional[float], iteration: int = 10) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=FRAME, objective=objective,
                  params={LR: 1e-3 * (idx + 1)}, checkpoint=f"{iteration:06d}.pth", checksum="0" * 64,
                  frames_since_replace=FRAME)


def cfg(n: int = 16, idx: int = 0, **kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies=n, policy_idx=idx, selection="mfpbt",
                                  mutation={LR: "mutate_float"}, start_after=0, initial_delay=0, ready_after=0,
                                  significance=None, bounds={LR: {"min": 1e-6, "max": 1.0}})
    values.update(kwargs)
    return pbt_config(values)


def run(objectives: Dict[int, float], idx: int, iteration: int = 10, seed: int = 0, **kwargs: Any) -> Any:
    records = {i: rec(i, o, iteration) for i, o in objectives.items()}
    own = MemberState(records[idx], None, FRAME)
    return decide(own, [r for i, r in records.items() if i != idx], cfg(len(objectives), idx, **kwargs),
                  random.Random(seed))


# -- layout ---------------------------------------------------------------------------------------


def test_the_default_layout_is_the_papers_scaled_to_the_population() -> None:
    assert default_layout(32, (1, 10, 25, 50)) == [(1, 8), (10, 8), (25, 8), (50, 8)]
    assert default_layout(16, (1, 10, 25, 50)) == [(1, 4), (10, 4), (25, 4), (50, 4)]
    assert default_layout(8, (1, 10, 25, 50)) == [(1, 2), (10, 2), (25, 2), (50, 2)]
    assert default_layout(6, (1, 10, 25, 50)) == [(1, 2), (25, 2), (50, 2)]  # the fastest and slowest kept
    assert default_layout(4, (1, 10, 25, 50)) == [(1, 2), (50, 2)]
    assert default_layout(10, (1, 10, 25, 50)) == [(1, 3), (10, 3), (25, 2), (50, 2)]
    subs = layout(MfPbtConfig(), 16)
    assert [s.members for s in subs] == [tuple(range(4 * i, 4 * i + 4)) for i in range(4)]
    assert subpopulation_of(MfPbtConfig(), 16, 9).frequency == 25


def test_explicit_sizes_and_their_errors() -> None:
    config = MfPbtConfig(mfpbt_frequencies=(1, 5), mfpbt_sizes=(3, 1))
    assert [(s.frequency, s.members) for s in layout(config, 4)] == [(1, (0, 1, 2)), (5, (3,))]
    with pytest.raises(ConfigError, match="sums to 4, but pbt.num_policies is 6"):
        layout(config, 6)
    with pytest.raises(ConfigError, match="strictly increasing"):
        MfPbtConfig(mfpbt_frequencies=(10, 1))
    with pytest.raises(ConfigError, match="one size per frequency"):
        MfPbtConfig(mfpbt_sizes=(2, 2))
    with pytest.raises(ConfigError, match="sums to 8"):
        cfg(6, mfpbt_sizes=[2, 2, 2, 2]).validate_population()
    with pytest.raises(ConfigError, match="fixed population"):
        PbtConfig.from_mapping({"selection": "mfpbt", "num_policies": "auto"}).validate_population()


def test_brackets_are_quarters() -> None:
    assert brackets(list(range(8))) == ([0, 1], [4, 5], [6, 7])
    assert brackets([3, 1, 2, 0]) == ([3], [2], [0])
    assert brackets([5, 4]) == ([5], [4], [4])  # two members: the worst is the migration bracket too
    assert brackets([1]) == ([], [], [])


# -- frequencies ----------------------------------------------------------------------------------


def test_each_sub_population_evolves_at_its_own_frequency() -> None:
    objectives = {i: float(i) for i in range(16)}  # member 4 is the worst of sub-population 1 (frequency 10)
    off = run(objectives, 4, iteration=15)
    assert off.action == KEEP and off.reason.startswith(
        "sub-population 1 (frequency 10, members [4, 5, 6, 7]) evolves at multiples of 10 intervals, not at 15")
    on = run(objectives, 4, iteration=20)
    assert on.action == REPLACE and on.donor_idx == 7 and "bottom quarter" in on.reason
    assert run(objectives, 0, iteration=7).action == REPLACE  # frequency 1: every interval


# -- selection inside and migration ---------------------------------------------------------------


def test_the_bottom_quarter_copies_the_top_quarter_in_rank_order_and_perturbs() -> None:
    objectives = {i: float(i) for i in range(32)}  # sub-population 0 = members 0..7 ranked 7, 6, ..., 0
    worst, second = run(objectives, 0), run(objectives, 1)
    assert (worst.donor_idx, second.donor_idx) == (6, 7)  # the paper's pairing: both quarters in rank order
    assert worst.action == REPLACE and worst.params_after[LR] != worst.donor.params[LR]
    assert "sub-population 0 (frequency 1, members [0, 1, 2, 3, 4, 5, 6, 7])" in worst.reason
    top = run(objectives, 7)
    assert top.action == KEEP and "neither bottom nor migration bracket" in top.reason


def test_migration_from_a_slower_sub_population_brings_its_hyperparameters() -> None:
    objectives = {i: float(i) for i in range(16)}  # the best members are in the slowest sub-population 3
    decision = run(objectives, 5, iteration=10)  # sub-population 1 = 4..7: ranked 7, 6, 5, 4; 5 migrates
    assert decision.action == REPLACE and decision.donor_idx == 15
    assert decision.params_after == {LR: decision.donor.params[LR]}  # no perturbation after a migration
    assert "migration from member 15 of sub-population 3 (frequency 50" in decision.reason


def test_migration_from_a_faster_sub_population_keeps_the_best_own_hyperparameters() -> None:
    objectives = {i: float(-i) for i in range(16)}  # the best members are in the fastest sub-population 0
    decision = run(objectives, 13, iteration=50)  # sub-population 3 = 12..15 ranked 12, 13, 14, 15: 14 migrates
    assert decision.action == KEEP  # 13 is second: no bracket
    decision = run(objectives, 14, iteration=50)
    assert decision.action == REPLACE and decision.donor_idx == 0
    assert decision.params_after == {LR: rec(12, 0.0).params[LR]}  # the hyperparameters of 12, its own best
    assert "member 12's hyperparameters (best of its own sub-population" in decision.reason


def test_each_migrant_goes_to_one_member_of_the_bracket() -> None:
    objectives = {i: float(i) for i in range(32)}  # sub-population 0 = 0..7: bracket = ranks 4, 5 = members 3, 2
    first, second = run(objectives, 3), run(objectives, 2)
    assert (first.donor_idx, second.donor_idx) == (31, 30)


def test_a_migrant_that_ranks_below_the_member_is_not_taken() -> None:
    objectives = {i: float(-i) for i in range(16)}
    objectives.update({2: 100.0})  # sub-population 0 = 0..3 ranked 2, 0, 1, 3: member 1 is the bracket
    decision = run(objectives, 1)  # every other sub-population is below member 1
    assert decision.action == KEEP and "neither bottom nor migration bracket" in decision.reason


def test_a_two_member_sub_population_copies_when_no_migrant_is_better() -> None:
    objectives = {0: 1.0, 1: 5.0, 2: 0.0, 3: 0.5}  # 4 members: sub-populations [0, 1] (frequency 1), [2, 3] (50)
    decision = run(objectives, 0, iteration=3)
    assert decision.action == REPLACE and decision.donor_idx == 1 and "bottom quarter" in decision.reason
    objectives[3] = 9.0
    migrated = run(objectives, 0, iteration=3)
    assert migrated.donor_idx == 3 and migrated.reason.startswith("replace: migration from member 3")


def test_a_migration_whose_lead_is_not_significant_is_skipped() -> None:
    objectives = {i: float(i) for i in range(16)}
    decision = run(objectives, 5, iteration=10, significance=0.05)  # no episode returns: no test possible
    assert decision.action == KEEP and decision.reason.startswith("no migration, lead not significant")
    pair = {0: 1.0, 1: 5.0, 2: 0.0, 3: 9.0}  # two members: the worse one copies instead (not significant either)
    copied = run(pair, 0, iteration=3, significance=0.05)
    assert copied.action == MUTATE and copied.reason.startswith("perturb only, lead not significant: bottom quarter")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=16, max_size=16), st.integers(0, 15), st.integers(1, 100))
def test_a_member_acts_only_at_its_frequency_and_never_copies_a_worse_member(values: List[float], idx: int,
                                                                            iteration: int) -> None:
    objectives = dict(enumerate(values))
    decision = run(objectives, idx, iteration=iteration)
    sub = subpopulation_of(MfPbtConfig(), 16, idx)
    if iteration % sub.frequency:
        assert decision.action == KEEP
    if decision.action == REPLACE:
        assert objectives[decision.donor_idx] > objectives[idx]
        assert f"sub-population {sub.index} (frequency {sub.frequency}" in decision.reason
    assert decision.action in (KEEP, MUTATE, REPLACE)
