"""The tools on a shared workspace a peer wrote into (issue 25, item 7): pbt.status and pbt.analyze
survive extreme numbers, short_keys is linear, status escapes every control character, and
pbt.replay refuses schedule keys PBT never changes (the run's identity, the task module)."""
import json
import math
import time
from pathlib import Path

import pytest

from pbt.errors import ConfigError
from pbt.keys import short_keys
from pbt.storage import LineageEntry, Workspace
from pbt.tools.replay import parse_schedule
from pbt.tools.snapshot import read_snapshot
from pbt.tools.status import render_text

LR = "train.params.config.learning_rate"
ESC = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b]0;owned\x07"


def hostile_workspace(root: Path) -> Path:
    for idx in (0, 1):
        ws = Workspace(root, idx, 2)
        ws.publish(1, 100, 1.0 + idx, {LR: 1e-3, f"task.env.{ESC}": 1}, b"ckpt")
        ws.append_lineage(LineageEntry(policy_idx=idx, iteration=1, frame=100, action="mutate", reason=ESC,
                                       params_before={LR: 1e-3}, params_after={LR: 2e-3, ESC: ESC}, time=time.time(),
                                       network={"units": ESC, "activation": ESC}))
    with open(root / "001" / "lineage.jsonl", "ab") as f:  # numbers that overflowed every tool
        for fields in ({"time": 1e20}, {"time": 10 ** 400}, {"objective": 10 ** 400}, {"frame": 10 ** 400},
                       {"action": ESC, "donor": 0, "iteration": 2, "frame": 200, "time": 5.0}):
            f.write(json.dumps({"policy_idx": 1, "iteration": 2, "action": "replace", **fields}).encode() + b"\n")
    record = json.loads((root / "000" / "000001.yaml").read_text())
    for name, change in (("000002", {"objective": 10 ** 400}), ("000003", {"time": 1e400}),
                         ("000004", {"episode_returns": [1e308] * 8})):
        planted = dict(record, iteration=int(name), **change)
        (root / "000" / f"{name}.yaml").write_text(json.dumps(planted))
    (root / "001" / "heartbeat").write_text('{"pid": Infinity, "host": "h", "token": "t", "time": 1e400}')
    return root


def test_status_survives_and_escapes_every_control_character(tmp_path: Path) -> None:
    pytest.importorskip("rich")
    snapshot = read_snapshot(hostile_workspace(tmp_path / "ws"))
    for width in (220, 80):
        text = render_text(snapshot, width=width)
        assert "\x1b" not in text and "\x07" not in text
        assert "\\x1b" in text


def test_analyze_survives(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from pbt.tools.analyze import analyze

    result = analyze(hostile_workspace(tmp_path / "ws"), tmp_path / "out")
    assert result.best is not None


def test_short_keys_is_linear_in_the_keys_length() -> None:
    deep = [".".join(["k"] * 1000 + [f"v{i}"]) for i in range(300)]  # quadratic before: minutes
    started = time.monotonic()
    names = short_keys(deep)
    assert time.monotonic() - started < 20  # a hang detector, not a speed check (~0.3 s)
    assert names[deep[7]] == "v7"
    clash = [".".join([f"p{i}"] + ["x"] * 1000) for i in range(300)]
    assert short_keys(clash)[clash[3]] == clash[3]
    keys = ["train.params.config.gamma", "task.env.gamma", "train.params.config.tau", "a.b", "b"]
    assert short_keys(keys) == {"train.params.config.gamma": "config.gamma", "task.env.gamma": "env.gamma",
                                "train.params.config.tau": "tau", "a.b": "a.b", "b": "b"}


@pytest.mark.parametrize("key", ["train_dir", "task", "task.name", "task.kind", "experiment", "checkpoint",
                                 "pbt.workspace", "train.params.algo.name", "hydra.run.dir", "max_frames"])
def test_replay_refuses_keys_pbt_never_changes(key: str) -> None:
    with pytest.raises(ConfigError, match="never changes in PBT"):
        parse_schedule({"steps": [{"frame": 0, "params": {key: "evil:Module"}}]}, "schedule.yaml")
    assert parse_schedule({"steps": [{"frame": 0, "params": {LR: 1e-3}}]}, "s")[0].params == {LR: 1e-3}


@pytest.mark.parametrize("frame", [10 ** 400, 1e308, 2 ** 53 + 1, math.inf, math.nan, -1])
def test_replay_refuses_frames_beyond_the_bounds_without_overflowing(frame: float) -> None:
    # a 400-digit frame raised OverflowError (math.isfinite of an int), 1e308 was taken as a frame
    with pytest.raises(ConfigError, match="frame must be a whole number in 0..9007199254740992"):
        parse_schedule({"steps": [{"frame": frame, "params": {LR: 1e-3}}]}, "schedule.yaml")
    with pytest.raises(ConfigError, match="an int of 401 digits"):
        parse_schedule({"steps": [{"frame": 0, "params": {LR: 10 ** 400}}]}, "schedule.yaml")
    assert parse_schedule({"steps": [{"frame": 2 ** 53, "params": {LR: 2 ** 62}}]}, "s")[0].frame == 2 ** 53


def test_analyze_survives_extreme_hyperparameter_values_in_a_lineage(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from pbt.tools.analyze import analyze

    root = tmp_path / "ws"
    for idx in (0, 1):
        ws = Workspace(root, idx, 2)
        ws.publish(1, 100, 1.0 + idx, {LR: 1e-3}, b"ckpt")
        ws.append_lineage(LineageEntry(policy_idx=idx, iteration=1, frame=100, action="mutate",
                                       params_before={LR: 1e-3}, params_after={LR: 2e-3}, time=time.time()))
    with open(root / "001" / "lineage.jsonl", "ab") as f:
        for value in (10 ** 400, [10 ** 400], {"a": 10 ** 400}, 1e308, -1e308, math.inf, math.nan, 2 ** 62):
            f.write(json.dumps({"policy_idx": 1, "iteration": 2, "frame": 200, "action": "mutate", "mode": "inplace",
                                "params_before": {LR: value}, "params_after": {LR: value}}).encode() + b"\n")
    assert analyze(root, tmp_path / "out").best is not None  # OverflowError, then matplotlib's ValueError
