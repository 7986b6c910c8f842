"""Isaac Lab's Isaac-Cartpole-Direct trained for real by our worker (kit-less, Newton, CPU): one
worker learns, a 2-member population exploits in place, a SIGKILLed member resumes.

Skipped unless isaaclab is importable (Python 3.12 venv of scripts/test_isaaclab.sh). Each run is
64 envs x 32 steps = 2048 frames per epoch (about 1 s on 2 cores once Warp's kernels are cached).
"""
import json
import re
import sys
from pathlib import Path
from typing import Dict, List

import pytest

# Not "isaaclab": this test folder, on sys.path's tests/, would pass as a namespace package of that name.
pytest.importorskip("isaaclab_tasks", reason="Isaac Lab 3.0 is not installed (Python 3.12: scripts/test_isaaclab.sh)")

from conftest import parse_summary, run_train  # noqa: E402
from faults_util import Worker, log_match, wait_for  # noqa: E402
from isaaclab_util import cartpole_asset, scalars, task_args  # noqa: E402
from pbt.storage import Workspace  # noqa: E402

pytestmark = [pytest.mark.isaaclab, pytest.mark.training]
EPOCH = 64 * 32


@pytest.fixture(scope="module")
def asset() -> Path:
    return cartpole_asset()


def member_cmd(asset: Path, idx: int, n: int, ws: Path, runs: Path, max_frames: int, *extra: str) -> List[str]:
    return [sys.executable, "-m", "pbt.train", *task_args(asset), "pbt=pbt_default", f"pbt.policy_idx={idx}",
            f"pbt.num_policies={n}", f"pbt.workspace={ws}", f"pbt.interval_steps={4 * EPOCH}", "pbt.start_after=0",
            "pbt.initial_delay=0", "pbt.ready_after=0", f"max_frames={max_frames}",
            "experiment=il", f"train_dir={runs}", "pbt.heartbeat_interval=0.5", "pbt.heartbeat_timeout=20", *extra]


def lineage(ws: Path, idx: int) -> List[Dict]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_single_worker_learns_cartpole(tmp_path: Path, asset: Path) -> None:
    """Episode return (rl_games' rewards/step: Isaac Lab's reward summed over an episode), first
    epochs vs last: about -16 for the untrained policy with this asset (300-step episodes paying
    Isaac Lab's pole-position and velocity penalties); about -4 after 20 epochs (40k frames)."""
    proc = run_train([*task_args(asset), "max_frames=40960", "experiment=learn", f"train_dir={tmp_path / 'runs'}"],
                     tmp_path, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    summary = parse_summary(out)
    assert summary["frames"] >= 40960, summary
    returns = scalars(tmp_path / "runs" / "learn" / "summaries", "rewards/step")
    assert len(returns) >= 8, returns
    early, late = sum(returns[:3]) / 3, sum(returns[-3:]) / 3
    assert late > early + max(2.0, 0.25 * abs(early)), (early, late, returns)


def test_two_members_exploit_in_place(tmp_path: Path, asset: Path) -> None:
    """Member 1 cannot learn (constant lr 1e-7): it is replaced by member 0 in place (same process).
    Two members: Isaac Lab's own selection rule (threshold: below mean - k * std), as Isaac Lab users
    run it (``agent.pbt.*`` maps onto it); DexPBT's worst-fraction rule wants more than 2 members.
    The objective (mean episode return) is known once half the envs finished a complete (second)
    episode: the untrained policy's episodes last the full 300 steps, so from iteration 5 (epoch 20).
    Member 0 then needs an iteration or two to pull significantly ahead (measured: Welch p=0.18 at
    iteration 6, 4e-5 at iteration 7), so the run lasts 9 iterations: 7 and 8 can still act."""
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    frames = 36 * EPOCH
    common = ("pbt.selection=threshold",)
    workers = [Worker(member_cmd(asset, 0, 2, ws, runs, frames, *common), tmp_path / "m0.log", tmp_path),
               Worker(member_cmd(asset, 1, 2, ws, runs, frames, *common, "train.params.config.lr_schedule=constant",
                                 "train.params.config.learning_rate=1e-7"), tmp_path / "m1.log", tmp_path)]
    try:
        codes = [w.wait(900) for w in workers]
    finally:
        for w in workers:
            w.stop()
    logs = [w.log() for w in workers]
    assert codes == [0, 0], "\n\n".join(text[-3000:] for text in logs)
    replaced = [e for e in lineage(ws, 1) if e["action"] == "replace"]
    assert replaced, (lineage(ws, 1), logs[1][-3000:])
    assert all(e.get("donor") == 0 for e in replaced), replaced
    assert all(e.get("mode") == "inplace" for e in replaced), replaced
    for idx in (0, 1):
        assert parse_summary(logs[idx])["frames"] >= frames


@pytest.mark.faults
def test_sigkilled_member_resumes(tmp_path: Path, asset: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    cmd = member_cmd(asset, 0, 2, ws, runs, 16 * EPOCH, "task.env.episode_length_s=2.0")  # its peer never starts
    first = Worker(cmd, tmp_path / "first.log", tmp_path)
    workers = [first]
    try:
        def newest():
            record = Workspace(ws, 0, 2).latest_record(0, verify=True)
            return None if record is None else (record.iteration, record.frame)

        wait_for("two records", lambda: (newest() or (0, 0))[0] >= 2 and newest(), 300, workers=[first])
        first.kill()
        first.wait()
        intact = newest()
        second = Worker(cmd, tmp_path / "second.log", tmp_path)
        workers.append(second)
        resumed = wait_for("the member to resume", lambda: log_match(second, r"resumes from its iteration (\d+) "
                                                                             r"\(frame (\d+)\)"), 300, workers=[second])
        assert (int(resumed.group(1)), int(resumed.group(2))) == intact, second.log()[-3000:]
        assert second.wait(420) == 0, second.log()[-3000:]
        summary = parse_summary(second.log())
        assert summary["frames"] >= 16 * EPOCH
        assert re.search(r"taking over the lock of pid \d+", second.log()), second.log()[-3000:]
    finally:
        for w in workers:
            w.stop()
