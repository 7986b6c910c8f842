"""The agent adapters on real rl_games agents built through pbt.rl_games.runner: every in-place key
applies and reads back on a continuous (Pendulum) and a discrete PPO agent, the discrete one sends
bounds_loss_coef to a rebuild, donor weights load keeping the member's counters and learning rate,
a change (in place or by a restart) carries the rate the adaptive schedule found, and an unknown algo
falls back to exec-only."""
import copy
import math
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games import (  # noqa: E402
    AgentAdapter,
    ContinuousPpoAdapter,
    DiscretePpoAdapter,
    adapter_class,
    make_adapter,
    register_adapter,
)
from pbt.rl_games.agent import CONFIG  # noqa: E402

#: A new value for every key either PPO agent can change in place (each differs from the configs').
NEW_VALUES: Dict[str, Any] = {
    CONFIG + "learning_rate": 2.5e-4, CONFIG + "gamma": 0.97, CONFIG + "tau": 0.9, CONFIG + "e_clip": 0.15,
    CONFIG + "entropy_coef": 0.003, CONFIG + "critic_coef": 1.5, CONFIG + "grad_norm": 0.7,
    CONFIG + "mini_epochs": 3, CONFIG + "kl_threshold": 0.02, CONFIG + "reward_shaper.scale_value": 0.3,
    CONFIG + "bounds_loss_coef": 0.0005,
}
BOUNDS = CONFIG + "bounds_loss_coef"

DISCRETE_TASK = textwrap.dedent('''
    from rl_games.common.gym_compat import gym

    from pbt.tasks.cartpole import Cartpole


    class DiscreteCartpole(Cartpole):
        """Cartpole pushed left or right with full force: a discrete action space."""

        action_space = gym.spaces.Discrete(2)

        def step(self, actions):
            return super().step((actions.reshape(-1, 1).float() * 2.0 - 1.0))
''')

COMMON = ["num_envs=16", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
          "train.params.config.horizon_length=16", "train.params.config.minibatch_size=256"]
DISCRETE = ["task=disc_task:DiscreteCartpole", "train.params.algo.name=a2c_discrete",
            "train.params.model.name=discrete_a2c", "~train.params.network.space.continuous",
            "+train.params.network.space.discrete={}"]


def build(overrides: List[str], train_dir: Any) -> SimpleNamespace:
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.rl_games.runner import build_runner, create_agent
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=rewrite_task_overrides(
            [*overrides, *COMMON, f"train_dir={train_dir}", "experiment=adapter"]))
    runner = build_runner(cfg)
    algo = create_agent(runner, "adapter")
    return SimpleNamespace(algo=algo, name=runner.algo_name, cfg=cfg)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, SimpleNamespace]:
    root = tmp_path_factory.mktemp("adapters")
    (root / "disc_task.py").write_text(DISCRETE_TASK)
    sys.path.insert(0, str(root))
    try:
        return {"a2c_continuous": build(["task=Pendulum"], root / "runs"),
                "a2c_discrete": build(DISCRETE, root / "runs")}
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("name, cls", [("a2c_continuous", ContinuousPpoAdapter), ("a2c_discrete", DiscretePpoAdapter)])
def test_every_inplace_key_applies_and_reads_back(built: Dict[str, SimpleNamespace], name: str, cls: type) -> None:
    algo = built[name].algo
    assert built[name].name == name and type(algo).__name__ == ("A2CAgent" if name == "a2c_continuous"
                                                                    else "DiscreteA2CAgent")
    agent = make_adapter(algo, name)
    assert type(agent) is cls
    expected = set(NEW_VALUES) - ({BOUNDS} if name == "a2c_discrete" else set())
    assert set(agent.inplace_keys()) == expected
    for key in expected:
        assert agent.read(key) != pytest.approx(NEW_VALUES[key]), key  # the test changes every value
    agent.set_hyperparameters({k: NEW_VALUES[k] for k in expected})
    for key in expected:
        assert agent.read(key) == pytest.approx(NEW_VALUES[key], rel=1e-6), key
    # Where rl_games actually reads them: the minibatch lr, the epoch loop, the adaptive schedule.
    assert algo.last_lr == pytest.approx(2.5e-4) and isinstance(algo.mini_epochs_num, int)
    assert algo.scheduler.kl_threshold == pytest.approx(0.02)
    # One real epoch with them: nothing resets the values that no schedule moves.
    algo.init_tensors()
    algo.obs = algo.env_reset()
    algo.train_epoch()
    for key in expected - {CONFIG + "learning_rate"}:
        assert agent.read(key) == pytest.approx(NEW_VALUES[key], rel=1e-6), key
    assert not agent.nonfinite_weights()


def test_discrete_agent_needs_a_rebuild_for_the_bounds_loss(built: Dict[str, SimpleNamespace]) -> None:
    assert not hasattr(built["a2c_discrete"].algo, "bounds_loss_coef")  # why it is not in the discrete table
    changes = {BOUNDS: 0.001, CONFIG + "gamma": 0.9, CONFIG + "horizon_length": 32}
    assert DiscretePpoAdapter.rebuild_keys(changes) == [BOUNDS, CONFIG + "horizon_length"]
    assert ContinuousPpoAdapter.rebuild_keys(changes) == [CONFIG + "horizon_length"]
    agent = make_adapter(built["a2c_discrete"].algo, "a2c_discrete")
    with pytest.raises(ConfigError, match="bounds_loss_coef cannot change in a running"):
        agent.set_hyperparameters({BOUNDS: 0.001})


@pytest.mark.parametrize("name", ["a2c_continuous", "a2c_discrete"])
def test_donor_weights_load_keeping_counters_and_learning_rate(built: Dict[str, SimpleNamespace], name: str) -> None:
    algo = built[name].algo
    agent = make_adapter(algo, name)
    donor = copy.deepcopy(agent.full_state())  # (the state holds the live tensors)
    donor_print = agent.fingerprint()
    with torch.no_grad():
        for p in algo.model.parameters():
            p.add_(0.5)
    algo.frame, algo.epoch_num = 12345, 67
    agent.set_hyperparameters({CONFIG + "learning_rate": 1e-4})
    donor["optimizer"]["param_groups"][0]["lr"] = 9e-3  # the donor trained at another lr
    assert agent.fingerprint() != donor_print
    agent.load_weights(donor)
    assert agent.fingerprint() == donor_print
    assert (algo.frame, algo.epoch_num) == (12345, 67)
    assert agent.read(CONFIG + "learning_rate") == pytest.approx(1e-4)
    assert algo.game_rewards.current_size == 0
    assert f"frame 12345, epoch 67, lr 0.0001, weights {donor_print[:16]}" == agent.describe()
    # A restore (own checkpoint) takes its counters and, under the adaptive schedule of the shipped
    # configs, the rate the checkpoint was training at; without a usable one, the configured rate.
    donor["frame"], donor["epoch"] = 500, 3
    agent.restore(donor, {"learning_rate": 3e-4})
    assert (algo.frame, algo.epoch_num) == (500, 3) and agent.read(CONFIG + "learning_rate") == pytest.approx(9e-3)
    for unusable in (math.nan, -1.0, "0.1", None):
        donor["optimizer"]["param_groups"][0]["lr"] = unusable
        agent.restore(donor, {"learning_rate": 3e-4})
        assert agent.read(CONFIG + "learning_rate") == pytest.approx(3e-4) and algo.last_lr == pytest.approx(3e-4)
    with torch.no_grad():
        next(iter(algo.model.parameters()))[0].fill_(math.nan)
    assert agent.nonfinite_weights()
    agent.load_weights(donor)
    assert not agent.nonfinite_weights()


@pytest.mark.parametrize("name", ["a2c_continuous", "a2c_discrete"])
def test_a_change_carries_the_rate_the_adaptive_schedule_found(built: Dict[str, SimpleNamespace], name: str) -> None:
    """Under rl_games' KL-adaptive schedule the learning rate in force is state, like Adam's moments:
    a replace continues at the donor's rate and a mutation at the member's own, each scaled as the
    decision scales ``learning_rate``, where resetting to the configured value would cost the
    member the epochs its schedule needs to find the rate again, at every change."""
    from pbt.rl_games.exploit import Exploiter

    algo = built[name].algo
    agent = make_adapter(algo, name)
    lr = CONFIG + "learning_rate"
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace", policy_idx=0), last_iteration=3,
                             params={lr: 1e-3, CONFIG + "gamma": 0.99}, network=None)
    exploiter = Exploiter(member, agent, score=SimpleNamespace(reset=lambda: None, note_change=lambda: None))  # type: ignore[arg-type]
    agent.put_rate(4e-3)  # where the schedule moved this member
    mutate = SimpleNamespace(action="mutate", donor=None, reason="r", params_before=dict(member.params),
                             params_after={lr: 1.2e-3, CONFIG + "gamma": 0.98}, network=None)
    exploiter.exploit_inplace(mutate)  # type: ignore[arg-type]
    assert algo.last_lr == pytest.approx(4.8e-3) and agent.read(lr) == pytest.approx(4.8e-3)
    assert agent.read(CONFIG + "gamma") == pytest.approx(0.98)

    donor_state = copy.deepcopy(agent.full_state())
    donor_state["optimizer"]["param_groups"][0]["lr"] = 2e-4  # the donor's schedule found a lower rate
    donor = SimpleNamespace(policy_idx=1, params={lr: 5e-4}, checksum="c")
    member.workspace = SimpleNamespace(load_checkpoint=lambda record: donor_state)
    replace = SimpleNamespace(action="replace", donor=donor, reason="r", params_before=dict(member.params),
                              params_after={lr: 4e-4, CONFIG + "gamma": 0.99}, network=None)
    exploiter.exploit_inplace(replace)  # type: ignore[arg-type]
    assert algo.last_lr == pytest.approx(1.6e-4)  # the donor's 2e-4 x (4e-4 / 5e-4)
    # Within the schedule's own bounds, whatever a peer's checkpoint says.
    donor_state["optimizer"]["param_groups"][0]["lr"] = 5.0
    exploiter.exploit_inplace(replace)  # type: ignore[arg-type]
    assert algo.last_lr == pytest.approx(algo.scheduler.max_lr)

    # No schedule moving the rate: the configured value is the rate in force, as before.
    scheduler = algo.scheduler
    try:
        from rl_games.common.schedulers import IdentityScheduler

        algo.scheduler = IdentityScheduler()
        assert agent.rate_in_force() is None and agent.rate_in_force(donor_state) is None
        exploiter.exploit_inplace(mutate)  # type: ignore[arg-type]
        assert algo.last_lr == pytest.approx(1.2e-3)
    finally:
        algo.scheduler = scheduler


@pytest.mark.parametrize("name", ["a2c_continuous", "a2c_discrete"])
def test_a_restart_carries_the_rate_in_the_checkpoint_it_restores(
    built: Dict[str, SimpleNamespace], name: str, tmp_path: Any
) -> None:
    """A change carried out by re-executing the process (pbt.restart_mode=exec, or a key no running
    agent can change) writes the rate the change carries, the mutation's factor included, into the
    checkpoint copy the restarted process restores; the restore puts it in force."""
    from pbt.rl_games.exploit import Exploiter
    from pbt.storage import Workspace

    algo = built[name].algo
    agent = make_adapter(algo, name)
    lr = CONFIG + "learning_rate"
    workspace = Workspace(tmp_path / "ws", 0, 2)
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="exec", policy_idx=0), last_iteration=3,
                             params={lr: 1e-3}, network=None, workspace=workspace, run_dir=tmp_path / "run",
                             argv=["train.py", "task=Pendulum"], cfg={"experiment": "x"})
    exploiter = Exploiter(member, agent, score=None)  # type: ignore[arg-type]
    agent.put_rate(4e-3)
    workspace.save(3, 1000, 1.0, dict(member.params), agent.full_state())  # the member's own record
    donor_state = copy.deepcopy(agent.full_state())
    donor_state["optimizer"]["param_groups"][0]["lr"] = 2e-4
    donor = Workspace(tmp_path / "ws", 1, 2).save(5, 2000, 2.0, {lr: 5e-4}, donor_state)

    def restored(decision: SimpleNamespace) -> float:
        outcome = exploiter.plan_exec(decision, frame=1500, why="pbt.restart_mode=exec")  # type: ignore[arg-type]
        assert outcome.mode == "exec", outcome.reason
        state = torch.load(str(outcome.restart.checkpoint), map_location="cpu", weights_only=False)
        agent.put_rate(1.0)  # anything: the restore must take the checkpoint's
        agent.restore(state, {lr: 1e-3})
        return float(algo.last_lr)

    mutate = SimpleNamespace(action="mutate", donor=None, reason="r", params_before={lr: 1e-3},
                             params_after={lr: 1.2e-3}, network=None)
    assert restored(mutate) == pytest.approx(4.8e-3)  # its own 4e-3 x 1.2
    replace = SimpleNamespace(action="replace", donor=donor, reason="r", params_before={lr: 1e-3},
                              params_after={lr: 4e-4}, network=None)
    assert restored(replace) == pytest.approx(1.6e-4)  # the donor's 2e-4 x (4e-4 / 5e-4)


def test_a_restart_carries_the_evaluations_of_the_weights_it_restores(
    built: Dict[str, SimpleNamespace], tmp_path: Any
) -> None:
    """With ``pbt.eval_window``, the checkpoint copy an exec restart loads carries the evaluation
    episodes that played its weights (a mutation: the member's own window; a replace: the donor's
    published ones, when its record says they are evaluations), as an in-place change carries them;
    none when the restart trains another task or the member ranks by its training episodes. The copy still restores, and a junk list reads as none."""
    from pbt.rl_games.evaluation import CARRIED_EPISODES_KEY, EvaluatedObjective, PlayResult, read_carried
    from pbt.rl_games.exploit import Exploiter
    from pbt.storage import Workspace

    algo = built["a2c_continuous"].algo
    agent = make_adapter(algo, "a2c_continuous")
    lr, reward = CONFIG + "learning_rate", "task.env.rewardScale"
    workspace = Workspace(tmp_path / "ws", 0, 2)
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="exec", policy_idx=0), last_iteration=3,
                             params={lr: 1e-3, reward: 1.0}, network=None, workspace=workspace,
                             run_dir=tmp_path / "run", argv=["train.py", "task=Pendulum"], cfg={"experiment": "x"})
    window = EvaluatedObjective(window_episodes=4)
    window.set(PlayResult(2, [1.0, 2.0], [], 10))
    window.set(PlayResult(2, [3.0, 4.0], [], 10))
    stale = dict(agent.full_state(), **{CARRIED_EPISODES_KEY: [-1.0]})  # a copy's key never passes through
    workspace.save(3, 1000, 2.5, dict(member.params), stale, episode_returns=window.recent)
    donors = Workspace(tmp_path / "ws", 1, 2)
    evaluated = donors.save(5, 2000, 9.0, {lr: 5e-4, reward: 1.0}, agent.full_state(),
                            episode_returns=[8.0, 9.0, 10.0], evaluated=True)
    trained = donors.save(6, 2400, 9.0, {lr: 5e-4, reward: 1.0}, agent.full_state(), episode_returns=[7.0])

    def carried(score: Any, action: str, after: Dict[str, Any], donor: Any = evaluated) -> List[float]:
        decision = SimpleNamespace(action=action, donor=donor if action == "replace" else None, reason="r",
                                   params_before=dict(member.params), params_after=after, network=None)
        outcome = Exploiter(member, agent, score).plan_exec(decision, frame=1500, why="x")  # type: ignore[arg-type]
        assert outcome.mode == "exec", outcome.reason
        state = torch.load(str(outcome.restart.checkpoint), map_location="cpu", weights_only=True)
        agent.restore(state, {lr: 1e-3})  # the key is no obstacle to the restore
        return read_carried(state)

    assert carried(window, "mutate", {lr: 1.2e-3, reward: 1.0}) == [1.0, 2.0, 3.0, 4.0]
    assert carried(window, "replace", {lr: 4e-4, reward: 1.0}) == [8.0, 9.0, 10.0]
    assert carried(window, "replace", {lr: 4e-4, reward: 2.0}) == []  # another task: its scores are not these
    assert carried(window, "replace", {lr: 4e-4, reward: 1.0}, trained) == []  # training returns, not evaluations
    assert carried(object(), "mutate", {lr: 1.2e-3, reward: 1.0}) == []  # ranked by training episodes
    for junk in ([1.0, math.nan], [True], "1.0", [1.0] * 100_001, {"a": 1.0}):
        assert read_carried({CARRIED_EPISODES_KEY: junk}) == [], junk
    assert read_carried({}) == [] and read_carried({CARRIED_EPISODES_KEY: [1, 2.5]}) == [1.0, 2.5]


def test_rate_factor_is_the_learning_rates_ratio_or_one() -> None:
    from pbt.rl_games.agent import rate_factor

    lr = CONFIG + "learning_rate"
    assert rate_factor({lr: 1e-3}, {lr: 1.5e-3}) == pytest.approx(1.5)
    for before, after in [({}, {lr: 1e-3}), ({lr: 1e-3}, {}), ({lr: 0.0}, {lr: 1e-3}), ({lr: math.inf}, {lr: 1e-3}),
                          ({lr: True}, {lr: 1e-3}), ({lr: "1e-3"}, {lr: 1e-3}), ({lr: 1e-3}, {lr: math.nan})]:
        assert rate_factor(before, after) == 1.0, (before, after)


def test_unknown_algo_falls_back_to_exec_only(caplog: pytest.LogCaptureFixture) -> None:
    assert adapter_class("a2c_continuous") is ContinuousPpoAdapter
    with caplog.at_level("WARNING"):
        assert adapter_class("my_trpo") is AgentAdapter
    assert "no PBT adapter for rl_games algo 'my_trpo'" in caplog.text and "register_adapter" in caplog.text
    assert AgentAdapter.inplace_keys() == [] and AgentAdapter.rebuild_keys({CONFIG + "gamma": 0.9}) == [CONFIG + "gamma"]
    fake = SimpleNamespace(get_full_state_weights=dict, set_full_state_weights=lambda s, set_epoch: None)
    assert type(make_adapter(fake, "my_trpo")) is AgentAdapter
    with pytest.raises(ConfigError, match="lacks get_full_state_weights, set_full_state_weights"):
        make_adapter(SimpleNamespace(), "my_sac")
    with pytest.raises(ConfigError, match="must subclass AgentAdapter"):
        register_adapter("my_trpo", dict)  # type: ignore[arg-type]


def test_exploit_mode_follows_the_adapter_table() -> None:
    from pbt.rl_games.exploit import Exploiter

    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace"), params={CONFIG + "gamma": 0.99,
                                                                                   BOUNDS: 1e-4})
    decision = SimpleNamespace(params_after={CONFIG + "gamma": 0.98, BOUNDS: 1e-4})
    discrete = Exploiter(member, DiscretePpoAdapter(None), score=None)  # type: ignore[arg-type]
    assert discrete.restart_mode(decision) == ("inplace", "")  # type: ignore[arg-type]
    decision.params_after[BOUNDS] = 2e-4
    assert discrete.restart_mode(decision) == (  # type: ignore[arg-type]
        "exec", f"{BOUNDS} cannot change in a running agent")
    continuous = Exploiter(member, ContinuousPpoAdapter(None), score=None)  # type: ignore[arg-type]
    assert continuous.restart_mode(decision) == ("inplace", "")  # type: ignore[arg-type]
    member.pbt.restart_mode = "exec"
    assert continuous.restart_mode(decision) == ("exec", "pbt.restart_mode=exec")  # type: ignore[arg-type]


def test_task_parameters_the_task_reads_each_step_change_in_place() -> None:
    """A task's ``live_setters()`` (e.g. Isaac Lab reward scales) extend the in-place table: such a
    change needs no restart and reaches the running task; any other task key still restarts."""
    from pbt.rl_games.exploit import Exploiter

    live, other = "task.env.rew_scale_alive", "task.env.episode_length_s"
    applied: List[Any] = []
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace", policy_idx=0), last_iteration=3,
                             params={CONFIG + "gamma": 0.99, live: 1.0, other: 5.0}, network=None)
    agent = ContinuousPpoAdapter(None)
    agent.set_hyperparameters = lambda params: applied.append(dict(params))  # type: ignore[method-assign]
    agent.describe = lambda: "fake"  # type: ignore[method-assign]
    exploiter = Exploiter(member, agent, score=SimpleNamespace(reset=lambda: None),  # type: ignore[arg-type]
                          task_setters={live: lambda value: applied.append((live, value))})
    decision = SimpleNamespace(action="mutate", donor=None, reason="r", params_before=dict(member.params),
                               params_after={CONFIG + "gamma": 0.98, live: 1.3, other: 5.0}, network=None)
    assert exploiter.restart_mode(decision) == ("inplace", "")  # type: ignore[arg-type]
    outcome = exploiter.finish_inplace(decision, parameters=None)  # type: ignore[arg-type]
    assert applied == [{CONFIG + "gamma": 0.98}, (live, 1.3)]
    assert (outcome.action, outcome.mode, outcome.params_after) == ("mutate", "inplace", decision.params_after)
    decision.params_after[other] = 6.0
    assert exploiter.restart_mode(decision) == (  # type: ignore[arg-type]
        "exec", f"{other} cannot change in a running agent")


def test_a_change_in_place_is_noted_so_the_member_waits_for_its_effect() -> None:
    """New learning hyperparameters keep the objective but mark the change (the member then waits
    until its envs have played under it: pbt.wait_for_effect); a live task parameter (the reward)
    forgets the objective, which marks the change too."""
    from pbt.objective import MemberObjective
    from pbt.rl_games.exploit import Exploiter

    live = "task.env.rew_scale_alive"
    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace", policy_idx=0), last_iteration=3,
                             params={CONFIG + "gamma": 0.99, live: 1.0}, network=None)
    agent = ContinuousPpoAdapter(None)
    agent.set_hyperparameters = lambda params: None  # type: ignore[method-assign]
    score = MemberObjective("true_objective", "episode_return", num_envs=2)
    for _ in range(2):
        score.update({"true_objective": [1.0, 1.0]}, [0, 1])
    exploiter = Exploiter(member, agent, score=score, task_setters={live: lambda value: None})
    mutate = SimpleNamespace(action="mutate", donor=None, reason="r", params_before=dict(member.params),
                             params_after={CONFIG + "gamma": 0.98, live: 1.0}, network=None)
    assert score.effect_pending is None
    exploiter.finish_inplace(mutate, parameters=None)  # type: ignore[arg-type]
    assert score.effect_pending == (0, 2) and score.value == 1.0
    score.update({"true_objective": [2.0, 2.0]}, [0, 1])
    assert score.effect_pending is None
    mutate.params_after = {CONFIG + "gamma": 0.98, live: 1.5}
    exploiter.finish_inplace(mutate, parameters=None)  # type: ignore[arg-type]
    assert score.effect_pending == (0, 2) and score.value is None


def test_ranked_by_evaluation_a_member_waits_for_its_change_to_show_in_the_training_episodes() -> None:
    """An evaluation an epoch after a mutation plays weights barely trained under it, so the member
    ranked by evaluation waits (pbt.wait_for_effect) until every env has finished a training episode
    since the change, as a member ranked by its training episodes does; a copy waits likewise."""
    from pbt.objective import MemberObjective
    from pbt.rl_games.evaluation import EvaluatedObjective, PlayResult
    from pbt.rl_games.exploit import Exploiter

    member = SimpleNamespace(pbt=SimpleNamespace(restart_mode="inplace", policy_idx=0), last_iteration=3,
                             params={CONFIG + "gamma": 0.99}, network=None)
    agent = ContinuousPpoAdapter(None)
    agent.set_hyperparameters = lambda params: None  # type: ignore[method-assign]
    evaluation, training = EvaluatedObjective(window_episodes=4), MemberObjective("true_objective", "episode_return", num_envs=2)
    evaluation.set(PlayResult(2, [1.0, 2.0], [], 10))
    for _ in range(2):
        training.update({"true_objective": [1.0, 1.0]}, [0, 1])
    exploiter = Exploiter(member, agent, score=evaluation, training=training)  # type: ignore[arg-type]
    assert exploiter.effect_pending is None
    mutate = SimpleNamespace(action="mutate", donor=None, reason="r", params_before=dict(member.params),
                             params_after={CONFIG + "gamma": 0.98}, network=None)
    exploiter.finish_inplace(mutate, parameters=None)  # type: ignore[arg-type]
    evaluation.set(PlayResult(2, [3.0, 4.0], [], 10))  # the next evaluation: known, but not the change's effect
    assert evaluation.effect_pending is None and exploiter.effect_pending == (0, 2)
    training.update({"true_objective": [2.0]}, [0])
    assert exploiter.effect_pending == (1, 2)
    training.update({"true_objective": [2.0]}, [1])
    assert exploiter.effect_pending is None
    assert Exploiter(member, agent, score=training).effect_pending is None  # type: ignore[arg-type]


def test_rl_games_glue_imports_no_torch_before_the_task_backend() -> None:
    """Isaac Gym must be imported before torch: the package, the runner and the tools' config path
    must not import torch or rl_games."""
    code = ("import sys\n"
            "import pbt.rl_games, pbt.rl_games.runner, pbt.rl_games.exploit, pbt.tools.replay, pbt.tools.play, pbt.train\n"
            "bad = sorted(m for m in ('torch', 'rl_games') if m in sys.modules)\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["a2c_continuous", "a2c_discrete"])
def test_a_restore_goes_on_mid_episode_and_a_donors_weights_keep_the_members_own_envs(
    built: Dict[str, SimpleNamespace], name: str
) -> None:
    """A checkpoint carries where each env is in its episode: restoring it (a resumed member, an
    exec restart) goes on from there through the reset rl_games makes when training starts, while
    a donor's weights loaded in place leave the member's own envs where they are."""
    algo = built[name].algo
    agent = make_adapter(algo, name)
    task = algo.vec_env.task
    algo.init_tensors()
    algo.obs = algo.env_reset()
    algo.train_epoch()
    saved = agent.full_state()
    progress, obs = task.progress_buf.clone(), task.obs_buf.clone()
    assert torch.equal(saved["env_state"]["progress_buf"], progress) and bool((progress > 0).any())

    algo.train_epoch()  # the envs move on
    assert not torch.equal(task.progress_buf, progress)
    agent.restore(saved, {})
    algo.obs = algo.env_reset()  # what rl_games' train() does after a restore
    assert torch.equal(task.progress_buf, progress) and torch.equal(task.obs_buf, obs)
    algo.obs = algo.env_reset()  # only that one reset goes on: a later one starts afresh
    assert not torch.equal(task.progress_buf, progress)
    algo.train_epoch()
    own = task.progress_buf.clone()
    agent.load_weights(saved)  # a donor's checkpoint (here: an older one of the same agent)
    assert torch.equal(task.progress_buf, own)
