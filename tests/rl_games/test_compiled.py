"""torch_compile (a GPU user's choice): rl_games wraps the model in torch.compile after the observer
restored it, so a compiled agent's state_dict names every tensor ``_orig_mod.<name>``. Checkpoints
are written with the uncompiled names and load into compiled and uncompiled agents alike (a restart
or resume restores before rl_games compiles; play never compiles; a donor may be either). Compiled
here as rl_games does (``torch.compile(model)``, eager backend: no compiler needed on CPU)."""
import copy
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_agent_adapter import build

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games import make_adapter  # noqa: E402
from pbt.rl_games.agent import plain_checkpoint  # noqa: E402
from pbt.rl_games.trpo.settings import TrpoSettings  # noqa: E402
from pbt.storage.checkpoints import deserialize_checkpoint, serialize_state  # noqa: E402


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("compiled")
    compiled = build(["task=Pendulum"], root / "runs").algo
    compiled.model = torch.compile(compiled.model, backend="eager")  # what rl_games' Runner does on CUDA
    plain = build(["task=Pendulum"], root / "runs").algo
    return SimpleNamespace(compiled=compiled, plain=plain)


def perturb(algo: object) -> None:
    with torch.no_grad():
        for p in algo.model.parameters():
            p.add_(torch.randn_like(p))


def test_a_compiled_agent_writes_uncompiled_names(agents: SimpleNamespace) -> None:
    assert any("_orig_mod." in k for k in agents.compiled.model.state_dict())  # the situation under test
    state = make_adapter(agents.compiled, "a2c_continuous").full_state()
    assert state["model"] and not [k for k in state["model"] if "_orig_mod" in k]
    assert set(state["model"]) == set(agents.plain.model.state_dict())


@pytest.mark.parametrize("source, target", [("compiled", "plain"), ("plain", "compiled"), ("compiled", "compiled")])
def test_checkpoints_move_between_compiled_and_uncompiled_agents(agents: SimpleNamespace, source: str,
                                                                  target: str) -> None:
    giver, taker = make_adapter(getattr(agents, source), "a2c_continuous"), \
        make_adapter(getattr(agents, target), "a2c_continuous")
    perturb(getattr(agents, source))
    data = serialize_state(giver.full_state())  # through the checkpoint bytes, as the workspace does
    expected = giver.fingerprint()
    perturb(getattr(agents, target))
    assert taker.fingerprint() != expected
    state = deserialize_checkpoint(data, "test")
    assert taker.state_problem(state, counts=True) is None
    taker.restore(copy.deepcopy(state), {"learning_rate": 3e-4})  # resume, rollback, exec restart
    assert taker.fingerprint() == expected
    perturb(getattr(agents, target))
    taker.load_weights(state)  # an in-place exploit's donor
    assert taker.fingerprint() == expected


def test_an_rl_games_checkpoint_of_a_compiled_run_loads_uncompiled(agents: SimpleNamespace, tmp_path: Path) -> None:
    """rl_games' own saves (<run>/nn/*.pth, what pbt.play is often given) keep the compiled names."""
    raw = agents.compiled.get_full_state_weights()
    assert any("_orig_mod." in k for k in raw["model"])
    state = deserialize_checkpoint(serialize_state(raw), "nn/last.pth")
    plain = make_adapter(agents.plain, "a2c_continuous")
    assert plain.state_problem(state, counts=True) is None
    agents.plain.set_weights(plain_checkpoint(state))  # what pbt.play does
    assert plain.fingerprint() == make_adapter(agents.compiled, "a2c_continuous").fingerprint()


@pytest.mark.parametrize("value", [True, "max-autotune", {"mode": "default"}, None, "missing"])
def test_trpo_with_torch_compile_is_refused_at_start_up(value: object) -> None:
    config = {} if value == "missing" else {"torch_compile": value}
    with pytest.raises(ConfigError, match="torch_compile=false.*double backward|double backward.*torch_compile=false"):
        TrpoSettings.from_config(config)
    TrpoSettings.from_config({"torch_compile": False})
