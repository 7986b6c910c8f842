"""The one registry behind ``task=``: every accepted form, every way it can fail, and the Isaac Gym
build path run for real against a fake ``isaacgym`` + ``isaacgymenvs`` written to tmp_path.

The fake packages copy what matters of the real ones: ``import isaacgym`` refuses to load once torch
is imported, ``isaacgymenvs/__init__.py`` registers its OmegaConf resolvers unconditionally, the
task YAML interpolates IsaacGymEnvs' root config, and the task map holds a VecTask-like class over
torch tensors with the constructor arguments IsaacGymEnvs' tasks take.
"""
import json
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO, parse_summary, run_train
from pbt.errors import ConfigError, TaskError
from pbt.tasks.isaacgym import isaacgym_task_config
from pbt.tasks.registry import TaskRef, build_task, parse_task, prepare_backend, rewrite_task_overrides

# -- fake isaacgym / isaacgymenvs ---------------------------------------------------------------------
FAKE_ISAACGYM = '''
import sys
if "torch" in sys.modules:
    raise ImportError("PyTorch was imported before isaacgym modules.  Please import torch after isaacgym modules.")
'''

FAKE_ISAACGYMENVS = '''
from omegaconf import OmegaConf
OmegaConf.register_new_resolver('eq', lambda x, y: x.lower()==y.lower())
OmegaConf.register_new_resolver('contains', lambda x, y: x.lower() in y.lower())
OmegaConf.register_new_resolver('if', lambda pred, a, b: a if pred else b)
OmegaConf.register_new_resolver('resolve_default', lambda default, arg: default if arg=='' else arg)
'''

FAKE_TASKS = '''
import json
import os

import isaacgym  # noqa: F401  (the real task modules import isaacgym.gymtorch first)
import torch

try:
    from gymnasium import spaces
except ImportError:
    from gym import spaces


class FakeTask:
    """A 1-D point mass that should stay at the origin (VecTask-like, on sim_device)."""

    def __init__(self, cfg, rl_device, sim_device, graphics_device_id, headless, virtual_screen_capture,
                 force_render):
        record = os.environ.get("FAKE_ISAACGYM_RECORD")
        if record:
            with open(record, "w") as f:
                json.dump({"cfg": cfg, "rl_device": rl_device, "sim_device": sim_device,
                           "graphics_device_id": graphics_device_id, "headless": headless,
                           "virtual_screen_capture": virtual_screen_capture, "force_render": force_render}, f)
        self.cfg = cfg
        self.num_envs = cfg["env"]["numEnvs"]
        self.num_obs, self.num_actions, self.num_states = 2, 1, 0
        self.max_episode_length = cfg["env"]["episodeLength"]
        self.dt = cfg["sim"]["dt"]
        self.device, self.rl_device = torch.device(sim_device), torch.device(rl_device)
        self.observation_space = spaces.Box(-float("inf"), float("inf"), (self.num_obs,))
        self.action_space = spaces.Box(-1.0, 1.0, (self.num_actions,))
        self.state = torch.zeros(self.num_envs, 2, device=self.device)
        self.progress_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.extras = {}

    def reset_idx(self, ids):
        self.state[ids] = torch.rand(len(ids), 2, device=self.device) * 2 - 1
        self.progress_buf[ids] = 0

    def reset(self):
        self.reset_idx(torch.arange(self.num_envs, device=self.device))
        return {"obs": self.state.clone().to(self.rl_device)}

    def step(self, actions):
        a = torch.clamp(actions.to(self.device), -1.0, 1.0)[:, 0]
        self.state[:, 1] += a * self.dt
        self.state[:, 0] += self.state[:, 1] * self.dt
        self.progress_buf += 1
        rew = -self.state[:, 0] ** 2 - 0.1 * self.state[:, 1] ** 2
        time_outs = self.progress_buf >= self.max_episode_length
        self.extras = {"time_outs": time_outs.to(self.rl_device)}
        done = time_outs.clone()
        self.reset_idx(done.nonzero().squeeze(-1))
        return {"obs": self.state.clone().to(self.rl_device)}, rew.to(self.rl_device), done.to(self.rl_device), self.extras
'''

FAKE_TASK_MAP = '''
from .fake_task import FakeTask

isaacgym_task_map = {"FakeTask": FakeTask, "FakeBall": FakeTask}
'''

# Shaped like IsaacGymEnvs' cfg/task/Ant.yaml: interpolations into IsaacGymEnvs' root config.
FAKE_TASK_YAML = '''
name: FakeTask
physics_engine: ${..physics_engine}
env:
  numEnvs: ${resolve_default:4096,${...num_envs}}
  envSpacing: 5
  episodeLength: 50
sim:
  dt: 0.05
  use_gpu_pipeline: ${eq:${...pipeline},"gpu"}
  physx:
    num_threads: ${....num_threads}
    use_gpu: ${contains:"cuda",${....sim_device}}
task:
  randomize: False
'''


def write_fake_isaacgym(root: Path) -> Path:
    files = {
        "isaacgym/__init__.py": FAKE_ISAACGYM,
        "isaacgymenvs/__init__.py": FAKE_ISAACGYMENVS,
        "isaacgymenvs/tasks/__init__.py": FAKE_TASK_MAP,
        "isaacgymenvs/tasks/fake_task.py": FAKE_TASKS,
        "isaacgymenvs/cfg/task/FakeTask.yaml": FAKE_TASK_YAML,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


@pytest.fixture
def fake_isaacgym(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake packages importable in this process (torch may be loaded already, so ``isaacgym`` is
    stubbed in sys.modules the way the worker leaves it after importing it first)."""
    import types

    pytest.importorskip("omegaconf")  # Hydra's: skipped on the torch-free Python 3.8 leg
    from omegaconf import OmegaConf

    from pbt.resolvers import register_resolvers

    root = write_fake_isaacgym(tmp_path / "fake")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setitem(sys.modules, "isaacgym", types.ModuleType("isaacgym"))
    register_resolvers()  # as pbt.train does: the fake isaacgymenvs must not clash with them
    yield root
    for name in [m for m in sys.modules if m == "isaacgymenvs" or m.startswith("isaacgymenvs.")]:
        del sys.modules[name]
    for name in ("contains", "if"):
        if OmegaConf.has_resolver(name):
            OmegaConf.clear_resolver(name)


# -- parse_task / rewrite_task_overrides ------------------------------------------------------------
@pytest.mark.parametrize(
    "value, option, name, kind",
    [
        ("Pendulum", "Pendulum", "Pendulum", "builtin"),
        ("Cartpole", "Cartpole", "Cartpole", "builtin"),
        ("my_package.my_module:MyTask", "imported", "my_package.my_module:MyTask", "imported"),
        ("my_module:MyTask", "imported", "my_module:MyTask", "imported"),
        ("envpool/HalfCheetah-v4", "envpool", "HalfCheetah-v4", "envpool"),
        ("isaacgym/Ant", "isaacgym", "Ant", "isaacgym"),
        ("imported", "imported", "", "imported"),
        ("envpool", "envpool", "", "envpool"),
        ("isaacgym", "isaacgym", "", "isaacgym"),
        ("'envpool/Ant-v4'", "envpool", "Ant-v4", "envpool"),
    ],
)
def test_parse_task_accepts_every_form(value: str, option: str, name: str, kind: str) -> None:
    ref = parse_task(value)
    assert ref == TaskRef(option, name)
    assert ref.kind == kind


@pytest.mark.parametrize(
    "value, expected",
    [
        ("Pendulm", "Did you mean one of: 'Pendulum', 'PendulumImage'?"),
        ("cartpole", "Did you mean 'Cartpole'?"),
        ("envpool/", "missing the task name after 'envpool/'"),
        ("isaacgym/", "missing the task name after 'isaacgym/'"),
        (":MyTask", "an import path must look like my_package.my_module:MyTask"),
        ("my_module:", "an import path must look like my_package.my_module:MyTask"),
        ("my_module:1Task", "an import path must look like my_package.my_module:MyTask"),
        ("isacgym/Ant", "Isaac Gym: task=isaacgym/<Name>"),
        ("envpol/HalfCheetah-v4", "envpool/MuJoCo: task=envpool/<EnvId>"),
    ],
)
def test_parse_task_refuses_bad_forms_with_help(value: str, expected: str) -> None:
    with pytest.raises(TaskError) as info:
        parse_task(value)
    assert expected in str(info.value)
    assert isinstance(info.value, ConfigError)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["task=Pendulum", "num_envs=8"], ["task=Pendulum", "num_envs=8"]),
        (["task=envpool/HalfCheetah-v4", "num_envs=8"], ["task=envpool", "task.name=HalfCheetah-v4", "num_envs=8"]),
        (["seed=1", "task=isaacgym/Ant"], ["seed=1", "task=isaacgym", "task.name=Ant"]),
        (["task=my_pkg.mod:MyTask"], ["task=imported", "task.name=my_pkg.mod:MyTask"]),
        (["+task=envpool/Ant-v4"], ["task=envpool", "task.name=Ant-v4"]),
        (["task=envpool"], ["task=envpool"]),
        (["task.name=Ant-v4", "train.params.config.gamma=0.9"], ["task.name=Ant-v4", "train.params.config.gamma=0.9"]),
        ([], []),
    ],
)
def test_rewrite_task_overrides(argv: list, expected: list) -> None:
    assert rewrite_task_overrides(argv) == expected


def test_rewrite_refuses_an_unknown_task_before_hydra() -> None:
    with pytest.raises(TaskError, match=r"Unknown task 'Pendulm'. Did you mean one of: 'Pendulum', 'PendulumImage'\?"):
        rewrite_task_overrides(["num_envs=4", "task=Pendulm"])


# -- imported tasks -------------------------------------------------------------------------------
def test_import_path_to_a_missing_module_is_a_clear_error() -> None:
    with pytest.raises(TaskError) as info:
        build_task(TaskRef("imported", "no_such_module_xyz.sub:Task"), {"env": {}}, "cpu", "cpu", True)
    msg = str(info.value)
    assert "cannot import module 'no_such_module_xyz.sub'" in msg
    assert "PYTHONPATH" in msg


def test_import_path_to_a_missing_class_suggests_the_nearest() -> None:
    pytest.importorskip("torch")  # the module it names, pbt.tasks.pendulum, imports torch
    with pytest.raises(TaskError) as info:
        build_task(TaskRef("imported", "pbt.tasks.pendulum:Pendulm"), {"env": {}}, "cpu", "cpu", True)
    assert "module 'pbt.tasks.pendulum' has no attribute 'Pendulm'. Did you mean 'Pendulum'?" in str(info.value)


def test_imported_without_a_name_says_what_to_set() -> None:
    with pytest.raises(TaskError, match="task.name=my_package.my_module:MyTask"):
        build_task(TaskRef("imported", ""), {"env": {}}, "cpu", "cpu", True)


def test_user_class_missing_the_interface_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "half_task_mod.py").write_text(textwrap.dedent('''
        class HalfTask:
            num_envs = 4
            num_actions = 1

            def __init__(self, cfg, sim_device, rl_device, headless):
                self.cfg = cfg

            def reset(self):
                return {}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskError) as info:
        build_task(TaskRef("imported", "half_task_mod:HalfTask"), {"env": {}}, "cpu", "cpu", True)
    msg = str(info.value)
    assert "missing num_obs, step" in msg
    assert "half_task_mod:HalfTask" in msg
    assert "Bring your own task" in msg


# -- Isaac Gym: missing ----------------------------------------------------------------------------
def test_prepare_backend_without_isaacgym_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "isaacgym", None)  # import isaacgym -> ImportError, installed or not
    with pytest.raises(TaskError) as info:
        prepare_backend(TaskRef("isaacgym", "Ant"))
    msg = str(info.value)
    assert "task=isaacgym/Ant" in msg and "Isaac Gym" in msg
    assert "pip install -e isaacgym/python" in msg and "pip install -e IsaacGymEnvs" in msg
    prepare_backend(TaskRef("Pendulum", "Pendulum"))  # other kinds: nothing to import


@pytest.mark.training
def test_isaacgym_task_without_isaacgym_fails_at_once_naming_the_install(tmp_path: Path) -> None:
    proc = run_train(["task=isaacgym/Ant", f"train_dir={tmp_path / 'runs'}"], tmp_path, timeout=120)
    out = proc.stderr + proc.stdout
    assert proc.returncode != 0
    assert "Started to train" not in out and not (tmp_path / "runs").exists(), "should fail before training starts"
    assert "task=isaacgym/Ant: cannot import isaacgym" in out
    assert "pip install -e isaacgym/python" in out and "pip install -e IsaacGymEnvs" in out
    assert "SUMMARY" not in out


# -- Isaac Gym: the build path against the fake packages -----------------------------------------------
def test_isaacgymenvs_config_is_loaded_and_our_overrides_merged(fake_isaacgym: Path) -> None:
    ours = {"kind": "isaacgym", "name": "FakeTask", "cfgFile": "", "seed": 7,
            "env": {"numEnvs": 8, "episodeLength": 30}, "sim": {"physx": {"num_threads": 2}}}
    cfg = isaacgym_task_config("FakeTask", ours, "cpu", "cpu", True, 0)
    assert cfg["name"] == "FakeTask"
    assert cfg["physics_engine"] == "physx"
    assert cfg["env"] == {"numEnvs": 8, "envSpacing": 5, "episodeLength": 30}
    assert cfg["sim"]["use_gpu_pipeline"] is False and cfg["sim"]["physx"]["use_gpu"] is False
    assert cfg["sim"]["physx"]["num_threads"] == 2 and cfg["sim"]["dt"] == 0.05
    assert cfg["task"] == {"randomize": False}
    assert "kind" not in cfg and "cfgFile" not in cfg

    gpu = isaacgym_task_config("FakeTask", {"name": "FakeTask", "env": {"numEnvs": ""}}, "cuda:0", "cuda:0", True, 0)
    assert gpu["env"]["numEnvs"] == 4096  # IsaacGymEnvs' default when ours is empty
    assert gpu["sim"]["use_gpu_pipeline"] is True and gpu["sim"]["physx"]["use_gpu"] is True


def test_isaacgym_cfg_file_replaces_the_isaacgymenvs_yaml(fake_isaacgym: Path, tmp_path: Path) -> None:
    mine = tmp_path / "Mine.yaml"
    mine.write_text(FAKE_TASK_YAML.replace("episodeLength: 50", "episodeLength: 11"))
    cfg = isaacgym_task_config("FakeTask", {"cfgFile": str(mine), "env": {"numEnvs": 4}}, "cpu", "cpu", True, 0)
    assert cfg["env"]["episodeLength"] == 11 and cfg["env"]["numEnvs"] == 4
    with pytest.raises(TaskError, match="task.cfgFile=.*no such file"):
        isaacgym_task_config("FakeTask", {"cfgFile": str(tmp_path / "nope.yaml"), "env": {}}, "cpu", "cpu", True, 0)


def test_isaacgym_task_is_built_through_the_task_map(fake_isaacgym: Path) -> None:
    from omegaconf import OmegaConf

    task = build_task(TaskRef("isaacgym", "FakeTask"), {"name": "FakeTask", "env": {"numEnvs": 6}}, "cpu", "cpu", True)
    assert (task.num_envs, task.num_obs, task.num_actions) == (6, 2, 1)
    assert task.cfg["env"]["episodeLength"] == 50
    # importing isaacgymenvs (which registers 'eq' and 'resolve_default' again) left ours usable
    assert OmegaConf.create({"a": "", "b": "${resolve_default:3,${a}}", "c": "${eq:GPU,gpu}"}).b == 3
    assert OmegaConf.create({"c": "${eq:GPU,gpu}"}).c is True


def test_unknown_isaacgym_task_suggests_the_nearest(fake_isaacgym: Path) -> None:
    with pytest.raises(TaskError) as info:
        build_task(TaskRef("isaacgym", "FakeTsk"), {"env": {"numEnvs": 4}}, "cpu", "cpu", True)
    msg = str(info.value)
    assert "Unknown Isaac Gym task 'FakeTsk'. Did you mean 'FakeTask'?" in msg
    assert "Available: FakeBall, FakeTask." in msg


def test_isaacgym_after_torch_says_to_import_it_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # (the situation the worker must avoid: torch imported first)

    root = write_fake_isaacgym(tmp_path / "fake")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "isaacgym", raising=False)
    with pytest.raises(TaskError, match="Isaac Gym must be imported before torch"):
        prepare_backend(TaskRef("isaacgym", "FakeTask"))
    sys.modules.pop("isaacgym", None)


@pytest.mark.training
def test_isaacgym_fake_task_trains_through_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_fake_isaacgym(tmp_path / "fake")
    record = tmp_path / "built_with.json"
    monkeypatch.setenv("FAKE_ISAACGYM_RECORD", str(record))
    proc = run_train(
        ["task=isaacgym/FakeTask", "num_envs=32", "max_frames=2048", "sim_device=cpu", "rl_device=cpu",
         "train.params.config.minibatch_size=256", "+task.env.episodeLength=20", "experiment=fake",
         f"train_dir={tmp_path / 'runs'}"],
        tmp_path, timeout=180, extra_pythonpath=str(root))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = parse_summary(proc.stdout)
    assert summary["frames"] >= 2048
    built = json.loads(record.read_text())
    assert built["cfg"]["env"] == {"numEnvs": 32, "envSpacing": 5, "episodeLength": 20}
    assert built["cfg"]["sim"]["physx"]["use_gpu"] is False
    assert (built["sim_device"], built["rl_device"], built["headless"]) == ("cpu", "cpu", True)
    assert (built["virtual_screen_capture"], built["force_render"]) == (False, False)


# -- the family configs --------------------------------------------------------------------------------
@pytest.mark.parametrize("task, name", [("envpool", "HalfCheetah-v4"), ("isaacgym", "Ant")])
def test_family_configs_compose_with_every_mutated_key(task: str, name: str) -> None:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.config import PbtConfig
    from pbt.mutation import current_params
    from pbt.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=rewrite_task_overrides([f"task={task}/{name}", "pbt=pbt_default"]))
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert plain["task"]["kind"] == task and plain["task"]["name"] == name and plain["task_name"] == name
    pbt_cfg = PbtConfig.from_mapping(plain["pbt"])
    params = current_params(plain, pbt_cfg.explore.mutation)
    assert sorted(params) == sorted(pbt_cfg.explore.mutation)
    config = plain["train"]["params"]["config"]
    envs = plain["task"]["env"]["numEnvs"]
    assert config["num_actors"] == envs and config["games_to_track"] == envs
    from pbt.rl_games.runner import minibatch_size

    assert config["minibatch_size"] == "auto"  # follows num_envs; the shipped split is kept
    assert envs * config["horizon_length"] // minibatch_size(config) == config["num_minibatches"]
    assert config["gamma"] == 0.99 and config["learning_rate"] == 3e-4 and config["lr_schedule"] == "adaptive"
    assert plain["train"]["params"]["network"]["mlp"]["units"] == [256, 128, 64]
    assert config["torch_compile"] is False


def test_isaacgym_task_yaml_defaults_list_is_composed(fake_isaacgym: Path) -> None:
    task_dir = fake_isaacgym / "isaacgymenvs" / "cfg" / "task"
    (task_dir / "FakeBall.yaml").write_text("defaults:\n  - FakeTask\n  - _self_\nname: FakeBall\nenv:\n  episodeLength: 7\n")
    cfg = isaacgym_task_config("FakeBall", {"env": {"numEnvs": 4}}, "cpu", "cpu", True, 0)
    assert cfg["name"] == "FakeBall" and "defaults" not in cfg
    assert cfg["env"] == {"numEnvs": 4, "envSpacing": 5, "episodeLength": 7}
    assert cfg["sim"]["dt"] == 0.05
    (task_dir / "Loop.yaml").write_text("defaults:\n  - Loop\n")
    with pytest.raises(TaskError, match="includes itself"):
        isaacgym_task_config("Loop", {"env": {}}, "cpu", "cpu", True, 0)
