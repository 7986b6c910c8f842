"""Checkpoints load on a torch without ``torch.serialization.safe_globals`` (< 2.5; Isaac Gym's
Python 3.8 stops at torch 2.4): simulated by deleting the attributes torch 2.4 lacks, so loading
goes through the allow-list unpickler of ``pbt.storage.unpickler``. Every checkpoint kind (own,
donor, a ``checkpoint=`` file for play or resume, an rl_games file with numpy scalars) loads;
everything the hostile-peer tests plant is still refused and runs no code."""
import collections
import io
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pbt.errors import UnsafeCheckpointError
from pbt.storage import Workspace
from pbt.storage.checkpoints import deserialize_checkpoint, load_state_file, model_fingerprint, serialize_state

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import hostile_peer  # noqa: E402


@pytest.fixture(autouse=True)
def torch_2_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """What torch 2.4 lacks (``safe_globals``); the fallback uses no other weights-only API
    (``add_safe_globals`` stays: torch.distributed calls it on import here)."""
    monkeypatch.delattr(torch.serialization, "safe_globals")


def agent_state() -> dict:
    """What the rl_games adapters put in a checkpoint: model and optimizer state, numbers, a Parameter."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ELU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model(torch.ones(5, 3)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 7, "frame": 4096,
            "last_mean_rewards": -1.5, "sigma": torch.nn.Parameter(torch.zeros(2)), "shape": torch.Size([2, 3]),
            "dtype": torch.float16, "device": torch.device("cpu"), "z": 1 + 2j, "raw": b"\x00\xff",
            "env_state": collections.OrderedDict(running_mean=torch.arange(3.0)), "names": ["a", ("b", None)]}


def assert_same(loaded: dict, original: dict) -> None:
    assert model_fingerprint(loaded["model"]) == model_fingerprint(original["model"])
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 3e-4
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], original["optimizer"]["state"][0]["exp_avg"])
    assert type(loaded["sigma"]) is torch.nn.Parameter and loaded["shape"] == torch.Size([2, 3])
    assert loaded["dtype"] is torch.float16 and loaded["device"] == torch.device("cpu")
    assert loaded["z"] == 1 + 2j and loaded["raw"] == b"\x00\xff" and loaded["names"] == ["a", ("b", None)]
    assert type(loaded["env_state"]) is collections.OrderedDict


def test_own_and_donor_checkpoints_load(tmp_path: Path) -> None:
    state = agent_state()
    own, donor = Workspace(tmp_path, 0, 2), Workspace(tmp_path, 1, 2)
    own.publish(1, 100, 1.0, {"lr": 3e-4}, serialize_state(state))
    donor.publish(1, 100, 2.0, {"lr": 3e-4}, serialize_state(state))
    assert_same(own.load_checkpoint(own.latest_record(0)), state)  # resume and rollback
    peers = own.latest_records()
    assert_same(own.load_checkpoint(peers[1]), state)  # an exploit's donor


def test_a_checkpoint_file_loads_for_play(tmp_path: Path) -> None:
    state = agent_state()
    path = tmp_path / "best.pth"
    path.write_bytes(serialize_state(state))
    assert_same(load_state_file(path), state)


def test_an_rl_games_file_with_numpy_scalars_loads(tmp_path: Path) -> None:
    path = tmp_path / "rl_games.pth"
    torch.save({"model": {"w": torch.ones(2)}, "last_mean_rewards": np.float32(-3.5), "n": np.int64(7),
                "ok": np.bool_(True)}, str(path))
    state = load_state_file(path)
    assert state["last_mean_rewards"] == np.float32(-3.5) and state["n"] == 7 and state["ok"]
    with pytest.raises(UnsafeCheckpointError, match="not a plain number"):
        deserialize_checkpoint(hostile_peer.numpy_object_dtype_checkpoint(), "planted")


def test_a_code_running_pickle_is_refused_before_it_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(UnsafeCheckpointError, match="not allowed"):
        deserialize_checkpoint(hostile_peer.pickle_checkpoint(str(marker)), "planted")
    assert not marker.exists()


class Hooked:
    """Pickles as a tensor rebuilt with a backward hook (torch.save never writes hooks itself)."""

    def __reduce__(self) -> tuple:
        storage = torch.storage.TypedStorage(wrap_storage=torch.ones(1).untyped_storage(), dtype=torch.float32,
                                             _internal=True)
        return torch._utils._rebuild_tensor_v2, (storage, 0, (1,), (1,), True,
                                                 collections.OrderedDict([(0, torch.Size)]))


@pytest.mark.parametrize("make", ["legacy", "torchscript", "hooks", "codecs", "plain pickle", "bytes"])
def test_other_formats_and_globals_are_refused(make: str) -> None:
    buffer = io.BytesIO()
    if make == "legacy":
        torch.save({"w": torch.ones(1)}, buffer, _use_new_zipfile_serialization=False)
    elif make == "torchscript":
        torch.jit.save(torch.jit.script(torch.nn.Linear(1, 1)), buffer)
    elif make == "hooks":
        torch.save({"w": Hooked()}, buffer)
    elif make == "codecs":
        buffer.write(hostile_peer._torch_zip(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00utf_7\x86R."))
    elif make == "plain pickle":
        buffer.write(pickle.dumps({"w": 1}))
    else:
        buffer.write(b"not a checkpoint at all")
    reason = {"legacy": "legacy torch.save format", "torchscript": "TorchScript archive", "hooks": "backward hooks",
              "codecs": "latin-1 bytes only", "plain pickle": "not a torch zip", "bytes": "not a torch zip"}[make]
    with pytest.raises(UnsafeCheckpointError, match=reason):
        deserialize_checkpoint(buffer.getvalue(), make)


# ---- hypothesis: random pickles in a torch zip, through the allow-list unpickler -------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pbt.errors import PbtError  # noqa: E402

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), st.binary(max_size=8),
                    st.complex_numbers(allow_nan=False))
trees = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.tuples(c, c),
                                                   st.dictionaries(st.text(max_size=8), c, max_size=4)),
                     max_leaves=30)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=trees, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), noise=st.binary(max_size=64),
       cut=st.integers(0, 64))
def test_random_pickles_load_as_plain_data_or_are_refused(tree: object, protocol: int, noise: bytes, cut: int) -> None:
    data = pickle.dumps(tree, protocol=protocol)
    for payload in (data, data[:cut] + noise + data[cut:]):
        try:
            state = deserialize_checkpoint(hostile_peer._torch_zip(payload), "random")
        except PbtError:
            continue
        assert isinstance(state, dict)
