"""The stage where a user looks (no torch): status adds a stage column and ranks within stages,
the best member is the best of the furthest stage, analyze's report lists each member's stages, and a
workspace written without a curriculum shows none of it."""
from pathlib import Path

import pytest

pytest.importorskip("rich")  # pbt.status draws with rich (not in the Python 3.8 core environment)

from pbt.storage import LineageEntry, Workspace
from pbt.tools.report import stage_rows, write_report
from pbt.tools.snapshot import read_snapshot
from pbt.tools.status import render_text

LR = "train.params.config.learning_rate"


def member(ws: Path, idx: int, objective: float, stage, moves=()) -> None:
    w = Workspace(ws, idx, 4)
    w.append_lineage(LineageEntry(policy_idx=idx, iteration=0, frame=0, action="mutate", mode="startup",
                                  stage=None if stage is None else 0))
    for iteration, to in moves:
        w.append_lineage(LineageEntry(policy_idx=idx, iteration=iteration, frame=iteration * 1000, action="mutate",
                                      mode="inplace", reason=f"curriculum: entered stage {to}", stage=to))
    w.publish(5, 5000, objective, {LR: 1e-3}, b"weights", stage=None if stage is None else (stage, 2000))


def test_status_ranks_within_stages_and_the_best_is_of_the_furthest_stage(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    member(ws, 0, 0.9, 0)  # the highest objective, on the easiest stage
    member(ws, 1, 0.2, 1, [(2, 1)])
    member(ws, 2, 0.4, 1, [(2, 1)])
    member(ws, 3, 0.1, 0)
    snapshot = read_snapshot(ws)
    assert [(m.stage, m.rank) for m in snapshot.members] == [(0, 1), (1, 2), (1, 1), (0, 2)]
    assert snapshot.best is not None and snapshot.best.policy_idx == 2
    text = render_text(snapshot)
    (header,) = [line for line in text.splitlines() if "policy" in line and "objective" in line]
    assert header.split().index("stage") == header.split().index("objective") - 1
    rows = stage_rows(snapshot)
    assert [(r[0], r[3]) for r in rows] == [("0", "0"), ("1", "0"), ("1", "1"), ("2", "0"), ("2", "1"), ("3", "0")]
    md, _ = write_report(snapshot, tmp_path, None, [])
    report = md.read_text()
    assert "## Curriculum stages" in report and "| policy | frames | iteration | stage | objective |" in report


def test_a_workspace_without_a_curriculum_shows_no_stage(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    member(ws, 0, 0.9, None)
    member(ws, 1, 0.2, None)
    snapshot = read_snapshot(ws)
    assert [(m.stage, m.rank) for m in snapshot.members] == [(None, 1), (None, 2)]
    assert "stage" not in render_text(snapshot)
    assert stage_rows(snapshot) == []
    md, _ = write_report(snapshot, tmp_path, None, [])
    assert "Curriculum" not in md.read_text()
