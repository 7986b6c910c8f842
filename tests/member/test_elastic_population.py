"""An elastic population (``pbt.num_policies=auto``) with real worker processes sharing one workspace
(Pendulum on CPU): members 0 and 1 start it, member 1 finishes early and drops out of member 0's
ranking after the window, member 7 (a non-contiguous index) joins mid-run from the best member's
weights and frame count, and is ranked by member 0.
"""
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from conftest import REPO

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "tests"))

from faults_util import EPOCH_FRAMES, Worker, finish, wait_for, worker_cmd  # noqa: E402

from pbt.storage import Record, WorkspaceReader  # noqa: E402

INTERVAL = 4 * EPOCH_FRAMES
ELASTIC = ("pbt.elastic_window=1", "pbt.ready_after=0")


def lineage(ws: Path, idx: int) -> List[Dict[str, Any]]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cmd(idx: int, ws: Path, runs: Path, max_frames: int, *extra: str) -> List[str]:
    return worker_cmd(idx, "auto", ws, runs / f"m{idx}", *ELASTIC, *extra, max_frames=max_frames, interval=INTERVAL)


@pytest.mark.slow
def test_members_join_and_leave_a_running_population(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    workers = [Worker(cmd(0, ws, runs, 500_000), tmp_path / "w0.log", tmp_path),
               Worker(cmd(1, ws, runs, 100_000), tmp_path / "w1.log", tmp_path)]
    try:
        def objectives_known() -> Optional[Dict[int, Record]]:
            latest = WorkspaceReader(ws).latest_records() if ws.exists() else {}
            return latest if all(i in latest and latest[i].has_objective for i in (0, 1)) else None

        # member 1 may finish meanwhile (its last record has an objective): only member 0 must live on
        wait_for("both founders to publish an objective", objectives_known, timeout=300, workers=workers[:1])
        workers.append(Worker(cmd(7, ws, runs, 500_000), tmp_path / "w7.log", tmp_path))
    except BaseException:
        for w in workers:
            w.stop()
        raise
    logs = finish(workers, 600)

    # member 7 joined from the best member: its weights, its frame count, mutated hyperparameters
    joined = lineage(ws, 7)[0]
    assert joined["action"] == "replace" and joined["mode"] == "startup" and joined["donor"] in (0, 1), joined
    assert joined["frame"] > 0 and joined["params_after"] != joined["params_before"]
    assert "joined the running population from its best member" in logs[2]
    records_7 = [e for e in lineage(ws, 7)[1:] if e["frame"] > 0]
    assert records_7 and min(e["frame"] for e in records_7) > joined["frame"]  # it went on from the donor's frame
    assert "restored" in logs[2] and "join_checkpoint.pth" in logs[2]

    # member 0 saw 7 join and 1 leave (finished, its newest record older than the window)
    assert "joined: [7]" in logs[0], logs[0][-3000:]
    assert "left: 1 (newest record" in logs[0], logs[0][-3000:]
    reasons = [e["reason"] for e in lineage(ws, 0) if e["iteration"] > 0]
    assert any("members [0, 1] ranked" in r for r in reasons)
    assert any("members [0, 7] ranked" in r for r in reasons)  # after 1 left, with 7
    assert all("members [0, 1, 7]" not in r for r in lineage_reasons_after_leave(ws))


def lineage_reasons_after_leave(ws: Path) -> List[str]:
    """Member 0's decision reasons after the first decision that ranked [0, 7] (1 had left for good)."""
    reasons = [e["reason"] for e in lineage(ws, 0) if e["iteration"] > 0]
    first = next(i for i, r in enumerate(reasons) if "members [0, 7] ranked" in r)
    return reasons[first:]
