"""``pbt.objective`` naming a trainer statistic (``episode_return``, ``episode_length``) or a scalar the
env reports under ``episode`` (Isaac Lab style), and the error for a name that is none of these."""
from pathlib import Path

import pytest
import torch

from conftest import parse_summary, run_train
from pbt.errors import ConfigError
from pbt.objective import TRAINER_STATISTICS, MemberObjective
from pbt.rl_games.observer import WorkerObserver
from pbt.rl_games.vecenv import EPISODE_RETURN_KEY
from pbt.storage import WorkspaceReader


def observer_after_two_episodes(key: str, infos: dict) -> WorkerObserver:
    observer = WorkerObserver({"pbt": {"objective": key}})
    observer.score = MemberObjective(key, EPISODE_RETURN_KEY, 2)
    for _ in range(2):
        observer.last_infos = infos
        observer.score.update(infos, [0, 1])
    return observer


def test_a_wrong_name_lists_trainer_statistics_and_env_keys() -> None:
    infos = {"episode_return": torch.zeros(2), "time_outs": torch.zeros(2), "episode": {"success": torch.tensor(0.5)}}
    observer = observer_after_two_episodes("episode_lenght", infos)
    with pytest.raises(ConfigError) as err:
        observer.check_objective_key()
    message = str(err.value)
    assert "Did you mean" in message and message.index("'episode_length'") < message.index("trainer statistics")
    for name in TRAINER_STATISTICS:
        assert name in message
    assert "game_lengths" in message and "episode.success" in message and "time_outs" in message


def test_a_scalar_under_episode_is_an_objective() -> None:
    infos = {"episode_return": torch.zeros(2), "episode": {"success": torch.tensor(0.75)}}
    observer = observer_after_two_episodes("episode.success", infos)
    observer.check_objective_key()  # reported: no error
    assert observer.objective() == 0.75


@pytest.mark.training
def test_a_member_ranked_by_episode_length_publishes_it(tmp_path: Path) -> None:
    """Pendulum episodes always last episodeLength (200) steps and return a negative reward sum, so a
    record objective of exactly 200 is the episode length, not the return."""
    workspace = tmp_path / "ws"
    proc = run_train(["task=Pendulum", "pbt=pbt_default", "pbt.num_policies=2", "pbt.policy_idx=0",
                      f"pbt.workspace={workspace}", "pbt.objective=episode_length", "pbt.interval_steps=20000",
                      "max_frames=60000", "num_envs=64", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
                      f"train_dir={tmp_path / 'runs'}", "experiment=len"], tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    summary = parse_summary(proc.stdout)
    assert summary["reward"] < 0  # the mean episode return: clearly not what was published
    record = WorkspaceReader(workspace, 2).latest_record(0)
    assert record is not None and record.frame >= 60000
    assert record.objective == 200.0, record
    lengths = record.episode_returns  # per-episode objectives: lengths (the first, desynchronised ones cut short)
    assert lengths and all(v.is_integer() and 0 < v <= 200 for v in lengths)
    assert lengths[-64:] == [200.0] * 64  # every env's last, complete episode
