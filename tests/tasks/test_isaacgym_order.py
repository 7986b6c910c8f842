"""Isaac Gym's import order through every entry point: ``import isaacgym`` raises once torch is
imported (the fake package of test_task_registry copies that), so ``pbt.train``, ``pbt.play`` and
``pbt.replay`` with an Isaac Gym task, and a user's own Isaac Gym class (``task=pkg.mod:Cls``, whose
module imports isaacgym first), must import it before anything of ours imports torch. An exec
restart re-runs ``python -m pbt.train`` (pbt/restart.py), the first path here."""
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from conftest import parse_summary, worker_env
from test_task_registry import write_fake_isaacgym

CPU = ["sim_device=cpu", "rl_device=cpu", "torch_threads=1"]
FAKE = ["task=isaacgym/FakeTask", "num_envs=32", "train.params.config.minibatch_size=256", "+task.env.episodeLength=20"]
USER_TASK = '''
import isaacgym  # noqa: F401  (an Isaac Gym task module imports it before torch, as IsaacGymEnvs' do)
import torch  # noqa: F401

from pbt.tasks.pendulum import Pendulum as UserTask  # noqa: F401
'''


def pbt_module(module: str, args: List[str], cwd: Path, root: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=str(cwd), env=worker_env(str(root)),
                          capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert "imported before isaacgym" not in output, output[-3000:]
    assert proc.returncode == 0, output[-3000:]
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A fake Isaac Gym task trained for one short run through ``pbt.train``: its checkpoint."""
    tmp = tmp_path_factory.mktemp("isaacgym_order")
    root = write_fake_isaacgym(tmp / "fake")
    (root / "my_isaac_pkg").mkdir()
    (root / "my_isaac_pkg" / "__init__.py").write_text("")
    (root / "my_isaac_pkg" / "tasks.py").write_text(USER_TASK)
    proc = pbt_module("pbt.train", [*FAKE, *CPU, "max_frames=1024", "experiment=fake", f"train_dir={tmp / 'runs'}"],
                      tmp, root)
    assert parse_summary(proc.stdout)["frames"] >= 1024
    checkpoints = sorted((tmp / "runs" / "fake" / "nn").glob("*.pth"))
    assert checkpoints, list((tmp / "runs").rglob("*"))
    return {"tmp": tmp, "root": root, "checkpoint": checkpoints[-1]}


@pytest.mark.training
def test_play_imports_isaacgym_before_loading_the_checkpoint(trained: Dict[str, Path]) -> None:
    proc = pbt_module("pbt.play", [*FAKE, *CPU, f"checkpoint={trained['checkpoint']}", "episodes=2"],
                      trained["tmp"], trained["root"])
    assert "PLAY episodes=2" in proc.stdout + proc.stderr


@pytest.mark.training
def test_replay_imports_isaacgym_before_the_adapters(trained: Dict[str, Path]) -> None:
    schedule = trained["tmp"] / "schedule.yaml"
    schedule.write_text(yaml.safe_dump({"steps": [{"frame": 0, "params": {"train.params.config.gamma": 0.97}}]}))
    proc = pbt_module("pbt.replay", [str(schedule), *FAKE, *CPU, "max_frames=1024", "experiment=replay",
                                     f"train_dir={trained['tmp'] / 'replay_runs'}"], trained["tmp"], trained["root"])
    assert "REPLAY step 1/1 at frame 0 applied as config before training: gamma=0.97" in proc.stdout + proc.stderr


@pytest.mark.training
def test_a_users_isaacgym_class_is_imported_before_torch(trained: Dict[str, Path]) -> None:
    tmp = trained["tmp"]
    user = ["task=my_isaac_pkg.tasks:UserTask", "num_envs=32", "train.params.config.minibatch_size=256", *CPU]
    pbt_module("pbt.train", [*user, "max_frames=1024", "experiment=user", f"train_dir={tmp / 'user_runs'}"],
               tmp, trained["root"])
    checkpoint = sorted((tmp / "user_runs" / "user" / "nn").glob("*.pth"))[-1]
    proc = pbt_module("pbt.play", [*user, f"checkpoint={checkpoint}", "episodes=2"], tmp, trained["root"])
    assert "PLAY episodes=2" in proc.stdout + proc.stderr
