"""An elastic population (``pbt.num_policies=auto``): who is ranked, the window, the join donor, and
the strategies deciding among non-contiguous members. Pure functions, hand-built records."""
import dataclasses
import random
from typing import Any, Dict, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.selection import REPLACE, MemberState, decide
from pbt.selection.membership import (join_donor, plausible_frame, ranked_members, seconds_per_interval,
                                      window_seconds)
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
NOW = 10_000.0


def rec(idx: int, objective: Optional[float], age: float = 0.0, iteration: int = 5) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=iteration * 1000, objective=objective,
                  params={LR: 1e-3}, checkpoint=f"{iteration:06d}.pth", checksum="0" * 64, time=NOW - age,
                  frames_since_replace=10 ** 9)


def elastic_cfg(idx: int, **kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies="auto", policy_idx=idx, mutation={LR: "mutate_float"},
                                  start_after=0, initial_delay=0, ready_after=0, significance=None,
                                  mutation_rate=1.0, equal_experience=False)
    values.update(kwargs)
    return pbt_config(values)


def test_recent_or_training_peers_are_ranked_and_the_rest_left_out_with_a_reason() -> None:
    records = {0: rec(0, 1.0), 1: rec(1, 2.0, age=50), 2: rec(2, 3.0, age=500), 7: rec(7, 4.0, age=900)}
    membership = ranked_members(0, records, training={7}, now=NOW, window_seconds=100.0)
    assert membership.members == (0, 1, 7)  # 2 is too old; 7 is old but its heartbeat says it trains
    assert set(membership.left_out) == {2}
    assert "500 s old > window 100 s" in membership.left_out[2]


def test_own_index_is_always_ranked_even_without_a_record() -> None:
    assert ranked_members(3, {}, frozenset(), NOW, 10.0).members == (3,)


@settings(max_examples=200, deadline=None)
@given(ages=st.dictionaries(st.integers(0, 50), st.floats(0, 1000), max_size=12),
       training=st.frozensets(st.integers(0, 50)), window=st.floats(1, 500))
def test_membership_rule_holds_for_any_population(ages: Dict[int, float], training: Any, window: float) -> None:
    records = {i: rec(i, float(i), age=a) for i, a in ages.items()}
    membership = ranked_members(99, records, training, NOW, window)
    assert 99 in membership.members and list(membership.members) == sorted(membership.members)
    for idx in ages:
        age = NOW - records[idx].time  # the age as the clock reads it (floats round)
        assert (idx in membership.members) == (idx in training or age <= window)
        assert (idx in membership.left_out) != (idx in membership.members)


def test_pace_is_the_median_seconds_per_interval_of_own_progress() -> None:
    progress = [(0, 0.0), (1000, 10.0), (2000, 20.0), (3000, 60.0)]  # 10 s, 10 s, then a slow 40 s
    assert seconds_per_interval(progress, 1000) == pytest.approx(10.0)
    assert seconds_per_interval([(0, 0.0)], 1000) is None
    assert seconds_per_interval([(5, 1.0), (5, 2.0)], 1000) is None  # no frames: no pace
    assert window_seconds(3, 10.0, since_start=999.0) == 30.0
    assert window_seconds(3, None, since_start=20.0) == 60.0  # no pace yet: the time since start


def test_join_donor_is_the_best_live_peer_not_refused() -> None:
    records = {0: rec(0, 9.0), 1: rec(1, 5.0), 2: rec(2, 7.0), 3: rec(3, None), 4: rec(4, 8.0)}
    assert join_donor(0, records, alive={1, 2, 3, 4}).policy_idx == 4  # own 9.0 is not a donor
    assert join_donor(0, records, alive={1, 2, 3}).policy_idx == 2  # 4's heartbeat is stale
    assert join_donor(0, records, alive={1, 2, 3, 4}, refused={4, 2}).policy_idx == 1
    assert join_donor(0, {3: rec(3, None)}, alive={3}) is None  # no objective yet: start fresh


def test_num_policies_auto_and_its_keys_are_validated() -> None:
    cfg = elastic_cfg(12)
    assert cfg.elastic and cfg.population_size is None and cfg.elastic_window == 3 and cfg.join == "best"
    cfg.validate_population()  # any index >= 0
    assert PbtConfig.from_mapping({"num_policies": "8"}).population_size == 8
    with pytest.raises(ConfigError, match='"auto" for an elastic population'):
        PbtConfig.from_mapping({"num_policies": "atuo"})
    with pytest.raises(ConfigError, match="elastic_window"):
        PbtConfig.from_mapping({"num_policies": "auto", "elastic_window": 0})
    with pytest.raises(ConfigError, match="Did you mean 'fresh'"):
        PbtConfig.from_mapping({"num_policies": "auto", "join": "frsh"})


@pytest.mark.parametrize("selection", ["threshold", "dexpbt", "truncation", "tournament"])
def test_every_strategy_decides_among_non_contiguous_members(selection: str) -> None:
    # members 3, 10 and 42 are ranked; 5 published too but dropped out (not among the members)
    peers = [rec(10, 100.0), rec(42, 99.0), rec(5, 1000.0)]
    own = MemberState(rec(3, 1.0), None, 10 ** 9)
    extra: Dict[str, Any] = {"replace_fraction_worst": 0.34, "replace_fraction_best": 0.6} \
        if selection == "dexpbt" else {}
    if selection == "truncation":
        extra["quantile"] = 0.34
    if selection == "tournament":
        extra.update(tournament_size=3, elitism=False)
    decision = decide(own, peers, elastic_cfg(3, selection=selection, **extra), random.Random(0),
                      members=(3, 10, 42))
    assert decision.action == REPLACE and decision.donor is not None
    assert decision.donor.policy_idx in (10, 42)  # never the member that left (5)


def test_an_elastic_decision_needs_its_members() -> None:
    with pytest.raises(ConfigError, match="given members"):
        decide(MemberState(rec(3, 1.0), None, 10 ** 9), [], elastic_cfg(3), random.Random(0))


def test_a_record_dated_in_the_future_is_not_ranked_for_ever() -> None:
    future = {1: rec(1, 1.0, age=-1e6), 2: rec(2, 1.0, age=-60.0)}
    membership = ranked_members(0, future, training=set(), now=NOW, window_seconds=100.0)
    assert membership.members == (0, 2) and "in the future" in membership.left_out[1]  # 60 s: clock skew
    assert ranked_members(0, future, training={1}, now=NOW, window_seconds=100.0).members == (0, 1, 2)


def test_a_joiner_takes_only_a_plausible_frame_count() -> None:
    good = rec(1, 1.0, iteration=5)
    assert plausible_frame(good, 1000, max_frames=10_000) is None
    assert plausible_frame(good, 1000, max_frames=None) is None
    assert "max_frames" in plausible_frame(good, 1000, max_frames=5000)
    huge = dataclasses.replace(good, frame=2 ** 53, iteration=2 ** 53 // 1000)
    assert "max_frames" in plausible_frame(huge, 1000, max_frames=10 ** 9)
    lying = dataclasses.replace(good, frame=2 ** 53)  # says iteration 5
    assert "not iteration 5" in plausible_frame(lying, 1000, max_frames=None)
