"""Objective tracking copies nothing to the host per env step (pbt/objective.py, the observer's
``process_infos``): on a GPU each such copy waits for the queued work (a sync). On the CPU the copies
are counted instead: every torch call that moves data to the host is wrapped while the steps run.
The steps are then read once (an epoch end) and must give what the per-step host path gives."""
from collections import Counter
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

import pytest

torch = pytest.importorskip("torch")

from pbt.objective import MemberObjective  # noqa: E402
from pbt.rl_games.observer import WorkerObserver  # noqa: E402
from pbt.rl_games.vecenv import EPISODE_RETURN_KEY  # noqa: E402

#: Tensor methods that bring data to the host (each a device sync on a GPU).
HOST_COPIES = ("tolist", "item", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "nonzero",
               "__iter__", "__len__")
NUM_ENVS = 64


def counting(monkeypatch: pytest.MonkeyPatch) -> Counter:
    counts: Counter = Counter()
    for name in HOST_COPIES:
        original = getattr(torch.Tensor, name)

        def wrapper(self: Any, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    original_to = torch.Tensor.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
            counts["to(cpu)"] += 1
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return counts


def steps(count: int) -> List[Tuple[Dict[str, Any], Any]]:
    """rl_games-shaped steps: infos of per-env tensors and the (k, 1) done indices rl_games computed."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(count):
        done = (torch.rand(NUM_ENVS, generator=gen) < 0.3).nonzero(as_tuple=False)
        infos = {EPISODE_RETURN_KEY: torch.randn(NUM_ENVS, generator=gen),
                 "true_objective": torch.randn(NUM_ENVS, generator=gen), "episode": {"success": torch.rand(())}}
        out.append((infos, done))
    return out


@pytest.mark.parametrize("key", ["true_objective", "episode.success", "episode_return", "not_reported"])
def test_env_steps_copy_nothing_to_the_host_and_one_read_gives_the_same_objective(
        monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    observer = WorkerObserver({"pbt": {"objective": key}})
    observer.score = MemberObjective(key, EPISODE_RETURN_KEY, NUM_ENVS)
    observer.first_step_pending = False
    observer.algo = SimpleNamespace(frame=0, current_lengths=torch.zeros(NUM_ENVS))
    reference = MemberObjective(key, EPISODE_RETURN_KEY, NUM_ENVS)  # the per-step host path
    data = steps(40)
    for infos, done in data:
        reference.update(infos, [int(i) for i in done.reshape(-1).numpy()])
    counts = counting(monkeypatch)
    for infos, done in data:
        observer.process_infos(infos, done)
    assert sum(counts.values()) == 0, counts  # no host copy in any of the 40 steps
    objective, recent = observer.objective(), observer.score.recent  # the epoch end's read
    assert sum(counts.values()) <= 4, counts  # one copy of indices and one of values per tracker
    monkeypatch.undo()
    assert objective is not None and reference.value is not None
    assert objective == pytest.approx(reference.value, rel=1e-6)
    assert recent == pytest.approx(reference.recent, rel=1e-6)
    assert observer.score.reported.seen == reference.reported.seen


def test_a_step_given_as_a_list_after_deferred_ones_keeps_their_order() -> None:
    score = MemberObjective("true_objective", EPISODE_RETURN_KEY, 2)
    score.update({"true_objective": torch.tensor([1.0, 2.0])}, torch.tensor([[0], [1]]))
    score.update({"true_objective": torch.tensor([3.0, 4.0])}, torch.tensor([[0], [1]]))
    score.update({"true_objective": [5.0, 6.0]}, [1])  # e.g. a task reporting lists
    # first episodes are partial and never count (pbt/objective.py): 1.0 and 2.0 are left out
    assert score.value == pytest.approx((3.0 + 6.0) / 2) and score.recent == [3.0, 4.0, 6.0]
