"""Locks and heartbeats (pbt/storage/liveness.py) with real processes, real signals and os.execv.
No torch: runs on Python 3.8."""
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


import pytest

from pbt.storage.liveness import (ALIVE, FINISHED, HEARTBEAT_FILE, LOCK_FILE, STALE, UNKNOWN, Beat, LockedError,
                          MemberLiveness, peer_status, read_heartbeat, read_lock)
from pbt.procfs import is_alive as pid_alive, process_start_time
from pbt.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]

# Holds member 0's lock of the workspace argv[1] with a heartbeat, prints "locked <token>", and
# sleeps; "exec" re-executes itself once first (same PID) and must keep the lock.
HOLDER = r'''
import logging, os, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from pbt.storage.liveness import LockedError, MemberLiveness
from pbt.storage.local import LocalStore
member_dir, mode = sys.argv[1], sys.argv[2]
hold = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
live = MemberLiveness(LocalStore(os.path.dirname(member_dir)), os.path.basename(member_dir), 0,
                      heartbeat_interval=0.1, heartbeat_timeout=2.0)
try:
    live.acquire()
except LockedError as exc:
    print("refused", exc, flush=True)
    sys.exit(3)
print("locked", live.token, os.getpid(), flush=True)
if mode == "exec":
    os.execv(sys.executable, [sys.executable, sys.argv[0], member_dir, "after-exec", str(hold)])
live.start()
time.sleep(hold)
live.close("finished")
print("released", flush=True)
'''


def liveness(member_dir: Path, **kwargs: float) -> MemberLiveness:
    """The liveness of the member whose directory is ``member_dir`` (created if missing)."""
    member_dir.mkdir(parents=True, exist_ok=True)
    return MemberLiveness(LocalStore(member_dir.parent), member_dir.name, 0, **kwargs)  # type: ignore[arg-type]


def store_key(path: Path) -> tuple:
    """(store, key) of a file in a member directory."""
    return LocalStore(path.parent.parent), f"{path.parent.name}/{path.name}"


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def start_holder(tmp_path: Path, member_dir: Path, mode: str = "hold", hold: float = 60.0) -> subprocess.Popen:
    # written once, before any holder runs: rewriting it in place while an earlier holder's
    # interpreter was still reading it gave that holder an empty script (exit 0, nothing done)
    script = tmp_path / "holder.py"
    if not script.exists():
        script.write_text(HOLDER)
    return subprocess.Popen([sys.executable, str(script), str(member_dir), mode, str(hold)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())


def finish(proc: subprocess.Popen, timeout: float = 30) -> str:
    out, err = proc.communicate(timeout=timeout)
    return out + err


def test_pid_checks_see_dead_and_reused_processes() -> None:
    assert pid_alive(os.getpid(), process_start_time(os.getpid()))
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not pid_alive(proc.pid)
    assert not pid_alive(os.getpid(), "not-its-start-time")  # same PID, another process


def test_heartbeat_is_rewritten_atomically_and_closed(tmp_path: Path) -> None:
    member = liveness(tmp_path / "000", heartbeat_interval=0.01, heartbeat_timeout=1.0)
    member.acquire()
    member.start()
    seen = set()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # a concurrent reader never sees a torn heartbeat
        member.frame = random.randint(0, 10)
        beat = read_heartbeat(member.store, member.heartbeat_key)
        assert beat is not None and beat.pid == os.getpid() and beat.token == member.token
        seen.add(beat.time)
    assert len(seen) > 5
    member.close("finished")
    beat = read_heartbeat(member.store, member.heartbeat_key)
    assert beat is not None and beat.state == FINISHED
    assert not Path(member.lock_path).exists()
    assert not [n for n in os.listdir(str(tmp_path / "000")) if n.endswith(".tmp")]


def test_second_process_with_the_same_index_refuses_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    member_dir.mkdir()
    first = start_holder(tmp_path, member_dir)
    try:
        line = first.stdout.readline().split()
        assert line[0] == "locked", line
        second = start_holder(tmp_path, member_dir)
        out = finish(second)
        assert second.returncode == 3, out
        assert f"already being trained by pid {first.pid} on host" in out and "pbt.policy_idx" in out
        first.send_signal(signal.SIGKILL)
        first.wait()
        start = time.monotonic()
        third = start_holder(tmp_path, member_dir, hold=0.2)
        out = finish(third)
        assert third.returncode == 0, out
        assert "taking over the lock" in out and "no longer running" in out
        assert time.monotonic() - start < 10  # same host, owner gone: no waiting for the timeout
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        first.stdout.close()
        first.stderr.close()


def test_lock_survives_the_members_own_exec_restart(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    member_dir.mkdir()
    proc = start_holder(tmp_path, member_dir, mode="exec", hold=0.5)
    out = finish(proc)
    assert proc.returncode == 0, out
    locked = [line.split() for line in out.splitlines() if line.startswith("locked")]
    assert len(locked) == 2 and locked[0][1:] == locked[1][1:], out  # same token, same PID
    assert "keeping own lock" in out


def test_concurrent_takeover_of_a_stale_lock_has_one_winner(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    member_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (member_dir / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": os.uname()[1], "token": "dead",
                                                    "proc_start": None, "time": time.time()}))
    procs = [start_holder(tmp_path, member_dir, hold=3.0) for _ in range(5)]
    outs = [finish(p) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3, 3, 3, 3], "\n---\n".join(outs)


def _plant_foreign_lock(member_dir: Path, age: float, token: str = "far") -> None:
    member_dir.mkdir(exist_ok=True)
    (member_dir / LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "some-other-host", "token": token,
                                                    "proc_start": None, "time": time.time() - age}))
    os.utime(str(member_dir / LOCK_FILE), (time.time() - age, time.time() - age))


def test_lock_of_another_host_is_taken_over_once_its_heartbeat_is_older_than_the_limit(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    _plant_foreign_lock(member_dir, age=100)
    start = time.monotonic()
    liveness(member_dir, heartbeat_interval=0.1, heartbeat_timeout=1.0).acquire()  # at once
    assert time.monotonic() - start < 1.0
    (member_dir / LOCK_FILE).unlink()
    _plant_foreign_lock(member_dir, age=0)  # fresh, but nobody beats: taken over after the limit
    start = time.monotonic()
    live = liveness(member_dir, heartbeat_interval=0.1, heartbeat_timeout=1.0)
    live.acquire()
    assert 0.8 < time.monotonic() - start < 5.0
    owner = read_lock(*store_key(member_dir / LOCK_FILE))
    assert owner is not None and owner.token == live.token


def test_lock_of_another_host_with_an_advancing_heartbeat_is_refused(tmp_path: Path) -> None:
    member_dir = tmp_path / "000"
    _plant_foreign_lock(member_dir, age=0)
    stop = threading.Event()

    def beat() -> None:  # the remote owner, alive
        while not stop.is_set():
            data = Beat(pid=4242, host="some-other-host", token="far", time=time.time(), frame=1).to_json()
            tmp = member_dir / ".hb.tmp"
            tmp.write_bytes(data)
            os.replace(str(tmp), str(member_dir / HEARTBEAT_FILE))
            time.sleep(0.05)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        start = time.monotonic()
        with pytest.raises(LockedError, match="some-other-host.*heartbeat is advancing"):
            liveness(member_dir, heartbeat_interval=0.1, heartbeat_timeout=3.0).acquire()
        assert time.monotonic() - start < 2.0
    finally:
        stop.set()
        thread.join()


def test_a_process_whose_lock_was_taken_notices_and_stops_beating(tmp_path: Path, caplog) -> None:
    member = liveness(tmp_path / "000", heartbeat_interval=0.05, heartbeat_timeout=1.0)
    member.acquire()
    member.start()
    Path(member.lock_path).write_text(json.dumps({"pid": 1, "host": "x", "token": "thief", "time": time.time()}))
    with caplog.at_level(logging.ERROR, logger="pbt.storage.liveness"):
        deadline = time.monotonic() + 5
        while member.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert member.lost is not None and "lost its lock" in member.lost
    member.close()
    assert Path(member.lock_path).exists()  # not ours: left alone


def test_peer_status_alive_stale_finished_unknown(tmp_path: Path, caplog) -> None:
    d = tmp_path / "001"
    d.mkdir()
    assert peer_status(LocalStore(d.parent), d.name, 10).state == UNKNOWN
    now = time.time()
    (d / HEARTBEAT_FILE).write_bytes(Beat(pid=1, host="h", token="t", time=now - 5, frame=7).to_json())
    os.utime(str(d / HEARTBEAT_FILE), (now - 5, now - 5))
    assert peer_status(LocalStore(d.parent), d.name, 10, now).state == ALIVE
    status = peer_status(LocalStore(d.parent), d.name, 3, now)
    assert status.state == STALE and "pid 1 on h at frame 7" in status.describe()
    finished = Beat(pid=1, host="h", token="t", time=now - 500, frame=7, state=FINISHED)
    (d / HEARTBEAT_FILE).write_bytes(finished.to_json())
    os.utime(str(d / HEARTBEAT_FILE), (now - 500, now - 500))
    assert peer_status(LocalStore(d.parent), d.name, 3, now).state == ALIVE  # finished training: its records are final, not abandoned
    (d / HEARTBEAT_FILE).write_bytes(b'{"pid": 1, "ho')
    with caplog.at_level(logging.WARNING, logger="pbt.storage.liveness"):
        assert peer_status(LocalStore(d.parent), d.name, 3, now).state == UNKNOWN
    assert str(d / HEARTBEAT_FILE) in caplog.text
