"""Network surgery on real rl_games agents (pbt/rl_games/surgery.py): widening preserves the function
exactly (normalizers included), the other architecture changes are measured, Adam's state is kept
for unchanged parameters and fresh for new ones, parameter noise touches 10% of each weight matrix
and never the normalizers, and a donor's architecture can be adopted and undone.

Agents are built through pbt.rl_games.runner: Pendulum (continuous, shared and separate actor and
critic) and Cartpole (discrete), with input and value normalization whose statistics are set to
non-trivial values so that a surgery that broke them would show.
"""
import copy
from typing import Any, Dict, List, Tuple

import pytest

torch = pytest.importorskip("torch")

from test_donor_shapes import build  # noqa: E402

from pbt.mutation.network import (ACTIVATION, ADD_LAYER, ADD_UNITS, PARAMETERS, REMOVE_LAYER,  # noqa: E402
                                  REMOVE_UNITS, NetworkChange, NetworkSpec)
from pbt.rl_games import surgery  # noqa: E402

NORMALIZED = ["train.params.config.normalize_value=true", "train.params.config.normalize_input=true"]
VARIANTS = {
    "continuous": ["train.params.network.mlp.units=[32,16]"],
    "separate": ["train.params.network.mlp.units=[32,16]", "train.params.network.separate=true"],
    "discrete": ["task=Cartpole", "train.params.network.mlp.units=[32,16]"],
}


def agent(tmp_path_factory: pytest.TempPathFactory, variant: str, *extra: str) -> Any:
    adapter = build([*VARIANTS[variant], *NORMALIZED, *extra], tmp_path_factory.mktemp("surgery") / "runs")
    algo = adapter.algo
    state = algo.model.state_dict()
    gen = torch.Generator().manual_seed(0)
    for key in ("running_mean_std", "value_mean_std"):
        state[f"{key}.running_mean"] = torch.randn(state[f"{key}.running_mean"].shape, generator=gen, dtype=torch.float64) * 2
        state[f"{key}.running_var"] = torch.rand(state[f"{key}.running_var"].shape, generator=gen, dtype=torch.float64) + 0.5
    algo.model.load_state_dict(state)
    train_a_little(algo)
    return algo


def train_a_little(algo: Any) -> None:
    """A few Adam steps on a dummy loss so the optimizer has moments to keep (or not)."""
    obs = torch.randn(64, *algo.obs_shape)
    for _ in range(3):
        algo.optimizer.zero_grad()
        out = algo.model.a2c_network({"obs": algo.model.norm_obs(obs)})
        sum(o.pow(2).mean() for o in out[:-1] if torch.is_tensor(o)).backward()
        algo.optimizer.step()


def outputs(algo: Any, obs: Any) -> Any:
    """Every deterministic output of the model (mu and sigma or logits, the denormalized value),
    through its input normalizer, as the agent computes them."""
    model = algo.model
    model.eval()
    with torch.no_grad():
        parts = list(model.a2c_network({"obs": model.norm_obs(obs)})[:-1])
        parts[-1] = model.denorm_value(parts[-1])
        return torch.cat(parts, 1)


def change(algo: Any, op: str, units: Tuple[int, ...], layer: int = 0, activation: str = "", seed: int = 3) -> NetworkChange:
    before = surgery.current_spec(algo)
    return NetworkChange("architecture", before, NetworkSpec(units, activation or before.activation), op, layer=layer,
                         seed=seed, mutation_sd=0.1)


def relative_change(before: Any, after: Any) -> float:
    return float((before - after).abs().mean() / before.abs().mean())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("layer", [0, 1])
def test_widening_any_layer_computes_exactly_the_same_function(tmp_path_factory: pytest.TempPathFactory, variant: str,
                                                               layer: int) -> None:
    algo = agent(tmp_path_factory, variant)
    obs = torch.randn(2048, *algo.obs_shape) * 3
    before = outputs(algo, obs)
    normalizers = {k: v.clone() for k, v in algo.model.state_dict().items() if "mean_std" in k}
    units = [32, 16]
    units[layer] += 24
    surgery.apply_change(algo, change(algo, ADD_UNITS, tuple(units), layer))
    assert surgery.current_spec(algo).units == tuple(units)
    assert torch.equal(outputs(algo, obs), before)
    after = algo.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in normalizers.items())
    # the new units are live: their incoming weights are not zero, so training can use them
    new_rows = after[surgery.hidden_key("actor_mlp", layer)][-24:]
    assert new_rows.abs().sum() > 0
    train_a_little(algo)  # the rebuilt model and optimizer train


def test_optimizer_state_is_kept_for_unchanged_parameters_and_fresh_for_new_ones(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = agent(tmp_path_factory, "continuous")
    old = {name: {k: v.clone() for k, v in algo.optimizer.state[p].items()} for name, p in algo.model.named_parameters()}
    lr = algo.optimizer.param_groups[0]["lr"] = 3.3e-4
    fresh = surgery.apply_change(algo, change(algo, ADD_UNITS, (48, 16), 0))
    assert fresh == {"a2c_network.actor_mlp.0.weight", "a2c_network.actor_mlp.0.bias", "a2c_network.actor_mlp.2.weight"}
    params = dict(algo.model.named_parameters())
    for name, param in params.items():
        state = algo.optimizer.state.get(param, {})
        if name in fresh:
            assert not state, name  # step 0: Adam's bias correction starts over for a reshaped tensor
        else:
            assert torch.equal(state["exp_avg"], old[name]["exp_avg"]) and torch.equal(state["step"], old[name]["step"])
    assert algo.optimizer.param_groups[0]["lr"] == lr
    assert sorted(id(p) for p in algo.optimizer.param_groups[0]["params"]) == sorted(id(p) for p in params.values())


def test_narrowing_and_layer_changes_are_measured(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The documented, measured change of each non-exact architecture mutation (mean absolute output
    change relative to the mean absolute output, on random inputs; elu)."""
    measured: Dict[str, float] = {}
    for op, units, layer in ((REMOVE_UNITS, (24, 16), 0), (ADD_LAYER, (32, 16, 16), 2), (REMOVE_LAYER, (32,), 1)):
        algo = agent(tmp_path_factory, "continuous")
        obs = torch.randn(2048, *algo.obs_shape) * 3
        before = outputs(algo, obs)
        surgery.apply_change(algo, change(algo, op, units, layer))
        measured[op] = relative_change(before, outputs(algo, obs))
        assert surgery.current_spec(algo).units == units
    assert 0 < measured[REMOVE_UNITS] < 0.5 and 0 < measured[ADD_LAYER] < 0.5 and 0 < measured[REMOVE_LAYER] < 1.0, measured


def test_with_relu_adding_a_layer_is_exact_and_removing_it_again_too(tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = agent(tmp_path_factory, "separate", "train.params.network.mlp.activation=relu")
    obs = torch.randn(2048, *algo.obs_shape) * 3
    before = outputs(algo, obs)
    surgery.apply_change(algo, change(algo, ADD_LAYER, (32, 16, 16), 2))  # identity init: relu(relu(x)) = relu(x)
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)
    surgery.apply_change(algo, change(algo, REMOVE_LAYER, (32, 16), 2))  # folding an identity layer is exact too
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)
    narrowed = surgery.apply_change(algo, change(algo, REMOVE_UNITS, (32, 8), 1))
    assert "a2c_network.critic_mlp.2.weight" in narrowed and "a2c_network.value.weight" in narrowed


def test_an_activation_change_keeps_every_weight(tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = agent(tmp_path_factory, "discrete")
    weights = copy.deepcopy(algo.model.state_dict())
    fresh = surgery.apply_change(algo, change(algo, ACTIVATION, (32, 16), activation="tanh"))
    assert fresh == set()
    assert all(torch.equal(v, weights[k]) for k, v in algo.model.state_dict().items())
    assert isinstance(algo.model.a2c_network.actor_mlp[1], torch.nn.Tanh)
    assert surgery.current_spec(algo) == NetworkSpec((32, 16), "tanh")


def test_parameter_noise_changes_a_tenth_of_each_weight_matrix_and_nothing_else(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = agent(tmp_path_factory, "continuous")
    before = copy.deepcopy(algo.model.state_dict())
    fresh = surgery.apply_change(algo, change(algo, PARAMETERS, (32, 16)))
    after = algo.model.state_dict()
    assert fresh == set()
    changed: List[str] = []
    for key, tensor in before.items():
        if torch.equal(tensor, after[key]):
            continue
        changed.append(key)
        assert key.startswith("a2c_network.") and key.endswith(".weight") and tensor.dim() == 2, key
        differs = int((tensor != after[key]).sum())
        assert 0 < differs <= -(-tensor.numel() // 10), (key, differs)
        assert float(after[key].abs().max()) <= 2 * float(tensor.abs().max()) + 1e-6  # clamped
    assert len(changed) >= 4  # every hidden and head weight matrix
    same = surgery.transform_state(before, change(algo, PARAMETERS, (32, 16)), False)[0]
    again = surgery.transform_state(before, change(algo, PARAMETERS, (32, 16)), False)[0]
    assert all(torch.equal(same[k], again[k]) for k in same)  # reproducible from the change's seed


def test_a_donor_architecture_is_adopted_and_can_be_undone(tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = agent(tmp_path_factory, "continuous")
    donor = agent(tmp_path_factory, "continuous", "train.params.network.mlp.units=[64]")
    own_model = algo.model
    undo = surgery.swap_in(algo, NetworkSpec((64,), "elu"))
    algo.set_full_state_weights(copy.deepcopy(donor.get_full_state_weights()), set_epoch=False)
    obs = torch.randn(256, *algo.obs_shape)
    assert torch.equal(outputs(algo, obs), outputs(donor, obs))
    assert surgery.parameter_count(algo.model) == surgery.parameter_count(donor.model)
    undo()
    assert algo.model is own_model and surgery.current_spec(algo).units == (32, 16)
