"""A real two-member population ranked by ``pbt.eval_episodes``: every iteration's objective is the
evaluation the member logged (deterministic actions, whole episodes), known at the first iteration
and right after taking a donor's weights, and the SUMMARY reports it. Member 1 learns nothing (a
constant learning rate of 1e-7), so it is replaced; member 0 learns and never acts."""
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import REPO, parse_summary, run_train, worker_env
from pbt.storage import WorkspaceReader

pytestmark = pytest.mark.training

INTERVAL = 16_384
EPISODES = 8
NEVER = 10_000_000
"""Member 0's start_after: it never acts (its peer may still copy it), so its learning does not depend
on when its peer's records land."""
EVALUATION_RE = re.compile(rf"evaluation: {EPISODES} episodes \(200 steps\), objective (\S+),")


def member(idx: int, ws: Path, runs: Path) -> List[str]:
    cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", "pbt.num_policies=2",
           f"pbt.policy_idx={idx}", f"pbt.workspace={ws}", f"pbt.interval_steps={INTERVAL}",
           f"pbt.start_after={NEVER if idx == 0 else 0}", "pbt.initial_delay=0", "pbt.ready_after=0", f"pbt.eval_episodes={EPISODES}", "max_frames=120000",
           "num_envs=256", "sim_device=cpu", "rl_device=cpu", "torch_threads=1", f"train_dir={runs}",
           "experiment=evaluated"]
    if idx == 1:
        cmd += ["train.params.config.lr_schedule=constant", "train.params.config.learning_rate=1e-7"]
    return cmd


def without_budget(cmd: List[str]) -> List[str]:
    return [arg for arg in cmd if not arg.startswith("max_frames=")]


def test_members_rank_publish_and_report_their_evaluation(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    logs = [open(tmp_path / f"member{idx}.log", "w+") for idx in range(2)]
    procs = [subprocess.Popen(member(idx, ws, runs), cwd=str(REPO), env=worker_env(), stdout=log,
                              stderr=subprocess.STDOUT) for idx, log in enumerate(logs)]
    codes = [proc.wait(timeout=600) for proc in procs]
    outputs = [(tmp_path / f"member{idx}.log").read_text() for idx in range(2)]
    assert codes == [0, 0], [out[-3000:] for out in outputs]
    reader = WorkspaceReader(ws, 2)
    for idx, output in enumerate(outputs):
        evaluations = [float(v) for v in EVALUATION_RE.findall(output)]
        entries = [e for e in reader.read_lineage(idx) if e.frame > 0]
        # one more at the end when the member took new weights at its last iteration
        assert len(entries) >= 6 and len(evaluations) - len(entries) in (0, 1), (len(entries), output[-3000:])
        # the objective each iteration ranked and published is the evaluation it logged, every time
        assert [e.objective for e in entries] == pytest.approx(evaluations[: len(entries)], rel=1e-5)
        assert parse_summary(output)["objective"] == pytest.approx(evaluations[-1], rel=1e-3)  # never n/a
    healthy = [e.objective for e in reader.read_lineage(0) if e.frame > 0]
    assert healthy[-1] > healthy[0] + 300, healthy  # learning happened (Pendulum: about -1200 untrained)
    crippled = [e for e in reader.read_lineage(1) if e.frame > 0]
    taken = [i for i, e in enumerate(crippled) if e.action == "replace"]
    assert taken and taken[0] + 1 < len(crippled), [(e.frame, e.action, e.objective) for e in crippled]
    before, after = crippled[taken[0]], crippled[taken[0] + 1]
    # one interval after taking the donor's weights the member is scored on them, not n/a
    assert after.objective is not None and after.objective > before.objective + 200, (before, after)


POOLED_RE = re.compile(rf"evaluation: {EPISODES} episodes .*; ranked by (\S+), the mean of (\d+) pooled episodes")


@pytest.mark.parametrize("mode", ["inplace", "exec"])
def test_a_window_pools_evaluations_and_a_copy_carries_its_donors(tmp_path: Path, mode: str) -> None:
    """``pbt.eval_window=2``: each member ranks by the mean of its last two evaluations' episodes, and
    the crippled member, once it takes the healthy one's weights, pools the donor's evaluation of them
    with its own at once (without the carry its first evaluation after the change would stand alone),
    in place and after re-executing its process (the restart checkpoint carries them)."""
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    logs = [open(tmp_path / f"member{idx}.log", "w+") for idx in range(2)]
    extra = ["pbt.eval_window=2", f"pbt.restart_mode={mode}"]
    procs = [subprocess.Popen(member(idx, ws, runs) + extra, cwd=str(REPO), env=worker_env(),
                              stdout=log, stderr=subprocess.STDOUT) for idx, log in enumerate(logs)]
    codes = [proc.wait(timeout=600) for proc in procs]
    outputs = [(tmp_path / f"member{idx}.log").read_text() for idx in range(2)]
    assert codes == [0, 0], [out[-3000:] for out in outputs]
    reader = WorkspaceReader(ws, 2)
    for idx, output in enumerate(outputs):
        pooled = [(float(v), int(n)) for v, n in POOLED_RE.findall(output)]
        entries = [e for e in reader.read_lineage(idx) if e.frame > 0]
        assert len(entries) >= 6 and pooled[0][1] == EPISODES, (pooled, output[-3000:])
        assert [n for _, n in pooled[1:]] == [2 * EPISODES] * (len(pooled) - 1), pooled  # the carry included
        assert [e.objective for e in entries] == pytest.approx([v for v, _ in pooled[: len(entries)]], rel=1e-5)
    crippled = [e for e in reader.read_lineage(1) if e.frame > 0]
    taken = [i for i, e in enumerate(crippled) if e.action == "replace"]
    assert taken and taken[0] + 1 < len(crippled), [(e.frame, e.action, e.objective) for e in crippled]
    before, after = crippled[taken[0]], crippled[taken[0] + 1]
    assert after.objective is not None and after.objective > before.objective + 200, (before, after)


@pytest.mark.parametrize("samples", ["evaluations", "training"])
def test_the_significance_test_counts_what_it_is_asked_to(tmp_path: Path, samples: str) -> None:
    """``pbt.significance_samples``: the crippled member's decisions test the means of its and its
    donor's pooled evaluations (three each), or the training episodes their records carry beside
    the evaluations, and a lead at every snapshot (a learning member against one that learns nothing)
    still replaces it."""
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    logs = [open(tmp_path / f"member{idx}.log", "w+") for idx in range(2)]
    extra = ["pbt.eval_window=3", f"pbt.significance_samples={samples}", "max_frames=230000"]
    # on the healthy member's steep climb its three snapshots spread by hundreds (p 0.05-0.23 at
    # 80-115k frames); the lead over evaluations passes once the climb flattens
    procs = [subprocess.Popen(without_budget(member(idx, ws, runs)) + extra, cwd=str(REPO), env=worker_env(),
                              stdout=log, stderr=subprocess.STDOUT) for idx, log in enumerate(logs)]
    codes = [proc.wait(timeout=600) for proc in procs]
    outputs = [(tmp_path / f"member{idx}.log").read_text() for idx in range(2)]
    assert codes == [0, 0], [out[-3000:] for out in outputs]
    reader = WorkspaceReader(ws, 2)
    crippled = [e for e in reader.read_lineage(1) if e.frame > 0]
    tested = [e.reason for e in crippled if "Welch p=" in e.reason or "too few" in e.reason]
    unit = " evaluations vs significance" if samples == "evaluations" else " training episodes vs significance"
    assert tested and all(unit in r or "samples for a significance test" in r for r in tested), tested
    taken = [i for i, e in enumerate(crippled) if e.action == "replace"]
    assert taken, [(e.frame, e.action, e.reason) for e in crippled]
    if samples == "evaluations":
        assert "over 3 and 3 evaluations" in crippled[taken[0]].reason, crippled[taken[0]].reason
    else:  # the records carry both: the evaluations ranked and the training episodes tested
        record = reader.latest_record(0)
        assert record is not None and record.evaluated and len(record.episode_returns) == 3 * EPISODES
        assert len(record.training_returns) >= 100, len(record.training_returns)


def test_a_resumed_member_starts_its_window_from_its_records_evaluations(tmp_path: Path) -> None:
    """A member stopped and started again resumes its newest record's weights and, with them, the
    evaluation episodes that record published: its first evaluation is pooled with them (its peer
    never starts: nothing here depends on one)."""
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    alone = without_budget(member(0, ws, runs))
    for run, frames in enumerate((2 * INTERVAL, 3 * INTERVAL)):
        proc = subprocess.run(alone + ["pbt.eval_window=2", f"max_frames={frames}"],
                              cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=600)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-3000:]
        pooled = [int(n) for _, n in POOLED_RE.findall(output)]
        assert pooled, output[-3000:]
        if run == 1:
            assert "resumes from its iteration" in output, output[-3000:]
            assert pooled[0] == 2 * EPISODES, (pooled, output[-3000:])  # the record's episodes included


def test_an_isaac_gym_member_is_refused_before_the_simulator_loads(tmp_path: Path) -> None:
    """Isaac Gym is not installed here: the refusal comes before anything tries to import it."""
    proc = run_train(["task=isaacgym/Ant", "pbt=pbt_default", "pbt.eval_episodes=4", "sim_device=cpu",
                      "rl_device=cpu", f"train_dir={tmp_path / 'runs'}"], tmp_path, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "ConfigError: pbt.eval_episodes=4 plays the policy in a second instance of the task" in output, output
    assert "an Isaac Gym simulation runs once per process" in output and "isaacgym" not in output.split("ConfigError")[0]
