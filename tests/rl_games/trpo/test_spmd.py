"""Multi-process TRPO (``multi_gpu=True`` under torchrun) with 2 CPU ranks on the gloo backend: every
rank rolls out its own data, yet the model is identical on both after every update; a PBT decision
carried out on rank 0 alone reaches rank 1 before the next update."""
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO, worker_env

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
IN_STEP = re.compile(r"trpo rank (?P<rank>\d) epoch (?P<epoch>\d+): model in step across 2 ranks "
                     r"\(checksum (?P<checksum>\S+), own data (?P<data>\S+)\)")


def torchrun(args: List[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(cmd, cwd=str(cwd), env=worker_env(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.training
def test_two_ranks_train_in_step_through_pbt_train(tmp_path: Path) -> None:
    proc = torchrun(["-m", "pbt.train", "task=Pendulum", "train=PendulumTRPO", "num_envs=32", "sim_device=cpu",
                     "rl_device=cpu", "torch_threads=1", "max_frames=8192", "train.params.config.multi_gpu=True",
                     "train.params.network.mlp.units=[16,16]", f"train_dir={tmp_path / 'runs'}", "experiment=spmd"],
                    tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    seen: Dict[int, Dict[int, tuple]] = {0: {}, 1: {}}
    for match in IN_STEP.finditer(out):
        seen[int(match["rank"])][int(match["epoch"])] = (float(match["checksum"]), float(match["data"]))
    # 8192 frames of 2 ranks x 32 envs x 32 steps: 4 updates.
    assert sorted(seen[0]) == sorted(seen[1]) == [1, 2, 3, 4], out[-3000:]
    for epoch in seen[0]:
        assert seen[0][epoch][0] == seen[1][epoch][0]  # the same model on both ranks
        assert seen[0][epoch][1] != seen[1][epoch][1]  # from different data
    assert len({seen[0][e][0] for e in seen[0]}) == 4  # and it trained
    assert "SUMMARY frames=8192" in out  # frames of both ranks, counted on rank 0
    assert list((tmp_path / "runs" / "spmd" / "nn").glob("last_*.pth"))


@pytest.mark.training
def test_a_decision_carried_out_on_rank_0_reaches_rank_1(tmp_path: Path) -> None:
    proc = torchrun([str(HERE / "spmd_driver.py"), str(tmp_path)], REPO)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    by_rank = {r: {d["epoch"]: d for d in map(json.loads, (tmp_path / f"rank{r}.jsonl").read_text().splitlines())}
               for r in (0, 1)}
    assert sorted(by_rank[0]) == sorted(by_rank[1]) == [1, 2, 3, 4], out[-3000:]
    for epoch in range(1, 5):
        zero, one = by_rank[0][epoch], by_rank[1][epoch]
        assert zero["checksum"] == one["checksum"], (epoch, zero, one)
        assert (zero["max_kl"], zero["gamma"], zero["kl"]) == (one["max_kl"], one["gamma"], one["kl"])
    assert by_rank[1][2]["max_kl"] == 0.02 and by_rank[1][3]["max_kl"] == 0.0123 and by_rank[1][3]["gamma"] == 0.91
    assert "took rank 0's agent" in out


@pytest.mark.training
def test_pbt_that_would_restart_a_multi_process_member_is_refused(tmp_path: Path) -> None:
    from conftest import run_train

    proc = run_train(["task=Pendulum", "train=PendulumTRPO", "pbt=pbt_default", "pbt.num_policies=2",
                      f"pbt.workspace={tmp_path / 'ws'}", "train.params.config.multi_gpu=True", "sim_device=cpu",
                      "rl_device=cpu"], tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "SUMMARY" not in out
    # The default (PPO) scheme mutates keys TRPO does not have in place; pbt/mutation=trpo would be accepted.
    assert "a multi-process member (multi_gpu=True) can only change hyperparameters in place" in out
    assert "train.params.config.learning_rate" in out and "train.params.config.max_kl_divergence" in out


def test_a_rank_leaves_the_process_group_before_it_exits(tmp_path: Path) -> None:
    """After training every rank waits for the others and destroys the group, so no rank exits with
    gloo's threads still tied to a peer that is tearing down (a SIGABRT once on a loaded machine); a
    run without a group is left alone."""
    import torch.distributed as dist

    from pbt.rl_games.trpo import spmd

    spmd.leave()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    spmd.leave()
    assert not dist.is_initialized()
