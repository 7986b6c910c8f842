"""A diverged member (own objective NaN/inf after the rollback) is replaced from a leader under the
default gates: after the rollback its episode returns are empty and it has just started, so the
significance test and the ready rule would otherwise keep it mutating only. No torch."""
import math
import random
from typing import Any, Dict, List, Optional

import pytest

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.selection import KEEP, MUTATE, REPLACE, MemberState, decide, is_diverged
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
FRAME = 50_000_000


def rec(idx: int, objective: Optional[float], returns: int = 30, since: int = FRAME, frame: int = FRAME,
        lr: float = 1e-3) -> Record:
    return Record(policy_idx=idx, iteration=5, frame=frame, objective=objective, params={LR: lr},
                  checkpoint="000005.pth", checksum="0" * 64,
                  episode_returns=[(objective or 0.0) + 0.1 * (i % 3) for i in range(returns)],
                  frames_since_replace=since)


def defaults(rule: str, n: int, **kw: Any) -> PbtConfig:
    """The shipped defaults (significance 0.05, ready_after, dexpbt's groups and thresholds)."""
    values: Dict[str, Any] = dict(num_policies=n, selection=rule, mutation={LR: "mutate_float"})
    values.update(kw)
    return pbt_config(values)


def diverged(objective: float = math.nan, frame: int = FRAME) -> MemberState:
    # Just rolled back: no episode returns, nothing trained since (re)start.
    return MemberState(rec(0, objective, returns=0, since=0, frame=frame, lr=0.5), None, 0)


@pytest.mark.parametrize("rule", ["dexpbt", "threshold"])
@pytest.mark.parametrize("objective", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_diverged_member_is_replaced_from_a_leader_under_the_defaults(rule: str, objective: float, n: int) -> None:
    peers = [rec(i, 10.0 * i) for i in range(1, n)]
    for seed in range(10):
        decision = decide(diverged(objective), peers, defaults(rule, n), random.Random(seed))
        assert decision.action == REPLACE, decision.reason
        assert decision.donor_idx is not None and decision.donor.objective > 0
        assert "significance test skipped" in decision.reason
        assert decision.params_before[LR] == 0.5
        assert decision.params_after[LR] != 0.5  # it takes the donor's (then mutated), not its own


def test_the_same_member_with_a_finite_objective_is_held_by_the_gates() -> None:
    peers = [rec(1, 10.0), rec(2, 20.0)]
    fresh = MemberState(rec(0, -5.0, returns=0, since=0, lr=0.5), None, 0)
    assert decide(fresh, peers, defaults("dexpbt", 3), random.Random(0)).action == KEEP  # not ready yet
    assert decide(fresh, peers, defaults("threshold", 3), random.Random(0)).action == KEEP


def test_a_diverged_member_waits_for_the_populations_warm_up_and_for_a_leader() -> None:
    young = decide(diverged(frame=1000), [rec(1, 10.0)], defaults("dexpbt", 2), random.Random(0))
    assert young.action == KEEP and young.reason.startswith("initial_delay")
    unknown = decide(diverged(), [rec(1, None)], defaults("dexpbt", 2), random.Random(0))
    assert unknown.action == KEEP and "no other ready member" in unknown.reason
    not_ready = decide(diverged(), [rec(1, 10.0, since=0)], defaults("dexpbt", 2), random.Random(0))
    assert not_ready.action == KEEP  # donors still obey the ready rule
    threshold = decide(diverged(), [rec(1, 10.0, since=0)], defaults("threshold", 2), random.Random(0))
    assert threshold.action == MUTATE and "no ready leader" in threshold.reason
    banned = decide(diverged(), [rec(1, 10.0)], defaults("dexpbt", 2), random.Random(0), refused_donors={1})
    assert banned.action == KEEP


def test_a_diverged_peer_is_never_a_donor() -> None:
    own = MemberState(rec(0, 1.0), 1.0, FRAME)
    peers: List[Record] = [rec(1, math.nan), rec(2, math.inf), rec(3, 5.0)]
    for rule in ("dexpbt", "threshold"):
        donors = {decide(own, peers, defaults(rule, 4, significance=None, ready_after=0, dbg_mode=True,
                                               replace_fraction_best=1.0), random.Random(s)).donor_idx
                  for s in range(30)}
        assert donors <= {None, 3}


def test_is_diverged() -> None:
    assert is_diverged(rec(0, math.nan)) and is_diverged(rec(0, -math.inf))
    assert not is_diverged(rec(0, None)) and not is_diverged(rec(0, -1e300))
