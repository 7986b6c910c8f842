"""The whole population SIGKILLed (a node lost), then the same launcher command run again: every
member continues from its newest intact record; nothing starts from scratch."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import worker_env
from faults_util import wait_for
from pbt.storage import Workspace

pytestmark = [pytest.mark.training, pytest.mark.faults]

N = 2
MAX_FRAMES = 60_000

EXPERIMENT = f'''
from pbt.launcher import Experiment, ParamGrid, RunDescription

_cmd = ("python -m pbt.train task=Pendulum pbt=pbt_default num_envs=128 max_frames={MAX_FRAMES} "
        "pbt.interval_steps=4096 pbt.start_after=0 pbt.initial_delay=0 sim_device=cpu rl_device=cpu "
        "torch_threads=1 pbt.heartbeat_interval=0.5 pbt.heartbeat_timeout=5")
RUN_DESCRIPTION = RunDescription("faults", experiments=[
    Experiment("pend", _cmd, ParamGrid([("pbt.policy_idx", range({N}))]))])
'''


def newest(ws: Path, idx: int):
    record = Workspace(ws, idx, N).latest_record(idx, verify=True)
    return None if record is None else (record.iteration, record.frame)


def test_rerun_after_the_whole_population_was_sigkilled_continues_every_member(tmp_path: Path) -> None:
    (tmp_path / "fault_exp.py").write_text(EXPERIMENT)
    cmd = [sys.executable, "-m", "pbt.launcher.run", "--run=fault_exp", "--backend=processes",
           f"--train_dir={tmp_path / 'train'}", "--restart_delay=0.2"]
    ws = tmp_path / "train" / "faults" / "pend" / "workspace"
    logs = tmp_path / "train" / "faults" / "pend" / "logs"
    env = worker_env(str(tmp_path))
    with open(str(tmp_path / "launcher1.log"), "wb") as out:
        launcher = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for("every member's second record",
                 lambda: all((newest(ws, i) or (0, 0))[0] >= 2 for i in range(N)), 120)
        # The node dies: nobody gets to react (the launcher is frozen first, then everything is SIGKILLed).
        pids = [json.loads((ws / f"{i:03d}" / "heartbeat").read_text())["pid"] for i in range(N)]
        os.kill(launcher.pid, signal.SIGSTOP)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(30)
        for pid in pids:
            wait_for(f"pid {pid} to be gone", lambda: not os.path.exists(f"/proc/{pid}") or
                     open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z"), 30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    before = {i: newest(ws, i) for i in range(N)}
    assert all(before.values()), before
    assert all((ws / f"{i:03d}" / "lock").exists() for i in range(N))  # left behind by the killed members

    rerun = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=240)
    member_logs = {i: (logs / f"pend_{i:02d}.log").read_text() for i in range(N)}
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:] + member_logs[0][-3000:]
    for i in range(N):
        log = member_logs[i]
        resumed = re.findall(r"resumes from its iteration (\d+) \(frame (\d+)\)", log)
        assert [(int(a), int(b)) for a, b in resumed] == [before[i]], log[-3000:]
        assert re.search(r"taking over the lock of pid \d+ .*no longer running", log)
        lineage = Workspace(ws, i, N).read_lineage(i)
        assert sum(e.reason == "initial mutation of a fresh member" for e in lineage) == 1
        summary = re.findall(r"SUMMARY frames=(\d+)", log)
        assert len(summary) == 1 and int(summary[0]) >= MAX_FRAMES  # only the rerun finished
        final = newest(ws, i)
        assert final is not None and final[1] > before[i][1]
        assert '"state": "finished"' in (ws / f"{i:03d}" / "heartbeat").read_text()
        assert not (ws / f"{i:03d}" / "lock").exists()
