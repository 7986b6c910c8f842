"""Property-based fuzzing (issue 25) of every number a member or tool reads from a peer's files:
records (with the PB2 data ``param_history`` and ``gains`` and the curriculum's ``stage`` and
``stage_frame``), heartbeats, locks, lineage lines, object-log names, replay schedules and network
specs with huge integers, +-inf, NaN, 1e308, negatives, future times and deep or wide structures,
driven against the real readers, ``decide()`` for every strategy (PB2 where scikit-learn is
installed), the elastic rules and join check, the curriculum's stage filters and pbt.status. Each
reader either refuses the file (its own error: the project's root ``PbtError`` or the reader's
documented ``ValueError``, or a skipped entry) or returns values inside :mod:`pbt.storage.bounds`;
nothing downstream raises. Bounded examples: it runs in seconds. No torch: runs on Python 3.8."""
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
from pbt.curriculum.stages import furthest_stage, same_stage
from pbt.errors import CorruptRecordError, PbtError
from pbt.mutation import frozen_reason
from pbt.mutation.network import (ACTIVATIONS, KINDS, MAX_HIDDEN_LAYERS, MAX_UNITS, NetworkMutationConfig,
                                  NetworkSpec, NetworkTracker, network_of)
from pbt.mutation.space import parse_space
from pbt.selection import MemberState, decide
from pbt.selection.membership import join_donor, plausible_frame, ranked_members
from pbt.selection.pb2 import continuous_dims
from pbt.selection.pb2_data import data_points
from pbt.storage import LocalStore
from pbt.storage.bounds import MAX_ABS_VALUE, MAX_FRAMES, MAX_TIME, is_sample
from pbt.storage.lineage import parse_lineage
from pbt.storage.liveness import MAX_PID, judge, read_heartbeat, read_lock
from pbt.storage.objectlog import MAX_BASE_SEQ, base_name, parse_log_names, part_name
from pbt.storage.record import MAX_POLICY_IDX, MAX_STAGES, Record, parse_record
from pbt.tools.replay import parse_schedule, plan

LR = "train.params.config.learning_rate"
SUM = "cd" * 32
EXTREME = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 2 ** 53, 2 ** 53 + 1, 2 ** 62, 2 ** 64, -1, 0,
                     10 ** 400, -(10 ** 400), 1e12, 1e12 + 1, time.time() + 1e9, 5e-324]),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30), st.floats(), st.booleans(), st.none(),
    st.text(max_size=4))
FIELDS = ("objective", "time", "frame", "iteration", "frames_since_replace", "policy_idx", "version", "stage",
          "stage_frame", "family")
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GP = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a GP fit each
SPACE = {LR: {"type": "loguniform", "low": 1e-5, "high": 1e-2}}
DIMS = continuous_dims(parse_space("fuzz", SPACE))
STRATEGIES: List[Dict[str, Any]] = [
    {"selection": "dexpbt", "replace_fraction_worst": 0.34, "replace_fraction_best": 0.6},
    {"selection": "threshold"}, {"selection": "threshold", "significance_for": "last_of_family"},
    {"selection": "threshold", "eval_episodes": 2, "eval_window": 2, "significance_samples": "evaluations"},
    {"selection": "threshold", "eval_episodes": 2, "significance_samples": "training"},
    {"selection": "truncation", "quantile": 0.34},
    {"selection": "tournament", "tournament_size": 3, "elitism": False, "eval_loop": 3},
    {"selection": "mfpbt", "mfpbt_frequencies": [1, 2]}]
PB2 = {"selection": "pb2", "pb2_quantile": 0.5, "search_space": SPACE}


def dumps(data: Any) -> bytes:
    return json.dumps(data).encode()  # NaN/Infinity and 400-digit ints as JSON writers emit them


def record_data(idx: int, changes: Dict[str, Any]) -> Dict[str, Any]:
    data: Dict[str, Any] = {"policy_idx": idx, "iteration": 3, "frame": 3000, "objective": 1.0 + idx,
                            "params": {LR: 1e-3}, "checkpoint": "000003.pth", "checksum": SUM, "time": 1.0,
                            "episode_returns": [1.0, 2.0, 1.5], "frames_since_replace": 10 ** 6, "version": 1,
                            "history": {"1": 0.5, "2": 0.7}, "param_history": {"1": {LR: 1e-4}, "2": {LR: 2e-3}},
                            "gains": {"2": 0.2, "3": 0.3 + idx}, "family": idx % 2, "evaluated": True,
                            "training_returns": [0.5, 1.0 + idx, 0.7]}
    data.update(changes)
    return data


def check_bounded(record: Record) -> None:
    assert 0 <= record.frame <= MAX_FRAMES and 0 <= record.iteration <= MAX_FRAMES
    assert math.isfinite(record.time) and 0 <= record.time <= MAX_TIME
    assert all(is_sample(v) for v in record.episode_returns)
    assert all(is_sample(v) for v in record.training_returns)
    assert all(v is None or is_sample(v) for v in record.history.values())
    assert record.objective is None or not math.isfinite(record.objective) or abs(record.objective) <= MAX_ABS_VALUE
    assert all(is_sample(v) for v in record.gains.values())
    assert all(0 <= i <= MAX_FRAMES for i in [*record.history, *record.gains, *record.param_history])
    assert record.stage is None or 0 <= record.stage < MAX_STAGES
    assert record.stage_frame is None or 0 <= record.stage_frame <= MAX_FRAMES
    assert record.family is None or type(record.family) is int and 0 <= record.family < MAX_POLICY_IDX


ITERATIONS = st.sampled_from(["1", "2", "3", "9" * 16, "x", "-1", "", "1e3", "\u0663"])
record_changes = st.dictionaries(
    st.sampled_from(FIELDS + ("episode_returns", "training_returns", "history", "params", "gains", "param_history")),
    st.one_of(EXTREME, st.integers(0, 70), st.lists(EXTREME, max_size=6),
              st.dictionaries(ITERATIONS, EXTREME, max_size=3),
              st.dictionaries(ITERATIONS, st.one_of(st.fixed_dictionaries({LR: EXTREME}), EXTREME), max_size=3),
              st.fixed_dictionaries({LR: EXTREME})),
    max_size=4)


def parsed_peers(peers: List[Dict[str, Any]]) -> List[Record]:
    """The peers' records that parse (each checked to lie inside the bounds); the others are refused."""
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
    return parsed


def decide_all(peers: List[Dict[str, Any]], seed: int, significance: Any, strategies: List[Dict[str, Any]]) -> None:
    parsed = parsed_peers(peers)
    own = parse_record(dumps(record_data(0, {})), "own", 0, 3)
    n = len(peers) + 1
    for extra in strategies:
        cfg = PbtConfig.from_mapping(dict(enabled=True, num_policies=n, policy_idx=0, mutation={LR: "mutate_float"},
                                          start_after=0, initial_delay=0, ready_after=0, significance=significance,
                                          **extra))
        decide(MemberState(own, None, 10 ** 9), parsed, cfg, random.Random(seed))
    records = {r.policy_idx: r for r in parsed}
    ranked_members(0, records, set(), time.time(), 100.0)
    join_donor(0, records, set(records))
    data_points(parsed, DIMS)  # PB2's data, also where scikit-learn is missing
    same_stage(records, 0)
    furthest_stage(records, MAX_STAGES - 1)


@FUZZ
@given(peers=st.lists(record_changes, min_size=1, max_size=4), seed=st.integers(0, 3),
       significance=st.sampled_from([None, 0.05]))
def test_records_with_extreme_numbers_are_refused_or_bounded_and_every_strategy_decides(
        peers: List[Dict[str, Any]], seed: int, significance: Any) -> None:
    decide_all(peers, seed, significance, STRATEGIES)


@GP
@given(peers=st.lists(record_changes, min_size=1, max_size=4), seed=st.integers(0, 3),
       significance=st.sampled_from([None, 0.05]))
def test_pb2_fits_its_gp_only_to_bounded_data_of_such_records(peers: List[Dict[str, Any]], seed: int,
                                                              significance: Any) -> None:
    pytest.importorskip("sklearn")  # PB2's GP (hypothesis re-raises the skip at the first example)
    decide_all(peers, seed, significance, [PB2])


@FEWER
@given(peers=st.lists(record_changes, min_size=1, max_size=4),
       interval=st.one_of(st.integers(1, 2 ** 20), st.sampled_from([1000, 2 ** 53])),
       max_frames=st.one_of(st.none(), st.integers(-5, 2 ** 60), st.sampled_from([0, 10 ** 6, 2 ** 53])))
def test_the_elastic_join_takes_only_a_plausible_frame_from_such_records(
        peers: List[Dict[str, Any]], interval: int, max_frames: Any) -> None:
    plausible = {}
    for record in parsed_peers([dict(p, frame=p.get("frame", 3000)) for p in peers]):
        why = plausible_frame(record, interval, max_frames)
        if why is None:
            assert record.frame // interval == record.iteration
            assert max_frames is None or max_frames <= 0 or record.frame < max_frames
            plausible[record.policy_idx] = record
        else:
            assert isinstance(why, str) and why
    donor = join_donor(0, plausible, set(plausible))
    assert donor is None or (donor.has_objective and donor.policy_idx in plausible)


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
                     "time", "decided_at", "action", "params_after", "network", "family"]), EXTREME, max_size=5)


@FUZZ
@given(lines=st.lists(line_fields, max_size=6))
def test_lineage_lines_with_extreme_numbers_are_skipped_or_bounded(lines: List[Dict[str, Any]]) -> None:
    data = b"".join(dumps(line) + b"\n" for line in lines)
    for entry in parse_lineage(data, "fuzz"):
        assert -1 <= entry.iteration <= MAX_FRAMES and -1 <= entry.frame <= MAX_FRAMES
        assert 0 <= entry.time <= MAX_TIME and 0 <= entry.decided_at <= MAX_TIME
        for value in (entry.objective, entry.donor_objective):
            assert value is None or not math.isfinite(value) or abs(value) <= MAX_ABS_VALUE
        assert entry.family is None or -1 <= entry.family <= MAX_FRAMES


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


lock_changes = st.dictionaries(st.sampled_from(["pid", "host", "token", "proc_start", "time"]),
                               st.one_of(EXTREME, st.text(max_size=2000)), max_size=3)


@FEWER
@given(changes=lock_changes, raw=st.one_of(st.none(), st.binary(max_size=64)))
def test_locks_with_extreme_numbers_are_refused_or_bounded(tmp_path_factory: Any, changes: Dict[str, Any],
                                                           raw: Any) -> None:
    root = Path(tmp_path_factory.mktemp("lock"))
    data = {"pid": 1, "host": "h", "token": "t", "proc_start": "12", "time": time.time(), **changes}
    (root / "lock").write_bytes(dumps(data) if raw is None else raw)
    try:
        lock = read_lock(LocalStore(root), "lock")
    except (ValueError, PbtError):
        return
    assert lock is not None and 0 <= lock.pid <= MAX_PID
    assert math.isfinite(lock.time) and 0 <= lock.time <= MAX_TIME


LOG_NAMES = st.one_of(st.text(max_size=14), st.from_regex(r"[pb][0-9]{10}", fullmatch=True),
                      st.sampled_from(["p9999999999", "b9999999999", "b1000000001", part_name(0), part_name(1),
                                       part_name(2), base_name(0), base_name(1), base_name(10 ** 9), "p00000000001",
                                       "p-000000001", "p000000000\u0663", "P0000000000"]))


@FEWER
@given(names=st.lists(LOG_NAMES, max_size=30))
def test_object_log_names_are_parsed_or_ignored(names: List[str]) -> None:
    base, live, covered = parse_log_names(names)
    assert base is None or (0 <= base <= MAX_BASE_SEQ and base_name(base) in names)
    floor = -1 if base is None else base
    assert live == list(range(floor + 1, floor + 1 + len(live)))
    assert all(part_name(seq) in names for seq in live)
    assert set(covered) <= set(names) and not set(covered) & {part_name(seq) for seq in live}


JSON = st.recursive(st.one_of(EXTREME, st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=4)), max_leaves=12)
SCHEDULE_KEYS = st.one_of(st.sampled_from([LR, "train.params.config.gamma", "train_dir", "task", "task.name",
                                           "task.kind", "checkpoint", "pbt.workspace", "hydra.run.dir", "max_frames",
                                           "train.params.algo.name", "", "task.env.x"]), st.text(max_size=10))
STEPS = st.lists(st.fixed_dictionaries({"frame": st.one_of(EXTREME, st.integers(0, 10 ** 7)),
                                        "params": st.dictionaries(SCHEDULE_KEYS, JSON, max_size=3)}), max_size=4)


@FEWER
@given(document=st.one_of(JSON, STEPS, st.fixed_dictionaries({"steps": STEPS})))
def test_replay_schedules_are_refused_or_clean(document: Any) -> None:
    try:
        steps = parse_schedule(document, "fuzz")
    except PbtError:
        return
    assert steps and all(0 <= step.frame <= MAX_FRAMES for step in steps)
    assert [step.frame for step in steps] == sorted(step.frame for step in steps)
    assert not [key for step in steps for key in step.params if frozen_reason(key) is not None]
    try:
        plan(steps, {LR: 1e-3}, [LR])
    except PbtError:
        pass


WIDTHS = st.one_of(st.integers(-2, MAX_UNITS + 2), st.sampled_from([0, 1, 64, 4096, MAX_UNITS, 2 ** 62, 10 ** 400]),
                   EXTREME)
SPEC = st.fixed_dictionaries(
    {"units": st.one_of(st.lists(WIDTHS, max_size=MAX_HIDDEN_LAYERS + 8), st.lists(st.just(4096), max_size=80),
                        EXTREME),
     "activation": st.one_of(st.sampled_from(ACTIVATIONS), EXTREME)},
    optional={"rnn": st.one_of(st.sampled_from(["lstm", "gru", "rnn"]), EXTREME), "rnn_units": WIDTHS,
              "rnn_layers": WIDTHS, "cnn_filters": st.lists(WIDTHS, max_size=20),
              "cnn_kernels": st.lists(WIDTHS, max_size=20), "cnn_strides": st.lists(WIDTHS, max_size=20),
              "cnn_padding": st.lists(WIDTHS, max_size=20), "parameters": WIDTHS})
LIMITS = NetworkMutationConfig()


@FEWER
@given(data=st.one_of(SPEC, JSON), kind=st.sampled_from(KINDS), seed=st.integers(0, 3))
def test_deep_and_wide_network_specs_are_refused_or_within_the_limits(data: Any, kind: str, seed: int) -> None:
    try:
        spec = NetworkSpec.from_dict(data, "fuzz")
    except ValueError:
        spec = None
    else:
        assert 1 <= len(spec.units) <= MAX_HIDDEN_LAYERS and all(1 <= u <= MAX_UNITS for u in spec.units)
    tracker = NetworkTracker(LIMITS, NetworkSpec((64, 64), "elu"))
    adopted = tracker.within_limits(spec, "the donor's network")
    assert adopted is None or not LIMITS.check_spec(adopted, "adopted", tracker.start)
    change = tracker.plan(kind, data, random.Random(seed))  # the donor's network, when it may be adopted
    assert not LIMITS.check_spec(change.after, "after", tracker.start), change
    assert tracker.resume(data, "fuzz") is None or tracker.spec == NetworkSpec((64, 64), "elu")
    try:  # the same spec inside a peer's record
        record = parse_record(dumps(record_data(1, {"network": data})), "fuzz", 1, 3)
    except CorruptRecordError:
        return
    network_of(record.network)
