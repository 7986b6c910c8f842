"""IsaacGymEnvs' ``task/<group>=<option>`` (``task=AllegroKukaLSTM task/env=regrasping``): the task
YAML's own config groups composed as Hydra composes them in IsaacGymEnvs, the spelling rewritten
before Hydra runs, and every refusal. Isaac Gym cannot run here: the fake isaacgymenvs of
test_task_registry stands in (its cfg/task/ holds the YAMLs)."""

from pathlib import Path

import pytest

from conftest import REPO
from pbt.errors import TaskError
from pbt.tasks.isaacgym import isaacgym_task_config
from pbt.tasks.registry import rewrite_task_overrides
from test_task_registry import fake_isaacgym  # noqa: F401  (the fixture)

# Shaped like IsaacGymEnvs' AllegroKuka.yaml (_self_ first, then the env group) and
# AllegroKukaLSTM.yaml (the base task as a sibling default).
KUKA = """defaults:
  - _self_
  - env: reorientation
name: FakeKuka
env:
  subtask: ""
  numEnvs: ${resolve_default:8192,${...num_envs}}
  episodeLength: 600
  successSteps: 1
sim:
  dt: 0.01667
"""
KUKA_LSTM = "defaults:\n  - FakeKuka\n  - _self_\nname: FakeKukaLSTM\nenv:\n  envSpacing: 2\n"
OPTIONS = {
    "reorientation": 'subtask: "reorientation"\n',
    "regrasping": 'subtask: "regrasping"\nepisodeLength: 300\nsuccessSteps: 30\n',
    "throw": 'subtask: "throw"\n',
}


@pytest.fixture
def kuka(fake_isaacgym: Path) -> Path:  # noqa: F811
    task_dir = fake_isaacgym / "isaacgymenvs" / "cfg" / "task"
    (task_dir / "FakeKuka.yaml").write_text(KUKA)
    (task_dir / "FakeKukaLSTM.yaml").write_text(KUKA_LSTM)
    (task_dir / "env").mkdir()
    for name, text in OPTIONS.items():
        (task_dir / "env" / f"{name}.yaml").write_text(text)
    return task_dir


def build(name: str, groups: dict) -> dict:
    return isaacgym_task_config(name, {"env": {"numEnvs": 4}, "groups": groups}, "cpu", "cpu", True, 0)


def test_the_default_option_of_a_group_is_composed_under_its_key(kuka: Path) -> None:
    cfg = build("FakeKuka", {})
    assert cfg["env"] == {"subtask": "reorientation", "numEnvs": 4, "episodeLength": 600, "successSteps": 1}
    assert "groups" not in cfg and "defaults" not in cfg


def test_a_chosen_option_replaces_the_default_through_a_sibling_task(kuka: Path) -> None:
    cfg = build("FakeKukaLSTM", {"env": "regrasping"})
    assert cfg["name"] == "FakeKukaLSTM"
    assert cfg["env"] == {
        "subtask": "regrasping",
        "numEnvs": 4,
        "episodeLength": 300,
        "successSteps": 30,
        "envSpacing": 2,
    }
    # our own +task.env.* overrides still win over the group's option
    mine = isaacgym_task_config(
        "FakeKuka", {"env": {"numEnvs": 4, "episodeLength": 77}, "groups": {"env": "throw"}}, "cpu", "cpu", True, 0
    )
    assert mine["env"]["subtask"] == "throw" and mine["env"]["episodeLength"] == 77


def test_an_unknown_option_names_the_options(kuka: Path) -> None:
    with pytest.raises(
        TaskError,
        match=r"task/env=regrasp: no .*Did you mean 'regrasping'\?.*"
        r"Options: regrasping, reorientation, throw\.",
    ):
        build("FakeKuka", {"env": "regrasp"})


def test_a_group_the_task_does_not_have_is_refused(kuka: Path) -> None:
    with pytest.raises(
        TaskError, match=r"task/robot=x: isaacgym/FakeKuka has no 'robot' config group.*Its groups: env\."
    ):
        build("FakeKuka", {"robot": "x"})
    with pytest.raises(TaskError, match=r"task/env=throw: isaacgym/FakeTask has no 'env'.*Its groups: none\."):
        build("FakeTask", {"env": "throw"})


def test_isaacgymenvs_spelling_is_rewritten_and_refused_without_an_isaacgym_task() -> None:
    assert rewrite_task_overrides(["task/env=regrasping", "task=isaacgym/AllegroKukaLSTM"]) == [
        "task=isaacgym",
        "task.name=AllegroKukaLSTM",
        "++task.groups.env=regrasping",
    ]
    for argv in (["task=Pendulum", "task/env=regrasping"], ["task/env=regrasping"]):
        with pytest.raises(TaskError, match="task/env=regrasping: .*needs an Isaac Gym task.*task=isaacgym/<Name>"):
            rewrite_task_overrides(argv)
    with pytest.raises(TaskError, match="plain names"):
        rewrite_task_overrides(["task=isaacgym/Ant", "task/env=../x"])


def test_the_rewritten_override_composes_into_the_task_config() -> None:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.resolvers import register_resolvers

    register_resolvers()
    overrides = rewrite_task_overrides(["task=isaacgym/AllegroKukaLSTM", "task/env=regrasping"])
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    task = OmegaConf.to_container(cfg.task, resolve=True)
    assert task["name"] == "AllegroKukaLSTM" and task["groups"] == {"env": "regrasping"}
