"""A member joining an elastic population (``pbt.num_policies=auto``) beside planted peers (issue 25,
item 5). An honest founder (member 0, a real worker) publishes; the test then plays four peers, each
better than the founder, each a trap for the joiner (member 7, a real worker started afterwards):

* member 2: the best record, training (a fresh heartbeat), but at frame 2**53: a joiner taking that
  frame count "finished" after one epoch;
* member 3: a record and a heartbeat dated 11 days in the future: ranked and "alive" for ever;
* member 4: a heartbeat that says finished: alive for ever, yet its frames are spent;
* member 5: training, a plausible frame, but a checkpoint that does not fit this agent (one weight
  of another shape, checksum intact): the joiner died restoring it at every start.

The joiner refuses 2 (its frame), never considers 3 or 4 (not alive and training), takes 5, finds
its checkpoint does not fit and starts fresh, and trains to max_frames; the founder finishes too,
and ranks neither 3 nor 4 at its last iteration. Every honest record survives, and no planted file
is touched."""
import copy
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Dict, List

import pytest

from faults_util import EPOCH_FRAMES, Worker, finish, wait_for, worker_cmd
from pbt.storage import Record, Workspace
from pbt.storage.record import record_to_yaml

pytestmark = [pytest.mark.training, pytest.mark.faults]
torch = pytest.importorskip("torch")

FOUNDER_FRAMES = 24 * EPOCH_FRAMES  # long enough to be training still when the test has planted
JOINER_FRAMES = 10 * EPOCH_FRAMES
FUTURE = 10 ** 6  # seconds: far beyond the clock skew a reader allows (pbt.storage.bounds)
# No member acts (start_after beyond max_frames; what is tested is who is ranked and the join), and
# no member waits for a slower one (the joiner starts fresh, far behind the founder). The planted
# heartbeats are written once: the default timeout keeps them fresh for the whole test.
ELASTIC = ("pbt.elastic_window=1", "pbt.ready_after=0", "pbt.start_after=100000000", "pbt.max_lead=null",
           "pbt.heartbeat_timeout=600")


def elastic_cmd(idx: int, ws: Path, runs: Path, max_frames: int) -> List[str]:
    cmd = worker_cmd(idx, "auto", ws, runs / f"m{idx}", *ELASTIC, max_frames=max_frames)
    return [c for c in cmd if c not in ("pbt.start_after=0", "pbt.heartbeat_timeout=5")]  # ELASTIC sets them


def beat(ws: Path, idx: int, state: str, at: float) -> None:
    (ws / f"{idx:03d}" / "heartbeat").write_text(json.dumps(
        {"pid": 1, "host": "planted-host", "token": "t", "time": at, "frame": None, "state": state, "policy_idx": idx}))


def plant(ws: Path, founder: Record) -> None:
    state = Workspace(ws, 0, None).load_checkpoint(founder, 0)
    misfit = copy.deepcopy(state)
    name = next(k for k, v in misfit["model"].items() if v.is_floating_point() and v.dim() == 2)
    misfit["model"][name] = torch.zeros(3, 3)
    params, now = founder.params, time.time()
    Workspace(ws, 2, None).save(2 ** 53 // EPOCH_FRAMES, 2 ** 53, -10.0, params, state, [-10.0] * 16)
    beat(ws, 2, "running", now)
    future = Workspace(ws, 3, None).save(1, EPOCH_FRAMES, -20.0, params, state, [-20.0] * 16)
    (ws / "003" / "000001.yaml").write_bytes(record_to_yaml(dataclasses.replace(future, time=now + FUTURE)))
    beat(ws, 3, "running", now + FUTURE)
    Workspace(ws, 4, None).save(1, EPOCH_FRAMES, -30.0, params, state, [-30.0] * 16)
    beat(ws, 4, "finished", now)
    Workspace(ws, 5, None).save(1, EPOCH_FRAMES, -50.0, params, misfit, [-50.0] * 16)
    beat(ws, 5, "running", now)


def planted_files(ws: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for idx in (2, 3, 4, 5) for p in (ws / f"{idx:03d}").iterdir()}


def test_a_joiner_refuses_planted_donors_and_trains_to_max_frames(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    workers = [Worker(elastic_cmd(0, ws, runs, FOUNDER_FRAMES), tmp_path / "w0.log", tmp_path)]
    try:
        founder: Record = wait_for("the founder's first record",
                                   lambda: Workspace(ws, 0, None).latest_record(0, verify=True), 120, workers=workers)
        plant(ws, founder)
        planted = planted_files(ws)
        workers.append(Worker(elastic_cmd(7, ws, runs, JOINER_FRAMES), tmp_path / "w7.log", tmp_path))
    except BaseException:
        for w in workers:
            w.stop()
        raise
    founder_log, joiner_log = finish(workers, 300)

    assert "member 2 is no donor to join from: its frame 9007199254740992 is not below max_frames" in joiner_log
    assert re.search(r"member 5's checkpoint \S+ does not fit this agent \(model\['[^']+'\] has shape \(3, 3\)",
                     joiner_log), joiner_log[-4000:]
    assert "this joiner starts fresh from frame 0" in joiner_log
    assert not re.search(r"joined the running population from its best member [234]", joiner_log)
    reader = Workspace(ws, 0, None)
    joined = reader.read_lineage(7)
    assert joined[0].mode == "startup" and joined[0].donor == 5, joined[0]  # the join it tried
    frames = [e.frame for e in joined[1:]]
    assert frames and max(frames) <= JOINER_FRAMES, frames  # never the planted 2**53

    # every honest record on disk is intact, and each honest member trained to its max_frames
    for idx, budget in ((0, FOUNDER_FRAMES), (7, JOINER_FRAMES)):
        names = sorted(p.name for p in (ws / f"{idx:03d}").glob("*.yaml"))
        assert names, idx
        for name in names:
            record = reader.latest_record(idx, max_iteration=int(name[:-5]), verify=True)
            assert record is not None and record.iteration == int(name[:-5]), (idx, name)
        newest = reader.latest_record(idx, verify=True)
        assert newest is not None and budget - EPOCH_FRAMES <= newest.frame <= budget, (idx, newest)
    # the founder saw the planted members (5 ranked: it is training), never the future-dated 3, and
    # the finished 4 no more at its last iteration
    ranked = [set(m.group(1).split(", ")) for m in re.finditer(r"elastic population: members \[([\d, ]*)\] ranked",
                                                              "\n".join(e.reason for e in reader.read_lineage(0)))]
    assert any("5" in r for r in ranked), founder_log[-3000:]
    assert not [r for r in ranked if "3" in r] and "4" not in ranked[-1], ranked
    assert planted_files(ws) == planted  # a peer's files are never touched
