"""A replace whose donor is behind (pbt.max_donor_lag): the member waits for the donor's checkpoint at
its own iteration, takes it only when it continues the weights that were ranked, and stops waiting
when the donor changes, stops training or cannot be read."""
import dataclasses
from typing import Dict, List, Optional

import pytest

from pbt.config import PbtConfig
from pbt.errors import WorkspaceError
from pbt.pacing import continues, donor_lag_reason, fresh_donor
from pbt.selection import KEEP, MUTATE, REPLACE, Decision
from pbt.storage import Record
from pbt.storage.liveness import ALIVE, FINISHED, RUNNING, STALE, Beat, PeerStatus

INTERVAL = 1000
PARAMS = {"train.params.config.gamma": 0.99}


def config(**values: object) -> PbtConfig:
    return PbtConfig.from_mapping({"interval_steps": INTERVAL, "heartbeat_interval": 1.0, **values})


def record(iteration: int, since: Optional[int] = None, params: Optional[Dict[str, float]] = None) -> Record:
    """Donor 1's record at ``iteration``; ``since``: frames since its last replace (default: never replaced)."""
    frame = iteration * INTERVAL + 7
    return Record(1, iteration, frame, 10.0 * iteration, dict(params or PARAMS), f"ck{iteration}", f"sum{iteration}",
                  frames_since_replace=frame if since is None else since)


def peer(state: str = RUNNING, judged: str = ALIVE, frame: int = 1) -> PeerStatus:
    return PeerStatus(judged, 1.0, Beat(pid=1, host="h", token="t", time=0.0, frame=frame, state=state))


def replace(donor: Record) -> Decision:
    return Decision(REPLACE, donor, "replace: underperformer", {"k": 1}, {"k": 2})


class Donor:
    """The donor's newest record at each look (the last one repeats), and its liveness (one status, or
    one per look, the last one repeating)."""

    def __init__(self, records: List[Optional[Record]], status: "PeerStatus | List[PeerStatus]") -> None:
        self.records, self.looks = records, 0
        self.statuses = status if isinstance(status, list) else [status]

    def newest(self, idx: int) -> Optional[Record]:
        assert idx == 1
        self.looks += 1
        return self.records[min(self.looks, len(self.records)) - 1]

    def check(self) -> Dict[int, PeerStatus]:
        return {1: self.statuses[min(self.looks, len(self.statuses) - 1)]}


def run(decision: Decision, donor: Donor, own_iteration: int = 5, **cfg: object) -> Decision:
    return fresh_donor(decision, own_iteration, donor.newest, donor.check, config(**cfg), None, lambda: False,
                       sleep=lambda s: None)


def test_a_member_waits_for_the_donors_checkpoint_at_its_own_iteration() -> None:
    ranked = record(3)
    donor = Donor([record(3), record(4), record(5)], peer())
    out = run(replace(ranked), donor)
    assert out.donor == record(5) and donor.looks == 3
    assert "checkpoint of its iteration 5 (ranked at its iteration 3)" in out.reason
    assert out.params_after == {"k": 2} and out.action == REPLACE  # the hyperparameters stay decided


def test_max_donor_lag_allows_that_many_iterations_behind_and_null_never_waits() -> None:
    donor = Donor([record(4), record(5)], peer())
    assert run(replace(record(3)), donor, max_donor_lag=1).donor == record(4) and donor.looks == 1
    never = Donor([record(5)], peer())
    decision = replace(record(3))
    assert run(decision, never, max_donor_lag=None) is decision and never.looks == 0
    assert run(decision, never, num_policies="auto") is decision and never.looks == 0  # elastic: no waiting


@pytest.mark.parametrize("decision", [Decision(KEEP, None, "keep", {}, {}),
                                      Decision(MUTATE, None, "mutate", {"k": 1}, {"k": 2})])
def test_only_a_replace_waits(decision: Decision) -> None:
    donor = Donor([record(5)], peer())
    assert run(decision, donor) is decision and donor.looks == 0


def test_a_donor_at_or_ahead_of_the_member_is_taken_as_ranked() -> None:
    decision = replace(record(5))
    donor = Donor([record(6)], peer())
    assert run(decision, donor) is decision and donor.looks == 0


def test_a_donor_replaced_since_ends_the_wait_and_its_ranked_checkpoint_is_taken() -> None:
    # replaced at its iteration 3, right after publishing the ranked record: its frames since the
    # last replace restarted, so record 4 trains other weights
    donor = Donor([record(3), record(4, since=INTERVAL)], peer())
    out = run(replace(record(3)), donor)
    assert out.donor == record(3) and donor.looks == 2
    assert "changed at its iteration 4" in out.reason


def test_a_donor_that_mutated_since_is_not_continued() -> None:
    donor = Donor([record(4, params={"train.params.config.gamma": 0.995})], peer())
    out = run(replace(record(3)), donor)
    assert out.donor == record(3) and "changed at its iteration 4" in out.reason


@pytest.mark.parametrize("status", [peer(FINISHED), peer(judged=STALE), PeerStatus("unknown")])
def test_a_donor_no_longer_training_is_not_waited_for(status: PeerStatus) -> None:
    donor = Donor([record(3)], status)
    out = run(replace(record(3)), donor)
    assert out.donor == record(3) and donor.looks == 1
    assert "published no newer checkpoint" in out.reason


def test_a_donor_that_trained_past_the_members_iteration_without_publishing_it_ends_the_wait() -> None:
    # a storage outage: the donor's records 4-5 failed, it trains on at frame 6000+ and will publish
    # 6, which the member at iteration 5 never reads; waiting on would stall it until the donor ends
    statuses = [peer(frame=4500), peer(frame=5900), peer(frame=6000)]
    donor = Donor([record(3)], statuses)
    out = run(replace(record(3)), donor)
    assert out.donor == record(3) and donor.looks == 3
    assert "trained past this member's iteration 5 (frame 6000) without publishing it" in out.reason
    # a newer record that continues the ranked one is still taken
    donor = Donor([record(3), record(4)], [peer(frame=4500), peer(frame=6100)])
    out = run(replace(record(3)), donor)
    assert out.donor == record(4) and "its iteration 4 (ranked at its iteration 3)" in out.reason
    assert "without publishing it" in out.reason


def test_an_unreadable_donor_ends_the_wait() -> None:
    def newest(idx: int) -> Optional[Record]:
        raise WorkspaceError("listing refused")

    out = fresh_donor(replace(record(3)), 5, newest, lambda: {1: peer()}, config(), None, lambda: False,
                      sleep=lambda s: None)
    assert out.donor == record(3) and "cannot be read (listing refused)" in out.reason


def test_a_stop_request_ends_the_wait() -> None:
    looks: List[int] = []

    def newest(idx: int) -> Optional[Record]:
        looks.append(1)
        return record(3)

    out = fresh_donor(replace(record(3)), 5, newest, lambda: {1: peer()}, config(), None, lambda: len(looks) >= 2,
                      sleep=lambda s: None)
    assert out.donor == record(3) and len(looks) == 2


def test_continues_needs_the_same_weights_hyperparameters_and_network() -> None:
    old = record(3)
    assert continues(old, record(5))
    assert not continues(old, record(3))  # not later
    assert not continues(old, record(5, since=2 * INTERVAL))  # replaced in between
    assert not continues(old, dataclasses.replace(record(5), network={"units": [8]}))
    assert not continues(old, dataclasses.replace(record(5), policy_idx=2))


def test_donor_lag_reason_names_the_donor_and_the_gap() -> None:
    why = donor_lag_reason(7, record(4), peer(), 1)
    assert why is not None and "donor 1" in why and "iteration 4, 3 behind this member's 7" in why
    assert donor_lag_reason(7, record(6), peer(), 1) is None
    assert donor_lag_reason(7, record(4), peer(FINISHED), 1) is None


PEER = """
import sys, time
from pbt.storage import Workspace
from pbt.storage.liveness import WAITING, MemberLiveness, read_heartbeat
from pbt.storage.local import LocalStore

ws = sys.argv[1]
store = LocalStore(ws)
peer = Workspace(ws, 1, 2)
liveness = MemberLiveness(store, "001", 1, heartbeat_interval=0.2, heartbeat_timeout=30.0)
liveness.acquire()
liveness.frame = 3000
liveness.start()
params = {"train.params.config.learning_rate": 2e-3, "train.params.config.gamma": 0.9}
peer.publish(3, 3000, 100.0, params, b"peer 3", frames_since_replace=3000)
print("published 3", flush=True)
deadline = time.time() + 120  # a member that never waits fails the test instead of hanging it
while True:  # go on training once member 0 waits for this donor
    beat = read_heartbeat(store, "000/heartbeat")
    if beat is not None and beat.state == WAITING:
        break
    if time.time() > deadline:
        print("member 0 never waited", flush=True)
        sys.exit(3)
    time.sleep(0.05)
for iteration in (4, 5):
    liveness.frame = iteration * 1000
    peer.publish(iteration, iteration * 1000, 100.0, params, b"peer %d" % iteration, frames_since_replace=iteration * 1000)
print("published 5", flush=True)
sys.stdin.read()  # alive until the test ends
liveness.close()
"""


def test_a_real_member_waits_for_a_slower_donor_process_and_takes_its_newer_checkpoint(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from test_refusals import member_with_fake_checkpoints

    ws = tmp_path / "ws"
    member = member_with_fake_checkpoints(tmp_path, ws, equal_experience=False)
    donor = subprocess.Popen([sys.executable, "-c", PEER, str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert donor.stdout is not None and donor.stdout.readline().strip() == "published 3"
        with member.iteration(5000, 1.0, {}, [1.0], stop=lambda: donor.poll() is not None) as it:
            assert it is not None
            decision = it.decision
        assert donor.stdout.readline().strip() == "published 5"
        assert decision.action == REPLACE and decision.donor is not None
        assert (decision.donor.policy_idx, decision.donor.iteration) == (1, 5)
        assert member.workspace.read_checkpoint_bytes(decision.donor) == b"peer 5"
        assert "checkpoint of its iteration 5 (ranked at its iteration 3)" in decision.reason
    finally:
        donor.communicate("", timeout=60)
        member.close()
    assert donor.returncode == 0 and Path(ws).is_dir()
