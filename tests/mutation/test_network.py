"""The pure part of network mutations (pbt/mutation/network.py): settings validated at start-up,
one kind drawn per explore step with the configured probabilities, changes inside the limits.
No torch (runs on Python 3.8)."""
import random
from typing import Any, Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.mutation.network import (ACTIVATION, ADD_LAYER, ADD_UNITS, ARCHITECTURE, HYPERPARAMETERS, KINDS, NONE,
                                  PARAMETERS, REMOVE_LAYER, REMOVE_UNITS, NetworkMutationConfig, NetworkSpec,
                                  NetworkTracker, draw_kind, plan_change, spec_from_config, to_network_mutation,
                                  validate_start)


def cfg(units: Any = (16,), activation: str = "elu", **network: Any) -> Dict[str, Any]:
    return {"train": {"params": {"network": {"name": "actor_critic", "separate": False,
                                             "mlp": {"units": list(units), "activation": activation, "d2rl": False},
                                             **network}, "config": {}}}}


def test_the_agilerl_defaults_parse_and_round_trip() -> None:
    import yaml

    from pbt.config import hydra_nodes
    from pbt.mutation import DEFAULT_MUTATION

    # pbt/mutation=agilerl composes the default scheme and the generated network_mutation node
    data = {"mutation": dict(DEFAULT_MUTATION), "network_mutation": hydra_nodes()["network_mutation"]}
    pbt = PbtConfig.from_mapping(data)
    network = pbt.explore.network_mutation
    assert isinstance(network, NetworkMutationConfig) and network.architecture == 0.3
    assert "train.params.config.gamma" in pbt.explore.mutation
    assert PbtConfig.from_mapping(pbt.to_dict()) == pbt
    assert yaml.safe_load(yaml.safe_dump(pbt.to_dict()))["network_mutation"]["unit_changes"] == [16, 32, 64]
    assert PbtConfig().explore.network_mutation is None  # default scheme: only hyperparameters


@pytest.mark.parametrize("block, message", [
    ({"none": 0.5}, "sum to 1.4"),
    ({"architecture": -0.1, "none": 0.5}, "must be a probability in"),
    ({"architecture": "a lot"}, "must be a probability in"),
    ({"new_layer": 1.5}, "new_layer=1.5 must be a probability"),
    ({"mutation_sd": 0}, "mutation_sd=0 must be a finite number > 0"),
    ({"min_layers": 3, "max_layers": 2}, "min_layers <= max_layers"),
    ({"min_units": 0}, "min_units=0 must be a whole number >= 1"),
    ({"min_units": 64, "max_units": 32}, "min_units <= max_units"),
    ({"unit_changes": []}, "unit_changes=[] must be a non-empty list"),
    ({"unit_changes": "16"}, "must be a list"),
    ({"activations": ["relu", "elux"]}, "Did you mean 'elu'"),
    ({"activations": []}, "activations is empty"),
    ({"architecure": 0.3}, "Did you mean 'architecture'"),
])
def test_bad_probabilities_and_limits_are_refused_with_the_fix(block: Dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        PbtConfig.from_mapping({"network_mutation": block})
    assert message in str(info.value), str(info.value)
    assert "pbt.network_mutation" in str(info.value)


def test_the_starting_network_must_fit_the_limits() -> None:
    settings_ = to_network_mutation("network_mutation", {"max_units": 64, "max_layers": 2})
    assert validate_start(settings_, cfg((16, 32))) == NetworkSpec((16, 32), "elu")
    with pytest.raises(ConfigError, match=r"layers of \[128\] units, outside min_units..max_units 8..64"):
        validate_start(settings_, cfg((128,)))
    with pytest.raises(ConfigError, match="3 hidden layers, outside min_layers..max_layers 1..2"):
        validate_start(settings_, cfg((16, 16, 16)))
    with pytest.raises(ConfigError, match="activation 'selu', not in activations"):
        validate_start(settings_, cfg((16,), "selu"))
    with pytest.raises(ConfigError, match="rnn"):
        validate_start(settings_, cfg((16,), rnn={"name": "lstm"}))
    with pytest.raises(ConfigError, match="torch_compile=false"):
        validate_start(settings_, {**cfg((16,)), "rl_device": "cuda:0"})
    on_gpu = cfg((16,))
    on_gpu["train"]["params"]["config"]["torch_compile"] = False
    assert validate_start(settings_, {**on_gpu, "rl_device": "cuda:0"}).units == (16,)
    with pytest.raises(ConfigError, match="actor_critic MLP"):
        spec_from_config({"train": {"params": {"network": {"name": "resnet_actor_critic"}}}})
    with pytest.raises(ConfigError, match="units must be a list"):
        spec_from_config(cfg(()))


def test_kinds_are_drawn_with_their_probabilities() -> None:
    settings_ = NetworkMutationConfig(none=0.1, architecture=0.4, parameters=0.2, activation=0.0, hyperparameters=0.3)
    rng = random.Random(7)
    counts = {kind: 0 for kind in KINDS}
    for _ in range(20000):
        counts[draw_kind(settings_, rng)] += 1
    assert counts[ACTIVATION] == 0
    for kind, share in ((NONE, 0.1), (ARCHITECTURE, 0.4), (PARAMETERS, 0.2), (HYPERPARAMETERS, 0.3)):
        assert abs(counts[kind] / 20000 - share) < 0.02, counts


def test_only_the_hyperparameters_kind_lets_the_scheme_mutate() -> None:
    settings_ = NetworkMutationConfig(none=0.0, architecture=1.0, parameters=0.0, activation=0.0, hyperparameters=0.0)
    tracker = NetworkTracker(settings_, NetworkSpec((16,), "elu"))
    assert tracker.draw(random.Random(1)) == ARCHITECTURE
    change = tracker.plan(ARCHITECTURE, {"units": [32, 32], "activation": "tanh"}, random.Random(1))
    assert change is not None and change.before == NetworkSpec((32, 32), "tanh")  # from the donor's network
    assert change.changes_network and change.after != change.before


@settings(max_examples=300, deadline=None)
@given(units=st.lists(st.integers(8, 256), min_size=1, max_size=4), seed=st.integers(0, 2 ** 32),
       kind=st.sampled_from([ARCHITECTURE, ACTIVATION, PARAMETERS, NONE]), new_layer=st.floats(0, 1))
def test_changes_stay_inside_the_limits_and_say_what_they_did(units: Any, seed: int, kind: str, new_layer: float) -> None:
    settings_ = NetworkMutationConfig(new_layer=new_layer)
    spec = NetworkSpec(tuple(units), "elu")
    change = plan_change(spec, kind, settings_, random.Random(seed))
    after = change.after
    assert change.before == spec and settings_.check_spec(after, "after") == []
    assert change == plan_change(spec, kind, settings_, random.Random(seed))  # reproducible
    if change.op == ADD_LAYER:
        assert after.units == spec.units + (spec.units[-1],)
    elif change.op == REMOVE_LAYER:
        assert after.units == spec.units[:-1]
    elif change.op in (ADD_UNITS, REMOVE_UNITS):
        layer = change.layer
        assert layer is not None and after.units[:layer] == spec.units[:layer]
        assert (after.units[layer] > spec.units[layer]) == (change.op == ADD_UNITS)
    elif change.op == ACTIVATION:
        assert after.units == spec.units and after.activation in ("relu", "tanh")
    else:
        assert after == spec
    assert kind != ARCHITECTURE or change.op in (ADD_LAYER, REMOVE_LAYER, ADD_UNITS, REMOVE_UNITS, NONE)


def test_a_network_at_every_limit_is_kept_with_the_reason() -> None:
    settings_ = NetworkMutationConfig(min_layers=1, max_layers=1, min_units=16, max_units=16, new_layer=1.0,
                                      activations=("elu",))
    spec = NetworkSpec((16,), "elu")
    layer = plan_change(spec, ARCHITECTURE, settings_, random.Random(0))
    assert not layer.changes_network and "min_layers = max_layers" in layer.describe()
    units = plan_change(spec, ARCHITECTURE, NetworkMutationConfig(min_units=16, max_units=16, new_layer=0.0,
                                                                  activations=("elu",)), random.Random(0))
    assert not units.changes_network and "min_units and max_units" in units.describe()
    assert "no other allowed activation" in plan_change(spec, ACTIVATION, settings_, random.Random(0)).describe()


def test_a_recorded_network_is_checked_before_it_is_used() -> None:
    tracker = NetworkTracker(NetworkMutationConfig(), NetworkSpec((16,), "elu"))
    assert tracker.resume({"units": [48, 16], "activation": "tanh", "parameters": 999}, "rec") is None
    assert tracker.spec == NetworkSpec((48, 16), "tanh")
    for junk in ({"units": [0], "activation": "elu"}, {"units": [16], "activation": "os.system"}, [16], {"units": "16"}):
        assert tracker.resume(junk, "its record") is not None
        assert tracker.spec == NetworkSpec((48, 16), "tanh")
    tracker.parameters = 1234
    assert tracker.record_value() == {"units": [48, 16], "activation": "tanh", "parameters": 1234}
    assert NetworkSpec((48, 16), "tanh").overrides() == {"train.params.network.mlp.units": [48, 16],
                                                         "train.params.network.mlp.activation": "tanh"}
