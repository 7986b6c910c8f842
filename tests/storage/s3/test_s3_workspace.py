"""The workspace on a real SeaweedFS: the same guarantees as on a directory (records visible only
after their checkpoint, checksums verified, exclusive membership with takeover of a dead member,
heartbeats, retention, lineage, the hostile-content refusals) and the request budget of a scan."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest
import torch

from pbt.errors import CorruptRecordError, UnsafeCheckpointError
from pbt.storage import LineageEntry, RetentionPolicy, Workspace, WorkspaceReader
from pbt.storage.checkpoints import serialize_state
from pbt.storage.format import LOCK_FILE
from pbt.storage.liveness import ALIVE, FINISHED, MemberLiveness, peer_status, read_lock
from pbt.storage.local import LocalStore
from pbt.storage.s3 import S3Store
from pbt.storage.s3_client import parse_s3_url

pytestmark = pytest.mark.s3  # the seaweed fixture: a real SeaweedFS
REPO = Path(__file__).resolve().parents[3]
CKPT = serialize_state({"model": {"w": torch.arange(4.0)}, "frame": 1})


def plant(raw, url: str, key: str, data: bytes) -> None:  # noqa: ANN001
    bucket, prefix = parse_s3_url(url)
    raw.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=data)


def remove(raw, url: str, key: str) -> None:  # noqa: ANN001
    bucket, prefix = parse_s3_url(url)
    raw.delete_object(Bucket=bucket, Key=f"{prefix}/{key}")


def test_a_record_is_visible_only_with_its_checkpoint_and_checksums_are_verified(s3_url: str, raw) -> None:  # noqa: ANN001
    ws = Workspace(s3_url, 0, 2)
    assert ws.root == s3_url and ws.own_dir == f"{s3_url}/000"
    ws.probe_writable()
    first = ws.publish(1, 100, 1.0, {"lr": 0.1}, CKPT)
    peer = Workspace(s3_url, 1, 2)
    assert peer.latest_records() == {0: first}
    assert torch.equal(peer.load_checkpoint(first)["model"]["w"], torch.arange(4.0))
    # A record whose checkpoint is not there (yet, or any more) is not visible; the older one is.
    plant(raw, s3_url, "000/000002.yaml", ws.store.get("000/000001.yaml").replace(b"000001.pth", b"000002.pth")
          .replace(b"iteration: 1", b"iteration: 2"))
    assert peer.latest_record(0) == first
    # Replaced bytes fail the checksum.
    plant(raw, s3_url, "000/000001.pth", serialize_state({"model": {"w": torch.zeros(4)}}))
    with pytest.raises(CorruptRecordError, match="checksum mismatch"):
        peer.load_checkpoint(first)


def test_a_member_resumes_from_its_newest_verified_record(s3_url: str, raw) -> None:  # noqa: ANN001
    ws = Workspace(s3_url, 0, 1)
    ws.publish(1, 100, 1.0, {}, CKPT)
    ws.publish(2, 200, 2.0, {}, CKPT)
    plant(raw, s3_url, "000/000002.pth", b"torn")
    again = Workspace(s3_url, 0, 1)
    assert again.newest_iteration(verify=True) == 1
    assert again.has_own_files()


def test_hostile_records_and_checkpoints_are_refused_as_on_a_directory(s3_url: str, raw) -> None:  # noqa: ANN001
    victim = Workspace(s3_url, 0, 3)
    victim.publish(1, 100, 1.0, {}, CKPT)
    evil = Workspace(s3_url, 1, 3)
    good = evil.publish(1, 100, 5.0, {}, CKPT)
    # Wrong types in a record: skipped with a warning, the older one stands.
    plant(raw, s3_url, "001/000002.pth", CKPT)
    plant(raw, s3_url, "001/000002.yaml", json.dumps({
        "policy_idx": 1, "iteration": 2, "frame": 200, "objective": "1_000", "params": {}, "checkpoint": "000002.pth",
        "checksum": "ab" * 32, "time": 1.0, "episode_returns": [], "frames_since_replace": 0, "version": 1}).encode())
    assert victim.latest_records()[1] == good
    # A record over its size cap is refused before it is read.
    plant(raw, s3_url, "001/000003.yaml", b"a: 1\n" * 100_000)
    assert victim.latest_records()[1] == good
    # A pickle that would run code, with a matching checksum: refused by the safe loader.
    payload = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    bad = Workspace(s3_url, 2, 3).publish(1, 100, 9.0, {}, payload)
    with pytest.raises((UnsafeCheckpointError, CorruptRecordError)):
        victim.load_checkpoint(bad)
    # A checkpoint far over the cap is refused from the object's headers.
    victim.own_checkpoint_size = len(CKPT)
    victim.limits = type(victim.limits)(checkpoint_floor=1000)
    huge = Workspace(s3_url, 2, 3).publish(2, 200, 9.0, {}, b"\0" * 200_000)
    assert victim.latest_record(2) is not None and victim.latest_record(2).iteration == 1  # type: ignore[union-attr]
    with pytest.raises(CorruptRecordError):
        victim.read_checkpoint_bytes(huge)


def test_lineage_is_written_without_append_and_reads_back_whole(s3_url: str) -> None:
    ws = Workspace(s3_url, 0, 1)
    entries = [LineageEntry(0, i, i * 100, "keep" if i % 3 else "mutate", reason=f"r{i}") for i in range(40)]
    for entry in entries:
        ws.append_lineage(entry)
    assert ws.read_lineage() == entries
    assert Workspace(s3_url, 0, 1).read_lineage(0) == entries


def _same_run(ws: Workspace) -> List[str]:
    """Publish 12 iterations with retention and a slow peer; the member's files that remain."""
    slow = Workspace(ws.store, 1, 2)
    slow.publish(3, 300, 0.5, {}, CKPT)
    for it in range(1, 13):
        ws.publish(it, it * 100, float(it), {}, CKPT)
        ws.cleanup()
    ws.append_lineage(LineageEntry(0, 12, 1200, "keep"))
    return sorted(n for n in ws.store.list(ws.own_key) if not n.startswith("lineage"))


def test_retention_removes_exactly_what_it_removes_on_a_directory(s3_url: str, tmp_path: Path) -> None:
    policy = RetentionPolicy(keep_records=3, max_records=6)
    on_s3 = _same_run(Workspace(S3Store(s3_url), 0, 2, retention=policy))
    on_disk = _same_run(Workspace(LocalStore(tmp_path), 0, 2, retention=policy))
    assert on_s3 == on_disk
    assert len(on_s3) == 12  # 6 records and their checkpoints


def test_best_copy_and_move_aside_work_on_prefixes(s3_url: str) -> None:
    ws = Workspace(s3_url, 0, 2)
    record = Workspace(s3_url, 1, 2).publish(1, 100, 7.0, {}, CKPT)
    assert ws.update_best(record, 1)
    assert ws.best_record() is not None and ws.best_record().objective == 7.0  # type: ignore[union-attr]
    ws.publish(1, 100, 1.0, {}, CKPT)
    moved = ws.move_aside()
    assert [str(m).rsplit("/", 1)[1].split(".old-")[0] for m in moved] == ["000", "best0"]
    assert not ws.has_own_files() and ws.best_record() is None


def test_scan_of_a_population_costs_one_listing_and_fetches_only_changed_records(s3_url: str) -> None:
    n = 8
    for idx in range(n):
        Workspace(s3_url, idx, n).publish(1, 100, float(idx), {}, CKPT)
    me = Workspace(S3Store(s3_url), 0, n)
    assert len(me.latest_records()) == n
    assert me.store.requests == {"list_objects_v2": 1, "get_object": n}
    me.store.requests.clear()
    Workspace(s3_url, 3, n).publish(2, 200, 9.0, {}, CKPT)
    assert me.latest_records()[3].iteration == 2
    assert me.store.requests == {"list_objects_v2": 1, "get_object": 1}


def test_a_scan_fetches_the_changed_records_and_heartbeats_concurrently_and_the_reads_hit_them(
        s3_url: str) -> None:
    import threading

    n = 6
    for idx in range(n):
        ws = Workspace(s3_url, idx, n)
        ws.publish(1, 100, float(idx), {}, CKPT)
        MemberLiveness(ws.store, ws.own_key, idx, 30.0, 600.0).beat()
    me = Workspace(S3Store(s3_url), 0, n)
    client = me.store.client
    threads = set()
    real_get = client.get_object

    def get_object(**kwargs):  # noqa: ANN003, ANN202
        threads.add(threading.get_ident())
        return real_get(**kwargs)

    client.get_object = get_object
    with me.store.scan():
        prefetched = dict(me.store.requests)
        peers = me.latest_records()
        beats = [peer_status(me.store, me.member_key(i), 600.0).state for i in range(1, n)]
    assert len(peers) == n and beats == [ALIVE] * (n - 1)
    # every record and heartbeat came with the scan's prefetch, from several threads; the reads sent nothing
    assert prefetched == {"list_objects_v2": 1, "get_object": 2 * n} == dict(me.store.requests)
    assert len(threads) > 1 and threading.get_ident() not in threads


def test_heartbeats_and_a_finished_member_on_s3(s3_url: str) -> None:
    store = S3Store(s3_url)
    member = MemberLiveness(store, "000", 0, heartbeat_interval=0.2, heartbeat_timeout=30.0)
    member.acquire()
    member.start()
    status = peer_status(S3Store(s3_url), "000", 30.0)
    assert status.state == ALIVE and status.beat is not None and status.beat.token == member.token
    member.close(FINISHED)
    after = peer_status(S3Store(s3_url), "000", 30.0)
    assert after.beat is not None and after.beat.state == FINISHED and after.state == ALIVE
    assert read_lock(store, f"000/{LOCK_FILE}") is None  # released


def test_a_lock_of_another_host_that_stops_beating_is_taken_over(s3_url: str, raw) -> None:  # noqa: ANN001
    lock = {"pid": 4242, "host": "some-other-host", "token": "far", "proc_start": None, "time": time.time()}
    plant(raw, s3_url, f"000/{LOCK_FILE}", json.dumps(lock).encode())
    # An object's date cannot be set back: the taker watches the owner's heartbeat (there is none)
    # until pbt.heartbeat_timeout passes, then takes over through a create-if-absent guard.
    member = MemberLiveness(S3Store(s3_url), "000", 0, heartbeat_interval=0.1, heartbeat_timeout=1.0)
    member.acquire()
    owner = read_lock(S3Store(s3_url), f"000/{LOCK_FILE}")
    assert owner is not None and owner.token == member.token
    assert not [n for n in S3Store(s3_url).list("000") if n.startswith("lock.takeover")]
    member.release()


HOLDER = r"""
import sys, time
from pbt.storage.liveness import LockedError, MemberLiveness
from pbt.storage.reader import open_store
live = MemberLiveness(open_store(sys.argv[1]), "000", 0, heartbeat_interval=0.2, heartbeat_timeout=5.0)
try:
    live.acquire()
except LockedError as exc:
    print("refused", exc, flush=True)
    sys.exit(3)
print("locked", live.token, flush=True)
live.start()
time.sleep(float(sys.argv[2]))
live.close("finished")
"""


def _holder(url: str, hold: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", HOLDER, url, str(hold)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_real_processes_one_member_per_index_and_a_killed_ones_lock_taken_over(s3_url: str) -> None:
    first = _holder(s3_url, 120)
    try:
        assert first.stdout.readline().startswith("locked")  # type: ignore[union-attr]
        second = _holder(s3_url, 0.1)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 3, out + err
        assert f"already being trained by pid {first.pid}" in out
        first.send_signal(signal.SIGKILL)
        first.wait()
        third = _holder(s3_url, 0.1)
        out, err = third.communicate(timeout=120)
        assert third.returncode == 0, out + err
        assert "taking over the lock" in err and "no longer running" in err
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()


def test_a_members_whole_iteration_costs_one_listing(s3_url: str, tmp_path: Path) -> None:
    """A real PbtMember's iteration on S3: decide (publish, scan, decide), act, and record (lineage,
    best copy, retention) list the workspace once: the scan opened after publishing serves them all."""
    from pbt.iteration import kept
    from pbt.member import PbtMember

    n = 4
    for idx in range(1, n):
        ws = Workspace(s3_url, idx, n)
        ws.publish(1, 1000, float(idx), {}, CKPT)
        MemberLiveness(ws.store, ws.own_key, idx, 30.0, 600.0).beat()
    block = {"enabled": True, "policy_idx": 0, "num_policies": n, "workspace": s3_url, "interval_steps": 1000,
             "mutation": {"train.params.config.learning_rate": "mutate_float"}, "start_after": 0,
             "initial_delay": 0, "ready_after": 0, "heartbeat_interval": 30.0, "heartbeat_timeout": 600.0}
    cfg = {"seed": 3, "checkpoint": "", "experiment": "exp",
           "train": {"params": {"config": {"learning_rate": 1e-3}}}, "pbt": block}
    member = PbtMember(cfg, tmp_path / "run", [])
    member.startup()
    member.workspace.retention = RetentionPolicy(keep_records=1, max_records=1, peer_margin=0)
    member.started(0)
    state = {"model": {"w": torch.arange(4.0)}}
    try:
        for iteration in (1, 2, 3):
            member.workspace.store.requests.clear()
            with member.iteration(iteration * 1000, 0.5, state, [0.5]) as it:
                assert it is not None
                member.record(it, kept(it.decision, it.decision.reason))
            assert member.workspace.store.requests["list_objects_v2"] == 1, member.workspace.store.requests
        own = sorted(n for n in member.workspace.store.list("000") if n.endswith(".yaml"))
        assert own == ["000003.yaml"]  # retention ran in the record step
        best = member.workspace.best_record()
        assert best is not None and (best.policy_idx, best.objective) == (3, 3.0)  # so did the best copy
        assert [e.action for e in member.workspace.read_lineage()][-3:] == ["keep"] * 3
    finally:
        member.close()


def test_one_member_iteration_and_one_tool_snapshot_each_cost_one_listing(s3_url: str) -> None:
    from pbt.tools.snapshot import read_snapshot

    n = 6
    for idx in range(n):
        ws = Workspace(s3_url, idx, n)
        ws.publish(1, 100, float(idx), {}, CKPT)
        ws.append_lineage(LineageEntry(idx, 1, 100, "keep"))
        MemberLiveness(ws.store, ws.own_key, idx, 30.0, 600.0).beat()
    me = Workspace(S3Store(s3_url), 0, n)
    own = me.publish(2, 200, 0.0, {}, CKPT)
    with me.store.scan():  # a PBT iteration's workspace calls (a real member's: the test above)
        peers = me.latest_records(max_iteration=2)
        peers[0] = own
        assert all(peer_status(me.store, me.member_key(i), 600.0).state == ALIVE for i in range(1, n))
        me.update_best(max(peers.values(), key=lambda r: r.objective))
        me.cleanup(peers)
    assert me.store.requests["list_objects_v2"] == 1, me.store.requests
    assert [len(m.lineage) for m in read_snapshot(s3_url).members] == [1] * n
    tool = WorkspaceReader(S3Store(s3_url))  # what read_snapshot does: records, lineages, heartbeats
    with tool.store.scan():
        for idx in tool.member_indices():
            tool.latest_record(idx), tool.read_lineage(idx), tool.read_heartbeat(idx)
    assert tool.store.requests["list_objects_v2"] == 1, tool.store.requests


@pytest.mark.parametrize("junk", [b"", b"\xff\xfe not json", b"[1, 2]", b'{"pid": "x"}', b"{" * 100_000])
def test_a_junk_heartbeat_makes_a_peer_unknown_never_an_error(s3_url: str, raw, junk: bytes) -> None:  # noqa: ANN001
    plant(raw, s3_url, "001/heartbeat", junk)
    assert peer_status(S3Store(s3_url), "001", 600.0).state == "unknown"
    with pytest.raises(ValueError, match="heartbeat"):
        WorkspaceReader(s3_url).read_heartbeat(1)
