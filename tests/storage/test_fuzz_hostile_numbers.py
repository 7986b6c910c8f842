"""Property-based fuzzing (issue 25) of every number a member or tool reads from a peer's files:
records, heartbeats and lineage lines with huge integers, +-inf, NaN, 1e308, negatives and future
times, driven against the real readers, ``decide()`` for every strategy, the elastic rules and
pbt.status. Each reader either refuses the file (its own error, or a skipped lineage line) or
returns values inside :mod:`pbt.storage.bounds`; nothing downstream raises. Bounded examples: it
runs in seconds. No torch: runs on Python 3.8."""
import importlib.util
import json
import math
import random
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbt.config import PbtConfig
from pbt.errors import CorruptRecordError
from pbt.selection import MemberState, decide
from pbt.selection.membership import join_donor, ranked_members
from pbt.storage import LocalStore
from pbt.storage.bounds import MAX_ABS_VALUE, MAX_FRAMES, MAX_TIME, is_sample
from pbt.storage.lineage import parse_lineage
from pbt.storage.liveness import judge, read_heartbeat
from pbt.storage.record import Record, parse_record

LR = "train.params.config.learning_rate"
SUM = "cd" * 32
EXTREME = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 2 ** 53, 2 ** 53 + 1, 2 ** 62, 2 ** 64, -1, 0,
                     10 ** 400, -(10 ** 400), 1e12, 1e12 + 1, time.time() + 1e9, 5e-324]),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30), st.floats(), st.booleans(), st.none(),
    st.text(max_size=4))
FIELDS = ("objective", "time", "frame", "iteration", "frames_since_replace", "policy_idx", "version")
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRATEGIES: List[Dict[str, Any]] = [
    {"selection": "dexpbt", "replace_fraction_worst": 0.34, "replace_fraction_best": 0.6},
    {"selection": "threshold"}, {"selection": "truncation", "quantile": 0.34},
    {"selection": "tournament", "tournament_size": 3, "elitism": False, "eval_loop": 3}]


def dumps(data: Any) -> bytes:
    return json.dumps(data).encode()  # NaN/Infinity and 400-digit ints as JSON writers emit them


def record_data(idx: int, changes: Dict[str, Any]) -> Dict[str, Any]:
    data: Dict[str, Any] = {"policy_idx": idx, "iteration": 3, "frame": 3000, "objective": 1.0 + idx,
                            "params": {LR: 1e-3}, "checkpoint": "000003.pth", "checksum": SUM, "time": 1.0,
                            "episode_returns": [1.0, 2.0, 1.5], "frames_since_replace": 10 ** 6, "version": 1,
                            "history": {"1": 0.5, "2": 0.7}}
    data.update(changes)
    return data


def check_bounded(record: Record) -> None:
    assert 0 <= record.frame <= MAX_FRAMES and 0 <= record.iteration <= MAX_FRAMES
    assert math.isfinite(record.time) and 0 <= record.time <= MAX_TIME
    assert all(is_sample(v) for v in record.episode_returns)
    assert all(v is None or is_sample(v) for v in record.history.values())
    assert record.objective is None or not math.isfinite(record.objective) or abs(record.objective) <= MAX_ABS_VALUE


record_changes = st.dictionaries(
    st.sampled_from(FIELDS + ("episode_returns", "history", "params")),
    st.one_of(EXTREME, st.lists(EXTREME, max_size=6),
              st.dictionaries(st.sampled_from(["1", "2", "9" * 16, "x"]), EXTREME, max_size=3),
              st.fixed_dictionaries({LR: EXTREME})),
    max_size=4)


@FUZZ
@given(peers=st.lists(record_changes, min_size=1, max_size=4), seed=st.integers(0, 3))
def test_records_with_extreme_numbers_are_refused_or_bounded_and_every_strategy_decides(
        peers: List[Dict[str, Any]], seed: int) -> None:
    parsed: List[Record] = []
    for idx, changes in enumerate(peers, start=1):
        data = record_data(idx, changes)
        try:
            record = parse_record(dumps(data), "fuzz", idx, 3 if type(data.get("iteration")) is not int
                                  else data["iteration"])
        except CorruptRecordError:
            continue
        check_bounded(record)
        parsed.append(record)
    own = parse_record(dumps(record_data(0, {})), "own", 0, 3)
    n = len(peers) + 1
    for extra in STRATEGIES:
        cfg = PbtConfig.from_mapping(dict(enabled=True, num_policies=n, policy_idx=0, mutation={LR: "mutate_float"},
                                          start_after=0, initial_delay=0, ready_after=0, significance=0.05,
                                          **extra))
        decide(MemberState(own, None, 10 ** 9), parsed, cfg, random.Random(seed))
    records = {r.policy_idx: r for r in parsed}
    ranked_members(0, records, set(), time.time(), 100.0)
    join_donor(0, records, set(records))


beat_changes = st.dictionaries(st.sampled_from(["pid", "time", "frame", "started", "policy_idx", "host", "state"]),
                               EXTREME, max_size=3)


@FUZZ
@given(changes=beat_changes, timeout=st.sampled_from([0.0, 30.0, 1e308]))
def test_heartbeats_with_extreme_numbers_are_refused_or_judged(tmp_path_factory: Any, changes: Dict[str, Any],
                                                               timeout: float) -> None:
    root = Path(tmp_path_factory.mktemp("hb"))
    data = {"pid": 1, "host": "h", "token": "t", "time": time.time(), "frame": 7, "state": "running",
            "started": 0.0, "policy_idx": 1, **changes}
    (root / "heartbeat").write_bytes(dumps(data))
    try:
        beat = read_heartbeat(LocalStore(root), "heartbeat")
    except ValueError:
        return
    assert beat is not None and math.isfinite(beat.time) and 0 <= beat.time <= MAX_TIME
    assert beat.frame is None or 0 <= beat.frame <= MAX_FRAMES
    judge(beat, timeout)


line_fields = st.dictionaries(
    st.sampled_from(["policy_idx", "iteration", "frame", "objective", "donor", "donor_iteration", "donor_objective",
                     "time", "decided_at", "action", "params_after", "network"]), EXTREME, max_size=5)


@FUZZ
@given(lines=st.lists(line_fields, max_size=6))
def test_lineage_lines_with_extreme_numbers_are_skipped_or_bounded(lines: List[Dict[str, Any]]) -> None:
    data = b"".join(dumps(line) + b"\n" for line in lines)
    for entry in parse_lineage(data, "fuzz"):
        assert -1 <= entry.iteration <= MAX_FRAMES and -1 <= entry.frame <= MAX_FRAMES
        assert 0 <= entry.time <= MAX_TIME and 0 <= entry.decided_at <= MAX_TIME
        for value in (entry.objective, entry.donor_objective):
            assert value is None or not math.isfinite(value) or abs(value) <= MAX_ABS_VALUE


@pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason="pbt-status needs rich")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(changes=record_changes, line=line_fields, beat=beat_changes)
def test_status_never_dies_on_such_files(tmp_path_factory: Any, changes: Dict[str, Any], line: Dict[str, Any],
                                         beat: Dict[str, Any]) -> None:
    from pbt.storage import Workspace
    from pbt.tools.snapshot import read_snapshot
    from pbt.tools.status import render_text

    root = Path(tmp_path_factory.mktemp("ws"))
    Workspace(root, 0, 2).publish(3, 3000, 1.0, {LR: 1e-3}, b"own")
    peer = root / "001"
    peer.mkdir()
    (peer / "000003.yaml").write_bytes(dumps(record_data(1, changes)))
    (peer / "000003.pth").write_bytes(b"peer")
    (peer / "lineage.jsonl").write_bytes(dumps(line) + b"\n")
    (peer / "heartbeat").write_bytes(dumps({"pid": 1, "host": "h", "token": "t", "time": 1.0, **beat}))
    render_text(read_snapshot(root), width=120)
