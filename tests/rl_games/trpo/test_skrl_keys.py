"""skrl's TRPO keys on the TRPO learner: random_timesteps, learning_starts, learning-rate schedulers with
arguments (KL-adaptive, linear), time_limit_bootstrap, and the rollouts/discount_factor/lambda aliases."""
import logging
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games.trpo.settings import TrpoSettings, resolve_aliases  # noqa: E402

C = "train.params.config."


def trpo_settings(config: Dict[str, Any]) -> TrpoSettings:
    """TrpoSettings of a partial config, compile off (as every TRPO config must say: refused otherwise)."""
    return TrpoSettings.from_config({"torch_compile": False, **config})


def build(overrides: list, tmp_path: Any, name: str) -> Any:
    from test_agent import build as build_agent

    return build_agent(overrides, tmp_path / "runs", name).algo


def test_random_timesteps_act_uniformly_then_the_policy_acts(tmp_path) -> None:
    """8 envs, horizon 16: the first 20 env steps draw uniform actions, recorded with their log-probability
    under the policy; from step 20 on (the second rollout's 5th step) the policy's own samples."""
    algo = build([f"+{C}random_timesteps=20", f"+{C}learning_starts=100000"], tmp_path, "random")
    algo.model.a2c_network.sigma.data.fill_(-3.0)  # the policy's own actions: within ~0.2 of its mean
    seen = []
    original = algo.get_action_values

    def record(obs: Any) -> Dict[str, torch.Tensor]:
        res = original(obs)
        seen.append(res)
        return res

    algo.get_action_values = record
    for _ in range(2):
        algo.train_epoch()
        algo.frame += algo.curr_frames
    spread = [float((res["actions"] - res["mus"]).abs().max()) for res in seen]
    assert len(seen) == 32 and all(s > 0.5 for s in spread[:20]) and all(s < 0.5 for s in spread[20:]), spread
    first = seen[0]
    assert float(first["actions"].min()) >= -1.0 and float(first["actions"].max()) <= 1.0
    assert torch.allclose(first["neglogpacs"], algo.model.neglogp(first["actions"], first["mus"], first["sigmas"],
                                                                  torch.log(first["sigmas"])))


def test_no_update_before_learning_starts(tmp_path) -> None:
    """learning_starts=20 env steps, rollouts of 16: the first rollout (steps 1..16) updates nothing, the
    second (17..32) does."""
    algo = build([f"+{C}learning_starts=20"], tmp_path, "starts")
    before = {k: v.clone() for k, v in algo.model.state_dict().items()}
    algo.train_epoch()
    algo.frame += algo.curr_frames
    after = algo.model.state_dict()
    changed = [k for k in before if k.startswith("a2c_network") and not torch.equal(before[k], after[k])]
    assert changed == [] and algo.last_step["line_search_tries"] == 0.0
    algo.train_epoch()
    assert algo.last_step["line_search_tries"] >= 1
    assert any(not torch.equal(before[k], algo.model.state_dict()[k]) for k in before if "critic" in k or "value" in k)


def test_kl_adaptive_scheduler_with_arguments_follows_the_policy_steps_kl(tmp_path) -> None:
    algo = build([f"{C}learning_rate_scheduler=kl_adaptive", f"{C}learning_epochs=2",
                  f"+{C}learning_rate_scheduler_kwargs={{kl_threshold:0.5,max_lr:0.004,lr_factor:2.0}}"],
                 tmp_path, "kl_adaptive")
    scheduler = algo.scheduler
    assert (scheduler.kl_threshold, scheduler.max_lr, scheduler.lr_factor, scheduler.kl_factor, scheduler.min_lr) == \
        (0.5, 0.004, 2.0, 2.0, 1e-6)
    algo.train_epoch()  # a trust-region step's KL (<= max_kl_divergence 0.02) is below 0.5 / 2: the lr doubles
    assert algo.last_step["kl"] < 0.25
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.004)  # 1e-3 x 2 x 2, capped at max_lr
    assert scheduler.update(1e-3, 0.0, 0, 0, 1.5)[0] == pytest.approx(5e-4)  # above 2 x 0.5: halved
    assert scheduler.update(1e-3, 0.0, 0, 0, 0.5)[0] == 1e-3  # in between: kept


def test_the_kl_adaptive_defaults_are_rl_games_adaptive_scheduler() -> None:
    from rl_games.common.schedulers import AdaptiveScheduler

    from pbt.rl_games.trpo.schedule import build_scheduler

    ours = build_scheduler(TrpoSettings(learning_rate_scheduler="kl_adaptive"), -1, 1000)
    theirs = AdaptiveScheduler(0.008)
    for kl in (0.0, 0.003, 0.004, 0.01, 0.016, 0.02, 1.0):
        for lr in (1e-6, 3e-4, 1e-2):
            assert ours.update(lr, 0.0, 0, 0, kl) == theirs.update(lr, 0.0, 0, 0, kl)


def test_linear_scheduler_takes_its_arguments(tmp_path) -> None:
    algo = build([f"{C}learning_rate_scheduler=linear", "max_frames=1000",
                  f"+{C}learning_rate_scheduler_kwargs={{min_lr:1e-4,max_steps:4,use_epochs:true}}"], tmp_path, "lin")
    algo.epoch_num = 1
    algo.train_epoch()  # epoch 1 of 4: 3/4 of the way from 1e-3 to 1e-4 is left
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 + (1e-3 - 1e-4) * 0.75)


@pytest.mark.parametrize("kwargs, message", [
    ({"learning_rate_scheduler": "kl_adaptive", "learning_rate_scheduler_kwargs": {"kl_treshold": 0.1}},
     "kl_adaptive takes kl_threshold, .*not 'kl_treshold'.*Did you mean 'kl_threshold'"),
    ({"learning_rate_scheduler": "kl_adaptive", "learning_rate_scheduler_kwargs": {"lr_factor": 1.0}},
     "lr_factor=1.0 must be > 1"),
    ({"learning_rate_scheduler": "kl_adaptive", "learning_rate_scheduler_kwargs": {"min_lr": 0.1}},
     "min_lr .0.1. must be below max_lr"),
    ({"learning_rate_scheduler": "linear", "learning_rate_scheduler_kwargs": {"max_steps": 0}}, "max_steps=0"),
    ({"learning_rate_scheduler_kwargs": {"min_lr": 1e-4}}, "none takes no arguments"),
    ({"learning_rate_scheduler_kwargs": 0.1}, "must be a mapping"),
    ({"random_timesteps": -1}, "random_timesteps=-1 must be >= 0"),
    ({"learning_starts": 1.5}, "learning_starts=1.5 must be a whole number"),
    ({"time_limit_bootstrap": "yes"}, "time_limit_bootstrap='yes' must be True or False"),
])
def test_bad_skrl_keys_are_refused_naming_the_key(kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        trpo_settings(kwargs)


def test_time_limit_bootstrap_is_rl_games_value_bootstrap(tmp_path) -> None:
    config = {"num_actors": 4, "horizon_length": 8}
    assert trpo_settings({"time_limit_bootstrap": False}).rl_games_config(config)["value_bootstrap"] is False
    assert "value_bootstrap" not in trpo_settings({}).rl_games_config(config)
    with pytest.raises(ConfigError, match="time_limit_bootstrap=False and its rl_games name .*value_bootstrap=True"):
        trpo_settings({"time_limit_bootstrap": False}).rl_games_config({**config, "value_bootstrap": True})
    assert build([f"{C}time_limit_bootstrap=False"], tmp_path, "no_bootstrap").value_bootstrap is False
    assert build([], tmp_path, "bootstrap").value_bootstrap is True  # the shipped TRPO configs bootstrap


def test_skrl_names_are_aliases_with_a_note() -> None:
    config = {"rollouts": 16, "discount_factor": 0.99, "lambda": 0.9, "horizon_length": 32, "gamma": 0.95}
    notes = resolve_aliases(config)
    assert config == {"horizon_length": 16, "gamma": 0.99, "tau": 0.9}
    assert f"{C}rollouts=16 is skrl's name of rl_games' horizon_length: {C}horizon_length=16 (instead of the " \
        "train config's 32)" in notes
    assert any(f"{C}lambda=0.9 is skrl's name of rl_games' tau" in n for n in notes)
    # A value given on the command line (as a PBT restart gives its own) is not replaced by the alias.
    config = {"discount_factor": 0.99, "gamma": 0.97}
    notes = resolve_aliases(config, explicit=["gamma"])
    assert config == {"gamma": 0.97} and "is not used" in notes[0]
    with pytest.raises(ConfigError, match="rollouts=0 .horizon_length. must be a whole number"):
        resolve_aliases({"rollouts": 0})


def test_skrl_2_gae_lambda_is_tau_and_refused_beside_lambda() -> None:
    config = {"gae_lambda": 0.92, "tau": 0.95}
    notes = resolve_aliases(config)
    assert config == {"tau": 0.92} and f"{C}gae_lambda=0.92 is skrl's name of rl_games' tau" in notes[0]
    with pytest.raises(ConfigError, match="lambda and .*gae_lambda are both given"):
        resolve_aliases({"lambda": 0.9, "gae_lambda": 0.92})


def test_aliases_reach_the_agent_through_the_run_config(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pbt.rl_games.runner"):
        algo = build([f"+{C}rollouts=8", f"+{C}discount_factor=0.98", f"+{C}lambda=0.9"], tmp_path, "aliases")
    assert (algo.horizon_length, algo.gamma, algo.tau) == (8, 0.98, 0.9)
    assert any("rollouts=8 is skrl's name of rl_games' horizon_length" in r.getMessage() for r in caplog.records)
