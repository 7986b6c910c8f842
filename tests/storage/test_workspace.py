"""Tests for pbt.workspace: atomic writes, records, scans, checkpoints, lineage, best copy, retention.

Tests that need torch skip themselves (``pytest.importorskip``) so the rest runs on Python 3.8.
"""
import hashlib
import json
import logging
import math
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbt.errors import ConfigError, CorruptRecordError, UnsafeCheckpointError, WorkspaceError
from pbt.storage.record import Record
from pbt.storage import RetentionPolicy, Workspace
from pbt.storage.lineage import LineageEntry, weights_origin
from pbt.storage.format import checkpoint_name, record_name
from pbt.storage.local import atomic_write_bytes
from pbt.storage.reader import read_record
from pbt.storage.record import parse_record, record_to_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def _publish(ws: Workspace, iteration: int, objective: float = 1.0, payload: bytes = b"") -> Record:
    data = payload or f"checkpoint {ws.policy_idx} {iteration}".encode() * 8
    return ws.publish(iteration, iteration * 1000, objective, {"train.params.config.gamma": 0.99}, data,
                      episode_returns=[objective, objective - 1.0])


def _files(directory: Path) -> List[str]:
    return sorted(os.listdir(str(directory)))


def _write_fixture(directory: Path, idx: int, iteration: int, objective: float = 1.0) -> Record:
    """A valid record + checkpoint written directly (no fsync), for fast scan fixtures."""
    data = f"ckpt {idx} {iteration}".encode()
    record = Record(policy_idx=idx, iteration=iteration, frame=iteration * 10, objective=objective,
                    params={"a": 0.5}, checkpoint=checkpoint_name(iteration),
                    checksum=hashlib.sha256(data).hexdigest())
    directory.mkdir(parents=True, exist_ok=True)
    (directory / record.checkpoint).write_bytes(data)
    (directory / record_name(iteration)).write_text(json.dumps(record.to_dict()))  # JSON is YAML too
    return record


# ---- construction and atomic writes ------------------------------------------------------------


def test_rejects_bad_indices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="policy_idx"):
        Workspace(tmp_path, 4, 4)
    with pytest.raises(ConfigError, match="num_policies"):
        Workspace(tmp_path, 0, 0)
    with pytest.raises(ConfigError, match="max_records"):
        Workspace(tmp_path, 0, 2, retention=RetentionPolicy(keep_records=10, max_records=5))


def test_layout_is_isaacgymenvs_compatible(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 3, 8)
    record = _publish(ws, 7)
    assert (tmp_path / "003" / "000007.pth").is_file()
    assert (tmp_path / "003" / "000007.yaml").is_file()
    assert (tmp_path / "best3").is_dir()
    assert record.checkpoint == "000007.pth"
    assert record.checksum == hashlib.sha256((tmp_path / "003" / "000007.pth").read_bytes()).hexdigest()


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert _files(tmp_path) == ["f.bin"]


def test_atomic_write_removes_temp_on_error(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert _files(tmp_path) == ["f.bin"]
    assert target.read_bytes() == b"old"
    with pytest.raises(WorkspaceError, match="missing"):
        atomic_write_bytes(tmp_path / "missing" / "f.bin", b"x")


# ---- records -----------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", [float("nan"), float("inf"), float("-inf"), None, -3.25, 1e-300])
def test_objective_round_trips(tmp_path: Path, objective: float) -> None:
    ws = Workspace(tmp_path, 0, 1)
    ws.publish(1, 10, objective, {"x": 1}, b"data")
    record = read_record(tmp_path / "000" / "000001.yaml")
    if objective is None:
        assert record.objective is None
    elif math.isnan(objective):
        assert record.objective is not None and math.isnan(record.objective)
    else:
        assert record.objective == objective
    assert ws.latest_records()[0] == record


def test_record_round_trip_with_numpy_params(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    ws = Workspace(tmp_path, 1, 2)
    published = ws.publish(2, 20, np.float32(0.5), {"lr": np.float64(3e-4), "n": np.int64(4), "ok": np.bool_(True)},
                           b"data", episode_returns=np.array([1.0, 2.0]))
    record = read_record(tmp_path / "001" / "000002.yaml")
    assert record == published
    assert record.params == {"lr": 3e-4, "n": 4, "ok": True}
    assert type(record.params["n"]) is int and record.episode_returns == [1.0, 2.0]


def test_a_record_says_whether_its_episodes_are_evaluations(tmp_path: Path) -> None:
    """``evaluated``: written only when true (a record of a member ranked by training episodes keeps
    the format before it, and an older record reads as not evaluated); anything but a bool refused."""
    ws = Workspace(tmp_path, 0, 1)
    evaluated = ws.publish(1, 10, 1.0, {}, b"data", episode_returns=[1.0, 2.0], evaluated=True)
    assert read_record(tmp_path / "000" / "000001.yaml") == evaluated and evaluated.evaluated
    trained = ws.publish(2, 20, 1.0, {}, b"data", episode_returns=[1.0, 2.0])
    text = (tmp_path / "000" / "000002.yaml").read_text()
    assert "evaluated" not in text and not read_record(tmp_path / "000" / "000002.yaml").evaluated
    assert trained.to_dict().keys() == Record.from_dict(yaml.safe_load(text)).to_dict().keys()
    for junk in (1, "true", None, [True]):
        with pytest.raises(CorruptRecordError, match="evaluated must be true or false"):
            Record.from_dict(dict(evaluated.to_dict(), evaluated=junk))


def test_a_record_says_whose_weights_it_carries(tmp_path: Path) -> None:
    """``family``: written only when known (older records read as unknown); anything but an index
    in range refused, as every field a peer writes."""
    ws = Workspace(tmp_path, 0, 1)
    known = ws.publish(1, 10, 1.0, {}, b"data", family=3)
    assert read_record(tmp_path / "000" / "000001.yaml") == known and known.family == 3
    ws.publish(2, 20, 1.0, {}, b"data")
    text = (tmp_path / "000" / "000002.yaml").read_text()
    assert "family" not in text and read_record(tmp_path / "000" / "000002.yaml").family is None
    for junk in (-1, 1.5, "3", True, [3], 10 ** 6):
        with pytest.raises(CorruptRecordError, match="family"):
            Record.from_dict(dict(known.to_dict(), family=junk))


def test_a_record_with_evaluations_carries_the_training_episodes_too(tmp_path: Path) -> None:
    """``training_returns``: written only beside evaluations (a record of training episodes needs
    no second copy of them), non-finite values left out as from ``episode_returns``, and anything
    but a list of numbers refused, as every field a peer writes."""
    ws = Workspace(tmp_path, 0, 1)
    both = ws.publish(1, 10, 1.0, {}, b"data", [1.0, 2.0], evaluated=True, training_returns=[0.5, math.inf, 0.25])
    assert read_record(tmp_path / "000" / "000001.yaml") == both and both.training_returns == [0.5, 0.25]
    ws.publish(2, 20, 1.0, {}, b"data", [1.0, 2.0], training_returns=[0.5])  # training episodes ranked: none
    text = (tmp_path / "000" / "000002.yaml").read_text()
    assert "training_returns" not in text and read_record(tmp_path / "000" / "000002.yaml").training_returns == []
    for junk in ("0.5", [0.5, "x"], [True], {"a": 1.0}, [0.0] * 100_001, [1e309]):
        with pytest.raises(CorruptRecordError, match="training_returns"):
            Record.from_dict(dict(both.to_dict(), training_returns=junk))


def test_the_family_of_a_members_weights_follows_its_lineage() -> None:
    took = LineageEntry(2, 4, 400, "replace", donor=5, donor_iteration=4, family=1)
    mutated = LineageEntry(2, 5, 500, "mutate")
    rolled_back = LineageEntry(2, 6, 600, "rollback", donor=2, donor_iteration=3, family=2)
    assert weights_origin([], 2) == (0, 2) and weights_origin([mutated], 2) == (0, 2)
    assert weights_origin([took, mutated], 2) == (400, 1)
    assert weights_origin([took, mutated, rolled_back], 2) == (400, 2)  # a rollback is not a replace
    older = LineageEntry(2, 7, 700, "replace", donor=5, donor_iteration=6)  # a line from before the field
    assert weights_origin([took, older], 2) == (700, None)
    line = LineageEntry.from_dict(json.loads(took.to_json_line()))
    assert line == took and "family" not in mutated.to_dict()


def test_block_yaml_record_is_read_too(tmp_path: Path) -> None:
    writer = Workspace(tmp_path, 0, 1)
    record = _publish(writer, 2, objective=2.5)
    path = tmp_path / "000" / "000002.yaml"
    path.write_text(yaml.safe_dump(record.to_dict()))  # e.g. rewritten by a user's tool
    assert Workspace(tmp_path, 0, 1).latest_records()[0] == record


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    params=st.dictionaries(
        st.text(max_size=12),
        st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63 + 1, 2 ** 63 - 1), st.floats(),
                  st.text(max_size=20), st.lists(st.floats(allow_nan=False), max_size=3)),
        max_size=6,
    ),
    objective=st.one_of(st.none(), st.floats(-1e12, 1e12), st.sampled_from([math.nan, math.inf, -math.inf])),
    returns=st.lists(st.floats(-1e12, 1e12), max_size=5),
    evaluated=st.booleans(),
)
def test_record_text_reads_back_exactly_with_yaml_safe_load(params: Dict[str, object], objective: float,
                                                            returns: List[float], evaluated: bool) -> None:
    record = Record(policy_idx=1, iteration=3, frame=30, objective=objective, params=params,
                    checkpoint="000003.pth", checksum="0" * 64, episode_returns=returns, evaluated=evaluated)
    text = record_to_yaml(record)
    expected = record.to_dict()
    assert repr(yaml.safe_load(text)) == repr(expected)  # repr: NaN-aware, type-exact
    assert repr(parse_record(text, "x", 1, 3).to_dict()) == repr(expected)


def test_publish_refuses_a_record_readers_would_refuse(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    with pytest.raises(WorkspaceError, match="read back"):
        ws.publish(1, 1, 1.0, {"weird": "[" * 2000}, b"data")
    assert _files(tmp_path / "000") == []


def test_latest_records_honours_max_iteration(tmp_path: Path) -> None:
    members = [Workspace(tmp_path, i, 3) for i in range(3)]
    for it in range(5):
        _publish(members[0], it)
    for it in (0, 2, 4, 6):
        _publish(members[1], it)
    # member 2 has published nothing
    latest = members[2].latest_records(max_iteration=3)
    assert sorted(latest) == [0, 1]
    assert latest[0].iteration == 3 and latest[1].iteration == 2
    assert members[2].latest_records()[1].iteration == 6
    assert members[2].latest_records(max_iteration=-1) == {}
    assert members[0].newest_iteration() == 4 and members[0].newest_iteration(2) is None


def test_iterations_beyond_six_digits_sort_numerically(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    _publish(ws, 999999)
    _publish(ws, 1000000)
    assert ws.latest_records()[0].iteration == 1000000


def _edited(good: bytes, **changes: object) -> bytes:
    data = yaml.safe_load(good)
    data.update(changes)
    return yaml.safe_dump(data).encode()


def _alias_bomb(good: bytes) -> bytes:
    data = yaml.safe_load(good)
    shared: List[object] = [1.0, 2.0]
    for _ in range(30):  # 2**30 elements once expanded
        shared = [shared, shared]
    data["params"] = {"x": shared}
    text = yaml.safe_dump(data).encode()
    assert b"&id" in text
    return text


CORRUPTIONS = {
    "torn": lambda good: good[: len(good) // 2],
    "truncated_end": lambda good: good[: good.index(b'"version"')],
    "garbage": lambda good: bytes(range(256)) * 4,
    "foreign": lambda good: yaml.safe_dump({"iteration": 5, "true_objective": 3.0, "frame": 50,
                                            "params": {}, "checkpoint": "/x/000005.pth"}).encode(),
    "not_a_mapping": lambda good: b"- just\n- a list\n",
    "wrong_member": lambda good: _edited(good, policy_idx=1),
    "wrong_iteration": lambda good: _edited(good, iteration=4),
    "path_escape": lambda good: _edited(good, checkpoint="../001/000005.pth"),
    "bad_checksum_field": lambda good: _edited(good, checksum="zz"),
    "bad_number": lambda good: _edited(good, frame="many"),
    "infinite_iteration": lambda good: _edited(good, frame=float("inf")),
    "deep_nesting": lambda good: b"[" * 100000,
    "alias_bomb": _alias_bomb,
    "empty": lambda good: b"",
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_record_skipped_with_warning_and_older_used(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                            kind: str) -> None:
    writer = Workspace(tmp_path, 0, 2)
    _publish(writer, 4, objective=4.0)
    _publish(writer, 5, objective=5.0)
    path = tmp_path / "000" / "000005.yaml"
    path.write_bytes(CORRUPTIONS[kind](path.read_bytes()))
    reader = Workspace(tmp_path, 1, 2)
    with caplog.at_level(logging.WARNING, logger="pbt.storage.reader"):
        latest = reader.latest_records()
    assert latest[0].iteration == 4
    assert any("000005.yaml" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    with pytest.raises(CorruptRecordError, match="000005.yaml"):
        read_record(path)


def test_record_with_missing_or_empty_checkpoint_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = Workspace(tmp_path, 0, 2)
    _publish(writer, 1)
    _publish(writer, 2)
    _publish(writer, 3)
    (tmp_path / "000" / "000003.pth").unlink()
    (tmp_path / "000" / "000002.pth").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="pbt.storage.reader"):
        assert Workspace(tmp_path, 1, 2).latest_records()[0].iteration == 1
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "000003.yaml" in messages and "missing" in messages
    assert "000002.yaml" in messages and "empty" in messages
    with pytest.raises(CorruptRecordError, match="missing"):
        read_record(tmp_path / "000" / "000003.yaml")


def test_garbage_checkpoint_detected_by_checksum(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = Workspace(tmp_path, 0, 2)
    _publish(writer, 1)
    record = _publish(writer, 2)
    (tmp_path / "000" / "000002.pth").write_bytes(os.urandom(300))
    reader = Workspace(tmp_path, 1, 2)
    assert reader.latest_records()[0].iteration == 2  # the scan does not read checkpoints
    with pytest.raises(CorruptRecordError, match="checksum mismatch"):
        reader.read_checkpoint_bytes(record)
    with caplog.at_level(logging.WARNING, logger="pbt.storage.reader"):
        assert reader.latest_records(verify=True)[0].iteration == 1
    assert any("000002" in r.getMessage() for r in caplog.records)


def test_corrupt_warning_once_per_file_version_and_reparse_on_replace(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = Workspace(tmp_path, 0, 2)
    _publish(writer, 1)
    _publish(writer, 2, objective=2.0)
    path = tmp_path / "000" / "000002.yaml"
    good = path.read_bytes()
    path.write_bytes(b"{{{")
    reader = Workspace(tmp_path, 1, 2)
    with caplog.at_level(logging.WARNING, logger="pbt.storage.reader"):
        for _ in range(3):
            assert reader.latest_records()[0].iteration == 1
    assert sum("000002.yaml" in r.getMessage() for r in caplog.records) == 1
    atomic_write_bytes(path, good)  # a repaired file (new inode) is parsed again
    assert reader.latest_records()[0].iteration == 2


def test_republish_same_iteration(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1)
    _publish(ws, 3, payload=b"first" * 10)
    second = _publish(ws, 3, objective=7.0, payload=b"second" * 10)
    reader = Workspace(tmp_path, 0, 1)
    assert reader.latest_records()[0] == second
    assert reader.read_checkpoint_bytes(second) == b"second" * 10


def test_deleted_checkpoint_is_a_catchable_error(tmp_path: Path) -> None:
    writer = Workspace(tmp_path, 0, 2)
    record = _publish(writer, 1)
    (tmp_path / "000" / "000001.pth").unlink()
    with pytest.raises(CorruptRecordError, match="no longer exists"):
        Workspace(tmp_path, 1, 2).read_checkpoint_bytes(record)


def test_scan_of_512_members_is_fast(tmp_path: Path) -> None:
    n = 512
    for idx in range(n):
        for it in range(2):
            _write_fixture(tmp_path / f"{idx:03d}", idx, it, objective=float(idx))
    ws = Workspace(tmp_path, 0, n)
    start = time.perf_counter()
    first = ws.latest_records(max_iteration=1)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    second = ws.latest_records(max_iteration=1)
    warm = time.perf_counter() - start
    assert len(first) == n and all(r.iteration == 1 for r in first.values()) and first == second
    # Targets are 200 ms; the bounds leave room for a loaded shared CI machine.
    assert cold < 2.0, f"cold scan of {n} members took {cold:.3f} s"
    assert warm < 1.0, f"warm scan of {n} members took {warm:.3f} s"


# ---- kill -9 during writes ---------------------------------------------------------------------

WRITER = """
import os, random, sys
from pbt.storage import Workspace
ws = Workspace(sys.argv[1], 0, 2)
rng = random.Random(os.getpid())
it = int(sys.argv[2])
print("started", flush=True)
while True:
    data = os.urandom(rng.randint(1, 8) * 256 * 1024)
    target = it if rng.random() < 0.7 else max(0, it - 1)  # sometimes re-publish an iteration
    ws.publish(target, target * 100, float(target), {"lr": rng.random()}, data)
    it += 1
"""


def test_killed_writer_never_exposes_a_bad_record(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    root = tmp_path / "ws"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    reader = Workspace(root, 1, 2)
    rng = random.Random(1234)
    start_iteration = 0
    seen_records = 0
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, str(script), str(root), str(start_iteration)],
                                stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
            deadline = time.monotonic() + rng.uniform(0.05, 0.3)
            while time.monotonic() < deadline:  # read concurrently while it writes
                for record in reader.latest_records().values():
                    try:
                        data = reader.read_checkpoint_bytes(record)
                    except CorruptRecordError:
                        continue  # replaced or deleted between our two reads: detected, fine
                    assert hashlib.sha256(data).hexdigest() == record.checksum
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        # After the kill: every record on disk names a checkpoint with the right checksum.
        member_dir = root / "000"
        for name in _files(member_dir):
            if name.endswith(".yaml"):
                record = read_record(member_dir / name)
                reader.read_checkpoint_bytes(record)
                seen_records += 1
        newest = reader.newest_iteration(0)
        start_iteration = 0 if newest is None else newest + 1
    assert seen_records > 0
    leftovers = [n for n in _files(root / "000") if n.endswith(".tmp")]
    removed = Workspace(root, 0, 2, retention=RetentionPolicy(stale_tmp_seconds=0)).cleanup()
    assert all(root / "000" / n in removed for n in leftovers)
    assert not [n for n in _files(root / "000") if n.endswith(".tmp")]


# ---- lineage -----------------------------------------------------------------------------------


def test_lineage_round_trip_and_torn_last_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ws = Workspace(tmp_path, 2, 4)
    entries: List[LineageEntry] = [
        LineageEntry(2, 1, 100, "replace", donor=1, objective=3.5, params_after={"lr": 1e-4}),
        LineageEntry(2, 2, 200, "mutate", donor=2, objective=float("-inf")),
    ]
    for entry in entries:
        ws.append_lineage(entry)
    assert Workspace(tmp_path, 0, 4).read_lineage(2) == entries
    path = tmp_path / "002" / "lineage.jsonl"
    with open(str(path), "ab") as fobj:
        fobj.write(b'{"event": "exploit", "don')  # a writer killed mid-line
    with caplog.at_level(logging.WARNING, logger="pbt.storage.lineage"):
        assert ws.read_lineage() == entries
    assert any("torn last line" in r.getMessage() and "lineage.jsonl" in r.getMessage() for r in caplog.records)
    after = LineageEntry(2, 3, 300, "keep")
    ws.append_lineage(after)  # the torn fragment does not swallow the next entry
    assert ws.read_lineage() == entries + [after]
    assert Workspace(tmp_path, 0, 4).read_lineage(3) == []


# ---- best copy ---------------------------------------------------------------------------------


def test_update_best_keeps_one_copy_of_the_all_time_best(tmp_path: Path) -> None:
    members = [Workspace(tmp_path, i, 2) for i in range(2)]
    low = _publish(members[1], 1, objective=1.5)
    assert members[0].update_best(low)
    assert not members[0].update_best(low)  # unchanged
    high = _publish(members[1], 2, objective=-0.5 + 10)
    assert members[0].update_best(high)
    best_dir = tmp_path / "best0"
    names = _files(best_dir)
    assert len(names) == 2 and all("iter_000002" in n and "policy001" in n for n in names)
    stored = members[0].best_record()
    assert stored is not None and stored.objective == high.objective and stored.policy_idx == 1
    assert (best_dir / stored.checkpoint).read_bytes() == (tmp_path / "001" / high.checkpoint).read_bytes()
    assert not members[0].update_best(low)  # worse than the stored best
    assert not members[0].update_best(_publish(members[1], 3, objective=float("nan")))


# ---- retention ---------------------------------------------------------------------------------


def test_retention_without_peers_keeps_newest(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1, retention=RetentionPolicy(keep_records=3))
    for it in range(12):
        _publish(ws, it)
        ws.cleanup()
    assert _files(tmp_path / "000") == ["000009.pth", "000009.yaml", "000010.pth", "000010.yaml",
                                        "000011.pth", "000011.yaml"]


def test_retention_keeps_records_slow_peers_need_up_to_the_cap(tmp_path: Path) -> None:
    fast = Workspace(tmp_path, 0, 3, retention=RetentionPolicy(keep_records=4, max_records=10, peer_margin=2))
    medium = Workspace(tmp_path, 1, 3)
    _publish(Workspace(tmp_path, 2, 3), 0)  # member 2 stalls at iteration 0
    for it in range(25):
        _publish(fast, it)
        if it <= 12:
            _publish(medium, it)
        fast.cleanup()
        records = [n for n in _files(tmp_path / "000") if n.endswith(".yaml")]
        checkpoints = [n for n in _files(tmp_path / "000") if n.endswith(".pth")]
        assert len(records) <= 10 and len(checkpoints) == len(records)
    kept = sorted(int(n[:6]) for n in _files(tmp_path / "000") if n.endswith(".yaml"))
    assert kept == list(range(15, 25))  # hard cap: the stalled peer cannot pin everything


def test_retention_keeps_what_the_oldest_peer_needs(tmp_path: Path) -> None:
    fast = Workspace(tmp_path, 0, 2, retention=RetentionPolicy(keep_records=2, max_records=25, peer_margin=3))
    slow = Workspace(tmp_path, 1, 2)
    for it in range(20):
        _publish(fast, it)
        if it % 2 == 0:
            _publish(slow, it // 2)
        fast.cleanup()
    # slow's latest is 9: keep >= 9 - 3 = 6, more than keep_records
    kept = sorted(int(n[:6]) for n in _files(tmp_path / "000") if n.endswith(".yaml"))
    assert kept == list(range(6, 20))
    # the slow member finds our newest record not newer than its own iteration
    assert slow.latest_records(max_iteration=9)[0].iteration == 9


def test_cleanup_removes_orphans_and_stale_temps_but_not_lineage(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, 0, 1, retention=RetentionPolicy(keep_records=2))
    for it in range(4):
        _publish(ws, it)
    ws.append_lineage(LineageEntry(0, 0, 0, "mutate", mode="startup"))
    own = tmp_path / "000"
    (own / "000009.pth").write_bytes(b"orphan from a crash between .pth and .yaml")
    fresh_tmp = own / ".000010.pth.otherhost.12345.abcd.tmp"
    old_tmp = own / ".000011.pth.otherhost.12346.abcd.tmp"
    fresh_tmp.write_bytes(b"x")
    old_tmp.write_bytes(b"x")
    os.utime(str(old_tmp), (time.time() - 3600, time.time() - 3600))
    (own / "notes.txt").write_text("user file")
    removed = ws.cleanup()
    assert old_tmp in removed and own / "000009.pth" in removed
    assert _files(own) == [".000010.pth.otherhost.12345.abcd.tmp", "000002.pth", "000002.yaml", "000003.pth",
                           "000003.yaml", "lineage.jsonl", "notes.txt"]


def test_export_rejects_destination_inside_workspace(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", 0, 1)
    record = _publish(ws, 1)
    with pytest.raises(WorkspaceError, match="inside the workspace"):
        ws.export_checkpoint(record, 0, tmp_path / "ws" / "000" / "copy.pth", frame=1, epoch=1)


def test_import_does_not_pull_torch() -> None:
    code = "import sys, pbt.storage, pbt.restart; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(REPO_ROOT))


# ---- checkpoints (torch) -----------------------------------------------------------------------


def _full_state(torch):  # type: ignore[no-untyped-def]
    import collections

    np = pytest.importorskip("numpy")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return {
        "model": collections.OrderedDict(model.state_dict()),
        "epoch": 12,
        "frame": 12345,
        "optimizer": optimizer.state_dict(),
        "last_mean_rewards": np.float32(17.5),
        "running_mean_std": {"running_mean": np.zeros(3, dtype=np.float32), "count": np.float64(3.0)},
        "env_state": None,
    }


def test_save_and_load_full_state(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    ws = Workspace(tmp_path, 0, 2)
    state = _full_state(torch)
    record = ws.save(3, 12345, 17.5, {"lr": 3e-4}, state, episode_returns=[17.0, 18.0])
    loaded = Workspace(tmp_path, 1, 2).load_checkpoint(record, 0)
    assert loaded["frame"] == 12345 and loaded["epoch"] == 12
    assert loaded["last_mean_rewards"] == 17.5 and type(loaded["last_mean_rewards"]) is float
    assert torch.equal(loaded["running_mean_std"]["running_mean"], torch.zeros(3))
    for key, value in state["model"].items():
        assert torch.equal(loaded["model"][key], value)
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 3e-4


def test_save_rejects_objects_a_weights_only_load_cannot_hold(tmp_path: Path) -> None:
    pytest.importorskip("torch")

    class Custom:
        pass

    ws = Workspace(tmp_path, 0, 1)
    with pytest.raises(WorkspaceError, match=r"state\['extra'\]\[0\]"):
        ws.save(0, 0, 1.0, {}, {"extra": [Custom()]})
    assert _files(tmp_path / "000") == []


class _Payload:
    """Unpickling this creates a file: proof that a checkpoint ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.path, "w"))


@pytest.mark.parametrize("fmt", ["torch_zip", "raw_pickle"])
def test_malicious_checkpoint_is_refused_and_runs_no_code(tmp_path: Path, fmt: str) -> None:
    torch = pytest.importorskip("torch")
    import io

    marker = tmp_path / "pwned"
    payload = {"model": {}, "frame": 1, "evil": _Payload(str(marker))}
    if fmt == "torch_zip":
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
    else:
        data = pickle.dumps(payload, protocol=2)
    assert not marker.exists()
    # A peer plants it with a record whose checksum matches, so only the unpickler can refuse it.
    evil = Workspace(tmp_path / "ws", 1, 2)
    record = evil.publish(4, 400, 1e9, {}, data)
    victim = Workspace(tmp_path / "ws", 0, 2)
    assert victim.latest_records()[1] == record
    with pytest.raises(UnsafeCheckpointError, match="000004.pth"):
        victim.load_checkpoint(record, 1)
    with pytest.raises(UnsafeCheckpointError):
        victim.export_checkpoint(record, 1, tmp_path / "run" / "restart.pth", frame=5, epoch=1)
    assert not marker.exists()
    assert not (tmp_path / "run" / "restart.pth").exists()


def test_non_torch_checkpoint_with_matching_checksum_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ws = Workspace(tmp_path, 0, 1)
    record = ws.publish(1, 1, 1.0, {}, b"\x00garbage that is not a checkpoint" * 10)
    with pytest.raises(CorruptRecordError, match="000001.pth"):
        ws.load_checkpoint(record)


def test_export_keeps_own_frame_and_epoch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    donor = Workspace(tmp_path / "ws", 1, 2)
    record = donor.save(8, 80000, 5.0, {"lr": 1e-3}, _full_state(torch))
    me = Workspace(tmp_path / "ws", 0, 2)
    dest = me.export_checkpoint(record, 1, tmp_path / "run" / "pbt" / "restart.pth", frame=777, epoch=9)
    assert dest == (tmp_path / "run" / "pbt" / "restart.pth").absolute()
    state = torch.load(str(dest), map_location="cpu", weights_only=True)
    assert state["frame"] == 777 and state["epoch"] == 9
    assert "last_mean_rewards" not in state  # a donor's best score stays its own
    assert "last_mean_rewards" in me.load_checkpoint(me.save(1, 10, 1.0, {}, _full_state(torch)))
    assert _files(dest.parent) == ["restart.pth"]
    # The learner's edit (the rate a restart carries) lands in the copy, after the counts.
    me.export_checkpoint(record, 1, dest, frame=777, epoch=9, edit=lambda s: s.update(frame=1, lr=0.5))
    edited = torch.load(str(dest), map_location="cpu", weights_only=True)
    assert (edited["frame"], edited["lr"], edited["epoch"]) == (1, 0.5, 9)
    assert "lr" not in donor.load_checkpoint(record)  # the donor's own file is untouched
    (tmp_path / "ws" / "001" / "000008.pth").unlink()  # the donor cleaned up meanwhile
    with pytest.raises(CorruptRecordError, match="no longer exists"):
        me.export_checkpoint(record, 1, dest, frame=1, epoch=1)
    assert torch.load(str(dest), map_location="cpu", weights_only=True)["frame"] == 1
