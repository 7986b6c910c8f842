"""Pacing (pbt.max_lead) and lockstep ranking (pbt.synchronous): who holds a member back, when it waits,
and what its heartbeat says meanwhile."""
from typing import Dict, List, Optional

import pytest

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.pacing import (pacing_reason, slowest_live_peer, synchronous_reason, unpublished_peers, wait_for_iteration,
                        wait_for_peers)
from pbt.storage import Record
from pbt.storage.liveness import (ALIVE, FINISHED, RUNNING, STALE, UNKNOWN, WAITING, Beat, MemberLiveness,
                                  PeerStatus, read_heartbeat)
from pbt.storage.local import LocalStore
from pbt.tools.snapshot import WAITING_FOR_PEERS, MemberView

INTERVAL = 1000


def config(**values: object) -> PbtConfig:
    return PbtConfig.from_mapping({"interval_steps": INTERVAL, "max_lead": 2, "heartbeat_interval": 1.0, **values})


def peer(frame: Optional[int], state: str = RUNNING, judged: str = ALIVE) -> PeerStatus:
    return PeerStatus(judged, 1.0, Beat(pid=1, host="h", token="t", time=0.0, frame=frame, state=state))


def test_only_peers_still_training_hold_a_member_back() -> None:
    statuses = {1: peer(5000), 2: peer(2000, WAITING), 3: peer(100, FINISHED), 4: peer(50, judged=STALE),
                5: PeerStatus(UNKNOWN), 6: peer(None)}
    assert slowest_live_peer(statuses) == (2, 2000)
    assert slowest_live_peer({3: peer(100, FINISHED)}) is None


def test_a_member_waits_only_when_more_than_max_lead_intervals_ahead() -> None:
    statuses = {1: peer(3000), 2: peer(9000)}
    assert pacing_reason(5000, statuses, INTERVAL, 2) is None  # 2.0 intervals ahead: not more
    why = pacing_reason(5001, statuses, INTERVAL, 2)
    assert why is not None and "member 1 (frame 3000)" in why and "pbt.max_lead=2" in why
    assert pacing_reason(50_000, statuses, INTERVAL, None) is None  # pacing off
    assert pacing_reason(50_000, {1: peer(3000, FINISHED)}, INTERVAL, 2) is None  # nobody left to wait for


def test_waiting_heartbeats_waiting_until_the_slowest_peer_catches_up(tmp_path) -> None:
    (tmp_path / "000").mkdir()
    store = LocalStore(tmp_path)
    liveness = MemberLiveness(store, "000", 0, heartbeat_interval=1.0, heartbeat_timeout=10.0)
    slow = [1000, 2000, 3000, 4000]  # the slow peer's frame at each look
    looks: List[int] = []
    seen_states: List[str] = []

    def check() -> Dict[int, PeerStatus]:
        looks.append(len(looks))
        return {1: peer(slow[min(len(looks) - 1, len(slow) - 1)])}

    def sleep(seconds: float) -> None:
        beat = _beat(store)
        seen_states.append(MemberView(0, None, [], heartbeat=beat).liveness(beat.time))

    waited = wait_for_peers(config(), 6000, check, liveness, lambda: False, sleep=sleep)
    assert waited >= 0.0 and len(looks) == 4  # 5, 4, 3 intervals ahead, then 2: goes on
    assert seen_states == [WAITING_FOR_PEERS] * 3
    assert _beat(store).state == RUNNING and liveness.state == RUNNING


def test_a_stop_request_ends_the_wait() -> None:
    calls: List[int] = []
    waited = wait_for_peers(config(), 9000, lambda: {1: peer(0)}, None, lambda: bool(calls),
                            sleep=lambda s: calls.append(1))
    assert calls == [1] and waited >= 0.0


def test_no_pacing_in_an_elastic_population() -> None:
    looks: List[int] = []
    assert wait_for_peers(config(num_policies="auto"), 9000, lambda: looks.append(1) or {1: peer(0)}, None,
                          lambda: False) == 0.0
    assert looks == []


def record(idx: int, iteration: int) -> Record:
    frame = iteration * INTERVAL + 7
    return Record(idx, iteration, frame, 1.0, {}, f"ck{iteration}", f"sum{iteration}", frames_since_replace=frame)


def test_synchronous_a_member_ranks_once_every_peer_still_training_published_its_iteration() -> None:
    frame = 5 * INTERVAL + 7
    statuses = {0: peer(frame), 1: peer(frame), 2: peer(4 * INTERVAL + 7), 3: peer(100, FINISHED),
                4: peer(50, judged=STALE), 5: peer(None), 6: peer(6 * INTERVAL + 7)}
    newest = {0: record(0, 5), 1: record(1, 5), 2: record(2, 4), 3: record(3, 1), 4: record(4, 0)}
    # 2 has not published 5; finished, stale and not yet started peers hold nobody back; 6 trained past
    # this iteration (published it, or skipped it); 0 is this member
    assert unpublished_peers(5, frame, newest, statuses, own_idx=0) == [2]
    why = synchronous_reason(5, frame, newest, statuses, own_idx=0)
    assert why is not None and "members 2 have not published iteration 5" in why and "pbt.synchronous" in why
    # its heartbeat already says frame 5 (it beats before it publishes): still waited for
    assert unpublished_peers(5, frame, newest, {**statuses, 2: peer(frame)}, own_idx=0) == [2]
    assert synchronous_reason(5, frame, {**newest, 2: record(2, 5)}, statuses, own_idx=0) is None
    assert unpublished_peers(5, frame, {0: record(0, 5)}, {0: peer(frame), 1: peer(frame)}, own_idx=0) == [1]


def test_synchronous_waits_heartbeating_until_the_peers_publish_and_not_at_all_when_off(tmp_path) -> None:
    (tmp_path / "000").mkdir()
    store = LocalStore(tmp_path)
    liveness = MemberLiveness(store, "000", 0, heartbeat_interval=1.0, heartbeat_timeout=10.0)
    frame = 3 * INTERVAL + 7
    published = [{1: record(1, 2)}, {1: record(1, 2)}, {1: record(1, 3)}]  # peer 1's newest at each look
    looks: List[int] = []
    seen_states: List[str] = []

    def newest() -> Dict[int, Record]:
        looks.append(1)
        return {0: record(0, 3), **published[min(len(looks), len(published)) - 1]}

    def sleep(seconds: float) -> None:
        assert seconds <= 0.5  # a short poll: every member waits here at every iteration
        beat = _beat(store)
        seen_states.append(MemberView(0, None, [], heartbeat=beat).liveness(beat.time))

    check = lambda: {1: peer(frame)}  # noqa: E731
    sync = config(synchronous=True, policy_idx=0)
    assert wait_for_iteration(sync, 3, frame, newest, check, liveness, lambda: False, sleep=sleep) >= 0.0
    assert len(looks) == 3 and seen_states == [WAITING_FOR_PEERS] * 2
    assert _beat(store).state == RUNNING
    looks.clear()
    assert wait_for_iteration(config(policy_idx=0), 3, frame, newest, check, liveness, lambda: False) == 0.0
    assert looks == []  # off (the default): no look at all
    stops: List[int] = []
    wait_for_iteration(sync, 9, frame, lambda: {}, check, None, lambda: bool(stops), sleep=lambda s: stops.append(1))
    assert stops == [1]  # a stop request ends the wait


def test_synchronous_is_refused_for_an_elastic_population() -> None:
    with pytest.raises(ConfigError, match="pbt.synchronous=true.*elastic.*pbt.synchronous=false"):
        config(synchronous=True, num_policies="auto")


def _beat(store: LocalStore) -> Beat:
    beat = read_heartbeat(store, "000/heartbeat")
    assert beat is not None
    return beat
