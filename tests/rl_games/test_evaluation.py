"""``pbt.eval_episodes``: a member ranks by its policy played with deterministic actions in a second
instance of its task. The training rollout is untouched by an evaluation (its envs, observations,
recurrent states and torch's random draws), every env plays one whole episode, and tasks that cannot run twice in one
process are refused at start-up. On real rl_games agents (PPO, TRPO, a recurrent PPO) on Pendulum."""
from typing import Any, Dict, List

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.rl_games.evaluation import EvaluatedObjective, PlayResult, evaluation_problem, evaluation_task_config

EPISODE_LENGTH = 200  # configs/task/Pendulum.yaml


def config(task: Dict[str, Any], **pbt: Any) -> Dict[str, Any]:
    return {"task": task, "pbt": {"enabled": True, "eval_episodes": 8, **pbt}}


def test_isaac_tasks_are_refused_with_the_way_out() -> None:
    for kind, name in (("isaacgym", "Isaac Gym"), ("isaaclab", "Isaac Lab")):
        problem = evaluation_problem(config({"kind": kind, "name": "Ant"}))
        assert problem is not None
        assert f"an {name} simulation runs once per process" in problem
        assert "add pbt.eval_episodes=0 after your other overrides" in problem


def appended_settings(problem: str) -> List[str]:
    return problem.split("add ")[1].split(" after your other overrides")[0].split()


@pytest.mark.parametrize(
    "command",
    [
        ["pbt=evaluated_lockstep"],
        ["pbt.eval_episodes=16"],
        ["pbt.eval_episodes=16", "pbt.eval_window=3"],
        ["pbt.eval_episodes=16", "pbt.eval_window=3", "pbt.significance_samples=evaluations"],
        ["pbt=evaluated_lockstep", "pbt.eval_window=2"],
    ],
)
def test_on_an_isaac_task_the_named_settings_leave_a_config_that_runs(command: List[str]) -> None:
    """Every key that needs the evaluation is named at once, so the way out takes one step: the
    command with the named settings appended validates and needs no second instance."""
    isaac = {"kind": "isaaclab", "name": "Ant"}
    before = OmegaConf.to_container(compose_config(["pbt.enabled=true", *command]).pbt, resolve=True)
    problem = evaluation_problem({"task": isaac, "pbt": before})
    assert problem is not None
    after = OmegaConf.to_container(
        compose_config(["pbt.enabled=true", *command, *appended_settings(problem)]).pbt, resolve=True
    )
    assert evaluation_problem({"task": isaac, "pbt": after}) is None
    cfg = PbtConfig.from_mapping(after)  # type: ignore[arg-type]
    assert cfg.eval_episodes == 0
    if command[0] == "pbt=evaluated_lockstep":  # the preset's other keys stay
        assert cfg.synchronous and cfg.strategies["threshold"].leader_choice == "best"


def test_an_episode_length_objective_is_refused() -> None:
    problem = evaluation_problem(config({"name": "Pendulum"}, objective="episode_length"))
    assert problem is not None and "pbt.objective=episode_length" in problem


def test_cpu_tasks_and_the_default_pass() -> None:
    assert evaluation_problem(config({"name": "Pendulum"})) is None
    assert evaluation_problem(config({"kind": "envpool", "name": "HalfCheetah-v4"}, objective="episode_return")) is None
    assert evaluation_problem(config({"kind": "isaacgym", "name": "Ant"}, eval_episodes=0)) is None
    assert evaluation_problem(config({"kind": "isaacgym", "name": "Ant"}, enabled=False)) is None


def test_a_negative_count_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"pbt\.eval_episodes"):
        PbtConfig.from_mapping({"enabled": True, "eval_episodes": -1})


def test_the_evaluation_instance_has_one_env_per_episode_and_no_desync() -> None:
    task = {"name": "Pendulum", "env": {"numEnvs": 512, "desyncEpisodes": True, "mass": 1.0}}
    built = evaluation_task_config(task, 12)
    assert built["env"] == {"numEnvs": 12, "desyncEpisodes": False, "mass": 1.0}
    assert task["env"]["numEnvs"] == 512 and task["env"]["desyncEpisodes"] is True  # the training task's config stays


def test_an_evaluated_objective_forgets_old_weights_but_not_new_settings() -> None:
    objective = EvaluatedObjective()
    assert objective.value is None and not objective.mixed and objective.effect_pending is None
    objective.set(PlayResult(2, [1.0, 3.0], [], 10))
    assert objective.value == 2.0 and objective.recent == [1.0, 3.0]
    objective.note_change()  # learning hyperparameters only: the weights evaluated are the same
    assert objective.value == 2.0
    objective.reset()
    assert objective.value is None and objective.recent == []
    objective.set(PlayResult(2, [1.0, 3.0], [0.5, 0.7], 10))
    assert objective.value == pytest.approx(0.6) and objective.recent == [0.5, 0.7]


def test_a_window_pools_the_last_evaluations_and_a_copy_starts_from_its_donors() -> None:
    objective = EvaluatedObjective(window_episodes=4)  # pbt.eval_window=2 of 2 episodes each
    objective.set(PlayResult(2, [1.0, 3.0], [], 10))
    objective.set(PlayResult(2, [5.0, 7.0], [], 10))
    assert objective.value == 4.0 and objective.recent == [1.0, 3.0, 5.0, 7.0]
    objective.set(PlayResult(2, [9.0, 11.0], [], 10))  # the oldest evaluation drops out
    assert objective.value == 8.0 and objective.recent == [5.0, 7.0, 9.0, 11.0]
    objective.note_change()  # new learning hyperparameters, the same weights: the window stays
    assert objective.value == 8.0
    objective.reset(carried=[100.0] * 50 + [20.0, 22.0])  # a donor's (or a hostile record's) list
    assert objective.recent == [100.0, 100.0, 20.0, 22.0]
    objective.set(PlayResult(2, [30.0, 32.0], [], 10))
    assert objective.recent == [20.0, 22.0, 30.0, 32.0] and objective.value == 26.0
    objective.reset()  # weights without evaluations (a rollback): nothing known
    assert objective.value is None and objective.recent == []


def test_without_a_window_only_the_last_evaluation_counts_and_nothing_is_carried() -> None:
    objective = EvaluatedObjective()
    objective.set(PlayResult(2, [1.0, 3.0], [], 10))
    objective.set(PlayResult(3, [5.0, 7.0, 9.0], [], 10))
    assert objective.recent == [5.0, 7.0, 9.0]
    objective.set(PlayResult(2, [1.0, 3.0], [0.5], 10))  # the task's key from one episode only
    assert objective.value == 0.5 and objective.recent == [1.0, 3.0]  # as PlayResult has them
    objective.reset(carried=[1.0, 2.0])
    assert objective.value is None


@pytest.mark.parametrize(
    ("pbt", "message"),
    [
        ({"eval_window": 0}, r"pbt\.eval_window=0 is out of range"),
        ({"eval_window": 3}, r"pbt\.eval_window=3 pools evaluations, but pbt\.eval_episodes=0 runs none"),
        ({"eval_episodes": 16, "significance_samples": "evaluations"}, r"pbt\.eval_window=1 pools one: a test needs two"),
    ],
)
def test_a_bad_window_is_refused(pbt: Dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PbtConfig.from_mapping({"enabled": True, **pbt})


# -- real agents -----------------------------------------------------------------------------------

torch = pytest.importorskip("torch")

COMMON = ["task=Pendulum", "num_envs=16", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
          "train.params.config.horizon_length=16", "pbt=pbt_default", "pbt.eval_episodes=6"]
AGENTS = {
    "ppo": ["train.params.config.minibatch_size=256"],
    "trpo": ["train=PendulumTRPO"],
    "gru": ["train.params.config.minibatch_size=256", "task.env.observeVelocity=False",
            "+train.params.network.rnn={name:gru,units:16,layers:1}"],
}


def build(overrides: List[str], train_dir: Any, name: str) -> Any:
    from pbt.rl_games.evaluation import Evaluator
    from pbt.rl_games.runner import build_runner, create_agent, prepare_config

    cfg = compose_config([*COMMON, *overrides, f"train_dir={train_dir}", f"experiment={name}"])
    runner = build_runner(cfg)
    algo = create_agent(runner, name)
    return Evaluator.build(algo, prepare_config(cfg), 6)


@pytest.fixture(scope="module", params=sorted(AGENTS))
def evaluator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build(AGENTS[request.param], tmp_path_factory.mktemp(request.param) / "runs", request.param)


def test_every_env_plays_one_whole_episode(evaluator: Any) -> None:
    value = evaluator.evaluate()
    result = evaluator.objective
    assert len(result.recent) == 6 and value == pytest.approx(sum(result.recent) / 6)
    assert all(-16.3 * EPISODE_LENGTH <= r < 0 for r in result.recent), result.recent  # whole episodes of costs
    assert evaluator.env.task.num_envs == 6 and evaluator.algo.num_actors == 16


def test_the_training_rollout_is_untouched(evaluator: Any) -> None:
    algo = evaluator.algo
    algo.obs = algo.env_reset()
    if algo.is_rnn:  # as rl_games' training sets them up
        algo.rnn_states = [s.to(algo.ppo_device) for s in algo.model.get_default_rnn_state()]
    for _ in range(5):  # mid-episode, with recurrent states that are not zero
        values = algo.get_action_values(algo.obs)
        if algo.is_rnn:
            algo.rnn_states = values["rnn_states"]
        algo.obs, _, _, _ = algo.env_step(values["actions"])
    env, task = algo.vec_env, algo.vec_env.task
    progress, state = task.progress_buf.clone(), task.state.clone() if hasattr(task, "state") else None
    obs = algo.obs["obs"].clone()
    rnn = [s.clone() for s in algo.rnn_states] if algo.is_rnn else []
    algo.model.train()
    rng = torch.get_rng_state()
    evaluator.evaluate()
    assert torch.equal(torch.get_rng_state(), rng)  # the training's next random draws are unchanged
    assert algo.vec_env is env and torch.equal(task.progress_buf, progress)
    if state is not None:
        assert torch.equal(task.state, state)
    assert torch.equal(algo.obs["obs"], obs)
    if algo.is_rnn:
        assert len(algo.rnn_states) == len(rnn) and all(torch.equal(a, b) for a, b in zip(algo.rnn_states, rnn))
    else:
        assert algo.rnn_states is None
    assert algo.model.training  # the mode it was in
    assert evaluator.env.task.progress_buf.max() == 0  # the evaluation instance just reset its finished envs


class FakeAgent:
    """Just what run_episodes touches: 2 envs whose episodes end every ``length`` steps."""

    def __init__(self, length: int, infos: Dict[str, Any]) -> None:
        self.length, self.infos, self.t = length, infos, 0
        self.num_actors, self.is_rnn, self.vec_env = 2, False, None
        self.model = torch.nn.Linear(1, 1)

    def env_reset(self) -> Any:
        return torch.zeros(2, 1)

    def get_action_values(self, obs: Any) -> Dict[str, Any]:
        return {"mus": torch.zeros(2, 1)}

    def env_step(self, actions: Any) -> Any:
        self.t += 1
        done = torch.full((2,), self.t % self.length == 0)
        return torch.zeros(2, 1), torch.zeros(2), done, self.infos


def test_episodes_that_never_end_say_how_to_fix_it() -> None:
    from pbt.rl_games.evaluation import run_episodes

    with pytest.raises(ConfigError, match=r"only 0 of 2 episodes ended within 5 steps of 2 envs.*episodes=K"):
        run_episodes(FakeAgent(1000, {"episode_return": torch.zeros(2)}), 2, "true_objective", max_steps=5)


def test_an_env_without_per_env_returns_is_refused() -> None:
    from pbt.rl_games.evaluation import run_episodes

    for infos in ({}, {"episode_return": 3.0}):  # missing, or one number for two envs
        with pytest.raises(ConfigError, match="reports no per-env 'episode_return'.*task built through pbt.rl_games.vecenv"):
            run_episodes(FakeAgent(2, infos), 2, "true_objective")
    result = run_episodes(FakeAgent(2, {"episode_return": torch.tensor([1.0, 3.0])}), 2, "true_objective",
                          whole_first=True)
    assert result.returns == [1.0, 3.0] and result.steps == 2
