"""The best member's export when the newest records carry no objective: right after a replacement
a member's objective restarts with the new weights, so a run whose members were all replaced near
its end has newest records without one. The export then takes each member's newest scored record."""
import hashlib
from pathlib import Path
from typing import Optional

import yaml

from pbt.storage import Workspace
from pbt.tools.export import export_best, scored_records
from pbt.tools.snapshot import read_snapshot

PARAMS = {"train.params.config.gamma": 0.99}


def publish(root: Path, member: int, iteration: int, objective: Optional[float]) -> bytes:
    data = f"weights of member {member} at iteration {iteration}".encode()
    Workspace(root, member, 3).publish(iteration, 1000 * iteration, objective, PARAMS, data)
    return data


def test_members_whose_newest_records_are_unscored_are_ranked_by_their_newest_scored_one(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    publish(root, 0, 1, 5.0)
    publish(root, 0, 2, None)  # replaced at iteration 1
    publish(root, 1, 1, 3.0)
    kept = publish(root, 1, 2, 7.0)
    publish(root, 1, 3, None)  # replaced at iteration 2
    publish(root, 2, 1, None)  # never scored

    snapshot = read_snapshot(root)
    assert all(not m.record.has_objective for m in snapshot.members)
    ranked = scored_records(snapshot, Workspace(root, 0, 3))
    assert [(r.policy_idx, r.iteration, r.objective) for r in ranked] == [(1, 2, 7.0), (0, 1, 5.0)]

    best = export_best(snapshot, tmp_path / "out")
    assert best is not None and (best.record.policy_idx, best.record.iteration) == (1, 2)
    assert (tmp_path / "out" / "best" / "checkpoint.pth").read_bytes() == kept
    document = yaml.safe_load((tmp_path / "out" / "best" / "schedule.yaml").read_text())
    assert document["provenance"]["iteration"] == 2
    assert document["provenance"]["checkpoint_sha256"] == hashlib.sha256(kept).hexdigest()


def test_a_scored_newest_record_wins_over_an_older_better_one(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    publish(root, 0, 1, 9.0)
    publish(root, 0, 2, 1.0)  # the member got worse: its newest objective stands for it
    publish(root, 1, 1, 2.0)
    best = export_best(read_snapshot(root), tmp_path / "out")
    assert best is not None and (best.record.policy_idx, best.record.iteration) == (1, 1)


def test_nothing_is_exported_while_no_member_has_an_objective(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    publish(root, 0, 0, None)
    publish(root, 1, 1, None)
    assert export_best(read_snapshot(root), tmp_path / "out") is None
    assert not (tmp_path / "out" / "best").exists()
