"""What each kind of task declares about its reward (pbt.tasks.registry.reward_shaping)."""
import sys
from pathlib import Path

import pytest

from pbt.errors import TaskError
from pbt.tasks.registry import TaskRef, parse_task, reward_shaping


def test_builtins_declare_their_reward_shaping_keys() -> None:
    pytest.importorskip("torch")
    reacher = reward_shaping(parse_task("Reacher"))
    assert reacher.keys == ("task.env.actionCost", "task.env.distanceCost") and reacher.reports_true_objective
    cartpole = reward_shaping(parse_task("Cartpole"))
    assert cartpole.shapes("task.env.actionCost") and cartpole.reports_true_objective
    pendulum = reward_shaping(parse_task("Pendulum"))  # a fixed reward, no true_objective
    assert pendulum.keys == () and not pendulum.reports_true_objective


def test_a_user_task_declares_them_as_class_attributes(tmp_path: Path) -> None:
    (tmp_path / "shaped_task.py").write_text(
        "class Declared:\n    reward_shaping_keys = ('task.env.ctrlCost', 'task.env.bonus*')\n"
        "    reports_true_objective = True\n\n"
        "class Silent:\n    pass\n\n"
        "class Wrong:\n    reward_shaping_keys = 'task.env.ctrlCost'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        declared = reward_shaping(parse_task("shaped_task:Declared"))
        assert declared.shapes("task.env.ctrlCost") and declared.shapes("task.env.bonusReach")
        assert declared.reports_true_objective
        silent = reward_shaping(parse_task("shaped_task:Silent"))
        assert silent.keys == () and not silent.reports_true_objective
        with pytest.raises(TaskError, match="reward_shaping_keys must be a sequence of config keys"):
            reward_shaping(parse_task("shaped_task:Wrong"))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("shaped_task", None)


def test_families_declare_their_reward_keys_by_name() -> None:
    ant = reward_shaping(TaskRef("isaacgym", "Ant"))
    assert all(ant.shapes(f"task.env.{k}") for k in ("headingWeight", "upWeight", "actionsCost", "deathCost"))
    assert not ant.shapes("task.env.dofVelocityScale") and not ant.reports_true_objective
    kuka = reward_shaping(TaskRef("isaacgym", "AllegroKukaLSTM"))
    assert kuka.shapes("task.env.fingertipDeltaRewScale") and kuka.shapes("task.env.liftingBonus")
    assert kuka.reports_true_objective  # DexPBT's AllegroKuka reports successes as true_objective
    shadow = reward_shaping(TaskRef("isaacgym", "ShadowHand"))
    assert shadow.shapes("task.env.distRewardScale") and shadow.shapes("task.env.fallPenalty")
    lab = reward_shaping(TaskRef("isaaclab", "Isaac-Cartpole-Direct"))
    assert lab.shapes("task.env.rew_scale_alive") and lab.shapes("task.env.rewards.pole_pos.weight")
    assert reward_shaping(TaskRef("envpool", "Ant-v4")).shapes("task.env.kwargs.ctrl_cost_weight")
