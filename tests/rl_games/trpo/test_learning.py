"""TRPO end to end through the command lines: ``python -m pbt.train train=CartpoleTRPO`` learns (a short
run; the long Pendulum and Cartpole numbers are in docs/benchmarks/trpo.md), its checkpoint resumes training
at its frame count, and ``python -m pbt.play`` plays it."""
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from conftest import parse_summary, run_train, worker_env

FRAMES = 131_072
COMMON = ["task=Cartpole", "train=CartpoleTRPO", "num_envs=128", "sim_device=cpu", "rl_device=cpu", "torch_threads=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    root = tmp_path_factory.mktemp("trpo_cartpole")
    proc = run_train([*COMMON, f"max_frames={FRAMES}", f"train_dir={root / 'runs'}", "experiment=learn"], root,
                     timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoints = sorted((root / "runs" / "learn" / "nn").glob("last_*.pth"))
    assert checkpoints
    return {"root": root, "summary": parse_summary(proc.stdout + proc.stderr), "checkpoint": checkpoints[-1]}


@pytest.mark.training
def test_cartpole_trpo_learns_within_130k_frames(trained: Dict[str, object]) -> None:
    summary = trained["summary"]
    assert summary["frames"] == FRAMES
    # A random policy keeps the pole up about 20 steps; this run reaches about 150 (500 is the maximum).
    assert summary["reward"] > 80, summary
    assert summary["objective"] > 0.16, summary  # the fraction of the 500-step episode survived


@pytest.mark.training
def test_the_checkpoint_resumes_training_and_plays(trained: Dict[str, object]) -> None:
    root: Path = trained["root"]  # type: ignore[assignment]
    proc = run_train([*COMMON, f"max_frames={FRAMES + 16384}", f"checkpoint={trained['checkpoint']}",
                      f"train_dir={root / 'runs'}", "experiment=resumed"], root, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"(frame {FRAMES}, epoch 32" in out  # restored with its counters
    resumed = parse_summary(out)
    # Only episodes that ended within its 128 steps per env count, so short ones weigh more; random: ~20.
    assert resumed["frames"] == FRAMES + 16384 and resumed["reward"] > 40, resumed
    play = subprocess.run([sys.executable, "-m", "pbt.play", f"checkpoint={trained['checkpoint']}", *COMMON,
                           "num_envs=16", "episodes=16"], cwd=str(root), env=worker_env(), capture_output=True,
                          text=True, timeout=300)
    assert play.returncode == 0, play.stderr[-3000:]
    line = next(ln for ln in (play.stdout + play.stderr).splitlines() if "PLAY episodes=16" in ln)
    assert float(line.split("mean_return=")[1].split()[0]) > 80, line
