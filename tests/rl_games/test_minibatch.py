"""``minibatch_size: auto``: any ``num_envs`` works for every task, keeping the train config's number
of minibatches; an explicit minibatch size that does not divide the batch fails before training with
values that would work."""
import re
from pathlib import Path

import pytest

from conftest import MINIBATCH_LINE, parse_summary, run_train
from pbt.errors import ConfigError
from pbt.rl_games.runner import minibatch_size, nearest_divisors



def config(envs: int, horizon: int = 32, size: object = "auto", parts: int = 4) -> dict:
    return {"num_actors": envs, "horizon_length": horizon, "minibatch_size": size, "num_minibatches": parts}


@pytest.mark.parametrize("envs, horizon, parts, expected", [
    (512, 32, 4, 4096),  # the shipped Pendulum config
    (64, 32, 4, 512),
    (100, 32, 4, 800),
    (64, 64, 4, 1024),  # envpool's shipped config
    (4096, 16, 2, 32768),  # isaacgym's
    (3, 5, 4, 3),  # 15 samples: no whole quarter, the divisor of 15 nearest to 3.75
    (1, 1, 4, 1),
])
def test_auto_splits_the_batch_into_the_configured_number_of_minibatches(envs: int, horizon: int, parts: int,
                                                                        expected: int) -> None:
    assert minibatch_size(config(envs, horizon, parts=parts)) == expected
    assert minibatch_size(config(envs, horizon, size=None, parts=parts)) == expected


def test_an_explicit_value_that_divides_the_batch_is_used_as_given() -> None:
    assert minibatch_size(config(64, size=2048)) == 2048
    assert minibatch_size(config(64, size=64)) == 64


@pytest.mark.parametrize("size", [4096, 1000, 0, -512, 3.5, "big"])
def test_an_explicit_value_that_does_not_divide_the_batch_lists_values_that_work(size: object) -> None:
    with pytest.raises(ConfigError) as err:
        minibatch_size(config(64, size=size))
    message = str(err.value)
    assert f"minibatch_size={size!r}" in message and "= 2048 samples" in message
    works = [int(v) for v in re.search(r"Values that work: ([\d, ]+);", message).group(1).split(", ")]
    assert works and all(2048 % v == 0 for v in works)
    assert "minibatch_size=auto" in message


def test_nearest_divisors_are_divisors_nearest_first() -> None:
    assert nearest_divisors(2048, 1000, 3) == [1024, 512, 2048]
    assert nearest_divisors(12, 5, 2) == [6, 4]


def test_bad_num_minibatches_is_refused() -> None:
    with pytest.raises(ConfigError, match="num_minibatches=0"):
        minibatch_size(config(64, parts=0))


# -- real runs -------------------------------------------------------------------------------------------

#: Mean episode return a short run beats; a random policy scores about -1200 (Pendulum) and 20 (Cartpole).
LEARNED = {"Pendulum": -600.0, "Cartpole": 100.0}

@pytest.mark.training
@pytest.mark.parametrize("task, envs, frames, expected", [
    ("Pendulum", 100, 100_000, 800),  # 3,200 samples: not a power of two; 4 minibatches
    ("Cartpole", 48, 100_000, 768),  # Cartpole ships 2 minibatches: 48 x 32 / 2
])
def test_num_envs_just_works(tmp_path: Path, task: str, envs: int, frames: int, expected: int) -> None:
    proc = run_train([f"task={task}", f"num_envs={envs}", f"max_frames={frames}", "sim_device=cpu", "rl_device=cpu",
                      "torch_threads=1", f"train_dir={tmp_path / 'runs'}", "experiment=mb"], tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    size, auto, logged_envs, _, batch, parts = MINIBATCH_LINE.search(output).groups()
    assert (int(size), auto, int(logged_envs)) == (expected, " (auto)", envs)
    assert int(batch) // int(size) == int(parts)
    summary = parse_summary(proc.stdout)
    assert summary["frames"] >= frames
    assert summary["reward"] > LEARNED[task], summary  # learning happened


@pytest.mark.training
def test_an_incompatible_explicit_minibatch_fails_before_training(tmp_path: Path) -> None:
    proc = run_train(["task=Pendulum", "num_envs=64", "train.params.config.minibatch_size=4096", "max_frames=100000",
                      "sim_device=cpu", "rl_device=cpu", f"train_dir={tmp_path / 'runs'}", "experiment=bad"],
                     tmp_path, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ConfigError" in output and "minibatch_size=4096 does not split the batch" in output, output[-3000:]
    assert "Values that work: 64, 128, 256, 512, 1024, 2048;" in output
    assert "SUMMARY" not in output and not (tmp_path / "runs").exists()  # nothing trained, no run dir
