"""The pure donor filter of pbt/member.py: stale members stay ranked but are never donors, unless
they hold the population's best record. No torch: runs on Python 3.8."""
import random
from typing import List

import pytest

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.peers import refused_stale_donors
from pbt.selection import REPLACE, MemberState, decide
from pbt.storage.record import Record


def rec(idx: int, objective: float, frames_since_replace: int = 10**9) -> Record:
    return Record(policy_idx=idx, iteration=5, frame=5000, objective=objective, params={"lr": 1.0},
                  checkpoint="000005.pth", checksum="0" * 64, episode_returns=[objective] * 10,
                  frames_since_replace=frames_since_replace)


def cfg(n: int, **kw) -> PbtConfig:
    base = dict(num_policies=n, start_after=0, initial_delay=0, ready_after=0, significance=None,
                mutation={"lr": "mutate_float"}, replace_threshold_frac_std=0.0, replace_threshold_frac_absolute=0.0,
                selection="dexpbt")
    base.update(kw)
    return pbt_config(base)


def test_refused_stale_donors_spares_a_stale_member_holding_the_best_record() -> None:
    records = [rec(0, 1.0), rec(1, 9.0), rec(2, 5.0), rec(3, float("nan"))]
    assert refused_stale_donors(records, stale=[1, 2]) == {2}
    assert refused_stale_donors(records, stale=[3]) == {3}
    assert refused_stale_donors(records, stale=[]) == set()


def _donors(records: List[Record], stale: List[int], config: PbtConfig, seeds: int = 200) -> set:
    own = records[0]
    banned = refused_stale_donors(records, stale)
    donors = set()
    for seed in range(seeds):
        decision = decide(MemberState(own, own.objective, 10**9), records, config, random.Random(seed),
                          refused_donors=banned)
        if decision.action == REPLACE:
            donors.add(decision.donor_idx)
    return donors


@pytest.mark.parametrize("rule", ["dexpbt", "threshold"])
def test_a_stale_member_is_no_donor_unless_it_is_the_best(rule: str) -> None:
    records = [rec(0, 0.0), rec(1, 10.0), rec(2, 9.0), rec(3, 8.0), rec(4, 5.0), rec(5, 4.0)]
    config = cfg(6, selection=rule, replace_fraction_best=0.5, dbg_mode=True, threshold_std=0.0,
                 threshold_abs=0.0)
    assert _donors(records, [], config) >= {1, 2}
    assert 2 not in _donors(records, [2], config)  # stale, not the best: never a donor
    assert 1 in _donors(records, [1], config)  # stale but still the population best: may be a donor


def test_a_stale_member_still_counts_in_the_ranking() -> None:
    # 4 members: own (0) is the worst of the known ones; member 3 is stale and not the best. Dropping
    # it from the snapshot would make it "unknown" (ranked last), lift member 0 out of the worst group
    # and leave too few known objectives; banning it as a donor keeps the ranking and picks another donor.
    records = [rec(0, 1.0), rec(1, 10.0), rec(2, 9.0), rec(3, 9.5)]
    config = cfg(4, replace_fraction_best=0.75)
    dropped = decide(MemberState(records[0], 1.0, 10**9), records[:3], config, random.Random(0))
    assert dropped.action != REPLACE
    donors = _donors(records, [3], config)
    assert donors and 3 not in donors
