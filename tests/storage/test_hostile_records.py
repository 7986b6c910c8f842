"""Planted files the torch-free core must refuse (issue 11), on Python 3.8 too: records of the wrong
types, YAML nested in block style (which crashed libyaml's composer), FIFOs, symlinks, NUL names
and huge files read through the Store, and a symlinked best directory or lineage."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from pbt.errors import CorruptRecordError, PbtError
from pbt.storage import LocalStore, Workspace
from pbt.storage.backend import Refused
from pbt.storage.lineage import LineageEntry
from pbt.storage.record import parse_record, record_to_yaml

REPO = Path(__file__).resolve().parents[2]
SUM = "ab" * 32


def good(**changes: Any) -> bytes:
    data = {"policy_idx": 1, "iteration": 3, "frame": 300, "objective": 1.5, "params": {"a.b": 0.1},
            "checkpoint": "000003.pth", "checksum": SUM, "time": 1.0, "episode_returns": [1.0, 2],
            "frames_since_replace": 0, "version": 1}
    data.update(changes)
    return json.dumps(data).encode()


def bounded(fn: Callable[[], Any], limit: float = 60.0) -> Any:
    """Run ``fn`` in a thread; fail if it is still blocked after ``limit`` seconds (a hang detector,
    not a speed check)."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: B902 - reported below
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"{fn} blocked"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("changes", [
    {"objective": "1_000"}, {"objective": True}, {"objective": [1.0]}, {"iteration": 3.9}, {"iteration": True},
    {"policy_idx": 1.7}, {"policy_idx": -1}, {"frame": -1}, {"frame": 1.0}, {"params": [["a", 1]]},
    {"params": {"a": {"nested": 1}}}, {"params": {"a": "x" * 5000}}, {"episode_returns": ["1"]},
    {"episode_returns": [True]}, {"episode_returns": {"a": 1}}, {"checkpoint": "0\u0000.pth"},
    {"checkpoint": "a\n.pth"}, {"checkpoint": 5}, {"checksum": 7}, {"version": "1"}, {"time": "now"},
    {"frames_since_replace": 2.5},
])
def test_records_with_the_wrong_types_are_refused(changes: dict) -> None:
    with pytest.raises(CorruptRecordError):
        parse_record(good(**changes), "planted", 1, 3)


def test_records_ours_ever_wrote_still_read() -> None:
    assert parse_record(good(), "x", 1, 3).episode_returns == [1.0, 2.0]
    assert parse_record(good(objective=None), "x", 1, 3).objective is None
    nan = good().replace(b'"objective": 1.5', b'"objective": .nan')
    assert parse_record(nan, "x", 1, 3).objective != parse_record(nan, "x", 1, 3).objective
    assert parse_record(good(objective=3), "x", 1, 3).objective == 3.0


DEEP = {"block sequence": "- " * 50000 + "x\n",
        "block mapping": "".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "v: 1\n",
        "flow": "[" * 500 + "]" * 500}


@pytest.mark.parametrize("kind", sorted(DEEP))
def test_deeply_nested_yaml_is_refused_without_crashing_the_process(tmp_path: Path, kind: str) -> None:
    """In a subprocess: libyaml's composer used to overflow the C stack on ``"- " * 50000``."""
    path = tmp_path / "000005.yaml"
    path.write_text(DEEP[kind])
    code = ("import sys; from pbt.storage.record import parse_record; from pbt.errors import CorruptRecordError\n"
            "try:\n    parse_record(open(sys.argv[1], 'rb').read(), sys.argv[1])\n"
            "except CorruptRecordError as exc:\n    print('REFUSED', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "REFUSED" in proc.stdout and "nested deeper" in proc.stdout, proc.stdout


@pytest.mark.skipif(getattr(yaml, "CSafeLoader", None) is None, reason="the crash is libyaml's")
def test_the_unguarded_loader_does_crash_on_block_nesting(tmp_path: Path) -> None:
    """What the guard above prevents: the plain safe loader dies on the same 100 kB text."""
    code = "import yaml; yaml.load('- ' * 50000 + 'x', Loader=yaml.CSafeLoader)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert proc.returncode != 0


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path / "ws", 0, 3)
    workspace.publish(1, 100, 1.0, {"a": 1}, b"own checkpoint")
    return workspace


def outside_files(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "rcfile").write_text("# start-up file\n")
    (outside / "dir" / "precious").write_text("keep me\n")
    return outside


def test_fifo_records_heartbeats_and_checkpoints_never_block(ws: Workspace, tmp_path: Path) -> None:
    peer = ws.root / "001"
    peer.mkdir()
    os.mkfifo(str(peer / "000007.yaml"))
    os.mkfifo(str(peer / "heartbeat"))
    os.mkfifo(str(peer / "lineage.jsonl"))
    (peer / "000006.yaml").write_bytes(good(iteration=6, checkpoint="000006.pth"))
    os.mkfifo(str(peer / "000006.pth"))
    assert bounded(lambda: ws.latest_records()) == {0: ws.latest_record(0)}
    with pytest.raises(ValueError):
        bounded(lambda: ws.read_heartbeat(1))
    assert bounded(lambda: ws.read_lineage(1)) == []


def test_nul_and_control_names_are_refused_not_a_valueerror(ws: Workspace) -> None:
    peer = ws.root / "001"
    peer.mkdir()
    text = good(iteration=4).replace(b"000003.pth", b"0\\u0000.pth")
    (peer / "000004.yaml").write_bytes(text)
    assert 1 not in ws.latest_records()
    with pytest.raises(Refused):
        ws.store.get("001/0\x00.pth", 10)
    with pytest.raises(Refused):
        ws.store.stat("001/a\nb")


def test_a_huge_sparse_checkpoint_is_refused_before_reading(ws: Workspace) -> None:
    peer = ws.root / "001"
    peer.mkdir()
    (peer / "000003.yaml").write_bytes(good())
    with open(str(peer / "000003.pth"), "wb") as fobj:
        fobj.truncate(3 * 1024 ** 3)
    assert 1 not in ws.latest_records()  # skipped at scan time: over the cap
    record = parse_record(good(), "x", 1, 3)
    with pytest.raises(Refused, match="over|more than"):
        ws.read_checkpoint_bytes(record)


def test_a_symlinked_best_dir_is_moved_aside_and_nothing_outside_is_deleted(ws: Workspace, tmp_path: Path) -> None:
    outside = outside_files(tmp_path)
    best = ws.best_dir
    best.rmdir()
    best.symlink_to(outside / "dir")
    assert ws.best_record() is None  # never listed through the link
    peer = Workspace(ws.root, 1, 3)
    record = peer.publish(2, 200, 9.0, {"a": 1}, b"peer checkpoint")
    assert ws.update_best(record)
    assert (outside / "dir" / "precious").read_text() == "keep me\n"
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["precious"]
    assert not best.is_symlink() and ws.best_record().objective == 9.0


def test_a_symlinked_lineage_is_never_appended_through(ws: Workspace, tmp_path: Path) -> None:
    outside = outside_files(tmp_path)
    lineage = ws.own_dir / "lineage.jsonl"
    lineage.symlink_to(outside / "rcfile")
    ws.append_lineage(LineageEntry(0, 1, 100, "mutate", params_after={"x": "$(touch /tmp/pwned)"}))
    assert (outside / "rcfile").read_text() == "# start-up file\n"
    assert not lineage.is_symlink() and len(ws.read_lineage()) == 1


def test_a_symlinked_member_dir_is_never_listed(ws: Workspace, tmp_path: Path) -> None:
    outside = outside_files(tmp_path)
    (outside / "dir" / "000003.yaml").write_bytes(good(policy_idx=2))
    (ws.root / "002").symlink_to(outside / "dir")
    assert 2 not in ws.latest_records()
    with pytest.raises(Refused):
        ws.store.list("002")


def test_refusals_are_logged_once_per_file(ws: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    peer = ws.root / "001"
    peer.mkdir()
    os.mkfifo(str(peer / "000009.yaml"))
    for _ in range(5):
        ws.latest_records()
    assert len([r for r in caplog.records if "000009.yaml" in r.getMessage()]) == 1


def test_everything_the_store_raises_is_a_pbt_error(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for key in ("", "a/../b", "a//b", "x\x00", "."):
        with pytest.raises(PbtError):
            store.get(key, 10)
    assert record_to_yaml  # the writer module still imports


def test_a_planted_high_member_directory_costs_an_elastic_member_one_entry(tmp_path: Path) -> None:
    # an elastic member (num_policies=None) scans the member directories present, never
    # range(largest index): 999999/ must not make it look at a million indices
    ws = Workspace(tmp_path, 0, None)
    (tmp_path / "999999").mkdir()
    looked_at = []
    real = ws.latest_record

    def counting(idx: int, *args: Any, **kwargs: Any) -> Any:
        looked_at.append(idx)
        return real(idx, *args, **kwargs)

    ws.latest_record = counting  # type: ignore[method-assign]
    assert ws.latest_records() == {}
    assert looked_at == [0, 999999]
