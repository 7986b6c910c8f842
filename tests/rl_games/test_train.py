"""The worker's command line: bad input fails at once with a useful message; Pendulum learns."""
import math
import re

import pytest

from conftest import run_train

pytestmark = pytest.mark.training  # every test starts python -m pbt.train


def test_unknown_task_fails_at_once_listing_valid_tasks(tmp_path):
    proc = run_train(["task=Pendulm"], tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "Started to train" not in proc.stdout and not (tmp_path / "runs").exists()  # refused before anything
    assert "Unknown task 'Pendulm'" in proc.stderr
    assert re.search(r"Did you mean (one of: )?'Pendulum'", proc.stderr), proc.stderr  # the closest first
    for name in ("Pendulum", "Cartpole", "my_package.my_module:MyTask", "envpool/"):
        assert name in proc.stderr


def test_misspelt_key_fails_naming_it(tmp_path):
    proc = run_train(["train.params.config.learnin_rate=1"], tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "learnin_rate" in proc.stderr + proc.stdout
    assert "SUMMARY" not in proc.stdout


def test_pbt_with_one_policy_is_refused_before_training(tmp_path):
    proc = run_train(["pbt=pbt_default", "pbt.num_policies=1", f"pbt.workspace={tmp_path / 'ws'}"], tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "PBT needs at least 2 policies" in proc.stderr + proc.stdout
    assert "pbt.num_policies" in proc.stderr + proc.stdout


def test_mutation_of_missing_key_is_refused_naming_nearest(tmp_path):
    proc = run_train(["pbt=pbt_default", "pbt.num_policies=2", f"pbt.workspace={tmp_path / 'ws'}",
                      "+pbt.mutation={train.params.config.gama:mutate_discount}"], tmp_path, timeout=60)
    out = proc.stderr + proc.stdout
    assert proc.returncode != 0
    assert "'train.params.config.gama' does not exist" in out
    assert "Did you mean 'train.params.config.gamma'?" in out
    assert "SUMMARY" not in out
    assert not (tmp_path / "ws" / "001").exists()


def test_pendulum_learns_within_a_million_frames(trained_pendulum):
    summary = trained_pendulum["summary"]
    assert summary["frames"] >= 1_000_000
    # A random policy scores about -1200 per episode; a swing-up-and-balance policy about -150.
    assert summary["reward"] > -250, summary  # (wall time: docs/benchmarks/task-learning.md; not asserted)
    # Pendulum defines no true_objective: the objective is the mean return over each env's last episode
    assert math.isfinite(summary["objective"]) and summary["objective"] > -400, summary
