"""Surgery on the RNN and CNN blocks (pbt/rl_games/surgery_blocks.py) of real rl_games agents built
through pbt.rl_games.runner: widening LSTM/GRU units and conv filters computes exactly the same
function on random inputs (hidden states carried, normalizers included), the other changes are
measured, shapes follow the spec, Adam's state is kept for unchanged tensors and fresh for reshaped
ones, and the agent's hidden states and rollout buffers follow the new RNN.

Recurrent agents: the partially observed Pendulum (observation [cos, sin]) with rl_games' rnn block,
after or before the MLP, shared or separate, LSTM and GRU; convolutional: the PendulumImage task.
"""

import copy
from typing import Any, List, Tuple

import pytest

torch = pytest.importorskip("torch")

from test_donor_shapes import build  # noqa: E402

from pbt.mutation.network import ADD_LAYER, ADD_UNITS, REMOVE_LAYER, REMOVE_UNITS, NetworkChange  # noqa: E402
from pbt.mutation.network_blocks import ConvSpec, RnnSpec  # noqa: E402
from pbt.rl_games import surgery  # noqa: E402

NORMALIZED = ["train.params.config.normalize_value=true", "train.params.config.normalize_input=true"]
SEQ = 8
RNNS = {
    "lstm-after": ["+train.params.network.rnn={name:lstm,units:16,layers:2}"],
    "gru-before-separate": [
        "+train.params.network.rnn={name:gru,units:16,layers:2,before_mlp:True}",
        "train.params.network.separate=true",
    ],
    "lstm-before-separate": [
        "+train.params.network.rnn={name:lstm,units:16,layers:1,before_mlp:True}",
        "train.params.network.separate=true",
    ],
    "gru-after": ["+train.params.network.rnn={name:gru,units:16,layers:1}"],
}
CNNS = {"shared": [], "separate": ["train.params.network.separate=true"]}


def recurrent(tmp_path_factory: pytest.TempPathFactory, variant: str, *extra: str) -> Any:
    adapter = build(
        [
            "task.env.observeVelocity=False",
            f"train.params.config.seq_length={SEQ}",
            "train.params.network.mlp.units=[24,16]",
            *RNNS[variant],
            *NORMALIZED,
            *extra,
        ],
        tmp_path_factory.mktemp("blocks") / "runs",
    )
    return prepared(adapter.algo)


def convolutional(tmp_path_factory: pytest.TempPathFactory, variant: str) -> Any:
    adapter = build(["task=PendulumImage", *CNNS[variant], *NORMALIZED], tmp_path_factory.mktemp("blocks") / "runs")
    return prepared(adapter.algo)


def prepared(algo: Any) -> Any:
    """Non-trivial normalizer statistics and hidden states, and Adam moments to keep (or not)."""
    gen = torch.Generator().manual_seed(0)
    state = algo.model.state_dict()
    for key in ("running_mean_std", "value_mean_std"):
        state[f"{key}.running_mean"] = torch.randn(
            state[f"{key}.running_mean"].shape, generator=gen, dtype=torch.float64
        )
        state[f"{key}.running_var"] = (
            torch.rand(state[f"{key}.running_var"].shape, generator=gen, dtype=torch.float64) + 0.5
        )
    algo.model.load_state_dict(state)
    if algo.is_rnn:
        if algo.rnn_states is None:
            algo.init_tensors()  # as training starts: hidden states and the rollout's copies
        algo.rnn_states = [torch.randn(s.shape, generator=gen) * 0.5 for s in algo.rnn_states]
    obs = torch.rand(SEQ * algo.num_actors, *algo.obs_shape, generator=gen)
    for _ in range(3):
        algo.optimizer.zero_grad()
        out = forward(algo, obs)
        out.pow(2).mean().backward()
        algo.optimizer.step()
    return algo


def forward(algo: Any, obs: Any) -> Any:
    """mu, sigma and the denormalized value over sequences of SEQ steps, from the agent's own
    hidden states (one sequence per env), through the input normalizer."""
    model = algo.model
    batch = {"obs": model.norm_obs(obs)}
    if algo.is_rnn:
        batch.update(rnn_states=[s.clone() for s in algo.rnn_states], seq_length=SEQ)
    parts = list(model.a2c_network(batch)[:-1])
    parts[-1] = model.denorm_value(parts[-1])
    return torch.cat([p.reshape(p.shape[0], -1) for p in parts], 1)


def outputs(algo: Any, obs: Any) -> Any:
    algo.model.eval()
    with torch.no_grad():
        return forward(algo, obs)


def rnn_change(algo: Any, op: str, units: int, layers: int) -> NetworkChange:
    before = surgery.current_spec(algo)
    assert before.rnn is not None
    after = type(before)(before.units, before.activation, RnnSpec(before.rnn.name, units, layers), before.cnn)
    return NetworkChange("architecture", before, after, op, seed=5, block="rnn")


def cnn_change(algo: Any, op: str, layer: int, filters: int) -> NetworkChange:
    before = surgery.current_spec(algo)
    convs = list(before.cnn)
    old = convs[layer]
    convs[layer] = ConvSpec(filters, old.kernel_size, old.strides, old.padding)
    after = type(before)(before.units, before.activation, before.rnn, tuple(convs))
    return NetworkChange("architecture", before, after, op, layer=layer, seed=5, block="cnn")


def observations(algo: Any, seed: int = 1) -> Any:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(SEQ * algo.num_actors, *algo.obs_shape, generator=gen) * 2 - 0.5


def relative_change(before: Any, after: Any) -> float:
    return float((before - after).abs().mean() / before.abs().mean())


def adam_states(algo: Any) -> dict:
    return {
        name: {k: v.clone() for k, v in algo.optimizer.state[p].items()}
        for name, p in algo.model.named_parameters()
        if p in algo.optimizer.state
    }


def check_optimizer(algo: Any, old: dict, fresh: set) -> None:
    params = dict(algo.model.named_parameters())
    assert sorted(id(p) for g in algo.optimizer.param_groups for p in g["params"]) == sorted(
        id(p) for p in params.values()
    )
    for name, param in params.items():
        state = algo.optimizer.state.get(param, {})
        if name in fresh:
            assert not state, name
        elif name in old:
            assert torch.equal(state["exp_avg"], old[name]["exp_avg"]), name


@pytest.mark.parametrize("variant", sorted(RNNS))
def test_widening_rnn_units_computes_exactly_the_same_function(
    tmp_path_factory: pytest.TempPathFactory, variant: str
) -> None:
    algo = recurrent(tmp_path_factory, variant)
    obs = observations(algo)
    before, moments = outputs(algo, obs), adam_states(algo)
    hidden = [s.clone() for s in algo.rnn_states]
    layers = surgery.current_spec(algo).rnn.layers
    fresh = surgery.apply_change(algo, rnn_change(algo, ADD_UNITS, 40, layers))
    assert surgery.current_spec(algo).rnn.units == 40
    assert all(
        s.shape[2] == 40 and torch.equal(s[:, :, :16], h) and not s[:, :, 16:].any()
        for s, h in zip(algo.rnn_states, hidden)
    )  # the episodes under way go on
    assert all(mb.shape[3] == 40 for mb in algo.mb_rnn_states)
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)
    state = algo.model.state_dict()
    for key in [k for k in fresh if ".rnn.weight_hh_l" in k]:
        gates = state[key].reshape(-1, 40, 40)
        assert not gates[:, :16, 16:].any() and gates[:, 16:].abs().sum() > 0  # old units never read new ones
    assert ("a2c_network.actor_mlp.0.weight" in fresh) == ("before" in variant)  # the RNN's reader
    check_optimizer(algo, moments, fresh)
    prepared(algo)  # the rebuilt model, optimizer and hidden states train


@pytest.mark.parametrize("variant", ["lstm-after", "gru-before-separate"])
def test_narrowing_and_rnn_layer_changes_are_measured(tmp_path_factory: pytest.TempPathFactory, variant: str) -> None:
    """Narrowing keeps the units read most; an added layer is a near-identity (about 1% here);
    removing the top layer is not function-preserving (the readers keep their weights)."""
    measured = {}
    algo = recurrent(tmp_path_factory, variant)
    obs = observations(algo)
    layers = surgery.current_spec(algo).rnn.layers
    for op, units, depth in ((REMOVE_UNITS, 8, layers), (ADD_LAYER, 8, layers + 1), (REMOVE_LAYER, 8, layers)):
        before = outputs(algo, obs)
        surgery.apply_change(algo, rnn_change(algo, op, units, depth))
        measured[op] = relative_change(before, outputs(algo, obs))
        spec = surgery.current_spec(algo).rnn
        assert (spec.units, spec.layers) == (units, depth)
        assert all(s.shape[0] == depth and s.shape[2] == units for s in algo.rnn_states)
        assert surgery.spec_problem(algo.model.state_dict(), surgery.current_spec(algo)) is None
        prepared(algo)
    print("measured relative output change:", variant, measured)
    assert 0 < measured[ADD_LAYER] < 0.03, measured
    assert 0 < measured[REMOVE_UNITS] < 1.0 and measured[REMOVE_LAYER] > 0, measured


@pytest.mark.parametrize("variant", sorted(CNNS))
@pytest.mark.parametrize("layer", [0, 1])
def test_widening_conv_filters_computes_exactly_the_same_function(
    tmp_path_factory: pytest.TempPathFactory, variant: str, layer: int
) -> None:
    algo = convolutional(tmp_path_factory, variant)
    obs = observations(algo)
    before, moments = outputs(algo, obs), adam_states(algo)
    fresh = surgery.apply_change(algo, cnn_change(algo, ADD_UNITS, layer, 20))
    assert surgery.current_spec(algo).cnn[layer].filters == 20
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)
    state = algo.model.state_dict()
    assert state[f"a2c_network.actor_cnn.{2 * layer}.weight"].shape[0] == 20
    assert state[f"a2c_network.actor_cnn.{2 * layer}.weight"][8:].abs().sum() > 0  # live new filters
    reader = f"a2c_network.actor_cnn.{2 * layer + 2}.weight" if layer == 0 else "a2c_network.actor_mlp.0.weight"
    assert reader in fresh and f"a2c_network.actor_cnn.{2 * layer}.bias" in fresh
    assert (f"a2c_network.critic_cnn.{2 * layer}.weight" in fresh) == (variant == "separate")
    assert "a2c_network.mu.weight" not in fresh
    check_optimizer(algo, moments, fresh)
    prepared(algo)


def test_narrowing_conv_filters_keeps_the_filters_read_most(tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = convolutional(tmp_path_factory, "shared")
    obs = observations(algo)
    before = outputs(algo, obs)
    state = algo.model.state_dict()
    reader = state["a2c_network.actor_mlp.0.weight"].reshape(64, 8, -1)
    strongest = set(torch.topk(reader.pow(2).sum((0, 2)), 4).indices.tolist())
    kernel = state["a2c_network.actor_cnn.2.weight"]
    surgery.apply_change(algo, cnn_change(algo, REMOVE_UNITS, 1, 4))
    after = algo.model.state_dict()["a2c_network.actor_cnn.2.weight"]
    kept = {i for i in range(8) if any(torch.equal(kernel[i], row) for row in after)}
    assert after.shape[0] == 4 and kept == strongest
    assert 0 < relative_change(before, outputs(algo, obs)) < 1.0
    assert surgery.spec_problem(algo.model.state_dict(), surgery.current_spec(algo)) is None


def test_parameter_noise_reaches_conv_kernels_and_rnn_weights(tmp_path_factory: pytest.TempPathFactory) -> None:
    from pbt.mutation.network import PARAMETERS

    for algo in (convolutional(tmp_path_factory, "shared"), recurrent(tmp_path_factory, "gru-after")):
        before = copy.deepcopy(algo.model.state_dict())
        spec = surgery.current_spec(algo)
        surgery.apply_change(algo, NetworkChange("parameters", spec, spec, PARAMETERS, seed=3))
        changed = {k for k, v in algo.model.state_dict().items() if not torch.equal(v, before[k])}
        assert any("actor_cnn" in k or "weight_hh" in k for k in changed), changed
        assert not any("bias" in k or "mean_std" in k for k in changed), changed


def test_a_donor_rnn_and_cnn_architecture_is_adopted_and_undone(tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = recurrent(tmp_path_factory, "lstm-after")
    donor = recurrent(tmp_path_factory, "lstm-after", "train.params.network.rnn.units=32")
    hidden = algo.rnn_states
    undo = surgery.swap_in(algo, surgery.current_spec(donor))
    assert [s.shape[2] for s in algo.rnn_states] == [32, 32] and not any(s.any() for s in algo.rnn_states)
    algo.set_full_state_weights(copy.deepcopy(donor.get_full_state_weights()), set_epoch=False)
    algo.rnn_states = [s.clone() for s in donor.rnn_states]
    obs = observations(algo)
    assert torch.equal(outputs(algo, obs), outputs(donor, obs))
    undo()
    assert algo.rnn_states is hidden and surgery.current_spec(algo).rnn.units == 16


def test_a_record_naming_blocks_its_checkpoint_lacks_is_caught_from_the_shapes(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    algo = recurrent(tmp_path_factory, "gru-after")
    state, spec = algo.model.state_dict(), surgery.current_spec(algo)
    assert surgery.spec_problem(state, spec) is None
    huge = type(spec)(spec.units, spec.activation, RnnSpec("gru", 65536, 16), spec.cnn)
    assert "rnn has 1 layers of shape (48, 16)" in surgery.spec_problem(state, huge)
    assert "has no CNN" in surgery.spec_problem(state, type(spec)(spec.units, spec.activation, spec.rnn,
                                                                  (ConvSpec(8, 3, 1, 0),)))
    assert "has RNN" in surgery.spec_problem(state, type(spec)(spec.units, spec.activation))


def conv_layers_change(algo: Any, op: str) -> NetworkChange:
    before = surgery.current_spec(algo)
    convs = before.cnn + (ConvSpec(before.cnn[-1].filters, 3, 1, 1),) if op == ADD_LAYER else before.cnn[:-1]
    after = type(before)(before.units, before.activation, before.rnn, convs)
    return NetworkChange("architecture", before, after, op, layer=len(before.cnn), seed=5, block="cnn")


@pytest.mark.parametrize("variant", sorted(CNNS))
def test_with_relu_an_added_conv_layer_is_exact_and_removing_it_again_too(tmp_path_factory: pytest.TempPathFactory,
                                                                        variant: str) -> None:
    algo = convolutional(tmp_path_factory, variant)
    obs = observations(algo)
    before, moments = outputs(algo, obs), adam_states(algo)
    fresh = surgery.apply_change(algo, conv_layers_change(algo, ADD_LAYER))
    assert len(surgery.current_spec(algo).cnn) == 3 and "a2c_network.actor_cnn.4.weight" in fresh
    assert isinstance(algo.model.a2c_network.actor_cnn[4], torch.nn.Conv2d)
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)  # relu(identity(relu(x))) = relu(x)
    check_optimizer(algo, moments, fresh)  # every configured layer keeps its Adam state
    surgery.apply_change(algo, conv_layers_change(algo, REMOVE_LAYER))  # an identity layer removed: exact
    assert torch.allclose(outputs(algo, obs), before, rtol=0, atol=1e-5)
    surgery.apply_change(algo, conv_layers_change(algo, ADD_LAYER))
    prepared(algo)  # the new layer trains
    trained = outputs(algo, obs)
    surgery.apply_change(algo, conv_layers_change(algo, REMOVE_LAYER))
    assert len(surgery.current_spec(algo).cnn) == 2
    assert surgery.spec_problem(algo.model.state_dict(), surgery.current_spec(algo)) is None
    assert 0 < relative_change(trained, outputs(algo, obs))  # a trained layer's removal changes the outputs


def test_under_rnn_layer_norm_widening_is_close_but_not_exact(tmp_path_factory: pytest.TempPathFactory) -> None:
    """rnn.layer_norm normalizes over every unit, the new ones too (documented as the exception)."""
    algo = recurrent(tmp_path_factory, "lstm-after", "+train.params.network.rnn.layer_norm=True")
    assert "a2c_network.layer_norm.weight" in algo.model.state_dict()
    obs = observations(algo)
    before = outputs(algo, obs)
    fresh = surgery.apply_change(algo, rnn_change(algo, ADD_UNITS, 40, 2))
    assert "a2c_network.layer_norm.weight" in fresh and algo.model.state_dict()["a2c_network.layer_norm.weight"].shape == (40,)
    change = relative_change(before, outputs(algo, obs))
    print("layer_norm widening: relative output change", change)
    assert 0 < change < 1.0
    surgery.apply_change(algo, rnn_change(algo, REMOVE_UNITS, 16, 2))
    assert surgery.spec_problem(algo.model.state_dict(), surgery.current_spec(algo)) is None
    prepared(algo)
