"""Real workers killed for real: SIGKILL at random moments and in the middle of a checkpoint write,
SIGTERM (the launcher's and Slurm's stop signal), and a second process started for a busy index.

A member restarted after a SIGKILL resumes from its newest intact record (its frame count goes on,
it does not start over); a peer worker and a scanner thread reading the workspace all along never
get a record whose checkpoint fails its checksum; SIGTERM publishes the current state and exits
with 128+15; a duplicate of a running member refuses to start.
"""
import os
import random
import re
import signal
import threading
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from faults_util import Worker, log_match, wait_for, worker_cmd
from pbt.errors import CorruptRecordError
from pbt.storage import Workspace
from pbt.storage.reader import read_record

pytestmark = [pytest.mark.training, pytest.mark.faults]

CHECKPOINT_TMP = re.compile(r"\.\d{6}\.(pth|yaml)\..*\.tmp$")


class Scanner(threading.Thread):
    """A peer reading the workspace while workers are killed: every record it gets must name a
    checkpoint with the right sha256. A mismatch counts as a torn read unless the record file
    changed or vanished meanwhile (then the reader retries, as workers do)."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.workspace = Workspace(root, 1, 2)
        self.stop = threading.Event()
        self.verified = 0
        self.torn: List[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for idx, record in self.workspace.latest_records().items():
                try:
                    self.workspace.read_checkpoint_bytes(record)
                    self.verified += 1
                except CorruptRecordError as exc:
                    path = self.workspace.member_dir(idx) / f"{record.iteration:06d}.yaml"
                    try:
                        same = read_record(path) == record
                    except CorruptRecordError:
                        same = False  # deleted by retention meanwhile
                    if same and "checksum mismatch" in str(exc):
                        self.torn.append(str(exc))
            time.sleep(0.01)


def newest(root: Path, idx: int) -> Optional[Tuple[int, int]]:
    record = Workspace(root, idx, 2).latest_record(idx, verify=True)
    return None if record is None else (record.iteration, record.frame)


def kill_mid_write(worker: Worker, member_dir: Path, timeout: float) -> bool:
    """SIGSTOP the worker as soon as a checkpoint/record temp file appears; if the temp file is still
    there once it is stopped, the write is unfinished: SIGKILL it now. True when that happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(CHECKPOINT_TMP.search(n) for n in os.listdir(str(member_dir))):
            os.kill(worker.pid, signal.SIGSTOP)
            time.sleep(0.02)
            if any(CHECKPOINT_TMP.search(n) for n in os.listdir(str(member_dir))):
                os.kill(worker.pid, signal.SIGKILL)
                worker.wait()
                return True
            os.kill(worker.pid, signal.SIGCONT)
    return False


def test_sigkilled_worker_resumes_from_its_newest_intact_record(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    rng = random.Random(7)
    peer = Worker(worker_cmd(1, 2, ws, runs, max_frames=10_000_000), tmp_path / "peer.log", tmp_path)
    victim_cmd = worker_cmd(0, 2, ws, runs, max_frames=10_000_000)
    victim = Worker(victim_cmd, tmp_path / "victim0.log", tmp_path)
    scanner = Scanner(ws)
    workers = [peer, victim]
    try:
        wait_for("both members' first records", lambda: newest(ws, 0) and newest(ws, 1), 90, workers=workers)
        scanner.start()

        # A duplicate of the running peer refuses at once, naming the owner (checked below).
        duplicate = Worker(worker_cmd(1, 2, ws, runs, max_frames=10_000_000), tmp_path / "dup.log", tmp_path)
        workers.append(duplicate)

        mid_write_kills = 0
        for kill in range(3):
            before = wait_for("a record newer than the resume point",
                              lambda: (newest(ws, 0) or (0, 0))[0] >= 2 and newest(ws, 0), 90, workers=[victim])
            if kill == 1:
                mid_write_kills += kill_mid_write(victim, ws / "000", timeout=40)
            if victim.proc.poll() is None:
                time.sleep(rng.uniform(0.1, 1.5))
                victim.kill()
                victim.wait()
            intact = newest(ws, 0)
            assert intact is not None and intact[0] >= before[0]
            victim = Worker(victim_cmd, tmp_path / f"victim{kill + 1}.log", tmp_path)
            workers[1] = victim
            resumed = wait_for("the restarted member to resume",
                               lambda: log_match(victim, r"resumes from its iteration (\d+) \(frame (\d+)\)"), 90,
                               workers=[victim])
            assert (int(resumed.group(1)), int(resumed.group(2))) == intact, victim.log()[-3000:]
            assert log_match(victim, r"taking over the lock of pid \d+ .*no longer running"), victim.log()[-3000:]
            assert "initial mutation" not in victim.log()
            wait_for("a record past the resume point", lambda: (newest(ws, 0) or (0, 0))[1] > intact[1], 90,
                     workers=[victim])
        assert duplicate.wait(90) != 0
        assert f"already being trained by pid {peer.pid}" in duplicate.log(), duplicate.log()[-3000:]

        # SIGTERM: each member publishes its current state and exits with 128 + 15.
        for idx, worker in ((0, victim), (1, peer)):
            worker.kill(signal.SIGTERM)
            assert worker.wait(60) == 128 + signal.SIGTERM, worker.log()[-3000:]
            saved = re.search(r"SIGTERM: saved the current state as iteration (\d+) \(frame (\d+)\)", worker.log())
            assert saved, worker.log()[-3000:]
            assert newest(ws, idx) == (int(saved.group(1)), int(saved.group(2)))
            assert '"state": "stopped"' in (ws / f"{idx:03d}" / "heartbeat").read_text()
            assert not (ws / f"{idx:03d}" / "lock").exists()
    finally:
        scanner.stop.set()
        for worker in workers:
            worker.stop()
    scanner.join(10)
    assert scanner.verified > 20
    assert not scanner.torn, scanner.torn[:3]
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "checksum mismatch" not in logs
    # Every record on disk is intact; a killed writer's temp files are gone or left for cleanup only.
    for idx in (0, 1):
        member = Workspace(ws, idx, 2)
        for path in sorted((ws / f"{idx:03d}").glob("*.yaml")):
            member.read_checkpoint_bytes(read_record(path))
    lineage = Workspace(ws, 0, 2).read_lineage(0)
    assert sum(e.reason == "initial mutation of a fresh member" for e in lineage) == 1
    assert mid_write_kills == 1  # SIGSTOP-ped with its temp file present: killed before the rename
