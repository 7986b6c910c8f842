"""An elastic population (``pbt.num_policies=auto``) with real worker processes sharing one workspace
(Pendulum on CPU): members 0 and 1 start it, member 1 finishes early and drops out of member 0's
ranking after the window, member 7 (a non-contiguous index) joins mid-run from the best member's
weights and frame count, and is ranked by member 0. ``run_elastic`` also runs on an ``s3://``
workspace (tests/storage/s3/test_s3_population.py).
"""
import sys
from pathlib import Path
from typing import Dict, List, Optional, Union

import pytest

from conftest import REPO

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "tests"))

from faults_util import EPOCH_FRAMES, Worker, finish, wait_for, worker_cmd  # noqa: E402

from pbt.storage import LineageEntry, Record, WorkspaceReader  # noqa: E402

INTERVAL = 4 * EPOCH_FRAMES
# No member acts (start_after far beyond max_frames): an exploit would make a member's objective
# unknown again for a while, and a joiner needs a peer with a known objective. What is
# tested is who is ranked (every decision's reason names the members) and the join.
ELASTIC = ("pbt.elastic_window=1", "pbt.ready_after=0", "pbt.start_after=100000000")


def elastic_cmd(idx: int, workspace: Union[Path, str], runs: Path, max_frames: int) -> List[str]:
    cmd = worker_cmd(idx, "auto", Path("unused"), runs / f"m{idx}", *ELASTIC, max_frames=max_frames,
                     interval=INTERVAL)
    return [f"pbt.workspace={workspace}" if c.startswith("pbt.workspace=") else c for c in cmd
            if c != "pbt.start_after=0"]  # ELASTIC sets it


def run_elastic(tmp_path: Path, workspace: Union[Path, str]) -> None:
    """Start members 0 and 1, add member 7 once both have objectives; check the joins and leaves."""
    runs = tmp_path / "runs"

    def lineage(idx: int) -> List[LineageEntry]:
        return WorkspaceReader(workspace).read_lineage(idx)

    workers = [Worker(elastic_cmd(0, workspace, runs, 500_000), tmp_path / "w0.log", tmp_path),
               Worker(elastic_cmd(1, workspace, runs, 100_000), tmp_path / "w1.log", tmp_path)]
    try:
        def objectives_known() -> Optional[Dict[int, Record]]:
            try:
                latest = WorkspaceReader(workspace).latest_records()
            except Exception:  # noqa: BLE001 - no workspace yet
                return None
            return latest if all(i in latest and latest[i].has_objective for i in (0, 1)) else None

        # member 1 may finish meanwhile (its last record has an objective): only member 0 must live on
        wait_for("both founders to publish an objective", objectives_known, timeout=300, workers=workers[:1])
        workers.append(Worker(elastic_cmd(7, workspace, runs, 500_000), tmp_path / "w7.log", tmp_path))
    except BaseException:
        for w in workers:
            w.stop()
        raise
    logs = finish(workers, 600)

    # member 7 joined from the best member: its weights, its frame count, mutated hyperparameters
    joined = lineage(7)[0]
    assert joined.action == "replace" and joined.mode == "startup" and joined.donor in (0, 1), joined
    assert joined.frame > 0 and joined.params_after != joined.params_before
    assert "joined the running population from its best member" in logs[2]
    later = [e for e in lineage(7)[1:]]
    assert later and min(e.frame for e in later) > joined.frame  # it went on from the donor's frame
    assert "join_checkpoint.pth" in logs[2]

    # member 0 saw 7 join and 1 leave (finished, its newest record older than the window)
    assert "joined: [7]" in logs[0], logs[0][-3000:]
    assert "left: 1 (newest record" in logs[0], logs[0][-3000:]
    reasons = [e.reason for e in lineage(0) if e.iteration > 0]
    assert any("members [0, 1] ranked" in r for r in reasons)
    first = next(i for i, r in enumerate(reasons) if "members [0, 7] ranked" in r)  # 1 left, 7 joined
    assert all("members [0, 1, 7]" not in r for r in reasons[first:])  # 1 never came back


@pytest.mark.training
def test_members_join_and_leave_a_running_population(tmp_path: Path) -> None:
    run_elastic(tmp_path, tmp_path / "ws")
