"""Numbers a peer (or a diverging member) can write into the workspace (issue 25, item 1): huge
JSON integers, Infinity, 1e308 and future times are a refusal of that file (or lineage line),
logged, never an OverflowError that stops every member. No torch: runs on Python 3.8."""
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from pbt.errors import CorruptRecordError
from pbt.selection.experience import fitness
from pbt.selection.stats import welch_greater
from pbt.storage import LocalStore, Workspace
from pbt.storage.bounds import FUTURE_SKEW_SECONDS, MAX_FRAMES
from pbt.storage.lineage import LineageEntry, parse_lineage
from pbt.storage.liveness import ALIVE, HEARTBEAT_FILE, LOCK_FILE, STALE, UNKNOWN, Beat, MemberLiveness, judge, \
    peer_status, read_lock
from pbt.storage.record import Histories, Record, parse_record

SUM = "ab" * 32
HUGE = 10 ** 400  # json.dumps writes all 401 digits; float() of it overflows


def raw(**changes: Any) -> bytes:
    data: Dict[str, Any] = {"policy_idx": 1, "iteration": 3, "frame": 300, "objective": 1.5, "params": {"a.b": 0.1},
                            "checkpoint": "000003.pth", "checksum": SUM, "time": 1.0,
                            "episode_returns": [1.0, 2.0], "frames_since_replace": 0, "version": 1}
    data.update(changes)
    return json.dumps(data).encode()


BAD_RECORDS = {
    "huge int objective": raw(objective=HUGE), "huge int time": raw(time=HUGE),
    "huge int return": raw(episode_returns=[1.0, HUGE]), "huge int history": raw(history={"2": HUGE}),
    "inf return": raw(episode_returns=[math.inf, -math.inf]), "nan return": raw(episode_returns=[1.0, math.nan]),
    "1e308 returns": raw(episode_returns=[1e308] * 8), "1e308 history": raw(history={"1": 1e308, "2": 1e308}),
    "1e308 objective": raw(objective=1e308), "1e400 time": raw(time=1e400), "negative time": raw(time=-5.0),
    "frame 2**62": raw(frame=2 ** 62 - 1), "frame above 2**53": raw(frame=MAX_FRAMES + 1),
    "huge history key": raw(history={"9" * 16: 1.0}), "huge param int": raw(params={"a.b": HUGE}),
    "inf history": raw(history={"2": math.inf}),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_numbers_out_of_bounds_refuse_the_record(name: str) -> None:
    with pytest.raises(CorruptRecordError):
        parse_record(BAD_RECORDS[name], name, 1, 3)


def test_numbers_ours_write_still_read() -> None:
    assert math.isnan(parse_record(raw(objective=math.nan), "x", 1, 3).objective)  # diverged: ranks last
    assert parse_record(raw(objective=-math.inf), "x", 1, 3).objective == -math.inf
    assert parse_record(raw(objective=-1e12, frame=MAX_FRAMES), "x", 1, 3).frame == MAX_FRAMES


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_a_peer_record_with_such_numbers_is_skipped_not_fatal(tmp_path: Path, name: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    ws = Workspace(tmp_path, 0, 2)
    ws.publish(3, 300, 1.0, {"a.b": 0.1}, b"own")
    peer = Workspace(tmp_path, 1, 2)
    older = peer.publish(2, 200, 0.5, {"a.b": 0.1}, b"peer")
    peer.publish(3, 300, 0.5, {"a.b": 0.1}, b"peer3")
    (tmp_path / "001" / "000003.yaml").write_bytes(BAD_RECORDS[name])
    with caplog.at_level(logging.WARNING):
        assert ws.latest_records()[1] == older
        assert ws.latest_records()[1] == older
    assert sum("000003.yaml" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_publish_keeps_a_diverging_members_record_readable(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    ws.publish(1, 100, 5e13, {}, b"c", episode_returns=[math.inf, 1.0, -math.inf, math.nan, 2.0, 1e300],
               history=Histories({0: 1e300, 1: 2.0}))
    record = ws.latest_record(0)
    assert record is not None and math.isnan(record.objective)
    assert record.episode_returns == [1.0, 2.0] and record.history == {0: None, 1: 2.0}


def test_statistics_never_raise_on_extreme_values() -> None:
    assert welch_greater([1e308] * 8, [1.0, 2.0, 3.0]) is None  # too few usable samples
    assert welch_greater([math.inf, -math.inf, 1.0], [1.0, 2.0]) is None
    assert welch_greater([1e12, -1e12, 1e12], [-1e12, 1e12, -1e12]) is not None
    record = Record(policy_idx=0, iteration=3, frame=3, objective=1.0, params={}, checkpoint="000003.pth",
                    checksum=SUM, history={1: 1e308, 2: 1e308})
    assert fitness(record, 3) == 1.0


# -- heartbeats and locks ------------------------------------------------------------------------------


def beat_bytes(**changes: Any) -> bytes:
    data: Dict[str, Any] = {"pid": 1, "host": "h", "token": "t", "time": time.time(), "frame": 7,
                            "state": "running", "started": 0.0, "policy_idx": 1}
    data.update(changes)
    return json.dumps(data).encode()


@pytest.mark.parametrize("changes", [
    {"pid": math.inf}, {"pid": HUGE}, {"time": 1e400}, {"time": HUGE}, {"time": math.nan}, {"frame": HUGE},
    {"frame": math.inf}, {"started": -math.inf}, {"policy_idx": HUGE}, {"pid": 1.5}, {"host": ["x"]},
])
def test_heartbeats_with_such_numbers_count_as_unknown(tmp_path: Path, changes: Dict[str, Any]) -> None:
    (tmp_path / "001").mkdir()
    (tmp_path / "001" / HEARTBEAT_FILE).write_bytes(beat_bytes(**changes))
    assert peer_status(LocalStore(tmp_path), "001", 30.0).state == UNKNOWN
    (tmp_path / "001" / LOCK_FILE).write_bytes(beat_bytes(**changes))
    if set(changes) & {"pid", "time", "host"}:
        with pytest.raises(ValueError):
            read_lock(LocalStore(tmp_path), f"001/{LOCK_FILE}")


def test_a_heartbeat_dated_in_the_future_is_stale_not_alive_for_ever() -> None:
    now = time.time()
    soon = Beat(pid=1, host="h", token="t", time=now + FUTURE_SKEW_SECONDS / 2, frame=1)
    assert judge(soon, 30.0, now).state == ALIVE  # within the stated clock skew
    far = Beat(pid=1, host="h", token="t", time=now + 1e6, frame=1)
    assert judge(far, 30.0, now).state == STALE
    assert "last heartbeat dated 1000000 s in the future from pid 1" in judge(far, 30.0, now).describe()
    assert "dated" not in judge(soon, 30.0, now).describe()  # within the skew: "0 s ago"
    finished = Beat(pid=1, host="h", token="t", time=now + 1e6, frame=1, state="finished")
    assert judge(finished, 30.0, now).state == STALE


def test_a_lock_dated_in_the_future_is_taken_over_as_stale(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    member_dir.mkdir()
    future = time.time() + 1e8
    (member_dir / LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "some-other-host", "token": "far",
                                                    "proc_start": None, "time": future}))
    os.utime(str(member_dir / LOCK_FILE), (time.time() - 100, time.time() - 100))
    live = MemberLiveness(LocalStore(tmp_path), "000", 0, heartbeat_interval=0.1, heartbeat_timeout=1.0,
                          sleep=lambda s: pytest.fail("waited on a lock dated in the future"))
    live.acquire()
    owner = read_lock(LocalStore(tmp_path), f"000/{LOCK_FILE}")
    assert owner is not None and owner.token == live.token


# -- lineage -----------------------------------------------------------------------------------------


def test_lineage_lines_with_such_numbers_are_skipped_and_the_rest_kept(caplog: pytest.LogCaptureFixture) -> None:
    good = LineageEntry(policy_idx=0, iteration=1, frame=10, action="keep", time=5.0).to_json_line()
    bad = [json.dumps({"policy_idx": 0, "iteration": 2, "frame": 20, "action": "keep", **fields}).encode() + b"\n"
           for fields in ({"objective": HUGE}, {"time": 1e20}, {"time": HUGE}, {"frame": HUGE},
                          {"iteration": math.inf}, {"donor": HUGE}, {"decided_at": -1.0},
                          {"donor_objective": 1e300})]
    with caplog.at_level(logging.WARNING):
        entries = parse_lineage(good + b"".join(bad) + good, "lineage.jsonl")
    assert [e.iteration for e in entries] == [1, 1]
    assert caplog.text.count("skipping line") == len(bad)


def test_a_member_reads_its_own_lineage_with_a_planted_line(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    ws.append_lineage(LineageEntry(policy_idx=0, iteration=1, frame=10, action="keep"))
    with open(tmp_path / "000" / "lineage.jsonl", "ab") as f:
        f.write(b'{"policy_idx": 0, "iteration": 1' + b"0" * 400 + b', "action": "keep"}\n')
    assert [e.iteration for e in ws.read_lineage()] == [1]
