"""An interval shorter than one epoch: the member decides once per epoch and says so at start-up."""

from pathlib import Path

import pytest

from conftest import run_train
from pbt.rl_games.observer import short_interval_warning
from pbt.storage import WorkspaceReader


def test_no_warning_at_or_above_one_epoch() -> None:
    assert short_interval_warning(16384, 16384) is None
    assert short_interval_warning(50000, 16384) is None
    assert short_interval_warning(100, 0) is None  # epoch size unknown: nothing to say


def test_a_shorter_interval_names_the_epoch_and_the_fix() -> None:
    text = short_interval_warning(12500, 16384)
    assert text is not None
    assert "pbt.interval_steps=12500" in text and "16384 frames" in text and "once per epoch" in text
    assert "Set pbt.interval_steps to 16384" in text


@pytest.mark.training
def test_a_member_with_a_sub_epoch_interval_warns_and_decides_every_epoch(tmp_path: Path) -> None:
    """64 envs x 32 steps: an epoch is 2,048 frames; an interval of 1,000 gives one iteration per epoch
    whose numbers skip (frame // 1000: 2, 4, 6, ...)."""
    workspace = tmp_path / "ws"
    proc = run_train(["task=Pendulum", "pbt=pbt_default", "pbt.num_policies=2", "pbt.policy_idx=0",
                      f"pbt.workspace={workspace}", "pbt.interval_steps=1000", "max_frames=10240", "num_envs=64",
                      "sim_device=cpu", "rl_device=cpu", "torch_threads=1", f"train_dir={tmp_path / 'runs'}",
                      "experiment=short"], tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "pbt.interval_steps=1000 is shorter than one epoch (2048 frames" in output, output[-3000:]
    iterations = [e.iteration for e in WorkspaceReader(workspace, 2).read_lineage(0) if e.frame > 0]
    assert iterations and all(b - a == 2 for a, b in zip(iterations, iterations[1:])), iterations
