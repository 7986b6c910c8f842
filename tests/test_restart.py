"""Tests for pbt.restart: Hydra-safe overrides, argv rebuilding, and a real same-PID exec loop.

Hydra round trips skip themselves when hydra is not installed (Python 3.8 CI); the rest runs anyway.
"""
import functools
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.errors import ConfigError, PbtError
from pbt.restart import (
    RestartError,
    build_restart_argv,
    exec_restart,
    format_override,
    format_value,
    split_override_key,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


# ---- format_override ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (-7, "-7"),
        (0.1, "0.1"),
        (1e-05, "1e-05"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        ("adam", "adam"),
        ("runs/exp_1.a-b", "runs/exp_1.a-b"),
        ("true", "'true'"),
        ("NULL", "'NULL'"),
        ("1.5", "'1.5'"),
        ("", "''"),
        ("a b", "'a b'"),
        ("a=b", "'a=b'"),
        ("x,y", "'x,y'"),
        ("[1]", "'[1]'"),
        ("it's", "'it\\'s'"),
        ("back\\", "'back\\\\'"),
        ("${oc.env:HOME}", "'\\${oc.env:HOME}'"),
        ([1, "a b", 0.5], "[1,'a b',0.5]"),
        ({"k": 1.5}, "{k:1.5}"),
    ],
)
def test_format_value(value: Any, text: str) -> None:
    assert format_value(value) == text
    assert format_override("train.params.config.x", value) == "train.params.config.x=" + text


def test_format_value_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    assert format_value(np.float64(0.1)) == "0.1"  # not 'np.float64(0.1)'
    assert format_value(np.int64(4)) == "4"
    assert format_value(np.bool_(True)) == "true"


def test_format_override_rejects_bad_keys_and_values() -> None:
    for key in ("", "a=b", "a b", "--flag"):
        with pytest.raises(ConfigError):
            format_override(key, 1)
    with pytest.raises(ConfigError, match="type object"):
        format_override("a", object())
    with pytest.raises(ConfigError, match="dict key"):
        format_override("a", {"a b": 1})


@functools.lru_cache(maxsize=1)
def _hydra_parser() -> Any:
    parser_module = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    return parser_module.OverridesParser.create()


def _hydra_value(override: str) -> Any:
    """The value Hydra's parser reads from ``override``, after OmegaConf's escape handling."""
    from omegaconf import OmegaConf

    value = _hydra_parser().parse_overrides([override])[0].value()
    if isinstance(value, str) and "${" in value:  # escaped interpolation: what the config sees
        value = OmegaConf.create({"v": value}).v
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.floats(),
        st.integers(),
        st.booleans(),
        st.none(),
        st.lists(st.one_of(st.floats(), st.text(max_size=8), st.integers()), max_size=4),
    )
)
def test_hydra_parses_back_exactly(value: Any) -> None:
    pytest.importorskip("hydra")
    if isinstance(value, str) and "${" in value:
        pytest.importorskip("omegaconf")
    override = format_override("train.params.config.x", value)
    assert _same(value, _hydra_value(override)), override


def test_hydra_compose_applies_restart_argv(tmp_path: Path) -> None:
    hydra = pytest.importorskip("hydra")
    (tmp_path / "config.yaml").write_text("a: 1\nname: x\ncheckpoint: ''\n")
    values = {"a": 0.30000000000000004, "name": "x ${y} '\\ =,[]", "+extra": "q=r"}
    argv = build_restart_argv(["a=5", "name=old"], values, str(tmp_path / "my ck=1.pth"))
    with hydra.initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = hydra.compose("config", overrides=argv)
    assert cfg.a == values["a"] and cfg.name == values["name"] and cfg.extra == "q=r"
    assert cfg.checkpoint == str(tmp_path / "my ck=1.pth") and "pbt" not in cfg  # no internal state in the config


# ---- build_restart_argv ------------------------------------------------------------------------


def test_split_override_key() -> None:
    assert split_override_key("a.b=1") == ("", "a.b")
    assert split_override_key("++a.b=x=y") == ("++", "a.b")
    assert split_override_key("+a=1") == ("+", "a")
    assert split_override_key("~a") == ("~", "a")


def test_build_restart_argv_replaces_and_keeps() -> None:
    argv = [
        "--config-name", "pendulum",
        "-cd", "train.params.config.gamma=odd/dir",  # a flag's value is never taken for an override
        "task=pendulum",
        "train.params.config.gamma=0.99",
        "+train.params.config.tau=0.95",
        "~train.params.config.e_clip",
        "checkpoint=/old.pth",
        "pbt.restarted=false",  # an older version's marker: dropped
        "hydra.run.dir=outputs/x",
        "pbt.policy_idx=3",
    ]
    out = build_restart_argv(
        argv,
        {"train.params.config.gamma": 0.9, "train.params.config.tau": 0.5, "train.params.config.e_clip": 0.2},
        "/runs/ck 1.pth",
    )
    assert out == [
        "--config-name", "pendulum",
        "-cd", "train.params.config.gamma=odd/dir",
        "task=pendulum",
        "hydra.run.dir=outputs/x",  # kept: no run_dir given
        "pbt.policy_idx=3",
        "checkpoint='/runs/ck 1.pth'",
        "train.params.config.gamma=0.9",
        "++train.params.config.tau=0.5",  # was added with '+': re-added with '++'
        "train.params.config.e_clip=0.2",
    ]


def test_build_restart_argv_rejects_ambiguous_overrides() -> None:
    with pytest.raises(ConfigError, match="twice"):
        build_restart_argv([], {"a": 1, "++a": 2}, "/ck.pth")
    with pytest.raises(ConfigError, match="checkpoint"):
        build_restart_argv([], {"checkpoint": "/x.pth"}, "/ck.pth")


def test_build_restart_argv_run_dir_and_no_checkpoint(tmp_path: Path) -> None:
    argv = ["checkpoint=/pretrained.pth", "hydra.run.dir=outputs/${now:%H-%M-%S}", "lr=1"]
    out = build_restart_argv(argv, {"lr": 2}, None, run_dir=str(tmp_path / "run"))
    assert out == ["checkpoint=/pretrained.pth", f"hydra.run.dir={tmp_path / 'run'}", "lr=2"]


def test_build_restart_argv_makes_checkpoint_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert build_restart_argv([], {}, "ck.pth")[0] == f"checkpoint={tmp_path / 'ck.pth'}"


def test_argv_does_not_grow_over_500_restarts() -> None:
    argv: List[str] = ["task=pendulum", "pbt.policy_idx=1", "train.params.config.gamma=0.99", "+seed=3"]
    lengths = set()
    values: Dict[str, Any] = {}
    for i in range(500):
        values = {
            "train.params.config.gamma": 1.0 - 1.0 / (i + 3),
            "train.params.config.learning_rate": 3e-4 * (1.1 ** (i % 17)),
            "train.params.config.name": f"run {i} a=b",
            "seed": i,
        }
        argv = build_restart_argv(argv, values, f"/ckpt/dir with space/restart_{i}.pth")
        lengths.add(len(argv))
    assert lengths == {7}
    assert argv == [
        "task=pendulum",
        "pbt.policy_idx=1",
        "checkpoint='/ckpt/dir with space/restart_499.pth'",
        format_override("train.params.config.gamma", values["train.params.config.gamma"]),
        format_override("train.params.config.learning_rate", values["train.params.config.learning_rate"]),
        "train.params.config.name='run 499 a=b'",
        "++seed=499",
    ]


# ---- exec_restart ------------------------------------------------------------------------------

PROBE = """
import os, sys
from pbt.restart import build_restart_argv, exec_restart

log, total = sys.argv[1], int(sys.argv[2])
count = next((int(a.split("=", 1)[1]) for a in sys.argv[3:] if a.startswith("count=")), 0)
env_bytes = sum(len(k) + len(v) for k, v in os.environ.items())
assert (os.environ.get("PBT_RESTARTED") == "1") == (count > 0)  # set by exec_restart only
with open(log, "a") as fobj:
    fobj.write(f"{os.getpid()} {len(sys.argv)} {len(os.environ)} {env_bytes} {sys.argv[-1]}\\n")
if count < total:
    def failing_flush():
        raise RuntimeError("tensorboard writer already closed")
    overrides = {"count": count + 1, "lr": 1.0 / (count + 3), "name": "x y=" + str(count)}
    argv = build_restart_argv(sys.argv[3:], overrides, "/tmp/restart ck.pth")
    exec_restart([log, str(total)] + argv, before_exec=[failing_flush], module="restart_probe")
"""


def test_exec_restart_keeps_pid_argv_and_env_constant(tmp_path: Path) -> None:
    (tmp_path / "restart_probe.py").write_text(PROBE)
    log = tmp_path / "log.txt"
    total = 12
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "restart_probe", str(log), str(total), "task=x", "count=0"],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" ", 4) for line in log.read_text().splitlines()]
    assert len(rows) == total + 1
    assert len({r[0] for r in rows}) == 1  # one PID throughout
    assert len({r[1] for r in rows[1:]}) == 1  # argv length constant after the first restart
    # the environment never grows: the first restart adds the restarted marker, nothing after it
    assert len({(r[2], r[3]) for r in rows[1:]}) == 1 and int(rows[1][2]) == int(rows[0][2]) + 1
    assert rows[-1][4] == f"name='x y={total - 1}'"
    assert "before-restart callback" in proc.stderr and "tensorboard writer already closed" in proc.stderr


def test_exec_restart_pid_is_the_launchers_child(tmp_path: Path) -> None:
    (tmp_path / "restart_probe.py").write_text(PROBE)
    log = tmp_path / "log.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "restart_probe", str(log), "3"], cwd=str(tmp_path), env=env,
                            stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=60) == 0
    assert {int(line.split()[0]) for line in log.read_text().splitlines()} == {proc.pid}


def test_exec_restart_refuses_oversized_argv() -> None:
    called = []
    with pytest.raises(RestartError, match="exceed") as info:
        exec_restart(["x=" + "a" * 200000], before_exec=[lambda: called.append(1)], module="nonexistent_module")
    assert isinstance(info.value, PbtError) and called == []
