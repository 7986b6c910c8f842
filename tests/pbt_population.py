"""A real, short PBT population run once per test session and shared by the end-to-end PBT test and
the observability tests (status, analyze, TensorBoard, replay): 4 Pendulum members on CPU with short
PBT intervals. Members 2 and 3 are crippled (constant learning rate 1e-7) so that both are replaced
(the worst half may act, so neither hides behind the other):
member 3 exploits in place (the default), member 2 with ``pbt.restart_mode=exec``, so one run
checks both modes. About a minute on 2 cores.

Each test module's session fixture calls :func:`population`; the run happens once per session
(the result is cached under pytest's session temp dir) however many modules use it.
"""
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import yaml

from conftest import REPO, worker_env

N = 4
CRIPPLED = 3
EXEC_CRIPPLED = 2
MODES = {CRIPPLED: "inplace", EXEC_CRIPPLED: "exec"}
INTERVAL = 40_000
MAX_FRAMES = 400_000  # replaced members measure their objective again before the end
NUM_ENVS = 256
EXPERIMENT = "obs"


@dataclass
class Population:
    root: Path
    workspace: Path
    runs: Path
    logs: List[str]
    seconds: float

    def lineage(self, idx: int) -> List[Dict]:
        path = self.workspace / f"{idx:03d}" / "lineage.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def summaries(self, idx: int) -> Path:
        return self.runs / f"{EXPERIMENT}_pbt{idx:03d}" / "summaries"


def _pbt_keys() -> set:
    from pbt.config import flat_keys

    return set(flat_keys())


def member_cmd(idx: int, ws: Path, runs: Path) -> List[str]:
    cmd = [sys.executable, "-m", "pbt.train", "task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}",
           f"pbt.num_policies={N}", f"pbt.workspace={ws}", f"pbt.interval_steps={INTERVAL}", "pbt.start_after=0",
           "pbt.initial_delay=0", f"max_frames={MAX_FRAMES}", f"num_envs={NUM_ENVS}", "sim_device=cpu",
           "rl_device=cpu", "torch_threads=1", f"experiment={EXPERIMENT}", f"train_dir={runs}"]
    if "ready_after" in _pbt_keys():
        cmd.append("pbt.ready_after=0")
    if idx in MODES:  # learns nothing: a constant, tiny learning rate
        cmd += ["train.params.config.lr_schedule=constant", "train.params.config.learning_rate=1e-7",
                f"pbt.restart_mode={MODES[idx]}"]
    return cmd


def population(tmp_path_factory) -> Population:
    """The session's population (run on first use)."""
    root = tmp_path_factory.getbasetemp() / "pbt_population"
    marker = root / "done.json"
    if marker.exists():
        data = json.loads(marker.read_text())
        return _checked(Population(root, root / "ws", root / "runs", data["logs"], data["seconds"]))
    root.mkdir(parents=True, exist_ok=True)
    ws, runs = root / "ws", root / "runs"
    start = time.time()
    procs = []
    for idx in range(N):
        log = open(root / f"worker{idx}.log", "w")
        procs.append((subprocess.Popen(member_cmd(idx, ws, runs), cwd=str(root), env=worker_env(),
                                       stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for proc, log in procs:
        codes.append(proc.wait(timeout=300))
        log.close()
    logs = [(root / f"worker{idx}.log").read_text() for idx in range(N)]
    assert codes == [0] * N, "\n\n".join(text[-2000:] for text in logs)
    seconds = time.time() - start
    marker.write_text(json.dumps({"logs": logs, "seconds": seconds}))
    return _checked(Population(root, ws, runs, logs, seconds))


def _checked(result: Population) -> Population:
    for idx in MODES:
        replaced = [e for e in result.lineage(idx) if e["action"] == "replace"]
        assert replaced, f"crippled member {idx} was never replaced:\n{result.logs[idx][-3000:]}"
    return result
