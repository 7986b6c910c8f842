"""The processes backend with real processes and real signals (fake workers; no torch; Python 3.8 ok).

Each test writes a tiny fake worker and an experiment module into tmp_path, starts
``python -m launcher.run`` as a subprocess, and checks what the workers recorded on disk.
Liveness is read from /proc/PID/stat (a zombie counts as dead: PID 1 may reap orphans slowly).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import REPO
from pbt.launcher.backends.processes import GpuAllocator, ProcessesOptions, RunLock
from pbt.errors import ConfigError
from pbt.procfs import is_alive, process_start_time, read_stat


def process_state(pid: int) -> Optional[str]:
    stat = read_stat(pid)
    return None if stat is None else stat.state

# The fake worker takes Hydra-style key=value arguments like the real one. It appends one JSON
# line per start to <train_dir>/<experiment>/starts.jsonl (pid, CUDA_VISIBLE_DEVICES, argv), so a
# restarted worker can see its previous starts: that is how it "resumes".
FAKE_WORKER = r'''
import json, os, signal, subprocess, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
run_dir = os.path.join(args["train_dir"], args["experiment"])
os.makedirs(run_dir, exist_ok=True)
starts_path = os.path.join(run_dir, "starts.jsonl")
previous = open(starts_path).read().splitlines() if os.path.exists(starts_path) else []
record = {"pid": os.getpid(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"), "argv": sys.argv[1:],
          "previous_starts": len(previous), "time": time.time()}
with open(starts_path, "a") as f:
    f.write(json.dumps(record) + "\n")
mode = args.get("mode", "ok")
sleep = float(args.get("sleep", "0"))

def write_pids(pids):
    tmp = os.path.join(run_dir, "pids.json.tmp")
    with open(tmp, "w") as f:
        json.dump(pids, f)
    os.replace(tmp, os.path.join(run_dir, "pids.json"))

if mode == "ok":
    time.sleep(sleep)
    sys.exit(0)
if mode == "crash":
    time.sleep(sleep)
    sys.exit(3)
if mode == "crash_once":
    sys.exit(0 if previous else 4)
if mode == "hang_first":
    if previous:
        sys.exit(0)
    time.sleep(120)
    sys.exit(0)
if mode == "exec":
    if "restarted=1" in sys.argv:
        sys.exit(0)
    os.execv(sys.executable, [sys.executable] + sys.argv + ["restarted=1"])
if mode == "spawn":
    # A child in the worker's group, and a grandchild that escapes to its own session (setsid).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    write_pids([os.getpid(), child.pid, escaped.pid])
    time.sleep(120)
    sys.exit(0)
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
    write_pids([os.getpid(), child.pid])
    time.sleep(120)
    sys.exit(0)
if mode == "leave_child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    write_pids([os.getpid(), child.pid])
    sys.exit(0)
sys.exit(99)
'''

EXPERIMENT_MODULE = '''
from pbt.launcher import Experiment, ParamGrid, RunDescription
RUN_DESCRIPTION = RunDescription("{run_name}", experiments=[
    Experiment("pop", "python {worker} {args}", ParamGrid([("pbt.policy_idx", range({n}))])),
])
'''


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.worker = tmp_path / "fake_worker.py"
        self.worker.write_text(FAKE_WORKER)
        self.train_dir = tmp_path / "train"
        self.module_counter = 0

    def module(self, args: str, n: int, run_name: str = "run") -> str:
        self.module_counter += 1
        name = f"fake_run_{self.module_counter}"
        (self.tmp / f"{name}.py").write_text(EXPERIMENT_MODULE.format(run_name=run_name, worker=self.worker, args=args, n=n))
        return name

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.tmp), str(REPO)])
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(extra or {})
        return env

    def launcher_argv(self, module: str, *options: str) -> List[str]:
        return [sys.executable, "-m", "pbt.launcher.run", f"--run={module}", "--backend=processes",
                f"--train_dir={self.train_dir}", "--restart_delay=0", *options]

    def run(self, module: str, *options: str, timeout: float = 60) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(self.launcher_argv(module, *options), cwd=str(REPO), env=self.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)

    def start(self, module: str, *options: str) -> "subprocess.Popen[str]":
        return subprocess.Popen(self.launcher_argv(module, *options), cwd=str(REPO), env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)

    def member_dir(self, i: int, run_name: str = "run") -> Path:
        return self.train_dir / run_name / "pop" / f"pop_{i:02d}"

    def starts(self, i: int, run_name: str = "run") -> List[dict]:
        path = self.member_dir(i, run_name) / "starts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wait_for_pids(self, n: int, proc: "subprocess.Popen[str]", timeout: float = 30) -> List[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = [self.member_dir(i) / "pids.json" for i in range(n)]
            if all(f.exists() for f in files):
                return [pid for f in files for pid in json.loads(f.read_text())]
            assert proc.poll() is None, f"launcher exited early:\n{proc.communicate()[0]}"
            time.sleep(0.05)
        raise AssertionError("the fake workers did not write their pid files in time")


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def wait_dead(pids: List[int], timeout: float = 5.0) -> List[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in pids if is_alive(p)]
    return alive


# --- pure pieces -------------------------------------------------------------------------------


def test_gpu_allocator_least_loaded_first() -> None:
    gpus = GpuAllocator(num_gpus=4, per_gpu=2)
    order = [gpus.acquire() for _ in range(8)]
    assert order == [0, 1, 2, 3, 0, 1, 2, 3]
    assert not gpus.has_capacity()
    gpus.release(2)
    assert gpus.has_capacity()
    assert gpus.acquire() == 2


def test_gpu_allocator_refills_the_emptiest_gpu() -> None:
    gpus = GpuAllocator(num_gpus=3, per_gpu=3)
    taken = [gpus.acquire() for _ in range(6)]  # 0,1,2,0,1,2
    assert taken == [0, 1, 2, 0, 1, 2]
    gpus.release(1)
    gpus.release(1)
    assert gpus.acquire() == 1  # GPU 1 now has the fewest members


def test_gpu_allocator_unmanaged_on_one_gpu_and_unlimited_on_several() -> None:
    gpus = GpuAllocator(num_gpus=1, per_gpu=-1)
    assert not gpus.managed
    assert gpus.has_capacity()
    assert gpus.acquire() is None
    gpus = GpuAllocator(num_gpus=3, per_gpu=-1)  # several GPUs: spread, never all on the first
    assert gpus.managed and gpus.capacity is None
    assert [gpus.acquire() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0] and gpus.has_capacity()


def test_gpu_allocator_counts_gpus_other_members_hold() -> None:
    gpus = GpuAllocator(2, 2, devices=["4", "5"], held={"4": 2, "7": 1})
    assert gpus.acquire() == 1 and gpus.acquire() == 1 and not gpus.has_capacity()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_parallel": -1},
        {"experiments_per_gpu": 0},
        {"experiments_per_gpu": -2},
        {"experiments_per_gpu": 2, "num_gpus": 0},
        {"max_restarts": -1},
        {"kill_timeout": -1.0},
    ],
)
def test_bad_options_raise_config_error(kwargs: Dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ProcessesOptions(**kwargs)  # type: ignore[arg-type]


def test_process_state_of_a_zombie_is_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while process_state(proc.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process_state(proc.pid) == "Z"  # exited, not yet reaped
    assert not is_alive(proc.pid)
    proc.wait()
    assert process_state(proc.pid) is None
    assert is_alive(os.getpid())


def test_run_lock_records_host_pid_and_start_time(tmp_path: Path) -> None:
    import socket

    with RunLock([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a")]) as lock:
        assert lock.held == [str(tmp_path / "a" / "launcher.lock"), str(tmp_path / "b" / "launcher.lock")]
        text = (tmp_path / "a" / "launcher.lock").read_text()
        assert text == f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid())}\n"
        with pytest.raises(ConfigError, match=f"another launcher \\(pid {os.getpid()} on this host\\)"):
            RunLock([str(tmp_path / "b")]).__enter__()
    assert not (tmp_path / "a" / "launcher.lock").exists() and not (tmp_path / "b" / "launcher.lock").exists()


def test_run_lock_of_a_reused_pid_is_taken_over(tmp_path: Path) -> None:
    """The pid in a lock runs again, but as another process (other start time): the owner is gone."""
    import socket

    lock = tmp_path / "launcher.lock"
    lock.write_text(f"{socket.gethostname()} {os.getpid()} 1\n")
    with RunLock([str(tmp_path)]):
        assert lock.read_text().split()[1] == str(os.getpid())
    lock.write_text(f"{socket.gethostname()} {os.getpid()}\n")  # a lock from before start times: pid only
    with pytest.raises(ConfigError, match="another launcher"):
        RunLock([str(tmp_path)]).__enter__()
    assert lock.exists()  # a refused launcher leaves the other's lock alone
    lock.write_text(f"elsewhere {os.getpid()} 1\n")
    with pytest.raises(ConfigError, match=f"pid {os.getpid()} on host elsewhere"):
        RunLock([str(tmp_path)]).__enter__()


# --- real runs ---------------------------------------------------------------------------------


def test_members_run_with_their_commands_and_logs(setup: Setup) -> None:
    module = setup.module("mode=ok sleep=0.1", n=3)
    result = setup.run(module, "--num_gpus=0")
    assert result.returncode == 0, result.stdout
    run_dir = setup.train_dir / "run"
    for i in range(3):
        starts = setup.starts(i)
        assert len(starts) == 1
        argv = starts[0]["argv"]
        assert f"pbt.policy_idx={i}" in argv
        assert "pbt.num_policies=3" in argv
        assert f"pbt.workspace={run_dir / 'pop' / 'workspace'}" in argv
        assert f"train_dir={run_dir / 'pop'}" in argv
        assert f"experiment=pop_{i:02d}" in argv
        assert starts[0]["cvd"] == "unset"  # --experiments_per_gpu=-1 (default) leaves it alone
        log_text = (run_dir / "pop" / "logs" / f"pop_{i:02d}.log").read_text()
        assert f"pbt.policy_idx={i}" in log_text and "exited with status 0" in log_text
        # The exact command is printed.
        assert f"[pop_{i:02d}] CUDA_VISIBLE_DEVICES unset: {sys.executable} {setup.worker}" in result.stdout
    manifest = json.loads((run_dir / "members.json").read_text())
    assert [m["name"] for m in manifest["members"]] == ["pop_00", "pop_01", "pop_02"]


def test_gpu_placement_8_members_on_4_gpus_2_per_gpu(setup: Setup) -> None:
    module = setup.module("mode=ok sleep=1.5", n=8)
    result = setup.run(module, "--max_parallel=8", "--num_gpus=4", "--experiments_per_gpu=2")
    assert result.returncode == 0, result.stdout
    devices = [setup.starts(i)[0]["cvd"] for i in range(8)]
    assert devices == ["0", "1", "2", "3", "0", "1", "2", "3"]
    assert "[pop_05] CUDA_VISIBLE_DEVICES=1:" in result.stdout


def test_gpu_capacity_limits_parallelism(setup: Setup) -> None:
    # 3 members, 1 GPU with room for 2: the third starts only after one of the first two ended,
    # on the GPU slot that was freed.
    module = setup.module("mode=ok sleep=0.6", n=3)
    result = setup.run(module, "--num_gpus=1", "--experiments_per_gpu=2")
    assert result.returncode == 0, result.stdout
    starts = [setup.starts(i)[0] for i in range(3)]
    assert [s["cvd"] for s in starts] == ["0", "0", "0"]
    assert starts[2]["time"] >= min(starts[0]["time"], starts[1]["time"]) + 0.5
    assert "at most 2 run at once" in result.stdout  # a population that cannot all run is warned about


def test_crashing_member_is_restarted_max_restarts_times_then_fails(setup: Setup) -> None:
    module = setup.module("mode=crash", n=1)
    result = setup.run(module, "--num_gpus=0", "--max_restarts=2")
    assert result.returncode == 1, result.stdout
    starts = setup.starts(0)
    assert len(starts) == 3  # the first start + 2 restarts
    assert all(s["argv"] == starts[0]["argv"] for s in starts)  # same command: it resumes
    assert "exited with status 3: restarting it (1/2)" in result.stdout
    assert "no restarts left" in result.stdout


def test_crashed_member_resumes_and_finishes(setup: Setup) -> None:
    module = setup.module("mode=crash_once", n=2)
    result = setup.run(module, "--num_gpus=0", "--max_restarts=1")
    assert result.returncode == 0, result.stdout
    for i in range(2):
        starts = setup.starts(i)
        assert [s["previous_starts"] for s in starts] == [0, 1]


def test_member_killed_by_a_foreign_signal_is_restarted(setup: Setup) -> None:
    module = setup.module("mode=hang_first", n=1)
    proc = setup.start(module, "--num_gpus=0", "--max_restarts=1")
    try:
        deadline = time.monotonic() + 30
        while not setup.starts(0) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(setup.starts(0)[0]["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "was killed by SIGKILL: restarting it (1/1)" in out
    assert len(setup.starts(0)) == 2


def test_member_that_execs_itself_is_not_a_crash(setup: Setup) -> None:
    module = setup.module("mode=exec", n=2)
    result = setup.run(module, "--num_gpus=0", "--max_restarts=0")
    assert result.returncode == 0, result.stdout
    for i in range(2):
        starts = setup.starts(i)
        assert len(starts) == 2  # before and after os.execv ...
        assert starts[0]["pid"] == starts[1]["pid"]  # ... in the same process
        assert starts[1]["argv"][-1] == "restarted=1"
    assert "restarting" not in result.stdout


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT)])
def test_signal_stops_every_worker_and_what_they_started(setup: Setup, sig: int, status: int) -> None:
    module = setup.module("mode=spawn", n=2)
    proc = setup.start(module, "--num_gpus=0", "--kill_timeout=5")
    try:
        pids = setup.wait_for_pids(2, proc)
        assert len(pids) == 6 and all(is_alive(p) for p in pids)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, out
    assert wait_dead(pids) == [], f"still alive: {[(p, process_state(p)) for p in pids if is_alive(p)]}\n{out}"
    assert "stopping 2 running member(s)" in out


def test_sigkill_after_kill_timeout_for_workers_ignoring_sigterm(setup: Setup) -> None:
    module = setup.module("mode=ignore_term", n=1)
    proc = setup.start(module, "--num_gpus=0", "--kill_timeout=0.5")
    try:
        pids = setup.wait_for_pids(1, proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "sending SIGKILL" in out
    assert wait_dead(pids) == []


def test_processes_left_behind_by_a_finished_member_are_killed(setup: Setup) -> None:
    module = setup.module("mode=leave_child", n=1)
    result = setup.run(module, "--num_gpus=0")
    assert result.returncode == 0, result.stdout
    pids = json.loads((setup.member_dir(0) / "pids.json").read_text())
    assert wait_dead(pids) == []
    assert "left 1 process(es) running" in result.stdout


def test_unknown_run_module_is_a_clear_error(setup: Setup) -> None:
    result = setup.run("experiments.smoke_pbtt")
    assert result.returncode == 2
    assert "no module 'experiments.smoke_pbtt'" in result.stdout
    assert "Did you mean" in result.stdout and "'experiments.smoke_pbt'" in result.stdout


def test_workers_die_with_a_sigkilled_launcher(setup: Setup) -> None:
    # SIGKILL cannot be handled: the kernel's parent-death signal (PR_SET_PDEATHSIG) ends the workers.
    module = setup.module("mode=hang_first", n=2)
    proc = setup.start(module, "--num_gpus=0")
    try:
        deadline = time.monotonic() + 30
        while not all(setup.starts(i) for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [setup.starts(i)[0]["pid"] for i in range(2)]
        proc.kill()
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_dead(pids) == []


def test_second_launcher_on_the_same_run_is_refused(setup: Setup) -> None:
    module = setup.module("mode=hang_first", n=1)
    first = setup.start(module, "--num_gpus=0")
    try:
        deadline = time.monotonic() + 30
        while not setup.starts(0) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = setup.run(module, "--num_gpus=0")
        assert second.returncode == 2, second.stdout
        assert "another launcher" in second.stdout and f"pid {first.pid}" in second.stdout
        assert len(setup.starts(0)) == 1  # the second launcher started nothing
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
    assert not (setup.train_dir / "run" / "pop" / "launcher.lock").exists()  # released on exit


def test_stale_lock_of_a_dead_launcher_is_taken_over(setup: Setup) -> None:
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = setup.train_dir / "run" / "pop" / "launcher.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(f"{socket.gethostname()} {dead.pid}\n")
    module = setup.module("mode=ok", n=1)
    result = setup.run(module, "--num_gpus=0")
    assert result.returncode == 0, result.stdout
    assert "taking over" in result.stdout


# --- an inherited CUDA_VISIBLE_DEVICES mask (launcher.backends.gpus) ---------------------------


def run_with_mask(setup: Setup, module: str, mask: str, *options: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(setup.launcher_argv(module, *options), cwd=str(REPO), env=setup.env({"CUDA_VISIBLE_DEVICES": mask}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)


def graphics_args(start: dict) -> List[str]:
    return [a for a in start["argv"] if a.startswith("graphics_device_id=")]


def test_members_stay_on_the_gpus_of_an_inherited_mask(setup: Setup) -> None:
    module = setup.module("mode=ok sleep=1", n=4)
    result = run_with_mask(setup, module, "4,5", "--experiments_per_gpu=2")
    assert result.returncode == 0, result.stdout
    starts = [setup.starts(i)[0] for i in range(4)]
    assert [s["cvd"] for s in starts] == ["4", "5", "4", "5"]  # never "0"/"1": indices into the launcher's mask
    assert [graphics_args(s) for s in starts] == [[f"graphics_device_id={s['cvd']}"] for s in starts]  # Vulkan: physical
    assert "[pop_01] CUDA_VISIBLE_DEVICES=5:" in result.stdout
    assert not list((setup.train_dir / "run" / "pop" / "gpus").iterdir())  # claims released with the members


def test_the_default_spreads_members_over_uuid_and_mig_gpus(setup: Setup) -> None:
    mask = "GPU-8c3e2f1a-0000-1111-2222-333344445555,MIG-4a1b2c3d-6666-7777-8888-999900001111"
    module = setup.module("mode=ok sleep=0.2", n=4)
    result = run_with_mask(setup, module, mask)  # --experiments_per_gpu=-1 (the default)
    assert result.returncode == 0, result.stdout
    starts = [setup.starts(i)[0] for i in range(4)]
    entries = mask.split(",")
    assert [s["cvd"] for s in starts] == [entries[0], entries[1], entries[0], entries[1]]
    assert not any(graphics_args(s) for s in starts)  # no Vulkan index for a UUID: left as configured


def test_a_mask_of_one_gpu_is_inherited_unchanged(setup: Setup) -> None:
    module = setup.module("mode=ok", n=2)
    result = run_with_mask(setup, module, "3")
    assert result.returncode == 0, result.stdout
    assert [setup.starts(i)[0]["cvd"] for i in range(2)] == ["3", "3"]
    assert "CUDA_VISIBLE_DEVICES inherited (3)" in result.stdout


def test_members_another_launcher_runs_count_against_their_gpus(setup: Setup) -> None:
    """--add: the members already running (here: claims by this live test process) fill GPU 4."""
    claims = setup.train_dir / "run" / "pop" / "gpus"
    claims.mkdir(parents=True)
    me = f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid()) or ''}".rstrip()
    for name in ("pop_07", "pop_08"):
        (claims / name).write_text(f"{me}\n4\n")
    (claims / "pop_09").write_text(f"{socket.gethostname()} 999999999\n5\n")  # a dead member's claim
    module = setup.module("mode=ok sleep=0.2", n=2)
    result = run_with_mask(setup, module, "4,5", "--experiments_per_gpu=2")
    assert result.returncode == 0, result.stdout
    assert [setup.starts(i)[0]["cvd"] for i in range(2)] == ["5", "5"]
    assert "already held by running members of this run: 4 (2)" in result.stdout


def test_more_gpus_than_the_mask_gives_is_refused(setup: Setup) -> None:
    module = setup.module("mode=ok", n=1)
    result = run_with_mask(setup, module, "4,5", "--num_gpus=4", "--experiments_per_gpu=1")
    assert result.returncode == 2 and "this launcher was given 2 GPU(s)" in result.stdout, result.stdout
