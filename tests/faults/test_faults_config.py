"""Configuration mistakes fail before (or, for the objective key, right after the grace period of)
training, each saying what failed and how to fix it. Real ``python -m pbt.train`` processes, run
side by side to keep the test short, for what only a real worker can hit (the env's info keys, a
read-only mount); the other checks run in-process here and in tests/test_faults_member.py
(workspace under a file), tests/test_member.py (policy_idx out of range) and tests/test_train.py
(a mutation of a missing key, PBT with one policy: subprocesses)."""
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import worker_env
from faults_util import remount, tmpfs
from pbt.config import PbtConfig
from pbt.errors import ConfigError

BASE = ["task=Pendulum", "pbt=pbt_default", "pbt.num_policies=2", "sim_device=cpu", "rl_device=cpu", "num_envs=128",
        "torch_threads=1", "pbt.interval_steps=2048", "max_frames=200000"]


def run_all(tmp_path: Path, cases: Dict[str, List[str]]) -> Dict[str, subprocess.CompletedProcess]:
    procs = {}
    for name, args in cases.items():
        cmd = [sys.executable, "-m", "pbt.train", *BASE, f"train_dir={tmp_path / 'runs'}", f"experiment={name}", *args]
        procs[name] = subprocess.Popen(cmd, cwd=str(tmp_path), env=worker_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.mark.training
@pytest.mark.faults
def test_config_errors_say_what_failed_and_how_to_fix_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", size="1m") as ro:
        for name in ("000", "best0"):
            (ro / name).mkdir()
        remount(ro, "ro")
        results = run_all(tmp_path, {
            "objective_key": [f"pbt.workspace={tmp_path / 'ws1'}", "pbt.objective=episode_retrun"],
            "read_only": [f"pbt.workspace={ro}"],
        })
    expected = {
        "objective_key": ["pbt.objective='episode_retrun' is neither a trainer statistic nor reported by the task",
                          "Did you mean one of: 'episode_return'", "trainer statistics: episode_return",
                          "Env info keys (dotted for nested dicts, e.g. episode.<key>): time_outs",
                          "Or use true_objective (the default)"],
        "read_only": [f"pbt.workspace={ro} is not writable", "Read-only file system", "mounted read-write"],
    }
    for name, proc in results.items():
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, (name, out[-3000:])
        for text in expected[name]:
            assert text in out, (name, text, out[-3000:])
        if name != "objective_key":  # caught before any training
            assert "SUMMARY" not in out and "first env step" not in out, (name, out[-3000:])


@pytest.mark.parametrize("values, message", [
    ({"policy_idx": 2, "num_policies": 2}, "pbt.policy_idx=2 is out of range for pbt.num_policies=2. Valid range: 0..1"),
    ({"overwrite": True}, "pbt.overwrite=true only applies with pbt.resume=false"),
    ({"on_write_error": "retyr"}, "Unknown pbt.on_write_error='retyr'. Did you mean 'retry'?"),
    ({"heartbeat_interval": 30, "heartbeat_timeout": 40},
     "pbt.heartbeat_timeout=40.0 is out of range: it must be at least twice pbt.heartbeat_interval (30 s)"),
    ({"heartbeat_interval": 0}, "pbt.heartbeat_interval=0.0 is out of range"),
    ({"overwrite": "yes"}, "pbt.overwrite must be true or false"),
])
def test_reliability_keys_are_checked(values, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        PbtConfig.from_mapping(values).validate_population()
