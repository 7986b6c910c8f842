"""The launcher's live progress and end-of-run summary, on the v1 fixture workspace (a copy) and on
synthetic workspaces written file by file (no torch, no training; Python 3.8 ok, rich optional)."""
import logging
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import REPO
from pbt.launcher.populations import populations
from pbt.launcher.progress import (MemberRow, ProgressReporter, ProgressTracker, RateMeter, format_duration, plain_lines,
                               time_left)
from pbt.launcher.run_description import Experiment, Member, ParamGrid, RunDescription
from pbt.launcher.summary import find_winner, log_summaries, summary_lines
from pbt.storage import LineageEntry, Record
from pbt.storage.checkpoints import sha256_hex
from pbt.storage.liveness import Beat
from pbt.storage.record import record_to_yaml
from pbt.tools.snapshot import read_snapshot

FIXTURE = REPO / "tests" / "fixtures" / "workspace_v1"
LR = "train.params.config.learning_rate"
GAMMA = "train.params.config.gamma"


def run_members(train_dir: Path, n: int, max_frames: Optional[int] = 80000) -> List[Member]:
    cmd = "python -m pbt.train task=Pendulum pbt=pbt_default num_envs=64" + (
        f" max_frames={max_frames}" if max_frames is not None else "")
    description = RunDescription("run", [Experiment("exp", cmd, ParamGrid([("pbt.policy_idx", range(n))]))])
    return description.members(str(train_dir))


def workspace_of(members: List[Member]) -> Path:
    return Path(members[0].workspace or "")


@pytest.fixture
def fixture_run(tmp_path: Path) -> List[Member]:
    """The v1 fixture (2 finished members) as the workspace of a 3-member run: member 2 never started."""
    members = run_members(tmp_path, 3)
    shutil.copytree(str(FIXTURE), str(workspace_of(members)))
    return members


# ---- synthetic workspaces ------------------------------------------------------------------


def write_record(ws: Path, idx: int, iteration: int, frame: int, objective: Optional[float],
                 params: Dict[str, object], when: float) -> Record:
    member_dir = ws / f"{idx:03d}"
    member_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = f"{iteration:06d}.pth"
    data = f"weights of {idx} at {iteration}".encode()
    (member_dir / checkpoint).write_bytes(data)
    record = Record(idx, iteration, frame, objective, dict(params), checkpoint, sha256_hex(data), when,
                    [objective or 0.0] * 4, frame)
    (member_dir / f"{iteration:06d}.yaml").write_bytes(record_to_yaml(record))
    return record


def write_lineage(ws: Path, idx: int, entries: List[LineageEntry]) -> None:
    (ws / f"{idx:03d}").mkdir(parents=True, exist_ok=True)
    with open(ws / f"{idx:03d}" / "lineage.jsonl", "ab") as f:
        for entry in entries:
            f.write(entry.to_json_line())


def write_beat(ws: Path, idx: int, when: float, frame: int, state: str = "running") -> None:
    (ws / f"{idx:03d}").mkdir(parents=True, exist_ok=True)
    beat = Beat(pid=1, host="h", token="t", time=when, frame=frame, state=state, started=when - 100, policy_idx=idx)
    (ws / f"{idx:03d}" / "heartbeat").write_bytes(beat.to_json())


@pytest.fixture
def synthetic(tmp_path: Path) -> List[Member]:
    """4 members: 0 leads and gave its weights twice, 1 took them at iteration 2, 2 took them too but
    its newest record is torn, 3 never wrote anything (no directory)."""
    members = run_members(tmp_path, 4, max_frames=100000)
    ws = workspace_of(members)
    now = time.time()
    write_record(ws, 0, 3, 30000, -150.0, {LR: 3e-3, GAMMA: 0.95}, now - 5)
    write_record(ws, 1, 3, 30000, -300.0, {LR: 3e-3, GAMMA: 0.96}, now - 5)
    write_lineage(ws, 1, [
        LineageEntry(1, 0, 0, "mutate", mode="startup", params_after={LR: 1e-5, GAMMA: 0.95}, time=now - 60),
        LineageEntry(1, 2, 20000, "replace", donor=0, donor_iteration=2, mode="inplace",
                     params_before={LR: 1e-5, GAMMA: 0.95}, params_after={LR: 3e-3, GAMMA: 0.96}, time=now - 20),
    ])
    write_record(ws, 2, 1, 10000, -900.0, {LR: 1e-4, GAMMA: 0.95}, now - 30)
    write_lineage(ws, 2, [LineageEntry(2, 1, 10000, "replace", donor=0, donor_iteration=1, mode="exec",
                                       params_after={LR: 1e-4, GAMMA: 0.95}, time=now - 30)])
    (ws / "002" / "000002.yaml").write_text('{"policy_idx": 2,\n "iteration": 2')  # being written
    write_beat(ws, 0, now - 10, 20000)
    return members


# ---- frames/s and time left ----------------------------------------------------------------


def test_rate_is_the_slope_over_the_window_and_restarts_on_a_reset():
    meter = RateMeter(window=60)
    assert meter.rate() is None
    meter.add(100.0, 1000)
    assert meter.rate() is None  # one point says nothing about speed
    meter.add(110.0, 21000)
    assert meter.rate() == pytest.approx(2000.0)
    meter.add(112.0, 21000)  # the same count in a later heartbeat: it was reached at 110
    assert meter.rate() == pytest.approx(2000.0)
    meter.add(200.0, 221000)  # the first two points are now older than the window
    assert meter.points == {221000: 200.0} and meter.rate() is None
    meter.add(210.0, 241000)
    assert meter.rate() == pytest.approx(2000.0)
    meter.add(215.0, 500)  # a smaller frame count: another run on this workspace
    assert meter.rate() is None and meter.points == {500: 215.0}
    meter.add(0.0, 900)  # no time known: ignored
    meter.add(220.0, 500)
    assert meter.points == {500: 215.0}


def test_time_left_is_the_slowest_member_and_says_why_when_unknown():
    rows = [MemberRow("e", 0, frames=50000, max_frames=100000, fps=1000.0),
            MemberRow("e", 1, frames=90000, max_frames=100000, fps=500.0),
            MemberRow("e", 2, frames=100000, max_frames=100000, state="finished")]
    assert time_left(rows) == (50.0, "")
    rows[1].fps = None
    assert time_left(rows) == (None, "estimating")
    rows[1].max_frames = None
    left, why = time_left(rows)
    assert left is None and "max_frames" in why
    assert format_duration(3725) == "1:02:05" and format_duration(65) == "1:05" and format_duration(None) == "-"


# ---- progress on the fixture and on synthetic workspaces -----------------------------------


def test_progress_of_the_fixture_workspace(fixture_run):
    view = ProgressTracker(fixture_run).view()
    (population,) = view.populations
    rows = {r.policy_idx: r for r in population.rows}
    assert sorted(rows) == [0, 1, 2]
    assert rows[0].frames == 81920 and rows[0].rank == 1 and rows[0].action == "keep@it4"
    assert rows[0].state == "finished" and rows[0].done and rows[0].fps is None
    assert rows[0].objective == pytest.approx(-192.75776, abs=1e-3)
    assert rows[2].state == "waiting" and rows[2].frames is None and rows[2].max_frames == 80000
    assert population.best is not None and population.best[0] == 0
    lines = plain_lines(view)
    assert lines[0].startswith("progress exp: elapsed 0:00, time left estimating, best: member 0 (-192.8)")
    assert "exp #0: 81.9k/80.0k frames, -, objective -192.8 (rank 1), last keep@it4, weights from -, finished" in lines[1]
    assert "exp #2: -/80.0k frames" in lines[3] and "waiting" in lines[3]


def test_progress_of_a_synthetic_workspace_measures_frames_per_second(synthetic):
    ws = workspace_of(synthetic)
    tracker = ProgressTracker(synthetic)
    first = tracker.view()
    (population,) = first.populations
    rows = {r.policy_idx: r for r in population.rows}
    assert rows[1].action == "replace<-0@it2" and rows[2].action == "replace<-0@it1"
    assert rows[1].donor == "0@it2" and rows[0].donor == "-"
    assert rows[2].frames == 10000 and rows[2].objective == -900.0  # its torn newest record is skipped
    assert population.skipped == 1  # the torn record: counted, not shown as an error
    assert rows[3].state == "waiting" and rows[3].frames is None
    # Member 0: record at (now-5, 30000) and heartbeat at (now-10, 20000): 2000 frames/s.
    assert rows[0].fps == pytest.approx(2000.0, rel=1e-6)
    # A newer heartbeat, as the next refresh finds it.
    record_time = read_snapshot(ws).member(0).record.time
    write_beat(ws, 0, record_time + 15, 50000)
    rows = {r.policy_idx: r for r in tracker.view().populations[0].rows}
    assert rows[0].frames == 50000
    assert rows[0].fps == pytest.approx((50000 - 20000) / 20.0, rel=1e-6)  # from the oldest point in the window
    text = "\n".join(plain_lines(tracker.view()))
    assert "best: member 0 (-150)" in text and "time left estimating" in text  # members 2, 3 have no speed yet
    assert "skipped 1 unreadable file(s)" in text


def test_rich_table_of_the_progress(synthetic):
    pytest.importorskip("rich")
    from pbt.launcher.progress import render_rich_text

    text = render_rich_text(ProgressTracker(synthetic).view(), width=120)
    assert "frames/s" in text and "replace<-0@it2" in text and "best: member 0 (-150)" in text
    assert "30.0k/100.0k" in text and "2000/s" in text


def test_progress_without_max_frames_says_time_left_is_unknown(tmp_path):
    members = run_members(tmp_path, 2, max_frames=None)
    ws = workspace_of(members)
    write_record(ws, 0, 1, 10000, -500.0, {LR: 1e-3}, time.time())
    line = plain_lines(ProgressTracker(members).view())[0]
    assert "time left unknown (a member's command sets no max_frames=)" in line


def test_progress_before_the_workspace_exists_and_a_failing_refresh(tmp_path):
    members = run_members(tmp_path, 2)
    view = ProgressTracker(members).view()
    assert [r.state for r in view.populations[0].rows] == ["waiting", "waiting"]

    class Broken(ProgressTracker):
        def view(self):
            raise OSError("disk gone")

    reporter = ProgressReporter(members, mode="plain", interval=0.01, tracker=Broken(members))
    reporter.start()
    reporter.stop()  # the refreshes failed: logged at debug level, nothing raised


def test_plain_reporter_logs_lines_and_a_final_one(fixture_run):
    records: List[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("launcher")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        reporter = ProgressReporter(fixture_run, mode="auto", interval=3600)  # pytest's stdout: no terminal
        assert reporter.mode == "plain"
        reporter.start()
        reporter.stop()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    messages = [r.getMessage() for r in records]
    assert len(messages) == 1 and messages[0].startswith("progress exp: elapsed")
    assert ProgressReporter([m for m in fixture_run], mode="plain").interval == 30.0
    no_pbt = RunDescription("r", [Experiment("x", "python -m pbt.train task=Pendulum", pbt=False)]).members("/tmp/x")
    assert ProgressReporter(no_pbt, mode="auto").mode == "off"


# ---- summary -------------------------------------------------------------------------------


def test_summary_of_the_fixture_workspace_with_a_member_that_never_started(fixture_run):
    (population,) = populations(fixture_run)
    lines = summary_lines(population)
    text = "\n".join(lines)
    ws = workspace_of(fixture_run)
    assert lines[0] == f"PBT summary of exp (3 members, workspace {ws})"
    assert lines[1].split() == ["rank", "member", "objective", "frames", "given", "taken", "hyperparameters"]
    assert lines[2].split()[:6] == ["1", "0", "-192.8", "81.9k", "0", "0"]
    assert "learning_rate=0.0007734" in lines[2] and "critic_coef=2" in lines[2]
    assert "same for all: bounds_loss_coef=0.0001" in text
    assert "member(s) 2 wrote no record" in text
    assert "winner: member 0, objective -192.8" in text
    checkpoint = ws / "000" / "000004.pth"
    assert f"checkpoint: {checkpoint} (its newest record, iteration 4)" in text
    assert f"  pbt-status {ws}" in lines
    assert f"  pbt-analyze {ws} --out {ws.parent / 'analysis'}" in lines
    assert f"  pbt-play checkpoint={checkpoint} task=Pendulum num_envs=64 episodes=100" in lines


def test_summary_counts_exploits_given_and_taken(synthetic):
    (population,) = populations(synthetic)
    text = "\n".join(summary_lines(population))
    table = {line.split()[1]: line.split() for line in text.splitlines()[2:6]}
    assert table["0"][:6] == ["1", "0", "-150", "30.0k", "2", "0"]
    assert table["1"][:6] == ["2", "1", "-300", "30.0k", "0", "1"]
    assert table["2"][:6] == ["3", "2", "-900", "10.0k", "0", "1"]
    assert "exploits: 2 replace(s) in all" in text and "member(s) 3 wrote no record" in text
    assert " ".join(table["1"][6:]) == "gamma=0.96 learning_rate=0.003"  # what it took with the weights


def test_winner_falls_back_to_the_best_copy(fixture_run):
    snapshot = read_snapshot(workspace_of(fixture_run))
    (snapshot.root / "000" / "000004.pth").unlink()  # gone after the snapshot was read
    winner = find_winner(snapshot)
    assert winner is not None and winner.policy_idx == 0
    assert winner.checkpoint is not None and winner.checkpoint.is_file()
    assert winner.checkpoint.parent.name == "best0" and "best copy" in winner.source


def test_summary_of_a_missing_workspace_and_never_raising(tmp_path):
    members = run_members(tmp_path, 2)
    (population,) = populations(members)
    lines = summary_lines(population)
    assert len(lines) == 2 and "nothing to summarize" in lines[1] and "does not exist" in lines[1]
    ws = workspace_of(members)
    ws.mkdir(parents=True)
    (ws / "000").mkdir()  # a member that started and died before its first record
    text = "\n".join(summary_lines(population))
    assert "member(s) 0, 1 wrote no record" in text and "winner: none" in text
    log_summaries(members)  # logs, never raises
