"""Lockstep ranking (pbt.synchronous) with real workers: every member ranks the peers' records of its
own iteration, never a gap one interval old, and a peer killed for real (SIGKILL) holds the others
back only until its heartbeat goes stale."""
import re
import signal
from pathlib import Path
from typing import Dict, List, Set

import pytest

from faults_util import Worker, finish, wait_for, worker_cmd
from pbt.storage import Workspace
from pbt.storage.lineage import parse_lineage

pytestmark = [pytest.mark.training, pytest.mark.faults]

N = 3
KILLED = 2
KILL_AFTER = 8  # iterations member 2 publishes before it is killed
OFF_ITERATION = re.compile(r"with ([\d, ]+) at iteration (\d+) \(own at \d+\)|at iteration (\d+) with ([\d, ]+)")


def peers_off_own_iteration(reason: str, iteration: int) -> Set[int]:
    """The peers a decision compared at an iteration other than its own (its reason's equal-experience clause)."""
    off: Set[int] = set()
    for theirs_a, at_a, at_b, theirs_b in OFF_ITERATION.findall(reason):
        names, at = (theirs_a, at_a) if theirs_a else (theirs_b, at_b)
        if int(at) != iteration:
            off |= {int(name) for name in names.split(", ")}
    return off


def test_synchronous_members_rank_the_records_of_their_own_iteration_and_outlive_a_killed_peer(
    tmp_path: Path,
) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    # ranked by a deterministic evaluation: every record's objective is known, also right after a change
    extra = ("pbt.synchronous=true", "pbt.eval_episodes=8", "pbt.ready_after=0", "pbt.max_lead=null")
    # a generous heartbeat timeout: a live peer judged dead on a loaded machine would be ranked on an old record
    workers = [Worker(worker_cmd(i, N, ws, runs, *extra, max_frames=160_000, heartbeat_timeout=20),
                      tmp_path / f"w{i}.log", tmp_path) for i in range(N)]
    try:
        workspace = Workspace(ws, 0, N)

        def published() -> bool:
            record = workspace.latest_record(KILLED)
            return record is not None and record.iteration >= KILL_AFTER

        wait_for(f"member {KILLED} to publish iteration {KILL_AFTER}", published, timeout=240, workers=workers)
        workers[KILLED].kill(signal.SIGKILL)
        workers[KILLED].wait()
        last_of_killed = workspace.latest_record(KILLED)
        assert last_of_killed is not None
        finish(workers[:KILLED], timeout=300)
    finally:
        for w in workers:
            w.stop()
    decisions: Dict[int, List[int]] = {}
    for idx in range(KILLED):
        entries = parse_lineage((ws / f"{idx:03d}" / "lineage.jsonl").read_bytes(), str(idx))
        assert entries[-1].frame >= 160_000  # it finished its budget after member 2 died
        for entry in entries[:-1]:  # the last epoch's decision is not acted on: it waits for nobody
            if entry.iteration == 0:
                continue
            off = peers_off_own_iteration(entry.reason, entry.iteration)
            decisions.setdefault(idx, []).append(entry.iteration)
            # a live peer is always ranked at this member's own iteration; only the dead one lags behind
            assert off <= {KILLED}, (idx, entry.iteration, entry.reason)
            if entry.iteration <= last_of_killed.iteration:
                assert not off, (idx, entry.iteration, entry.reason)
    assert all(len(iterations) >= 30 for iterations in decisions.values()), decisions


def decisions_of(ws: Path, idx: int) -> List[tuple]:
    entries = parse_lineage((ws / f"{idx:03d}" / "lineage.jsonl").read_bytes(), str(idx))
    return [(e.iteration, e.frame, e.action, e.donor, e.objective, sorted(e.params_after.items())) for e in entries]


def test_a_population_in_lockstep_decides_the_same_when_run_again(tmp_path: Path) -> None:
    """Nothing a member ranks depends on when its peers publish, so the same population run twice makes
    the same decisions on the same objectives (asynchronous ranking depends on the machine's timing)."""
    extra = ("pbt.synchronous=true", "pbt.ready_after=0", "pbt.significance=null")
    runs = []
    for attempt in ("a", "b"):
        ws = tmp_path / attempt / "ws"
        workers = [Worker(worker_cmd(i, 2, ws, tmp_path / attempt / "runs", *extra, max_frames=60_000,
                                     heartbeat_timeout=20), tmp_path / f"{attempt}{i}.log", tmp_path)
                   for i in range(2)]
        finish(workers, timeout=300)
        runs.append([decisions_of(ws, i) for i in range(2)])
    assert runs[0] == runs[1]
    actions = [d[2] for member in runs[0] for d in member]
    assert "replace" in actions or "mutate" in actions, actions  # the runs did decide something
