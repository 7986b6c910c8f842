"""Property-based tests over planted content in a real workspace (issue 11): whatever a peer puts
there (random bytes, random YAML and pickle structures, FIFOs, symlinks out of the workspace, sparse
huge files, NUL names, every attack of benchmarks/hostile_peer.py), a member's reads and writes
raise nothing but PbtError, never block, never run code and never touch a file outside it."""
import io
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, List

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbt.errors import PbtError, UnsafeCheckpointError
from pbt.storage import Workspace
from pbt.storage.checkpoints import deserialize_checkpoint, serialize_state
from pbt.storage.lineage import LineageEntry

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import hostile_peer  # noqa: E402

N = 4
HANG_LIMIT = 60.0  # a hang detector, not a speed check


def member_round(ws: Workspace) -> None:
    """What a member does with the workspace in one PBT iteration (and a resume, a rollback)."""
    ws.publish((ws.newest_iteration() or 0) + 1, 1000, 1.0, {"a": 1}, serialize_state({"model": {"w": torch.ones(2)}}))
    peers = ws.latest_records()
    for idx, record in peers.items():
        try:
            ws.load_checkpoint(record)
        except PbtError:
            pass
        try:
            ws.read_heartbeat(idx)
        except ValueError:
            pass
        ws.read_lineage(idx)
    best = max((r for r in peers.values() if r.has_objective), key=lambda r: r.objective)
    try:
        ws.update_best(best)
    except PbtError:
        pass
    ws.append_lineage(LineageEntry(0, 1, 1000, "keep"))
    ws.cleanup(peers)
    newest = ws.latest_record(0, verify=True)
    assert newest is not None and newest.iteration == ws.last_published  # nothing of its own lost


def guarded(fn: Callable[[], Any]) -> None:
    """Run ``fn`` in a thread under the hang limit; only PbtError may escape."""
    errors: List[BaseException] = []

    def target() -> None:
        try:
            fn()
        except PbtError:
            pass
        except BaseException as exc:  # noqa: B902 - the property under test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_LIMIT)
    assert not thread.is_alive(), "a workspace operation blocked"
    assert not errors, repr(errors[0])


class Scene:
    """A fresh workspace, a sentinel directory outside it and a marker a payload would create.

    A context manager: the directory is removed on exit (hypothesis runs one Scene per example, so
    a fixture's tmp_path cannot hold them and a leak would leave ~100 directories per test run)."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="hostile_"))
        self.root = self.tmp / "ws"
        self.outside = self.tmp / "outside"
        self.marker = self.tmp / "pwned"
        hostile_peer.make_outside(self.outside)
        self.digest = hostile_peer.tree_digest(self.outside)
        self.ws = Workspace(self.root, 0, N)
        self.ws.publish(0, 500, 0.5, {"a": 1}, serialize_state({"model": {"w": torch.zeros(2)}}))
        self.peer = self.root / "002"
        self.peer.mkdir()

    def __enter__(self) -> "Scene":
        return self

    def __exit__(self, *exc_info: object) -> None:
        shutil.rmtree(str(self.tmp), ignore_errors=True)

    def check(self) -> None:
        guarded(lambda: member_round(self.ws))
        guarded(lambda: member_round(Workspace(self.root, 0, N)))  # a restarted member, cold caches
        assert not self.marker.exists(), "planted content ran code"
        assert hostile_peer.tree_digest(self.outside) == self.digest, "a file outside the workspace changed"


@pytest.mark.parametrize("attack", [a.__name__ for a in hostile_peer.Planter(Path("."), 3, [0], Path("."),
                                                                              Path(".")).attacks])
@pytest.mark.parametrize("loader", ["weights_only", "allow-list (torch < 2.6)"])
def test_every_planted_attack_is_refused(attack: str, loader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if loader != "weights_only":
        monkeypatch.delattr(torch.serialization, "safe_globals")
    with Scene() as scene:
        planter = hostile_peer.Planter(scene.root, 3, [0], scene.outside, scene.marker)
        getattr(planter, attack)()
        scene.check()


def test_all_attacks_at_once_in_a_fresh_process(tmp_path: Path) -> None:
    """A segfault (the numpy dtype checkpoint, libyaml's block nesting) would kill the process: run the
    scan in one and check it exits cleanly."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2])\n"
        "import hostile_peer, torch\n"
        "from pbt.storage import Workspace\n"
        "from pbt.storage.checkpoints import serialize_state\n"
        "ws = Workspace(Path(sys.argv[1]) / 'ws', 0, 4)\n"
        "ws.publish(0, 1, 0.0, {}, serialize_state({'model': {'w': torch.zeros(1)}}))\n"
        "p = hostile_peer.Planter(ws.root, 3, [0], Path(sys.argv[1]) / 'out', Path(sys.argv[1]) / 'pwned')\n"
        "hostile_peer.make_outside(p.outside)\n"
        "for attack in p.attacks:\n"
        "    attack()\n"
        "    for record in ws.latest_records().values():\n"
        "        try:\n"
        "            ws.load_checkpoint(record).get('model')\n"
        "        except Exception as exc:\n"
        "            assert exc.__class__.__module__ == 'pbt.errors' or 'Refused' in type(exc).__name__, exc\n"
        "print('SURVIVED')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(REPO / "benchmarks")], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0 and "SURVIVED" in proc.stdout, (proc.returncode, proc.stderr[-3000:])
    assert not (tmp_path / "pwned").exists()


def test_plain_numpy_scalars_still_load_and_structured_ones_never_do() -> None:
    import numpy as np

    buffer = io.BytesIO()
    torch.save({"last_mean_rewards": np.float32(-3.5), "n": np.int64(7), "ok": np.bool_(True)}, buffer)
    state = deserialize_checkpoint(buffer.getvalue(), "rl_games")
    assert state["last_mean_rewards"] == np.float32(-3.5) and state["n"] == 7
    with pytest.raises(UnsafeCheckpointError, match="not a plain number"):
        deserialize_checkpoint(hostile_peer.numpy_object_dtype_checkpoint(), "planted")


# ---- hypothesis: random content at random names ----------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
trees = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                   st.dictionaries(st.text(max_size=8), c, max_size=4)),
                     max_leaves=30)


@st.composite
def contents(draw: Any) -> Any:
    kind = draw(st.sampled_from(["bytes", "yaml block", "yaml flow", "pickle", "torch pickle", "payload", "fifo",
                                 "symlink file", "symlink dir", "sparse", "directory"]))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=2048))
    if kind.startswith("yaml"):
        return kind, yaml.safe_dump(draw(trees), default_flow_style=kind == "yaml flow").encode()
    if kind == "pickle":
        return kind, pickle.dumps(draw(trees), protocol=draw(st.integers(0, pickle.HIGHEST_PROTOCOL)))
    if kind == "torch pickle":
        return kind, hostile_peer._torch_zip(pickle.dumps(draw(trees), protocol=2))
    return kind, None


NAMES = st.sampled_from(["000009.yaml", "000009.pth", "heartbeat", "lock", "lineage.jsonl", "000001.yaml"])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(plants=st.lists(st.tuples(NAMES, contents(), st.booleans()), min_size=1, max_size=4),
       leader_name=st.sampled_from(["000009.pth", "0\x00.pth", "a\x01.pth", "../../outside/rcfile.pth"]))
def test_random_planted_content_never_escapes(plants: list, leader_name: str) -> None:
    with Scene() as scene:
        for name, (kind, data), into_own in plants:
            path = (scene.ws.own_dir if into_own and name.endswith(".pth") else scene.peer) / name
            hostile_peer._clear(path)
            if kind == "fifo":
                os.mkfifo(str(path))
            elif kind == "symlink file":
                path.symlink_to(scene.outside / "rcfile")
            elif kind == "symlink dir":
                path.symlink_to(scene.outside / "dir")
            elif kind == "sparse":
                with open(str(path), "wb") as fobj:
                    fobj.truncate(hostile_peer.SPARSE_BYTES)
            elif kind == "directory":
                path.mkdir()
            elif kind == "payload":
                path.write_bytes(hostile_peer.pickle_checkpoint(str(scene.marker)))
            else:
                path.write_bytes(data)
        checksum = "0" * 64
        target = scene.peer / "000009.pth"
        if target.is_file() and not target.is_symlink():
            import hashlib

            checksum = hashlib.sha256(target.read_bytes()).hexdigest() if target.stat().st_size < 1 << 20 else checksum
        hostile_peer._clear(scene.peer / "000010.yaml")
        (scene.peer / "000010.yaml").write_bytes(hostile_peer.record_text(2, 10, leader_name, checksum))
        scene.check()
