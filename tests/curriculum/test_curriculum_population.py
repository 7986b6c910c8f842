"""A real population through a 3-stage Reacher curriculum: members move through the stages in place
(Reacher's goal radius is live), at different times, and rank only against peers in their stage.

Members 0, 1 and 2 leave the first stage after one PBT interval; member 3 stays in it six times
as long (its own stage lengths), so for several intervals it is alone in stage 0 while the others
have objectives in later stages: it must find nobody to compare with. Every replace takes a donor
whose record was written in the recipient's stage. 64 envs: an episode is 12.8k frames, so
objectives are known within each stage.
"""
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import worker_env
from pbt.storage import LineageEntry, WorkspaceReader
from pbt.tools.snapshot import read_snapshot
from pbt.tools.status import render_text

pytestmark = pytest.mark.training

N = 4
LATE = 3
INTERVAL = 10_000
LATE_FRAMES = 60_000
MAX_FRAMES = 120_000


def curriculum(first: int) -> str:
    return (f"pbt.curriculum=[{{name: wide, task: {{task.env.goalRadius: 0.08}}, frames: {first}}}, "
            f"{{name: medium, task: {{task.env.goalRadius: 0.05}}, frames: 20000}}, "
            f"{{name: final, task: {{task.env.goalRadius: 0.03}}}}]")


def member_cmd(idx: int, ws: Path, runs: Path) -> List[str]:
    return [sys.executable, "-m", "pbt.train", "task=Reacher", "pbt=pbt_default", f"pbt.policy_idx={idx}",
            f"pbt.num_policies={N}", f"pbt.workspace={ws}", f"pbt.interval_steps={INTERVAL}", "pbt.start_after=0",
            "pbt.initial_delay=0", "pbt.ready_after=0", "pbt.max_lead=null", f"max_frames={MAX_FRAMES}",
            "num_envs=64", "sim_device=cpu", "rl_device=cpu", "torch_threads=1", "experiment=cur",
            f"train_dir={runs}", curriculum(LATE_FRAMES if idx == LATE else INTERVAL)]


def transitions(lineage: List[LineageEntry]) -> List[LineageEntry]:
    return [e for e in lineage if e.reason.startswith("curriculum:")]


def stage_of_record(lineage: List[LineageEntry], iteration: int) -> int:
    """The stage a member's record of ``iteration`` was written in: its transitions before it."""
    return sum(1 for e in transitions(lineage) if e.iteration < iteration)


def test_members_advance_through_the_stages_and_rank_within_their_stage(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    procs = []
    for idx in range(N):
        log = (tmp_path / f"member{idx}.log").open("w")
        procs.append((subprocess.Popen(member_cmd(idx, ws, runs), env=worker_env(), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(timeout=1500)
        log.close()
    logs = [(tmp_path / f"member{idx}.log").read_text() for idx in range(N)]
    for idx, (proc, _) in enumerate(procs):
        assert proc.returncode == 0, f"member {idx} failed:\n{logs[idx][-3000:]}"

    reader = WorkspaceReader(ws, N)
    lineages = {idx: reader.read_lineage(idx) for idx in range(N)}
    for idx, lineage in lineages.items():
        moves = transitions(lineage)
        assert [e.stage for e in moves] == [1, 2], (idx, [(e.frame, e.reason) for e in lineage])
        assert all(e.mode == "inplace" for e in moves)  # task.env.goalRadius has a live setter
        assert reader.latest_record(idx).stage == 2
        first = moves[0].frame
        late = LATE_FRAMES <= first < LATE_FRAMES + INTERVAL
        assert late if idx == LATE else (INTERVAL <= first < 2 * INTERVAL), (idx, first)

    # Member 3 alone in stage 0 while the others had objectives in stage 1: it compared with nobody.
    # (from the fourth interval on: a peer lagging three intervals would still show its stage-0 record)
    alone = [e for e in lineages[LATE] if e.stage == 0 and e.frame >= 4 * INTERVAL and e.objective is not None
             and e.action == "keep"]
    assert alone and all("1 objectives known: nothing to compare with" in e.reason for e in alone), \
        [(e.frame, e.reason) for e in lineages[LATE]]
    others_known = [e for i in range(N) if i != LATE for e in lineages[i] if e.stage == 1 and e.objective is not None]
    assert others_known, "the members in stage 1 had no objective to be (wrongly) compared with"

    for idx, lineage in lineages.items():
        for entry in lineage:
            if entry.action == "replace":  # a donor from the recipient's own stage
                assert stage_of_record(lineages[entry.donor], entry.donor_iteration) == entry.stage, entry

    assert "stage" in render_text(read_snapshot(ws))


def test_a_stage_without_live_setters_is_entered_by_restart(tmp_path: Path) -> None:
    """Pendulum's gravity has no live setter: members restart (exec) into the next stage and the
    restarted process takes the stage, and its task settings, from its lineage."""
    stages = ("pbt.curriculum=[{name: light, task: {task.env.gravity: 5.0}, frames: 10000}, "
              "{name: full, task: {task.env.gravity: 10.0}}]")
    procs = []
    for idx in range(2):
        cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}",
               "pbt.num_policies=2", f"pbt.workspace={tmp_path / 'ws'}", "pbt.interval_steps=10000", stages,
               "max_frames=30000", "num_envs=64", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
               "experiment=ex", f"train_dir={tmp_path / 'runs'}"]
        log = (tmp_path / f"member{idx}.log").open("w")
        procs.append((subprocess.Popen(cmd, env=worker_env(), stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(timeout=900)
        log.close()
    reader = WorkspaceReader(tmp_path / "ws", 2)
    for idx, (proc, _) in enumerate(procs):
        text = (tmp_path / f"member{idx}.log").read_text()
        assert proc.returncode == 0, text[-3000:]
        (move,) = transitions(reader.read_lineage(idx))
        assert (move.stage, move.mode) == (1, "exec") and "task.env.gravity cannot change" in move.mode_reason
        assert "curriculum stage 1 of 2 'full' (task.env.gravity=10.0) (entered at frame 10240" in text
        assert reader.latest_record(idx).stage == 1
