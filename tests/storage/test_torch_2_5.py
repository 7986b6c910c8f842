"""Checkpoints load on torch 2.5: ``torch.serialization.safe_globals`` exists there, but its loader
names every entry by the entry's own ``__module__``/``__name__``, so the ``(obj, "numpy.dtype")`` pairs
our numpy stand-ins need (torch >= 2.6) fail with AttributeError at load time. The loader must take
the allow-list unpickler on 2.5 as on 2.4 (``test_old_torch.py``). Simulated here by reporting version
2.5.1 and replacing ``safe_globals`` with one that behaves as 2.5's does with such pairs: had the
loader used it, every load below would fail ("not a loadable torch checkpoint")."""
import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, List

import numpy as np
import pytest
import torch

from pbt.errors import UnsafeCheckpointError
from pbt.storage.checkpoints import deserialize_checkpoint, load_state_file

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import hostile_peer  # noqa: E402


def safe_globals_of_torch_2_5(real: Callable[[List[Any]], Any]) -> Callable[[List[Any]], Any]:
    """torch 2.5's ``safe_globals``: a list of globals, each allowed under ``f"{g.__module__}.{g.__name__}"``
    (read by the loader; here on entry, which fails the same way for an ``(obj, name)`` pair)."""

    @contextlib.contextmanager
    def safe_globals(entries: List[Any]) -> Iterator[None]:
        for entry in entries:
            _ = f"{entry.__module__}.{entry.__name__}"  # AttributeError: 'tuple' object has no attribute '__module__'
        with real(entries):
            yield

    return safe_globals


@pytest.fixture(autouse=True)
def torch_2_5(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    monkeypatch.setattr(torch.serialization, "safe_globals", safe_globals_of_torch_2_5(torch.serialization.safe_globals))


def test_the_stand_in_refuses_named_pairs_as_torch_2_5_does() -> None:
    with pytest.raises(AttributeError, match="'tuple' object has no attribute '__module__'"):
        with torch.serialization.safe_globals([(np.dtype, "numpy.dtype")]):
            pass


def test_an_rl_games_file_with_numpy_scalars_loads(tmp_path: Path) -> None:
    path = tmp_path / "rl_games.pth"
    torch.save({"model": {"w": torch.ones(2)}, "last_mean_rewards": np.float32(-3.5), "n": np.int64(7),
                "ok": np.bool_(True)}, str(path))
    state = load_state_file(path)
    assert torch.equal(state["model"]["w"], torch.ones(2))
    assert state["last_mean_rewards"] == np.float32(-3.5) and state["n"] == 7 and state["ok"]


def refusal(data: bytes) -> str:
    with pytest.raises(UnsafeCheckpointError) as refused:
        deserialize_checkpoint(data, "planted")
    return str(refused.value)


def test_hostile_checkpoints_are_refused_as_on_torch_2_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "pwned"
    planted = [hostile_peer.pickle_checkpoint(str(marker)), hostile_peer.numpy_object_dtype_checkpoint()]
    on_2_5 = [refusal(data) for data in planted]
    monkeypatch.delattr(torch.serialization, "safe_globals")  # torch 2.4 (test_old_torch.py)
    on_2_4 = [refusal(data) for data in planted]
    assert on_2_5 == on_2_4
    assert "is not allowed in a checkpoint" in on_2_5[0]
    assert "not a plain number" in on_2_5[1]
    assert not marker.exists()
