"""The guard on reward-shaping mutation (pbt/mutation/shaping.py): pure checks."""
import pytest

from pbt.config import PbtConfig
from pbt.errors import ConfigError, PbtError
from pbt.mutation.shaping import RewardShaping, check_reward_shaping

REACHER = RewardShaping("Reacher", ("task.env.actionCost",), reports_true_objective=True)
NO_OBJECTIVE = RewardShaping("Pointmass", ("task.env.actionCost",), reports_true_objective=False)
LAB = RewardShaping("isaaclab/Isaac-Ant-Direct", ("task.env.rewards.*.weight", "task.env.rew_scale_*"))
SCHEME = ["task.env.actionCost", "train.params.config.learning_rate"]


def test_mutating_a_shaping_key_while_ranking_by_the_shaped_return_is_refused_saying_how_to_go_on() -> None:
    with pytest.raises(PbtError) as info:
        check_reward_shaping(SCHEME, "episode_return", REACHER, allow=False)
    message = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert "task.env.actionCost" in message and "pbt.objective=episode_return is the episode return" in message
    assert "pbt.objective=true_objective (task Reacher reports its own objective)" in message
    assert "pbt.objective=episode.<key>" in message and "pbt.allow_reward_shaping_mutation=true" in message


def test_true_objective_is_the_shaped_return_only_when_the_task_does_not_report_it() -> None:
    assert check_reward_shaping(SCHEME, "true_objective", REACHER, allow=False) == ["task.env.actionCost"]
    with pytest.raises(ConfigError, match="which task Pointmass does not report, falls back to the episode return"):
        check_reward_shaping(SCHEME, "true_objective", NO_OBJECTIVE, allow=False)
    for objective in ("episode.success", "episode_length"):
        assert check_reward_shaping(SCHEME, objective, NO_OBJECTIVE, allow=False) == ["task.env.actionCost"]


def test_the_override_accepts_the_risk_and_other_keys_are_never_refused() -> None:
    assert check_reward_shaping(SCHEME, "episode_return", NO_OBJECTIVE, allow=True) == ["task.env.actionCost"]
    assert check_reward_shaping(["train.params.config.learning_rate", "train.params.config.reward_shaper.scale_value"],
                                "episode_return", NO_OBJECTIVE, allow=False) == []


def test_patterns_match_isaac_lab_reward_weights_and_scales() -> None:
    assert LAB.shapes("task.env.rewards.alive.weight") and LAB.shapes("task.env.rew_scale_Terminated")
    assert not LAB.shapes("task.env.episode_length_s") and not LAB.shapes("task.env.rewards.alive.params")
    with pytest.raises(ConfigError, match="rewards.alive.weight"):
        check_reward_shaping(["task.env.rewards.alive.weight"], "true_objective", LAB, allow=False)


def test_the_override_key_is_a_pbt_key() -> None:
    assert PbtConfig.from_mapping({"allow_reward_shaping_mutation": True}).allow_reward_shaping_mutation
    assert PbtConfig.from_mapping({}).allow_reward_shaping_mutation is False
