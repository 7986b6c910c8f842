"""A real worker in a workspace where other files are damaged, foreign, malicious or abandoned.

Planted while the worker runs (it is member 0 of 4; the test plays members 1-3):

* member 1: the population best, but its checkpoint is a pickle that would run ``touch <marker>``
  when unpickled, with a record and a matching sha256 (a checksum does not make a file safe);
* member 2: a good record, but dead: its heartbeat is an hour old and its PID gone;
* member 3: a garbage record, a truncated record, a record of another tool, a record whose
  checkpoint fails its checksum, a stray checkpoint and a foreign file.

The worker warns naming each bad file, reports member 2 dead once, never takes member 2 (stale and
not the best) as a donor, refuses member 1's pickle every time it would be its donor, keeps training
and finishes; nothing executes.
"""
import json
import os
import pickle
import re
import time
from pathlib import Path

import pytest

from faults_util import Worker, wait_for, worker_cmd
from pbt.storage import Workspace
from pbt.storage.record import record_to_yaml
from pbt.tools.export import scored_records
from pbt.tools.snapshot import open_reader, read_snapshot

pytestmark = [pytest.mark.training, pytest.mark.faults]

PARAMS = {"train.params.config.learning_rate": 1e-3}


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(ws: Path, marker: Path) -> None:
    evil = Workspace(ws, 1, 4)
    evil.publish(0, 50_000, 1e6, PARAMS, pickle.dumps(Payload(marker), protocol=2), episode_returns=[1e6] * 64)

    dead = Workspace(ws, 2, 4)
    dead.publish(0, 50_000, 5e5, PARAMS, b"not even a torch file", episode_returns=[5e5] * 64)
    old = time.time() - 3600
    (ws / "002" / "heartbeat").write_text(json.dumps({"pid": 999_999, "host": "vm-gone", "token": "t", "time": old,
                                                      "frame": 50_000, "state": "running"}))
    os.utime(str(ws / "002" / "heartbeat"), (old, old))

    junk = Workspace(ws, 3, 4)
    good = junk.publish(0, 40_000, -1e6, PARAMS, b"some checkpoint bytes")
    (ws / "003" / good.checkpoint).write_bytes(b"other bytes: fails the checksum")
    (ws / "003" / "000003.yaml").write_bytes(os.urandom(300))
    text = record_to_yaml(good).replace(b'"iteration": 0', b'"iteration": 2').replace(b"000000.pth", b"000002.pth")
    (ws / "003" / "000002.pth").write_bytes(b"x" * 100)
    (ws / "003" / "000002.yaml").write_bytes(text[: len(text) // 2])
    (ws / "003" / "000001.yaml").write_text("name: a file of another tool\nvalue: 3\n")
    (ws / "003" / "000009.pth").write_bytes(os.urandom(1000))
    (ws / "003" / "notes.txt").write_text("not ours")


def test_worker_skips_bad_files_refuses_the_pickle_and_ignores_the_dead_member(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    marker = tmp_path / "pwned"
    cmd = worker_cmd(0, 4, ws, runs, "pbt.ready_after=0", "pbt.significance=null",
                     max_frames=110_000)
    worker = Worker(cmd, tmp_path / "worker.log", tmp_path)
    try:
        wait_for("the worker's first record", lambda: (ws / "000" / "000001.yaml").exists(), 90, workers=[worker])
        plant(ws, marker)
        code = worker.wait(240)
    finally:
        worker.stop()
    log = worker.log()
    assert code == 0, log[-4000:]
    assert not marker.exists(), "the planted pickle ran code"
    for name in ("000003.yaml", "000002.yaml", "000001.yaml"):
        assert re.search(rf"skipping corrupt record \S*/003/{name}", log), (name, log[-4000:])
    assert len(re.findall(r"member 2 looks dead \(last heartbeat \d+ s ago from pid 999999", log)) == 1, log[-4000:]
    refused = re.findall(r"donor checkpoint unavailable \(\S*/001/000000.pth: refused to load the checkpoint: it "
                         r"would need to run code, or it is not a torch checkpoint \([^)]*GLOBAL posix.system", log)
    lineage = Workspace(ws, 0, 4).read_lineage(0)
    decisions = [e for e in lineage if e.mode != "startup"]
    assert len(refused) >= 3, log[-4000:]
    assert not [e for e in lineage if e.action == "replace"]  # the only donors were bad ones
    assert not [e for e in decisions if e.donor == 2 or "candidate 2" in e.reason]
    assert sum("donor checkpoint unavailable" in e.reason for e in decisions) == len(refused)
    assert (ws / "001" / "000000.pth").exists()  # a peer's files are never touched


def test_honest_population_trains_to_the_end_beside_a_hostile_peer(tmp_path: Path) -> None:
    """Three honest members (0-2 of 4) train while benchmarks/hostile_peer.py, as member 3, keeps
    planting every attack of issue 11: leader records whose checkpoint is a code-running pickle, a
    numpy object-dtype scalar, a FIFO, a symlink out of the workspace, a 3 GiB sparse file, a NUL
    name or a directory; block-nested YAML; FIFO records, heartbeats and locks; symlinks in place of
    the victims' best directories and lineages."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hostile_peer

    ws, runs, outside, marker = tmp_path / "ws", tmp_path / "runs", tmp_path / "outside", tmp_path / "pwned"
    hostile_peer.make_outside(outside)
    digest = hostile_peer.tree_digest(outside)
    workers = [Worker(worker_cmd(i, 4, ws, runs, "pbt.ready_after=0", "pbt.significance=null", f"seed={i}",
                                 max_frames=120_000), tmp_path / f"worker{i}.log", tmp_path) for i in range(3)]
    planter = None
    try:
        wait_for("a first record", lambda: (ws / "000" / "000001.yaml").exists(), 120, workers=workers)
        planter = subprocess.Popen([sys.executable, str(Path(hostile_peer.__file__)), str(ws), "--attacker", "3",
                                    "--victims", "0", "1", "2", "--outside", str(outside), "--marker", str(marker),
                                    "--every", "0.05", "--count_file", str(tmp_path / "planted")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        codes = [w.wait(400) for w in workers]
    finally:
        if planter is not None:
            planter.kill()
            planter.wait(30)
        for worker in workers:
            worker.stop()
    logs = [w.log() for w in workers]
    assert codes == [0, 0, 0], [log[-3000:] for log in logs]
    assert int((tmp_path / "planted").read_text()) >= 18  # every attack planted at least once
    assert not marker.exists(), "a planted checkpoint ran code"
    assert hostile_peer.tree_digest(outside) == digest, "a file outside the workspace changed"
    assert sum(len(re.findall(r"refused \(", log)) for log in logs) > 0
    reader = Workspace(ws, 0, 4)
    for idx in range(3):
        # (the peer's own junk, 9000NN.yaml planted into honest directories, is no honest record)
        names = sorted(p.name for p in (ws / f"{idx:03d}").glob("*.yaml")
                       if p.name[:6].isdigit() and int(p.name[:6]) < hostile_peer.JUNK_FIRST)
        assert names, idx
        for name in names:  # every honest record on disk is intact: parses and its checksum matches
            record = reader.latest_record(idx, max_iteration=int(name[:6]), verify=True)
            assert record is not None and record.iteration == int(name[:6])
    # Learning happened: a random Pendulum policy scores about -1200 (early records and lineage
    # lines are gone: retention, and the peer's stolen lineages), trained ones above -600.
    # A member changed in its last interval has no objective in its newest record: each honest
    # member's newest scored record stands for it (all three can end unscored under load).
    # (scored_records keeps only finite objectives)
    final = [r.objective for r in scored_records(read_snapshot(ws), open_reader(ws)) if r.policy_idx < 3]
    assert final and max(final) > -600, final
