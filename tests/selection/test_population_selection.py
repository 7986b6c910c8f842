"""Selection strategies with real worker processes sharing one workspace (Pendulum on CPU).

- fast and crippled: the two crippled members (learning rate 1e-7) are also the fast ones
  (mini_epochs 1 against 6); they are replaced by a healthy member before they finish, and then
  learn. Pacing (``pbt.max_lead=1``) makes a member that gets ahead wait for the slowest, so
  whether a given decision compares a healthy peer at an earlier iteration is the scheduler's
  choice: this test does not ask for it (the pairwise rule itself: tests/selection/test_experience.py);
- truncation and tournament: in a population of two healthy and two crippled members, a crippled
  member takes a healthy member's weights and learns (it may first copy the other crippled member,
  when the healthy ones have not reported yet).

A minute or two each on 2 cores: run under ``flock /tmp/heavy.lock``.
"""
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from conftest import SUMMARY_RE, worker_env

pytest.importorskip("torch")

N = 4
CRIPPLED = (2, 3)
INTERVAL = 40_000
NUM_ENVS = 256
LEARNED = -700.0  # Pendulum: random/crippled policies stay near -1200; a trained one reaches about -150


def member_cmd(idx: int, ws: Path, runs: Path, max_frames: int, extra: Sequence[str]) -> List[str]:
    cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}",
           f"pbt.num_policies={N}", f"pbt.workspace={ws}", f"pbt.interval_steps={INTERVAL}", "pbt.start_after=0",
           "pbt.initial_delay=0", "pbt.ready_after=0", f"max_frames={max_frames}", f"num_envs={NUM_ENVS}",
           "sim_device=cpu", "rl_device=cpu", "torch_threads=1", "experiment=sel", f"train_dir={runs}", *extra]
    if idx in CRIPPLED:  # learns nothing: a constant, tiny learning rate
        cmd += ["train.params.config.lr_schedule=constant", "train.params.config.learning_rate=1e-7"]
    return cmd


def run_population(root: Path, max_frames: int, extra: Dict[int, Sequence[str]]) -> Dict[str, Any]:
    ws, runs = root / "ws", root / "runs"
    procs = []
    for idx in range(N):
        log = open(root / f"w{idx}.log", "w")
        cmd = member_cmd(idx, ws, runs, max_frames, extra.get(idx, ()))
        procs.append((subprocess.Popen(cmd, cwd=str(root), env=worker_env(), stdout=log, stderr=subprocess.STDOUT),
                      log))
    codes = []
    for proc, log in procs:
        codes.append(proc.wait(timeout=1800))  # a guard against a hang, generous for a loaded machine
        log.close()
    logs = [(root / f"w{idx}.log").read_text() for idx in range(N)]
    assert codes == [0] * N, "\n\n".join(text[-3000:] for text in logs)
    lineages = []
    for idx in range(N):
        path = ws / f"{idx:03d}" / "lineage.jsonl"
        lineages.append([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    return {"logs": logs, "lineages": lineages}


def final_objective(log: str) -> float:
    match = SUMMARY_RE.search(log)
    assert match, log[-3000:]
    value = match.group("objective")
    return float(value if value != "n/a" else match.group("reward"))


def replacements(result: Dict[str, Any], idx: int) -> List[Dict[str, Any]]:
    return [e for e in result["lineages"][idx] if e["action"] == "replace"]


@pytest.mark.training
def test_fast_crippled_members_are_replaced_before_they_finish(tmp_path: Path) -> None:
    max_frames = 600_000
    speeds = {i: ["train.params.config.mini_epochs=" + ("1" if i in CRIPPLED else "6")] for i in range(N)}
    result = run_population(tmp_path, max_frames, speeds)
    last_iteration = max_frames // INTERVAL
    for idx in CRIPPLED:
        replaced = replacements(result, idx)
        assert replaced, f"fast crippled member {idx} was never replaced:\n{result['logs'][idx][-3000:]}"
        first = replaced[0]
        assert first["iteration"] < last_iteration and first["donor"] not in CRIPPLED
        assert final_objective(result["logs"][idx]) > LEARNED, result["logs"][idx][-3000:]
    for idx in range(N):
        if idx not in CRIPPLED:
            assert final_objective(result["logs"][idx]) > LEARNED


@pytest.mark.training
@pytest.mark.parametrize("selection", ["truncation", "tournament"])
def test_a_crippled_member_takes_a_healthy_members_weights(tmp_path: Path, selection: str) -> None:
    result = run_population(tmp_path, 400_000, {i: [f"pbt/selection={selection}"] for i in range(N)})
    # Members rank whoever has reported: before the healthy members' first records, one crippled
    # member may copy the other (scheduling decides). What must hold: a crippled member copies a
    # healthy one at some point, and every crippled member that did ends up learning.
    from_healthy = {idx: [e for e in replacements(result, idx) if e["donor"] not in CRIPPLED] for idx in CRIPPLED}
    assert any(from_healthy.values()), "\n\n".join(result["logs"][i][-3000:] for i in CRIPPLED)
    for idx, events in from_healthy.items():
        if events:
            assert events[0]["reason"].startswith("replace"), events[0]
            assert final_objective(result["logs"][idx]) > LEARNED, result["logs"][idx][-3000:]
