"""Two real workers (members 0 and 1 of 3) beside issue 25's planted files (the test plays member 2):
a record whose objective is a 400-digit integer and whose returns are 1e308, a heartbeat with
``"pid": Infinity``, a line of overflowing numbers in each worker's own lineage, and 25 empty record
files named above each worker's own. Before the fix every worker exited 1 at its first PBT iteration
(OverflowError), and retention deleted each worker's own records. Both finish; nothing of theirs is lost."""
import json
from pathlib import Path

import pytest

from faults_util import Worker, finish, worker_cmd
from pbt.storage import WorkspaceReader

pytestmark = [pytest.mark.training, pytest.mark.faults]

MAX_FRAMES = 40_960  # 10 epochs of 4096 frames: 10 PBT iterations each


def plant(ws: Path) -> None:
    peer = ws / "002"
    peer.mkdir(parents=True)
    record = {"policy_idx": 2, "iteration": 1, "frame": 4096, "objective": 10 ** 400,
              "params": {"train.params.config.learning_rate": 1e-3}, "checkpoint": "000001.pth",
              "checksum": "ab" * 32, "time": 1.0, "episode_returns": [1e308] * 8, "frames_since_replace": 10 ** 6,
              "version": 1}
    (peer / "000001.yaml").write_text(json.dumps(record))
    (peer / "000001.pth").write_bytes(b"x")
    (peer / "heartbeat").write_text('{"pid": Infinity, "host": "h", "token": "t", "time": 1e400}')
    for idx in (0, 1):
        own = ws / f"{idx:03d}"
        own.mkdir(parents=True)
        (own / "lineage.jsonl").write_bytes(b'{"policy_idx": %d, "iteration": 1%s, "time": 1e20}\n' % (idx, b"0" * 400))
        for k in range(25):
            (own / f"{900000 + k:06d}.yaml").write_bytes(b"")


def test_workers_finish_beside_overflowing_numbers_and_junk_records(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    plant(ws)
    workers = [Worker(worker_cmd(i, 3, ws, runs, "pbt.ready_after=0", max_frames=MAX_FRAMES),
                      tmp_path / f"w{i}.log", tmp_path) for i in (0, 1)]
    logs = finish(workers, 500)
    for i, log in enumerate(logs):
        assert workers[i].proc.returncode == 0, log[-4000:]
        assert "OverflowError" not in log
    reader = WorkspaceReader(ws, 3)
    for idx in (0, 1):
        newest = reader.latest_record(idx, verify=True)
        assert newest is not None and newest.frame >= MAX_FRAMES - 4096, newest  # its last record survived
        assert (ws / f"{idx:03d}" / "900000.yaml").exists()  # not its own: neither ranked nor deleted
