"""``task=isaaclab/<TaskId>``, for real on Isaac Lab 3.0 (kit-less, Newton, CPU): the agent config
as overrides, env-config overrides, the clear errors, and the task built and stepped.

Skipped unless isaaclab is importable (Python 3.12 venv of scripts/test_isaaclab.sh).
"""
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.isaaclab
# Not "isaaclab": this test folder, on sys.path's tests/, would pass as a namespace package of that name.
pytest.importorskip("isaaclab_tasks", reason="Isaac Lab 3.0 is not installed (Python 3.12: scripts/test_isaaclab.sh)")

from conftest import REPO, worker_env  # noqa: E402
from isaaclab_util import TASK, cartpole_asset  # noqa: E402
from pbt.errors import TaskError  # noqa: E402
from pbt.tasks.registry import TaskRef, build_task, rewrite_task_overrides  # noqa: E402

ID = TASK.split("/", 1)[1]


@pytest.fixture(scope="module")
def asset() -> Path:
    return cartpole_asset()


def test_agent_config_becomes_overrides_before_the_users() -> None:
    out = rewrite_task_overrides([f"task={TASK}", "num_envs=64", "task.env.rew_scale_alive=2.0",
                                  "train.params.config.learning_rate=0.001"])
    assert "task=isaaclab" in out and f"task.name={ID}" in out
    # Isaac Lab's rl_games_direct_ppo_cfg.yaml: mlp [32, 32], lr 5e-4 (a string to PyYAML), 8 minibatches
    # of 4096 envs x 32 steps, 150 epochs; clip_observations 5.
    assert "++train.params.network.mlp.units=[32,32]" in out
    lr = [i for i, a in enumerate(out) if "config.learning_rate=" in a]
    assert out[lr[0]] == "++train.params.config.learning_rate=0.0005" and out[lr[-1]].endswith("=0.001")
    assert "++train.params.config.num_minibatches=8" in out  # minibatch_size auto: 64 x 32 / 8 at num_envs=64
    assert not any("minibatch_size" in a for a in out)
    assert "max_frames=307200" in out  # 150 x 32 x 64
    assert "task.clipObservations=5.0" in out
    assert "++task.env.rew_scale_alive=2.0" in out
    assert not any(a.startswith("num_envs=4096") for a in out)
    assert not any("config.device" in a or "env_name" in a or "max_epochs" in a for a in out)


def test_unknown_task_id_says_did_you_mean() -> None:
    with pytest.raises(TaskError, match=r"Unknown Isaac Lab task 'Isaac-Cartpol-Direct'.*Isaac-Cartpole-Direct"):
        rewrite_task_overrides(["task=isaaclab/Isaac-Cartpol-Direct"])


def test_unreachable_assets_fail_fast_naming_the_override(tmp_path: Path) -> None:
    """Stock Cartpole names a USD on NVIDIA's servers and a Nucleus ground plane: both are named,
    with the override that replaces each, within seconds instead of Isaac Lab's minute-long wait."""
    cfg = {"name": ID, "seed": 1, "numEnvs": 2, "presets": "newton_mjwarp", "checkAssets": True, "assetTimeout": 2.0,
           "env": {}}
    start = time.monotonic()
    with pytest.raises(TaskError) as info:
        build_task(TaskRef("isaaclab", ID), cfg, "cpu", "cpu", True)
    elapsed = time.monotonic() - start
    text = str(info.value)
    assert "scene.cartpole.spawn.usd_path" in text and "task.env.scene.cartpole.spawn.usd_path=" in text, text
    assert "task.groundCuboid=true" in text, text
    assert elapsed < 50, elapsed  # well before Isaac Lab's own ~60 s wait


def test_unknown_env_field_says_did_you_mean(asset: Path) -> None:
    cfg = {"name": ID, "seed": 1, "numEnvs": 2, "presets": "newton_mjwarp", "groundCuboid": True,
           "env": {"scene": {"cartpole": {"spawn": {"usd_path": str(asset)}}}, "rew_scale_alvie": 2.0}}
    with pytest.raises(TaskError, match=r"task.env.rew_scale_alvie: .*Did you mean.*rew_scale_alive"):
        build_task(TaskRef("isaaclab", ID), cfg, "cpu", "cpu", True)


def test_missing_isaaclab_is_explained_on_other_pythons() -> None:
    """Run on a Python without isaaclab (the one the venv was made from has none)."""
    import shutil

    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    probe = subprocess.run([base, "-c", "import isaaclab"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the base interpreter has isaaclab too")
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from pbt.tasks.isaaclab import import_isaaclab\n"
            "try:\n    import_isaaclab('Isaac-Cartpole-Direct')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n") % str(REPO)
    out = subprocess.run([base, "-c", code], capture_output=True, text=True, env=worker_env()).stdout
    assert "TaskError" in out and "pip install isaaclab==3.0.0" in out and "Python 3.12" in out, out


def test_builds_and_steps_kitless_on_cpu(asset: Path) -> None:
    """The real env behind Isaac Lab's rl_games wrapper: shapes, rewards, time-outs, env overrides."""
    import torch

    cfg = {"name": ID, "seed": 1, "numEnvs": 4, "presets": "newton_mjwarp", "groundCuboid": True,
           "clipObservations": 5.0, "clipActions": 1.0,
           "env": {"scene": {"cartpole": {"spawn": {"usd_path": str(asset)}}}, "episode_length_s": 0.1,
                   "rew_scale_alive": 3.0, "rew_scale_terminated": 0.0, "rew_scale_pole_pos": 0.0,
                   "rew_scale_cart_vel": 0.0, "rew_scale_pole_vel": 0.0}}
    task = build_task(TaskRef("isaaclab", ID), cfg, "cpu", "cpu", True)
    try:
        assert (task.num_envs, task.num_obs, task.num_actions) == (4, 4, 1)
        obs = task.reset()
        obs = obs["obs"] if isinstance(obs, dict) else obs
        assert obs.shape == (4, 4)
        dones, rewards = [], []
        for _ in range(8):
            obs, rew, done, extras = task.step(torch.zeros(4, 1))
            obs = obs["obs"] if isinstance(obs, dict) else obs
            assert obs.abs().max() <= 5.0  # the wrapper's clipping
            assert rew.shape == (4,) and "time_outs" in extras
            dones.append(done.clone())
            rewards.append(rew.clone())
        # 0.1 s episodes at 60 Hz (dt 1/120, decimation 2): every env times out within 8 steps.
        assert torch.stack(dones).any(dim=0).all()
        # rew_scale_alive=3 and every other term 0: Isaac Lab pays 3 * step_dt (1/60 s) per step alive.
        rew = torch.stack(rewards)
        assert (((rew - 3.0 / 60.0).abs() < 1e-5) | (rew == 0)).all(), rew
        assert (rew > 0).float().mean() > 0.5, rew
        assert math.isclose(float(task.env.unwrapped.cfg.rew_scale_alive), 3.0)
        # PBT changes a reward scale in place: the next steps pay the new scale, no rebuild
        setters = task.live_setters()
        assert {"task.env.rew_scale_alive", "task.env.rew_scale_pole_pos"} <= set(setters), sorted(setters)
        assert "task.env.episode_length_s" not in setters  # read at build time: a restart changes it
        setters["task.env.rew_scale_alive"](5.0)
        rewards = [task.step(torch.zeros(4, 1))[1].clone() for _ in range(4)]
        rew = torch.stack(rewards)
        assert (((rew - 5.0 / 60.0).abs() < 1e-5) | (rew == 0)).all() and (rew > 0).any(), rew
    finally:
        task.close()
