"""envpool MuJoCo tasks (``task=envpool/<EnvId>``, extra ``[mujoco]``): the env interface, the
auto-reset handling (no bogus transition ever reaches rl_games), errors, and a real training run."""
import sys

import numpy as np
import pytest
import torch

from conftest import MINIBATCH_LINE, parse_summary, run_train
from pbt.tasks.envpool import EnvpoolTask
from pbt.errors import TaskError
from pbt.tasks.registry import TaskRef, build_task


def make(env_id: str = "HalfCheetah-v4", num_envs: int = 4, desync: bool = False, **kwargs: object) -> EnvpoolTask:
    cfg = {"name": env_id, "seed": 3, "env": {"numEnvs": num_envs, "numThreads": 1, "desyncEpisodes": desync,
                                              "kwargs": kwargs}}
    task = build_task(TaskRef("envpool", env_id), cfg, "cpu", "cpu", True)
    assert isinstance(task, EnvpoolTask)
    return task


def test_interface_shapes_and_dtypes() -> None:
    task = make("Ant-v4", num_envs=5)
    assert (task.num_envs, task.num_obs, task.num_actions) == (5, 27, 8)
    obs = task.reset()["obs"]
    assert obs.shape == (5, 27) and obs.dtype == torch.float32
    out, rew, done, extras = task.step(torch.zeros(5, 8))
    assert out["obs"].shape == (5, 27) and out["obs"].dtype == torch.float32
    assert rew.shape == (5,) and rew.dtype == torch.float32
    assert done.shape == (5,) and done.dtype == torch.bool
    assert extras["time_outs"].shape == (5,) and extras["time_outs"].dtype == torch.bool
    task.close()


def test_episodes_end_on_the_time_limit_and_restart_at_once() -> None:
    """envpool itself resets a finished env on the *next* step (a no-op step with reward 0). The task
    resets it at once, so with a 4-step limit dones come exactly every 4 steps and no step has the
    exact-zero reward of envpool's reset step."""
    task = make(num_envs=3, max_episode_steps=4)
    task.reset()
    dones, timeouts, rewards = [], [], []
    for _ in range(12):
        _, rew, done, extras = task.step(torch.rand(3, 6) * 2 - 1)
        dones.append(done.clone())
        timeouts.append(extras["time_outs"].clone())
        rewards.append(rew.clone())
    dones_t, timeouts_t = torch.stack(dones), torch.stack(timeouts)
    expected = torch.tensor([(t + 1) % 4 == 0 for t in range(12)]).unsqueeze(1).expand(12, 3)
    assert torch.equal(dones_t, expected)
    assert torch.equal(timeouts_t, expected)  # HalfCheetah never terminates: every end is a time-out
    assert (torch.stack(rewards) != 0).all()
    task.close()


def test_the_observation_after_done_starts_the_next_episode() -> None:
    """With a 1-step limit every step ends an episode: the obs returned must be a fresh reset state
    (HalfCheetah's initial velocities are noise of scale 0.1), not the state after a full push."""
    task = make(num_envs=8, max_episode_steps=1)
    task.reset()
    for _ in range(3):
        out, _, done, extras = task.step(torch.ones(8, 6))
        assert done.all() and extras["time_outs"].all()
        assert out["obs"][:, 8:].abs().max() < 0.5  # qvel of a fresh state
    pushed = make(num_envs=8, max_episode_steps=100)
    pushed.reset()
    out, _, done, _ = pushed.step(torch.ones(8, 6))
    assert not done.any() and out["obs"][:, 8:].abs().max() > 0.5  # one full push: clearly not fresh
    task.close()
    pushed.close()


def test_termination_is_done_but_not_a_time_out() -> None:
    task = make("Hopper-v4", num_envs=4)
    task.reset()
    seen = torch.zeros(4, dtype=torch.bool)
    for _ in range(200):
        _, _, done, extras = task.step(torch.ones(4, 3))
        assert not (extras["time_outs"] & ~done).any()
        assert not extras["time_outs"][done].any()  # the hopper falls long before its 1000-step limit
        seen |= done
        if seen.all():
            break
    assert seen.all()
    task.close()


def test_desync_cuts_first_episodes_at_spread_out_steps() -> None:
    task = make(num_envs=32, desync=True, max_episode_steps=20)
    task.reset()
    first_end = torch.full((32,), -1)
    for t in range(20):
        _, _, done, extras = task.step(torch.zeros(32, 6))
        assert torch.equal(done, extras["time_outs"])
        first_end[(first_end < 0) & done] = t
    assert (first_end >= 0).all()  # every env's first episode ended within the limit ...
    assert len(set(first_end.tolist())) >= 8  # ... at many different steps
    task.close()


def test_actions_in_unit_range_are_scaled_to_the_env_bounds() -> None:
    task = make("Humanoid-v4", num_envs=4)  # bounds [-0.4, 0.4]
    actions = torch.tensor([[2.0], [-1.0], [0.5], [0.0]]).expand(4, 17)
    scaled = task.scale_actions(actions)
    assert scaled.dtype == np.float64 and scaled.shape == (4, 17)
    np.testing.assert_allclose(scaled[:, 0], [0.4, -0.4, 0.2, 0.0], atol=1e-6)
    task.close()


def test_unknown_env_id_suggests_close_ids() -> None:
    with pytest.raises(TaskError) as info:
        make("HalfCheeta-v4")
    msg = str(info.value)
    assert "Unknown envpool env id 'HalfCheeta-v4'" in msg
    assert "'HalfCheetah-v4'" in msg and "Did you mean" in msg
    assert "Ant-v4" in msg  # the MuJoCo ids are listed


def test_discrete_env_is_refused() -> None:
    with pytest.raises(TaskError, match="only continuous"):
        make("CartPole-v1")


def test_bad_env_kwargs_are_a_task_error() -> None:
    with pytest.raises(TaskError, match="task.env.kwargs"):
        make(no_such_option=3)


def test_missing_envpool_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(TaskError) as info:
        make()
    assert 'pip install -e ".[mujoco]"' in str(info.value)


@pytest.mark.training
def test_halfcheetah_learns_within_200k_frames(tmp_path) -> None:
    """Through the worker, with minibatch_size auto. A random policy scores about -350 per 1000-step episode (-520 .. -210 over 16 envs); five seeds of
    this run scored +156 .. +245 in 17-29 s of training on 2 shared cores."""
    proc = run_train(["task=envpool/HalfCheetah-v4", "num_envs=64", "max_frames=200000", "sim_device=cpu",
                      "rl_device=cpu", "experiment=learn", f"train_dir={tmp_path / 'runs'}"], tmp_path, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = parse_summary(proc.stdout)
    assert summary["frames"] >= 200000
    assert summary["reward"] > 0, summary
    # minibatch_size auto for envpool's shipped config (horizon 64, 4 minibatches): 64 x 64 / 4
    size, auto, envs, horizon, _, parts = MINIBATCH_LINE.search(proc.stdout + proc.stderr).groups()
    assert (int(size), auto, int(envs), int(horizon), int(parts)) == (1024, " (auto)", 64, 64, 4)
