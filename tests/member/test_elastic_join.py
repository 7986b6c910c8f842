"""A joiner of an elastic population (issue 25, item 5) takes its donor only among members alive and
training, and only a frame count that is plausible: a finished heartbeat, a frame of 2**53 or a
frame that is not the record's iteration never make a joiner "finish" at once."""
import random
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pbt.config import PbtConfig  # noqa: E402
from pbt.elastic import ElasticPopulation  # noqa: E402
from pbt.storage import Workspace  # noqa: E402
from pbt.storage.liveness import ALIVE, FINISHED, RUNNING, Beat, PeerStatus  # noqa: E402

LR = "train.params.config.learning_rate"
INTERVAL = 1000


def publish(root: Path, idx: int, iteration: int, frame: int, objective: float) -> None:
    Workspace(root, idx, None).save(iteration, frame, objective, {LR: 1e-3}, {"model": {}, "frame": frame, "epoch": 1})


def status(state: str) -> PeerStatus:
    return PeerStatus(ALIVE, 1.0, Beat(pid=1, host="h", token="t", time=time.time(), frame=1, state=state))


def test_only_a_training_donor_with_a_plausible_frame_is_joined(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    publish(root, 1, 5, 5 * INTERVAL, 9.0)  # the best, but finished
    publish(root, 2, 2 ** 53 // INTERVAL, 2 ** 53, 8.0)  # consistent, but far beyond max_frames
    publish(root, 3, 5, 2 ** 40, 7.0)  # a frame that is not its iteration
    publish(root, 4, 5, 5 * INTERVAL + 7, 1.0)  # honest
    cfg = PbtConfig.from_mapping(dict(enabled=True, num_policies="auto", policy_idx=0, mutation={LR: "mutate_float"},
                                      interval_steps=INTERVAL))
    statuses = {1: status(FINISHED), 2: status(RUNNING), 3: status(RUNNING), 4: status(RUNNING)}
    joined = ElasticPopulation(cfg).join(Workspace(root, 0, None), statuses, {LR: 1e-3}, tmp_path / "run",
                                         random.Random(0), max_frames=10 ** 6)
    assert joined is not None and joined[0].policy_idx == 4
    del statuses[4]
    assert ElasticPopulation(cfg).join(Workspace(root, 0, None), statuses, {LR: 1e-3}, tmp_path / "run",
                                       random.Random(0), max_frames=10 ** 6) is None
