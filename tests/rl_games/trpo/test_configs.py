"""Every shipped TRPO train config composes into valid TRPO settings, and the built-in tasks' ones
build an agent that runs an update; the linear value learning-rate schedule decays."""
from typing import Any, Dict

import pytest

from conftest import REPO

pytest.importorskip("torch")

from pbt.rl_games.trpo.settings import TrpoSettings  # noqa: E402

TRPO_CONFIGS = sorted(p.stem for p in (REPO / "configs" / "train").glob("*TRPO.yaml"))


def compose(overrides: list) -> Dict[str, Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=rewrite_task_overrides(overrides))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def test_the_generic_and_per_task_configs_are_shipped() -> None:
    assert {"PendulumTRPO", "CartpoleTRPO", "ReacherTRPO", "importedTRPO", "envpoolTRPO", "isaacgymTRPO"} \
        <= set(TRPO_CONFIGS)


@pytest.mark.parametrize("name", TRPO_CONFIGS)
def test_each_trpo_config_composes_into_valid_settings(name: str) -> None:
    plain = compose(["task=Pendulum", f"train={name}"])
    params = plain["train"]["params"]
    assert params["algo"]["name"] == "trpo" and params["network"]["separate"] is True
    config = dict(params["config"], num_actors=plain["task"]["env"]["numEnvs"])
    settings = TrpoSettings.from_config(config)
    derived = settings.rl_games_config(config)
    assert derived["minibatch_size"] * settings.mini_batches == config["num_actors"] * config["horizon_length"]


@pytest.mark.parametrize("task", ["Cartpole", "Reacher"])
def test_the_builtin_task_configs_build_and_update(tmp_path, task: str) -> None:
    from test_agent import build

    algo = build([f"task={task}", f"train={task}TRPO"], tmp_path / "runs", task.lower()).algo
    algo.train_epoch()
    assert algo.last_step["line_search_tries"] >= 1 and algo.trpo.max_kl_divergence == 0.01


def test_linear_schedule_decays_the_value_learning_rate(tmp_path) -> None:
    from test_agent import build

    algo = build(["train.params.config.learning_rate_scheduler=linear", "max_frames=1000"], tmp_path / "runs",
                 "linear").algo
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    algo.frame = 500  # half way: rl_games' linear schedule uses the frame count
    algo.train_epoch()
    # rl_games' linear schedule runs from the learning rate down to its floor of 1e-6.
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-6 + (1e-3 - 1e-6) * 0.5, rel=1e-9)


def test_trpo_keys_under_another_learner_are_refused() -> None:
    """rl_games would ignore them without a word; the error names the learner and how to choose TRPO."""
    from pbt.errors import ConfigError
    from pbt.rl_games.runner import refuse_other_learners_keys

    ppo = {"train": {"params": {"algo": {"name": "a2c_continuous"},
                                "config": {"gamma": 0.99, "max_kl_divergence": 0.02, "damping": 0.1}}}}
    with pytest.raises(ConfigError) as info:
        refuse_other_learners_keys(ppo)
    message = str(info.value)
    assert message.startswith("train.params.config.damping is a setting of the TRPO learner")
    assert "the learner is a2c_continuous" in message and "train=PendulumTRPO" in message
    assert "damping, max_kl_divergence" in message
    trpo = {"train": {"params": {"algo": {"name": "trpo"}, "config": {"max_kl_divergence": 0.02}}}}
    refuse_other_learners_keys(trpo)
    refuse_other_learners_keys({"train": {"params": {"algo": {"name": "a2c_continuous"}, "config": {"gamma": 0.9}}}})
