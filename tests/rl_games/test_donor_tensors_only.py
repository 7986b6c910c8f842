"""A donor contributes tensors only (issue 25, item 3): its optimizer hyperparameters (Adam's
``param_groups``: betas, maximize, capturable, ...), its ``last_mean_rewards`` and its bookkeeping
never reach the receiver; moments that are NaN, negative or not tensors refuse the donor. On real
rl_games PPO and TRPO agents built through pbt.rl_games.runner (Pendulum)."""
import copy
from typing import Any, Dict, List

import pytest

from conftest import compose_config

torch = pytest.importorskip("torch")
numpy = pytest.importorskip("numpy")

from pbt.rl_games import make_adapter  # noqa: E402
from pbt.rl_games.agent import AgentAdapter  # noqa: E402

COMMON = ["task=Pendulum", "num_envs=16", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
          "train.params.config.horizon_length=16"]


def build(overrides: List[str], train_dir: Any, name: str) -> AgentAdapter:
    from pbt.rl_games.runner import build_runner, create_agent

    cfg = compose_config([*COMMON, *overrides, f"train_dir={train_dir}", f"experiment={name}"])
    runner = build_runner(cfg)
    return make_adapter(create_agent(runner, name), runner.algo_name)


@pytest.fixture(scope="module", params=["ppo", "trpo"])
def adapter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AgentAdapter:
    overrides = ["train=PendulumTRPO"] if request.param == "trpo" else ["train.params.config.minibatch_size=256"]
    return build(overrides, tmp_path_factory.mktemp(request.param) / "runs", request.param)


def hostile_donor(adapter: AgentAdapter) -> Dict[str, Any]:
    """The adapter's own state as a donor would send it: moments filled with 0.5, and the
    hyperparameters and bookkeeping of the issue's findings."""
    state = copy.deepcopy(adapter.full_state())
    optimizer = state["optimizer"]
    shapes = [tuple(p.shape) for group in adapter.algo.optimizer.param_groups for p in group["params"]]
    ids = [pid for group in optimizer["param_groups"] for pid in group["params"]]
    optimizer["state"] = {pid: {"step": torch.tensor(3.0), "exp_avg": torch.full(shape, 0.5),
                                "exp_avg_sq": torch.full(shape, 0.5)} for pid, shape in zip(ids, shapes)}
    for group in optimizer["param_groups"]:
        group.update(betas=(1.0, 1.0), maximize=True, capturable=True, fused=False, eps=0.0, weight_decay=7.0)
    state["last_mean_rewards"] = "a string rl_games would compare with a float"
    state["env_state"] = {"planted": 1}
    return state


def test_a_donor_gives_its_moments_but_never_its_optimizer_settings(adapter: AgentAdapter) -> None:
    algo = adapter.algo
    settings = [{k: v for k, v in g.items() if k != "params"} for g in algo.optimizer.param_groups]
    best = algo.last_mean_rewards
    state = hostile_donor(adapter)
    assert adapter.state_problem(state) is None
    adapter.load_weights(state)
    assert [{k: v for k, v in g.items() if k != "params"} for g in algo.optimizer.param_groups] == settings
    assert algo.last_mean_rewards == best
    first = algo.optimizer.param_groups[0]["params"][0]
    assert torch.equal(algo.optimizer.state[first]["exp_avg"], torch.full(tuple(first.shape), 0.5))
    for group in algo.optimizer.param_groups:  # one step works: no capturable assertion, no NaN
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    algo.optimizer.step()
    assert not adapter.nonfinite_weights()


def test_restore_keeps_the_configured_optimizer_settings_too(adapter: AgentAdapter) -> None:
    algo = adapter.algo
    settings = [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in algo.optimizer.param_groups]
    state = hostile_donor(adapter)
    adapter.restore(state, {"learning_rate": 1e-3, "value_learning_rate": 1e-3})
    assert [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in algo.optimizer.param_groups] == settings
    assert type(algo.last_mean_rewards) is not str
    own = copy.deepcopy(adapter.full_state())
    own["last_mean_rewards"] = numpy.float32(17.5)  # as rl_games saves its best score
    adapter.restore(own, {"learning_rate": 1e-3, "value_learning_rate": 1e-3})
    assert float(algo.last_mean_rewards) == 17.5


@pytest.mark.parametrize("moment", ["nan", "negative", "string"])
def test_moments_that_are_not_finite_tensors_refuse_the_donor(adapter: AgentAdapter, moment: str) -> None:
    state = hostile_donor(adapter)
    entry = next(iter(state["optimizer"]["state"].values()))
    if moment == "nan":
        entry["exp_avg"] = torch.full_like(entry["exp_avg"], float("nan"))
    elif moment == "negative":
        entry["exp_avg_sq"] = -entry["exp_avg_sq"]
    else:
        entry["step"] = "3"
    problem = adapter.state_problem(state)
    assert problem is not None and problem.startswith("optimizer state"), problem
