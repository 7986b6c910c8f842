"""Two real workers (members 0 and 1 of 3) take a leader's checkpoint whose tensors fit and whose
checksum matches, but whose optimizer settings are hostile (issue 25, item 3): Adam's
``param_groups`` with ``betas (1, 1)``, ``maximize: True``, ``capturable: True, fused: False``, a NaN
learning rate and a huge ``initial_lr``, and a ``last_mean_rewards`` that is a string. The test plays
member 2: it copies worker 0's first checkpoint, makes it hostile, and publishes it as the leader
through the Workspace API. Before the fix a receiver exited 1 (capturable: AssertionError; the string
inside rl_games), or diverged to NaN and rolled back (betas), or trained by gradient ascent
(maximize). Now a donor gives its tensors only: both receivers take the leader's weights, keep their
own optimizer settings and learning rate in force, never diverge, and finish.

Once both took the leader's weights, member 2 leaves (the test removes its directory): its record
would otherwise lead for ever at its planted objective, and the workers would take its early weights
at every iteration instead of training on. PPO and TRPO (``train=PendulumTRPO``)."""
import copy
import math
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

from faults_util import Worker, finish, wait_for, worker_cmd
from pbt.storage import Record, Workspace

pytestmark = [pytest.mark.training, pytest.mark.faults]
torch = pytest.importorskip("torch")

MAX_FRAMES = 57_344  # 14 epochs of 4096 frames: 14 PBT iterations each; Pendulum's first episodes end in the 7th
LEADER = -50.0  # a Pendulum return far above any early member's (about -1200): the leader of both workers
LEARNERS = {"ppo": (), "trpo": ("train=PendulumTRPO", "pbt/mutation=trpo")}
EXPLOITED = re.compile(r"exploited in place in [\d.]+ ms \(frame \d+, epoch \d+, lr (\S+), weights")


def settings(state: Dict[str, Any]) -> List[Dict[str, Any]]:
    """An optimizer state's hyperparameters per group (all but the parameter ids and the lr)."""
    return [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in state["optimizer"]["param_groups"]]


def hostile(state: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(state)
    for group in out["optimizer"]["param_groups"]:
        group.update(betas=(1.0, 1.0), maximize=True, capturable=True, fused=False, lr=math.nan, initial_lr=1e30)
    out["last_mean_rewards"] = "a string rl_games compares with a float"
    return out


def replaced_from_leader(ws: Path, idx: int) -> bool:
    return any(e.action == "replace" and e.donor == 2 for e in Workspace(ws, idx, 3).read_lineage(idx))


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_receivers_keep_their_own_optimizer_settings_beside_a_hostile_donor(tmp_path: Path, learner: str) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    workers = [Worker(worker_cmd(i, 3, ws, runs, "pbt.ready_after=0", "pbt.significance=null", f"seed={i}",
                                 *LEARNERS[learner], max_frames=MAX_FRAMES), tmp_path / f"w{i}.log", tmp_path)
               for i in (0, 1)]
    try:
        first: Record = wait_for("worker 0's first record", lambda: Workspace(ws, 0, 3).latest_record(0, verify=True),
                                 120, workers=workers)
        own = Workspace(ws, 0, 3).load_checkpoint(first, 0)
        Workspace(ws, 2, 3).save(first.iteration, first.frame, LEADER, first.params, hostile(own),
                                 episode_returns=[LEADER] * 16, frames_since_replace=first.frame)
        wait_for("both workers to take the leader's weights",
                 lambda: all(replaced_from_leader(ws, i) for i in (0, 1)), 180, workers=workers)
        shutil.rmtree(ws / "002")  # member 2 leaves; the workers train on
    except BaseException:
        for w in workers:
            w.stop()
        raise
    logs = finish(workers, 300)

    for idx, log in enumerate(logs):
        assert "diverged" not in log, log[-4000:]
        lineage = Workspace(ws, idx, 3).read_lineage(idx)
        assert not [e for e in lineage if e.action == "rollback"], lineage
        assert [e for e in lineage if e.action == "replace" and e.donor == 2 and e.mode == "inplace"], lineage
        lrs = [float(lr) for lr in EXPLOITED.findall(log)]
        assert lrs and all(0 < lr < 1 for lr in lrs), (lrs, log[-3000:])  # its own lr, never the donor's NaN
        newest = Workspace(ws, idx, 3).latest_record(idx, verify=True)
        assert newest is not None and newest.frame >= MAX_FRAMES - 4096, newest
        state = Workspace(ws, idx, 3).load_checkpoint(newest, idx)
        assert settings(state) == settings(own), settings(state)  # betas, maximize, capturable: its own
        assert all(0 < g["lr"] < 1 for g in state["optimizer"]["param_groups"])
        assert not isinstance(state.get("last_mean_rewards"), str)
        model = state["model"]
        assert all(torch.isfinite(t).all() for t in model.values() if t.is_floating_point())
