"""pbt.play: a policy trained for ~1M frames on Pendulum plays (deterministic actions, no learning)
about as well as it scored at the end of training; clear errors for a missing or mismatched
checkpoint."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import worker_env

from pbt.errors import ConfigError
from pbt.tools.play import DEFAULT_EPISODES, PlayResult, split_episodes

PLAY_RE = re.compile(r"PLAY episodes=(?P<episodes>\d+) mean_return=(?P<ret>\S+) objective=(?P<objective>\S+) "
                     r"std_return=(?P<std>\S+)")
COMMON = ["task=Pendulum", "sim_device=cpu", "rl_device=cpu", "torch_threads=1"]


def play(args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pbt.play", *args], cwd=str(cwd), env=worker_env(),
                          capture_output=True, text=True, timeout=180)


@pytest.mark.training
def test_play_scores_close_to_the_training_return(tmp_path, trained_pendulum):
    trained = trained_pendulum["summary"]["reward"]
    checkpoints = [trained_pendulum["checkpoint"]]
    proc = play([f"checkpoint={checkpoints[-1]}", *COMMON, "episodes=200"], tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    match = PLAY_RE.search(output)
    assert match, output[-3000:]
    assert int(match["episodes"]) == 200
    played = float(match["ret"])
    # No true_objective on Pendulum: the objective is the mean return, as in training.
    assert float(match["objective"]) == played
    # Deterministic actions of a trained policy score about its (stochastic) training return.
    assert abs(played - trained) <= 0.2 * abs(trained) + 10, (played, trained)
    assert played > -400  # far better than an untrained policy (about -1200)
    assert not list(Path(checkpoints[-1]).parent.glob("play*")), "play wrote next to the checkpoint"

    # The same checkpoint with another network is refused with a clear message.
    mismatch = play([f"checkpoint={checkpoints[-1]}", *COMMON, "episodes=5", "train.params.network.mlp.units=[32]"],
                    tmp_path)
    assert mismatch.returncode == 2
    assert "does not fit the policy" in mismatch.stdout + mismatch.stderr


@pytest.mark.training
def test_play_needs_a_checkpoint(tmp_path):
    proc = play([*COMMON], tmp_path)
    assert proc.returncode == 2 and "needs checkpoint=" in proc.stdout + proc.stderr
    proc = play([f"checkpoint={tmp_path / 'missing.pth'}", *COMMON], tmp_path)
    assert proc.returncode == 2 and "no such file" in proc.stdout + proc.stderr


def test_episodes_argument():
    assert split_episodes(["task=Pendulum"]) == (DEFAULT_EPISODES, ["task=Pendulum"])
    assert split_episodes(["episodes=7", "num_envs=4"]) == (7, ["num_envs=4"])
    with pytest.raises(ConfigError):
        split_episodes(["episodes=0"])
    with pytest.raises(ConfigError):
        split_episodes(["episodes=many"])


def test_play_result_line():
    result = PlayResult(3, [-100.0, -200.0, -300.0], [], 400)
    assert result.line() == "PLAY episodes=3 mean_return=-200 objective=-200 std_return=81.65"
    assert PlayResult(2, [1.0, 3.0], [0.5, 1.0], 10).objective == 0.75
