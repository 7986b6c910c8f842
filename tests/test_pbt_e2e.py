"""End to end: 4 real worker processes on CPU share a workspace; a crippled member is replaced.

Asserts from the workspace and the lineage only (and the workers' logs for the restored weights):
every member wrote records, at least one replacement happened, the replaced member's weights right
after its restart equal the donor checkpoint's, its hyperparameters changed within their bounds,
its frame count is its own, and every process exited 0.
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import worker_env

torch = pytest.importorskip("torch")

from pbt.checkpoint import load_state_file, model_fingerprint  # noqa: E402
from pbt.mutation import EPS_CLIP_RANGE, MINI_EPOCHS_RANGE  # noqa: E402
from pbt.workspace import Workspace  # noqa: E402

N = 4
CRIPPLED = 3


def member_cmd(idx: int, ws: Path, runs: Path, mode_args=()):
    cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}",
           f"pbt.num_policies={N}", f"pbt.workspace={ws}", "pbt.interval_steps=100000", "pbt.start_after=0",
           "pbt.initial_delay=0", "pbt.ready_after=100000", "max_frames=500000", "num_envs=256", "sim_device=cpu", "rl_device=cpu",
           "experiment=e2e", f"train_dir={runs}", *mode_args]
    if idx == CRIPPLED:  # learns nothing: a constant, tiny learning rate
        cmd += ["train.params.config.lr_schedule=constant", "train.params.config.learning_rate=1e-7"]
    return cmd


def run_population(tmp_path: Path, mode_args=()):
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    procs = []
    for idx in range(N):
        log = open(tmp_path / f"worker{idx}.log", "w")
        procs.append((subprocess.Popen(member_cmd(idx, ws, runs, mode_args), cwd=str(tmp_path), env=worker_env(),
                                       stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for proc, log in procs:
        codes.append(proc.wait(timeout=240))
        log.close()
    logs = [(tmp_path / f"worker{idx}.log").read_text() for idx in range(N)]
    return ws, codes, logs


RESTORED = {
    "exec": r"restored (?P<path>\S+) \(frame (?P<frame>\d+), epoch \d+, lr (?P<lr>\S+), weights (?P<weights>\w+)\)",
    "inplace": r"exploited in place in [\d.]+ ms \(frame (?P<frame>\d+), epoch \d+, lr (?P<lr>\S+), "
               r"weights (?P<weights>\w+)\)",
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inplace", "exec"])
def test_population_replaces_crippled_member(tmp_path, mode):
    start = time.time()
    ws, codes, logs = run_population(tmp_path, [f"pbt.restart_mode={mode}"])
    assert codes == [0] * N, "\n\n".join(log[-2000:] for log in logs)
    assert time.time() - start < 180

    workspace = Workspace(ws, 0, N)
    for idx in range(N):
        assert workspace.latest_record(idx) is not None, f"member {idx} wrote no record"
        lineage = workspace.read_lineage(idx)
        assert lineage and lineage[0]["reason"] == "initial mutation of a fresh member"

    events = [e for idx in range(N) for e in workspace.read_lineage(idx) if e["action"] == "replace"]
    assert events, "no replacement happened"
    event = events[0]
    member, donor, donor_iter = event["policy_idx"], event["donor"], event["donor_iteration"]
    assert donor != member
    assert event["donor_objective"] > event["objective"]
    assert event["mode"] == mode

    # The restarted process restored exactly the donor checkpoint's weights, with its own frame count.
    donor_state = workspace.load_checkpoint(workspace.latest_record(donor, max_iteration=donor_iter), donor)
    fingerprint = model_fingerprint(donor_state["model"])[:16]
    restored = re.search(RESTORED[mode], logs[member])
    assert restored, logs[member][-3000:]
    if mode == "exec":
        assert restored["path"].endswith("restart_checkpoint.pth")
    assert restored["weights"] == fingerprint
    assert int(restored["frame"]) == event["frame"]
    optimizer_lr = restored["lr"]

    # Hyperparameters after the event are the recorded ones and within their bounds.
    after = event["params_after"]
    # The optimizer runs with the new learning rate from the first minibatch on.
    assert float(optimizer_lr) == pytest.approx(after["train.params.config.learning_rate"], rel=1e-5)
    assert EPS_CLIP_RANGE[0] <= after["train.params.config.e_clip"] <= EPS_CLIP_RANGE[1]
    assert MINI_EPOCHS_RANGE[0] <= after["train.params.config.mini_epochs"] <= MINI_EPOCHS_RANGE[1]
    assert 0 < after["train.params.config.gamma"] < 1 and 0 < after["train.params.config.tau"] < 1
    assert all(v > 0 for k, v in after.items() if k.endswith(("learning_rate", "grad_norm", "critic_coef")))
    next_records = [r for r in (workspace.latest_record(member, max_iteration=i) for i in range(1, 6))
                    if r is not None and r.iteration > event["iteration"]]
    assert next_records and next_records[0].params == after
    assert next_records[0].frame > event["frame"]
