"""The TRPO agent built by pbt.rl_games.runner on the real Pendulum: the GAE path it uses equals a plain
reference loop (time-outs included), one update stays inside the trust region (checked independently)
or leaves the policy untouched, the value function is fitted, every in-place key applies and reads
back, a checkpoint round-trips, and bad settings are refused before training."""
import copy
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from conftest import compose_config

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games import make_adapter  # noqa: E402
from pbt.rl_games.agent import CONFIG  # noqa: E402
from pbt.rl_games.trpo import optim  # noqa: E402
from pbt.rl_games.trpo.adapter import TrpoAdapter  # noqa: E402

COMMON = ["task=Pendulum", "train=PendulumTRPO", "num_envs=8", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
          "train.params.config.horizon_length=16", "train.params.network.mlp.units=[16,16]"]

#: A new value for every key the TRPO agent changes in place (each differs from PendulumTRPO's).
NEW_VALUES: Dict[str, Any] = {
    CONFIG + "max_kl_divergence": 0.005, CONFIG + "damping": 0.05, CONFIG + "conjugate_gradient_steps": 7,
    CONFIG + "conjugate_gradient_tolerance": 1e-8, CONFIG + "max_backtrack_steps": 6, CONFIG + "accept_ratio": 0.3,
    CONFIG + "step_fraction": 0.8, CONFIG + "fisher_sample_fraction": 0.5, CONFIG + "value_learning_rate": 3e-4, CONFIG + "learning_epochs": 3,
    CONFIG + "value_loss_scale": 0.5, CONFIG + "grad_norm_clip": 0.7, CONFIG + "gamma": 0.97, CONFIG + "tau": 0.9,
    CONFIG + "reward_shaper.scale_value": 0.3,
}


def build(overrides: List[str], train_dir: Any, name: str = "trpo") -> SimpleNamespace:
    from pbt.rl_games.runner import build_runner, create_agent

    cfg = compose_config([*COMMON, *overrides, f"train_dir={train_dir}", f"experiment={name}"])
    runner = build_runner(cfg)
    algo = create_agent(runner, name)
    algo.init_tensors()
    algo.obs = algo.env_reset()
    return SimpleNamespace(algo=algo, name=runner.algo_name, cfg=cfg)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return build([], tmp_path_factory.mktemp("trpo") / "runs")


def test_the_gae_path_equals_a_reference_loop_with_time_outs(tmp_path) -> None:
    algo = build(["task.env.episodeLength=5", "train.params.config.gamma=0.9", "train.params.config.tau=0.8"],
                 tmp_path / "runs", "gae").algo
    record: Dict[str, List[torch.Tensor]] = {"values": [], "rewards": [], "dones": [], "time_outs": [], "last": []}
    get_action_values, env_step, get_values = algo.get_action_values, algo.env_step, algo.get_values

    def action_values(obs: Any) -> Dict[str, torch.Tensor]:
        res = get_action_values(obs)
        record["values"].append(res["values"][:, 0].clone())
        return res

    def step(actions: torch.Tensor) -> Any:
        obs, rewards, dones, infos = env_step(actions)
        record["rewards"].append(rewards.reshape(-1).clone())
        record["dones"].append(dones.reshape(-1).float().clone())
        record["time_outs"].append(infos["time_outs"].reshape(-1).float().clone())
        return obs, rewards, dones, infos

    def values(obs: Any) -> torch.Tensor:
        out = get_values(obs)
        record["last"].append(out[:, 0].clone())
        return out

    algo.get_action_values, algo.env_step, algo.get_values = action_values, step, values
    with torch.no_grad():
        batch = algo.play_steps()
    v, r, d, to = (torch.stack(record[k]) for k in ("values", "rewards", "dones", "time_outs"))
    assert to.sum() > 0 and (d >= to).all()  # time-outs happened, and they end episodes
    horizon, gamma, lam, scale = v.shape[0], 0.9, 0.8, 0.1
    returns = torch.zeros_like(v)
    for env in range(v.shape[1]):
        adv = 0.0
        for t in reversed(range(horizon)):
            reward = scale * r[t, env] + gamma * v[t, env] * to[t, env]  # a cut episode bootstraps its value
            next_value = record["last"][0][env] if t == horizon - 1 else v[t + 1, env]
            alive = 1.0 - d[t, env]
            adv = reward + gamma * alive * next_value - v[t, env] + gamma * lam * alive * adv
            returns[t, env] = adv + v[t, env]
    # rl_games flattens env-major: env 0's steps, then env 1's, ...
    assert torch.allclose(batch["returns"].reshape(-1), returns.T.reshape(-1), atol=1e-5)


def _policy_stats(algo: Any, data: Dict[str, Any]) -> Any:
    with torch.no_grad():
        res = algo._forward(data)
    return res["mus"], res["sigmas"]


@pytest.mark.parametrize("accept_ratio, backtracks", [(0.5, 10), (0.999, 1)])
def test_one_update_stays_in_the_trust_region_or_keeps_the_policy(agent: SimpleNamespace, accept_ratio: float,
                                                                   backtracks: int) -> None:
    algo = agent.algo
    adapter = make_adapter(algo, "trpo")
    adapter.set_hyperparameters({CONFIG + "accept_ratio": accept_ratio, CONFIG + "max_backtrack_steps": backtracks})
    before = copy.deepcopy(algo.model.state_dict())
    policy_before = optim.flat(algo.policy_params).detach().clone()
    value_before = optim.flat(algo.value_params).detach().clone()
    result = algo.train_epoch()
    data = algo.dataset.values_dict
    new_mu, new_sigma = _policy_stats(algo, data)
    # The old policy under the normaliser the update used: the new state with the old policy weights.
    old_state = {k: (before[k] if not k.startswith("running_mean_std") and not k.startswith("value_mean_std") else v)
                 for k, v in algo.model.state_dict().items()}
    new_state = copy.deepcopy(algo.model.state_dict())
    algo.model.load_state_dict(old_state)
    old_mu, old_sigma = _policy_stats(algo, data)
    algo.model.load_state_dict(new_state)
    kl = float(optim.gaussian_kl(old_mu, old_sigma, new_mu, new_sigma).mean())
    policy_after = optim.flat(algo.policy_params).detach()
    if algo.last_step["accepted"]:
        assert 0.0 < kl < algo.trpo.max_kl_divergence
        assert kl == pytest.approx(algo.last_step["kl"], rel=1e-4)
        assert algo.last_step["surrogate_gain"] > 0
    else:
        assert torch.equal(policy_after, policy_before)  # restored
    assert (accept_ratio, bool(algo.last_step["accepted"])) != (0.5, False), algo.last_step  # the normal case steps
    assert not torch.equal(optim.flat(algo.value_params).detach(), value_before)  # the value function was fitted
    value_losses = result[5]
    assert len(value_losses) == algo.mini_epochs_num * len(algo.dataset)
    adapter.set_hyperparameters({CONFIG + "accept_ratio": 0.5, CONFIG + "max_backtrack_steps": 10})


def test_every_inplace_key_applies_and_reads_back(agent: SimpleNamespace) -> None:
    algo = agent.algo
    adapter = make_adapter(algo, "trpo")
    assert type(adapter) is TrpoAdapter and agent.name == "trpo"
    assert set(adapter.inplace_keys()) == set(NEW_VALUES)
    assert adapter.rebuild_keys({CONFIG + "mini_batches": 2, CONFIG + "horizon_length": 8}) == \
        [CONFIG + "horizon_length", CONFIG + "mini_batches"]
    saved = {key: adapter.read(key) for key in NEW_VALUES}
    for key in NEW_VALUES:
        assert adapter.read(key) != pytest.approx(NEW_VALUES[key]), key
    adapter.set_hyperparameters(NEW_VALUES)
    for key in NEW_VALUES:
        assert adapter.read(key) == pytest.approx(NEW_VALUES[key], rel=1e-6), key
    # Where the update reads them.
    assert algo.trpo.max_kl_divergence == 0.005 and algo.mini_epochs_num == 3 and algo.critic_coef == 0.5
    assert algo.grad_norm == 0.7 and algo.truncate_grads and algo.last_lr == 3e-4
    algo.train_epoch()
    for key in NEW_VALUES:
        assert adapter.read(key) == pytest.approx(NEW_VALUES[key], rel=1e-6), key
    with pytest.raises(ConfigError, match="max_kl_divergence=-0.1 must be > 0"):
        adapter.set_hyperparameters({CONFIG + "max_kl_divergence": -0.1})
    assert algo.trpo.max_kl_divergence == 0.005  # refused: unchanged
    adapter.set_hyperparameters(saved)
    assert not adapter.nonfinite_weights()


def test_checkpoint_round_trip_and_donor_keeps_the_members_lr(agent: SimpleNamespace) -> None:
    algo = agent.algo
    adapter = make_adapter(algo, "trpo")
    state = copy.deepcopy(adapter.full_state())
    assert adapter.state_problem(state, counts=True) is None
    assert set(state["optimizer"]["state"]) == set(range(len(algo.value_params)))  # the value optimizer's
    fingerprint = adapter.fingerprint()
    with torch.no_grad():
        for p in algo.model.parameters():
            p.add_(0.25)
    adapter.set_hyperparameters({CONFIG + "value_learning_rate": 2e-4})
    state["optimizer"]["param_groups"][0]["lr"] = 9e-3
    adapter.load_weights(state)
    assert adapter.fingerprint() == fingerprint and adapter.learning_rate() == pytest.approx(2e-4)
    adapter.restore(state, {"value_learning_rate": 5e-4})
    assert adapter.fingerprint() == fingerprint and adapter.learning_rate() == pytest.approx(5e-4)


def test_a_change_carries_the_value_rate_the_kl_adaptive_schedule_found(tmp_path) -> None:
    """Under ``learning_rate_scheduler=kl_adaptive`` the value learning rate in force is schedule
    state, as PPO's adaptive rate: a mutation continues at the member's own rate and a replace at the
    donor's, scaled as the decision scales ``value_learning_rate``; a restore keeps the checkpoint's
    (a restart's copy holds the carried rate); every change is sent to the other ranks."""
    from pbt.rl_games.exploit import Exploiter

    algo = build([CONFIG + "learning_rate_scheduler=kl_adaptive"], tmp_path / "runs", "klad").algo
    adapter = make_adapter(algo, "trpo")
    assert adapter.adaptive_rate() and adapter.rate_key == CONFIG + "value_learning_rate"
    lr = adapter.rate_key
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace", policy_idx=0), last_iteration=3,
                             params={lr: 1e-3}, network=None)
    exploiter = Exploiter(member, adapter, score=SimpleNamespace(reset=lambda: None, note_change=lambda: None))  # type: ignore[arg-type]
    adapter.put_rate(4e-3)  # where the schedule moved this member
    generation = algo.generation
    mutate = SimpleNamespace(action="mutate", donor=None, reason="r", params_before={lr: 1e-3},
                             params_after={lr: 1.2e-3}, network=None)
    exploiter.exploit_inplace(mutate)  # type: ignore[arg-type]
    assert algo.last_lr == pytest.approx(4.8e-3) and adapter.learning_rate() == pytest.approx(4.8e-3)
    assert algo.generation > generation

    donor_state = copy.deepcopy(adapter.full_state())
    donor_state["optimizer"]["param_groups"][0]["lr"] = 2e-4
    member.workspace = SimpleNamespace(load_checkpoint=lambda record: donor_state)
    donor = SimpleNamespace(policy_idx=1, params={lr: 5e-4}, checksum="c")
    replace = SimpleNamespace(action="replace", donor=donor, reason="r", params_before={lr: 1.2e-3},
                              params_after={lr: 4e-4}, network=None)
    exploiter.exploit_inplace(replace)  # type: ignore[arg-type]
    assert algo.last_lr == pytest.approx(1.6e-4)  # the donor's 2e-4 x (4e-4 / 5e-4)

    adapter.write_rate(donor_state, 3e-3)  # as a restart writes the carried rate into its copy
    adapter.restore(donor_state, {"value_learning_rate": 5e-4})
    assert algo.last_lr == pytest.approx(3e-3) and adapter.learning_rate() == pytest.approx(3e-3)
    adapter.write_rate(donor_state, 5.0)  # a peer's rate is kept within the schedule's bounds
    assert donor_state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(algo.scheduler.max_lr)


@pytest.mark.parametrize("override, message", [
    ("train.params.config.mini_batches=7", "mini_batches=7 does not split the batch"),
    ("train.params.network.separate=False", "needs separate actor and critic networks"),
    ("train.params.config.max_kl_divergence=0", "max_kl_divergence=0.0 must be > 0"),
    ("train.params.config.learning_rate_scheduler=cosine", "learning_rate_scheduler='cosine' must be one of none"),
    ("+train.params.config.max_kl_divergense=0.1", "Did you mean 'train.params.config.max_kl_divergence'"),
])
def test_bad_settings_are_refused_before_training(tmp_path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("'", "'")):
        build([override], tmp_path / "runs", "bad")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_update_unrolls_the_stored_sequences(tmp_path, cell: str) -> None:
    """The KL and Fisher products of a recurrent policy are taken on the distributions the policy acted
    with: the batch forward, unrolled from each sequence's stored state (resets inside sequences
    included), reproduces the rollout's mu and sigma exactly; zeroed states would not."""
    algo = build(["task.env.observeVelocity=False", "task.env.episodeLength=12", "train.params.config.seq_length=8",
                  f"+train.params.network.rnn={{name:{cell},units:16,layers:1}}"], tmp_path / "runs", "rnn").algo
    assert algo.is_rnn and algo.obs_shape == (2,)
    algo.train_epoch()
    policy_before = optim.flat(algo.policy_params).detach().clone()
    algo.set_eval()
    with torch.no_grad():
        batch = algo.play_steps_rnn()
    algo.prepare_dataset(batch)
    data = algo.dataset.values_dict
    mu, sigma = _policy_stats(algo, data)
    assert torch.equal(mu, data["mu"]) and torch.equal(sigma, data["sigma"])
    zeroed = {**data, "rnn_states": [torch.zeros_like(s) for s in data["rnn_states"]]}
    assert not torch.allclose(_policy_stats(algo, zeroed)[0], data["mu"], atol=1e-3)
    algo.set_train()
    algo.update_policy(data)
    if algo.last_step["accepted"]:
        new_mu, new_sigma = _policy_stats(algo, data)
        kl = float(optim.gaussian_kl(mu, sigma, new_mu, new_sigma).mean())
        assert 0.0 < kl < algo.trpo.max_kl_divergence and kl == pytest.approx(algo.last_step["kl"], rel=1e-4)
    else:
        assert torch.equal(optim.flat(algo.policy_params).detach(), policy_before)


@pytest.mark.parametrize("recurrent", [False, True])
def test_fisher_products_on_a_subsample_keep_samples_and_sequences_whole(tmp_path, recurrent: bool) -> None:
    """fisher_sample_fraction=0.25: the Fisher products see every 4th sample (recurrent: every 4th whole
    sequence, with its stored state, so it replays exactly what was played); the update still keeps
    the KL bound on the whole batch."""
    extra = (["task.env.episodeLength=12", "train.params.config.seq_length=8",
              "+train.params.network.rnn={name:gru,units:16,layers:1}"] if recurrent else [])
    algo = build(["train.params.config.fisher_sample_fraction=0.25", *extra], tmp_path / "runs", "sub").algo
    assert algo.trpo.fisher_stride() == 4
    algo.set_eval()
    with torch.no_grad():
        batch = algo.play_steps_rnn() if recurrent else algo.play_steps()
    algo.prepare_dataset(batch)
    data = algo.dataset.values_dict
    sub = algo._every(data, 4)
    expected = (data["mu"].reshape(-1, 8, 1)[::4].reshape(-1, 1) if recurrent else data["mu"][::4])
    assert sub["obs"].shape[0] == data["obs"].shape[0] // 4
    assert torch.equal(_policy_stats(algo, {**sub, "actions": sub["actions"]})[0], expected)
    mu, sigma = _policy_stats(algo, data)
    algo.set_train()
    algo.update_policy(data)
    assert algo.last_step["accepted"] == 1.0, algo.last_step
    new_mu, new_sigma = _policy_stats(algo, data)
    kl = float(optim.gaussian_kl(mu, sigma, new_mu, new_sigma).mean())
    assert 0.0 < kl < algo.trpo.max_kl_divergence
