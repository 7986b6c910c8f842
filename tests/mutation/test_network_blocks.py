"""The pure part of RNN and CNN network mutations (pbt/mutation/network_blocks.py): the blocks read
from the composed config (unsupported variants refused at start-up), limits checked at start-up and
on donors and resumed records (untrusted), records and overrides naming the whole architecture, and
architecture changes reaching every block inside the limits. No torch (runs on Python 3.8)."""
import random
from typing import Any, Dict

import pytest

from pbt.errors import ConfigError
from pbt.mutation.network import (ADD_LAYER, ADD_UNITS, ARCHITECTURE, REMOVE_LAYER, REMOVE_UNITS,
                                  NetworkMutationConfig, NetworkSpec, NetworkTracker, plan_change, spec_from_config,
                                  validate_start)
from pbt.mutation.network_blocks import ConvSpec, RnnSpec

CONVS = [{"filters": 8, "kernel_size": 3, "strides": 1, "padding": 0},
         {"filters": 16, "kernel_size": 2, "strides": 1, "padding": 1}]
ARCH = NetworkMutationConfig(none=0.0, architecture=1.0, parameters=0.0, activation=0.0, hyperparameters=0.0)


def cfg(**network: Any) -> Dict[str, Any]:
    return {"train": {"params": {"network": {"name": "actor_critic", "separate": False,
                                             "mlp": {"units": [32], "activation": "elu", "d2rl": False},
                                             **network}, "config": {}}}}


def lstm(units: int = 64, layers: int = 1, **extra: Any) -> Dict[str, Any]:
    return {"name": "lstm", "units": units, "layers": layers, "before_mlp": True, **extra}


def cnn(**extra: Any) -> Dict[str, Any]:
    return {"type": "conv2d", "activation": "relu", "initializer": {"name": "default"}, "convs": CONVS, **extra}


def test_the_rnn_and_cnn_blocks_are_read_from_the_config() -> None:
    spec = spec_from_config(cfg(rnn=lstm(), cnn=cnn()))
    assert spec.rnn == RnnSpec("lstm", 64, 1)
    assert spec.cnn == (ConvSpec(8, 3, 1, 0), ConvSpec(16, 2, 1, 1))
    assert spec.describe() == "[32] elu, lstm 64x1, cnn [8, 16]"
    assert spec_from_config(cfg()).rnn is None and spec_from_config(cfg()).cnn == ()


@pytest.mark.parametrize("network, message", [
    ({"rnn": lstm(concat_input=True)}, "rnn.concat_input"),
    ({"rnn": lstm(concat_output=True)}, "rnn.concat_output"),
    ({"rnn": {"name": "identity", "units": 4, "layers": 1}}, "must be one of lstm, gru"),
    ({"cnn": cnn(type="coord_conv2d")}, "cnn.type='coord_conv2d'"),
    ({"cnn": cnn(), "normalization": "layer_norm"}, "normalization='layer_norm' with a cnn block"),
    ({"cnn": cnn(convs=[{"filters": 8, "kernel_size": [3, 5], "strides": 1, "padding": 0}])}, "square kernels"),
])
def test_unsupported_variants_are_refused_at_start_up_saying_what(network: Dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        validate_start(ARCH, cfg(**network))


def test_the_starting_blocks_must_lie_inside_the_limits() -> None:
    with pytest.raises(ConfigError, match=r"768 RNN units, outside min_rnn_units..max_rnn_units 8..512"):
        validate_start(NetworkMutationConfig(max_rnn_units=512), cfg(rnn=lstm(768)))
    with pytest.raises(ConfigError, match=r"3 RNN layers, outside min_rnn_layers..max_rnn_layers 1..2"):
        validate_start(ARCH, cfg(rnn=lstm(64, 3)))
    with pytest.raises(ConfigError, match=r"conv layers of \[16\] filters, outside min_filters..max_filters 4..12"):
        validate_start(NetworkMutationConfig(max_filters=12), cfg(cnn=cnn()))
    with pytest.raises(ConfigError, match="min_rnn_units=64 and max_rnn_units=32"):
        NetworkMutationConfig(min_rnn_units=64, max_rnn_units=32)
    with pytest.raises(ConfigError, match="filter_changes"):
        NetworkMutationConfig(filter_changes=())


def test_records_and_overrides_name_the_whole_architecture() -> None:
    spec = spec_from_config(cfg(rnn=lstm(), cnn=cnn()))
    record = spec.to_dict()
    assert record == {"units": [32], "activation": "elu", "rnn": "lstm", "rnn_units": 64, "rnn_layers": 1,
                      "cnn_filters": [8, 16], "cnn_kernels": [3, 2], "cnn_strides": [1, 1], "cnn_padding": [0, 1]}
    assert all(isinstance(v, (str, int, list)) for v in record.values())  # a record holds scalars and lists only
    assert NetworkSpec.from_dict(record) == spec
    assert spec.overrides() == {"train.params.network.mlp.units": [32], "train.params.network.mlp.activation": "elu",
                                "train.params.network.rnn.units": 64, "train.params.network.rnn.layers": 1,
                                "train.params.network.cnn.convs": CONVS}
    assert NetworkSpec.from_dict({"units": [32], "activation": "elu"}) == NetworkSpec((32,), "elu")  # older records


@pytest.mark.parametrize("hostile", [{"rnn": "lstm", "rnn_units": 1 << 20, "rnn_layers": 1},
                                     {"rnn": "lstm", "rnn_units": "64", "rnn_layers": 1},
                                     {"rnn": "rnn", "rnn_units": 64, "rnn_layers": 1},
                                     {"rnn": "lstm", "rnn_units": 64, "rnn_layers": 100},
                                     {"cnn_filters": [8], "cnn_kernels": [3, 3], "cnn_strides": [1], "cnn_padding": [0]},
                                     {"cnn_filters": [-8], "cnn_kernels": [3], "cnn_strides": [1], "cnn_padding": [0]},
                                     {"cnn_filters": [8] * 100, "cnn_kernels": [3], "cnn_strides": [1], "cnn_padding": [0]},
                                     {"cnn_filters": [8], "cnn_kernels": [1000], "cnn_strides": [1], "cnn_padding": [0]}])
def test_a_hostile_record_network_is_refused(hostile: Dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        NetworkSpec.from_dict({"units": [32], "activation": "elu", **hostile})


def own_tracker() -> NetworkTracker:
    return NetworkTracker(ARCH, spec_from_config(cfg(rnn=lstm(), cnn=cnn())))


@pytest.mark.parametrize("donor", [
    {"rnn": "lstm", "rnn_units": 4096, "rnn_layers": 1},  # over max_rnn_units
    {"rnn": "lstm", "rnn_units": 64, "rnn_layers": 8},  # over max_rnn_layers
    {"rnn": "gru", "rnn_units": 64, "rnn_layers": 1},  # another cell
    {"rnn": "lstm", "rnn_units": 64, "rnn_layers": 1, "cnn_filters": [8, 1024]},  # over max_filters
    {"rnn": "lstm", "rnn_units": 64, "rnn_layers": 1, "cnn_kernels": [5, 2]},  # other kernels
    {"cnn_filters": [8, 16]},  # no RNN
])
def test_a_donor_outside_the_limits_or_unlike_this_member_is_never_adopted(donor: Dict[str, Any]) -> None:
    tracker = own_tracker()
    own = tracker.spec.to_dict()
    network = {**own, **donor}
    if "rnn" not in donor:
        network = {k: v for k, v in network.items() if not k.startswith("rnn")}
    rng = random.Random(0)
    tracker.draw(rng)
    change = tracker.plan(True, network, rng)
    assert change is not None and change.before == tracker.start
    assert tracker.resume(network, "member 3's record") is not None and tracker.spec == tracker.start


def test_a_donor_inside_the_limits_is_adopted() -> None:
    tracker = own_tracker()
    network = {**tracker.spec.to_dict(), "rnn_units": 128, "rnn_layers": 2, "cnn_filters": [12, 16]}
    rng = random.Random(0)
    tracker.draw(rng)
    change = tracker.plan(True, network, rng)
    assert change is not None and change.before.rnn == RnnSpec("lstm", 128, 2)
    assert change.before.cnn[0].filters == 12


def test_architecture_changes_reach_every_block_inside_the_limits() -> None:
    settings = NetworkMutationConfig(none=0.0, architecture=1.0, parameters=0.0, activation=0.0, hyperparameters=0.0,
                                     new_layer=0.5, max_rnn_units=80, min_rnn_units=48, filter_changes=(4, 64),
                                     max_filters=20)
    spec = spec_from_config(cfg(rnn=lstm(), cnn=cnn()))
    rng = random.Random(1)
    seen = set()
    for _ in range(300):
        change = plan_change(spec, ARCHITECTURE, settings, rng)
        seen.add((change.block, change.op))
        after = change.after
        assert not settings.check_spec(after, "after", spec), change.describe()
        if change.block == "rnn":
            assert after.units == spec.units and after.cnn == spec.cnn and change.describe().startswith("network rnn")
        if change.block == "cnn" and change.changes_network:
            assert after.rnn == spec.rnn and change.layer is not None
            if change.op in (ADD_UNITS, REMOVE_UNITS):
                assert [c.filters for i, c in enumerate(after.cnn) if i != change.layer] == \
                    [c.filters for i, c in enumerate(spec.cnn) if i != change.layer]
        spec = after if change.changes_network else spec
    assert {("rnn", op) for op in (ADD_UNITS, REMOVE_UNITS, ADD_LAYER, REMOVE_LAYER)} <= seen
    assert {("cnn", ADD_UNITS), ("cnn", REMOVE_UNITS), ("cnn", ADD_LAYER), ("cnn", REMOVE_LAYER),
            ("mlp", ADD_UNITS)} <= seen


def test_only_an_added_or_shape_keeping_last_conv_layer_is_removed() -> None:
    from pbt.mutation.network_blocks import plan_cnn

    settings = NetworkMutationConfig(min_conv_layers=1, max_conv_layers=2)
    configured = (ConvSpec(8, 3, 1, 0), ConvSpec(16, 2, 1, 1))  # kernel 2: the shape changes
    op, _, _, why = plan_cnn(configured, settings, random.Random(0), new_layer=True)
    assert op == "none" and "max_conv_layers" in why
    op, layer, grown, _ = plan_cnn(configured[:1], settings, random.Random(0), new_layer=True)
    assert (op, layer, grown) == ("add_layer", 1, (ConvSpec(8, 3, 1, 0), ConvSpec(8, 3, 1, 1)))
    op, layer, shrunk, _ = plan_cnn(grown, NetworkMutationConfig(max_conv_layers=2), random.Random(0), True)
    assert (op, shrunk) == ("remove_layer", configured[:1])


@pytest.mark.parametrize("extra, adopted", [((8, 3, 1, 1), True), ((16, 3, 1, 1), True), ((16, 5, 1, 2), False)])
def test_a_donor_with_an_added_conv_layer_is_adopted_only_if_mutations_could_add_it(extra: Any, adopted: bool) -> None:
    tracker = own_tracker()
    own = tracker.spec.to_dict()
    filters, kernel, stride, padding = extra
    network = {**own, "cnn_filters": own["cnn_filters"] + [filters], "cnn_kernels": own["cnn_kernels"] + [kernel],
               "cnn_strides": own["cnn_strides"] + [stride], "cnn_padding": own["cnn_padding"] + [padding]}
    problem = tracker.settings.check_spec(NetworkSpec.from_dict(network), "donor", tracker.start)
    assert (not problem) == adopted, problem


def test_an_mlp_only_network_draws_as_before() -> None:
    """No block draw without an RNN or CNN: a population's architecture changes stay reproducible."""
    spec = NetworkSpec((32,), "elu")
    a = [plan_change(spec, ARCHITECTURE, ARCH, random.Random(s)) for s in range(20)]
    assert all(change.block == "mlp" for change in a)
    assert [c.after for c in a] == [plan_change(spec, ARCHITECTURE, ARCH, random.Random(s)).after for s in range(20)]
