"""Helpers of the fault-injection tests (tests/test_faults_*.py): real worker processes, waiting on
files and logs, and real tmpfs mounts (the tests run as root, where chmod does not stop writes)."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, TypeVar

import pytest

from conftest import worker_env

T = TypeVar("T")

#: Small, fast settings: one epoch is 128 envs x 32 steps = 4096 frames.
EPOCH_FRAMES = 4096


def worker_cmd(idx: int, n: int, ws: Path, runs: Path, *extra: str, max_frames: int = 200_000,
               interval: int = EPOCH_FRAMES, task: str = "Pendulum", heartbeat_timeout: float = 5) -> List[str]:
    """``python -m pbt.train`` for member ``idx`` of an ``n``-member population on CPU, one thread.
    ``heartbeat_timeout``: 5 s finds a killed peer fast; a population with exec restarts needs more
    (a new interpreter's start-up leaves the heartbeat silent for 6-9 s, longer under load)."""
    return [sys.executable, "-m", "pbt.train", f"task={task}", "pbt=pbt_default", f"pbt.policy_idx={idx}",
            f"pbt.num_policies={n}", f"pbt.workspace={ws}", f"pbt.interval_steps={interval}", "pbt.start_after=0",
            "pbt.initial_delay=0", f"max_frames={max_frames}", "num_envs=128", "sim_device=cpu", "rl_device=cpu",
            "torch_threads=1", "experiment=fault", f"train_dir={runs}", "pbt.heartbeat_interval=0.5",
            f"pbt.heartbeat_timeout={heartbeat_timeout:g}", *extra]


class Worker:
    """One real worker process with its log file."""

    def __init__(self, cmd: Sequence[str], log: Path, cwd: Path, extra_pythonpath: Optional[str] = None) -> None:
        self.log_path = log
        self.log_file = open(str(log), "wb")
        self.proc = subprocess.Popen(list(cmd), cwd=str(cwd), env=worker_env(extra_pythonpath), stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log_file.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """Kill it (test cleanup)."""
        self.kill(signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if not self.log_file.closed:
            self.log_file.close()


def wait_for(what: str, check: Callable[[], Optional[T]], timeout: float = 60, interval: float = 0.05,
             workers: Sequence[Worker] = ()) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (with the workers'
    log tails) after ``timeout`` seconds or when one of ``workers`` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        for worker in workers:
            if worker.proc.poll() is not None:
                pytest.fail(f"waiting for {what}: worker {worker.pid} exited with {worker.proc.returncode}:\n"
                            f"{worker.log()[-4000:]}")
        if time.monotonic() > deadline:
            tails = "\n\n".join(w.log()[-3000:] for w in workers)
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(interval)


def finish(workers: Sequence[Worker], timeout: float = 300) -> List[str]:
    """Wait for every worker (each is stopped afterwards, also when waiting fails); fail unless all
    exited 0 without a traceback. Returns their logs."""
    try:
        codes = [w.wait(timeout) for w in workers]
    finally:
        for w in workers:
            w.stop()
    logs = [w.log() for w in workers]
    assert codes == [0] * len(workers), "\n\n".join(log[-3000:] for log in logs)
    assert not [log for log in logs if "Traceback" in log], "\n\n".join(log[-3000:] for log in logs)
    return logs


def log_match(worker: Worker, pattern: str) -> Optional["re.Match[str]"]:
    return re.search(pattern, worker.log())


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "8m") -> Iterator[Path]:
    """A real tmpfs mounted at ``path`` for the test; fails (not skips) when mounting is impossible:
    the read-only and disk-full tests must run for real."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {path} ({proc.stderr.strip()}): these fault tests need root and "
                    "mount permission (run them as root, e.g. in the CI container)")
    try:
        yield path
    finally:
        for _ in range(50):
            if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def remount(path: Path, mode: str) -> None:
    """``mount -o remount,<mode>`` (ro or rw); retries while a write is in flight (EBUSY)."""
    last = ""
    for _ in range(100):
        proc = subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], capture_output=True, text=True)
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(0.05)
    pytest.fail(f"cannot remount {path} {mode}: {last}")


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem is full (tmpfs fault tests)."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
