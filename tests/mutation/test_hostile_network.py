"""A peer's record naming a network (issue 25, item 4): a member adopts it only inside its own
configured limits (max_units, max_layers, activations), and the spec is compared with the
checkpoint's tensor shapes before anything is built; pbt.play does the same and caps the file."""
import random
from pathlib import Path

import pytest

from pbt.errors import CorruptRecordError
from pbt.mutation.network import NetworkMutationConfig, NetworkSpec, NetworkTracker

ARCH = NetworkMutationConfig(none=0.0, architecture=1.0, parameters=0.0, activation=0.0, hyperparameters=0.0)
OWN = NetworkSpec((64, 64), "elu")


@pytest.mark.parametrize("donor", [{"units": [65536, 65536], "activation": "elu"},
                                   {"units": [256] * 64, "activation": "elu"},
                                   {"units": [64], "activation": "softplus"}])
def test_a_donor_network_outside_the_limits_is_never_the_base(donor: dict) -> None:
    tracker = NetworkTracker(ARCH, OWN)
    rng = random.Random(0)
    change = tracker.plan(tracker.draw(rng), donor, rng)
    assert change is not None and change.before == OWN
    assert all(u <= ARCH.max_units for u in change.after.units) and len(change.after.units) <= ARCH.max_layers
    assert tracker.resume(donor, "member 3's record") is not None and tracker.spec == OWN


def test_a_donor_network_inside_the_limits_is_still_adopted() -> None:
    tracker = NetworkTracker(ARCH, OWN)
    rng = random.Random(0)
    change = tracker.plan(tracker.draw(rng), {"units": [128], "activation": "relu"}, rng)
    assert change is not None and change.before == NetworkSpec((128,), "relu")


def test_the_spec_is_checked_against_the_checkpoint_shapes_before_building() -> None:
    torch = pytest.importorskip("torch")
    from pbt.rl_games.surgery import spec_problem

    model = {"a2c_network.actor_mlp.0.weight": torch.zeros(64, 3), "a2c_network.actor_mlp.2.weight": torch.zeros(64, 64),
             "a2c_network.mu.weight": torch.zeros(1, 64)}
    assert spec_problem(model, OWN) is None
    assert "layer 0 has shape (64, 3)" in spec_problem(model, NetworkSpec((65536, 65536), "elu"))
    assert "hidden layers" in spec_problem(model, NetworkSpec((4096,) * 64, "elu"))
    assert spec_problem("junk", OWN) is not None and spec_problem({}, OWN) is not None


def test_play_refuses_a_network_outside_the_configured_limits_and_a_huge_file(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from pbt.storage.checkpoints import load_state_file
    from pbt.tools.play import network_limits_problem

    cfg = {"pbt": {"network_mutation": {"max_units": 256, "max_layers": 4}}}
    assert "outside min_units..max_units" in network_limits_problem(cfg, NetworkSpec((65536, 65536), "relu"))
    assert network_limits_problem(cfg, NetworkSpec((64, 64), "relu")) is None
    assert network_limits_problem({"pbt": {}}, NetworkSpec((65536,), "relu")) is None  # no limits configured
    big = tmp_path / "big.pth"
    big.write_bytes(b"\0" * 100)
    with pytest.raises(CorruptRecordError, match="over the 10 byte cap"):
        load_state_file(big, max_bytes=10)
