"""A real worker whose workspace (a real tmpfs) turns read-only, comes back, then fills up and is
freed: every failed PBT iteration is a clear error in the log, training goes on, and the member
publishes again at the next interval once the workspace is writable (pbt.on_write_error=retry)."""
import os
import re
import signal
from pathlib import Path

import pytest

from faults_util import Worker, fill, remount, tmpfs, wait_for, worker_cmd
from pbt.storage import Workspace

pytestmark = [pytest.mark.training, pytest.mark.faults]




def newest_frame(ws: Path) -> int:
    record = Workspace(ws, 0, 2).latest_record(0)
    return -1 if record is None else record.frame


def test_read_only_then_full_workspace_worker_keeps_training_and_retries(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with tmpfs(tmp_path / "ws", size="16m") as ws:
        worker = Worker(worker_cmd(0, 2, ws, runs, max_frames=10_000_000), tmp_path / "worker.log", tmp_path)
        try:
            wait_for("the first records", lambda: newest_frame(ws) >= 8192, 90, workers=[worker])

            def failures(reason: str) -> int:
                return len(re.findall(rf"could not publish iteration \d+: .*{reason}.*Training goes on", worker.log()))

            remount(ws, "ro")
            frozen = newest_frame(ws)
            wait_for("two failed iterations (read-only)", lambda: failures("Read-only file system") >= 2, 60,
                     workers=[worker])
            wait_for("a failed heartbeat", lambda: "cannot write its heartbeat" in worker.log(), 30, workers=[worker])
            assert newest_frame(ws) == frozen
            remount(ws, "rw")
            wait_for("a publish and a heartbeat after the remount", lambda: worker.log().count("writable again") >= 1
                     and "heartbeat written again" in worker.log(), 60, workers=[worker])

            fill(ws / "filler")
            wait_for("two failed iterations (disk full)", lambda: failures("No space left on device") >= 2, 60,
                     workers=[worker])
            full_at = newest_frame(ws)
            os.unlink(str(ws / "filler"))
            wait_for("a publish after freeing space", lambda: worker.log().count("writable again") >= 2, 60,
                     workers=[worker])
            assert newest_frame(ws) > full_at
            worker.kill(signal.SIGTERM)
            assert worker.wait(60) == 128 + signal.SIGTERM, worker.log()[-3000:]
        finally:
            worker.stop()
        log = worker.log()
        assert "Traceback" not in log
        # Nothing torn was left behind: every record names an intact checkpoint.
        member = Workspace(ws, 0, 2)
        records = sorted((ws / "000").glob("*.yaml"))
        assert records
        for path in records:
            record = member.latest_record(0, max_iteration=int(path.stem))
            assert record is not None and record.iteration == int(path.stem), path
            member.read_checkpoint_bytes(record)
