"""Divergence for real: a member whose rewards turn NaN for a few steps now and then (so its loss,
then its weights and value normalizer, go NaN at the next update) next to a healthy member.

rl_games would crash in the next rollout (a NaN sigma in torch.normal); instead the worker detects
the non-finite weights at the end of the epoch, rolls back to its newest checkpoint with finite
weights, and publishes a PBT record with objective NaN: it ranks last, is replaced from the healthy
leader under the default gates (significance test on, no dbg_mode), and is never a donor. Both
workers finish.

The poisoning starts only once the leader's record that the diverged member will compare with has
a known objective (the task reads the workspace): before that there is no leader to be replaced
from, and whether there was one depended on how far the two processes had drifted apart.
"""
import math
import re
from pathlib import Path

import pytest

from faults_util import EPOCH_FRAMES, Worker, worker_cmd
from pbt.storage import Workspace

pytestmark = [pytest.mark.training, pytest.mark.faults]
torch = pytest.importorskip("torch")

TASK = '''
import math

import torch
from pbt.storage.reader import WorkspaceReader
from pbt.tasks.pendulum import Pendulum


class PoisonedPendulum(Pendulum):
    """Pendulum reporting a constant true_objective (env.objectiveValue). With env.poisonAt > 0 its
    rewards are NaN for 3 steps, first at the first step >= poisonAt at which member 1's record at
    or below this member's PBT iteration (env.leaderWorkspace, env.interval frames) has a finite
    objective, then every env.poisonEvery steps."""

    def __init__(self, cfg, sim_device="cpu", rl_device="cpu", headless=True):
        super().__init__(cfg, sim_device, rl_device, headless)
        self.poison_at = int(self.env_cfg.get("poisonAt", 0))
        self.poison_every = int(self.env_cfg.get("poisonEvery", 200))
        self.objective_value = float(self.env_cfg.get("objectiveValue", 1.0))
        self.leader = self.env_cfg.get("leaderWorkspace")
        self.interval = int(self.env_cfg.get("interval", 4096))
        self.steps = 0
        self.armed_at = None

    def _leader_known(self):
        iteration = self.steps * self.num_envs // self.interval
        record = WorkspaceReader(self.leader, 2).latest_record(1, max_iteration=iteration)
        return record is not None and record.objective is not None and math.isfinite(record.objective)

    def _compute(self, actions):
        reward, terminated = super()._compute(actions)
        self.steps += 1
        if self.armed_at is None and self.poison_at > 0 and self.steps >= self.poison_at and self._leader_known():
            self.armed_at = self.steps
        since = -1 if self.armed_at is None else self.steps - self.armed_at
        if since >= 0 and since % self.poison_every < 3:
            reward = reward * float("nan")
        return reward, terminated

    def _episode_end_extras(self, done):
        self.extras["true_objective"] = torch.full((self.num_envs,), self.objective_value, device=self.device)
'''


def test_diverged_member_rolls_back_ranks_last_and_is_replaced_never_a_donor(tmp_path: Path) -> None:
    (tmp_path / "poison_task.py").write_text(TASK)
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    common = ("pbt.ready_after=0",)  # (a short run: donors are ready at once) otherwise the default gates
    task = "poison_task:PoisonedPendulum"
    poison = ("+task.env.poisonAt=500", f"+task.env.leaderWorkspace={ws}", f"+task.env.interval={EPOCH_FRAMES}")
    workers = [
        Worker(worker_cmd(0, 2, ws, runs, *common, *poison, max_frames=160_000, task=task),
               tmp_path / "w0.log", tmp_path, extra_pythonpath=str(tmp_path)),
        # The healthy member leads (objective 2 vs 1), so it never acts and its objective stays known.
        Worker(worker_cmd(1, 2, ws, runs, *common, "+task.env.objectiveValue=2.0", max_frames=160_000, task=task),
               tmp_path / "w1.log", tmp_path, extra_pythonpath=str(tmp_path)),
    ]
    try:
        codes = [w.wait(240) for w in workers]
    finally:
        for w in workers:
            w.stop()
    logs = [w.log() for w in workers]
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
    assert "Traceback" not in logs[0]
    rollbacks = re.findall(r"diverged \(NaN/inf in [^)]*\): rolled back to its own iteration \d+", logs[0])
    assert rollbacks, logs[0][-3000:]
    workspace = Workspace(ws, 0, 2)
    lineage0, lineage1 = workspace.read_lineage(0), workspace.read_lineage(1)
    # (a decision on the last epoch is logged but never acted on: leave it out)
    nan_decisions = [e for e in lineage0 if e.action != "rollback" and e.mode != "startup"
                     and e.objective is not None and math.isnan(e.objective)
                     and "training ends this epoch" not in e.reason]
    assert nan_decisions, lineage0[-5:]
    assert all(e.action == "replace" and e.donor == 1 and math.isfinite(e.donor_objective)
               and "significance test skipped" in e.reason for e in nan_decisions), nan_decisions
    # Member 1 never took member 0 as a donor while its record said NaN (it never took a NaN donor).
    assert not [e for e in lineage1 if e.action == "replace" and not math.isfinite(e.donor_objective)]
    # The records saying NaN carry the rolled-back, finite weights: a restart never resumes into NaN.
    nan_records = [r for r in (workspace.latest_record(0, max_iteration=i) for i in range(1, 60))
                   if r is not None and r.objective is not None and math.isnan(r.objective)]
    assert nan_records
    for record in nan_records:
        model = workspace.load_checkpoint(record, 0)["model"]
        assert all(torch.isfinite(t).all() for t in model.values() if t.is_floating_point())
