"""Local backend: run every member as a child process on this machine.

- At most ``max_parallel`` members run at once (0: all); with ``experiments_per_gpu > 0`` each member
  gets ``CUDA_VISIBLE_DEVICES`` set to the least-loaded of the launcher's GPUs (an inherited mask's
  entries, else ``num_gpus`` indices) and at most ``experiments_per_gpu`` members share a GPU; ``-1``
  spreads them without a limit over several GPUs and leaves the variable alone with one
  (``launcher.backends.gpus``: masks, ``--add``, Isaac Gym's graphics device).
- Each member writes stdout and stderr to its own log file (appended across restarts).
- Each member starts in its own session (process group). SIGINT, SIGTERM or SIGHUP to the launcher
  sends SIGTERM to every member's process group and to every process it started, waits up to
  ``kill_timeout`` seconds, then sends SIGKILL; nothing is left running. A second signal skips the wait.
- A member that exits non-zero or is killed by a signal the launcher did not send is restarted with
  the same command (it resumes from its workspace) up to ``max_restarts`` times. A member that
  re-executes itself (``os.execv``, same PID) is still the same process: that is not a crash.
- Exit status: 0 if every member exited 0, 1 if one failed for good, 128+N when stopped by signal N.
- While members run, the progress of each PBT population is shown (``launcher.progress``: a live
  table on a terminal, log lines otherwise); at the end, each population's summary (``launcher.summary``:
  ranks, exploits, the winner's checkpoint, the next commands).
"""

import argparse
import collections
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any, Callable, Deque, Dict, List, Optional, Tuple

from pbt.errors import ConfigError
from pbt.launcher.backends.base import str2bool
from pbt.launcher.backends.gpus import (
    MASK,
    GpuAllocator,
    claim,
    held_gpus,
    mask_entries,
    member_argv,
    unclaim,
    visible_gpus,
)
from pbt.launcher.backends.proctools import kill_signal_name, related_processes, signal_group, signal_processes
from pbt.launcher.progress import LIVE_INTERVAL, MODES, PLAIN_INTERVAL, ProgressReporter
from pbt.launcher.run_description import Member
from pbt.launcher.summary import log_summaries
from pbt.procfs import is_alive, process_start_time
from pbt.storage.local import create_exclusive, remove_quietly

log = logging.getLogger("launcher")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("processes backend")
    group.add_argument("--pause_between", type=float, default=0.0, help="seconds between two member starts (processes)")
    group.add_argument(
        "--num_gpus",
        type=int,
        default=None,
        help="GPUs to spread members over (default: all of an inherited CUDA_VISIBLE_DEVICES, else 1)",
    )
    group.add_argument(
        "--experiments_per_gpu",
        type=int,
        default=-1,
        help="members per GPU (sets CUDA_VISIBLE_DEVICES); -1: no limit, spread over several GPUs, "
        "the variable left alone with one",
    )
    group.add_argument(
        "--max_restarts", type=int, default=3, help="restarts of a crashed member (it resumes from its workspace)"
    )
    group.add_argument("--restart_delay", type=float, default=1.0, help="seconds before a crashed member is restarted")
    group.add_argument(
        "--kill_timeout", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL when stopping"
    )
    group.add_argument(
        "--progress",
        default="auto",
        choices=list(MODES),
        help="progress of PBT populations while they run: a live table (live), log lines (plain), "
        "none (off); auto: live when stdout is a terminal, else plain",
    )
    group.add_argument(
        "--progress_interval",
        type=float,
        default=None,
        help=f"seconds between two progress refreshes (default: {LIVE_INTERVAL:g} live, {PLAIN_INTERVAL:g} plain)",
    )
    group.add_argument(
        "--summary",
        type=str2bool,
        nargs="?",
        const=True,
        default=True,
        help="print each PBT population's summary (ranks, exploits, winner, next commands) at the end",
    )


@dataclass
class ProcessesOptions:
    """Options of the processes backend (``python -m launcher.run --help``); validated on creation."""

    max_parallel: int = 0  # members running at once (0: all)
    num_gpus: Optional[int] = None  # GPUs to spread members over (None: the inherited mask's, else 1)
    experiments_per_gpu: int = -1  # members per GPU; -1: no limit (one GPU: CUDA_VISIBLE_DEVICES left alone)
    pause_between: float = 0.0  # seconds between two member starts
    max_restarts: int = 3  # restarts of a crashed member
    restart_delay: float = 1.0  # seconds before a crashed member restarts
    kill_timeout: float = 10.0  # seconds between SIGTERM and SIGKILL
    poll_interval: float = 0.1  # seconds between two looks at the members
    progress: str = "auto"  # auto, live, plain or off
    progress_interval: Optional[float] = None  # seconds between two refreshes (None: by mode)
    summary: bool = True  # log each PBT population's summary at the end
    added: bool = False  # --add: members added to a run another launcher may be running

    def __post_init__(self) -> None:
        if self.max_parallel < 0:
            raise ConfigError(
                f"--max_parallel={self.max_parallel} is negative; use 0 to run every member at once, or a positive limit."
            )
        if self.num_gpus is not None and self.num_gpus < 0:
            raise ConfigError(
                f"--num_gpus={self.num_gpus} is negative; use the number of GPUs on this machine (0 for none)."
            )
        if self.experiments_per_gpu == 0 or self.experiments_per_gpu < -1:
            raise ConfigError(
                f"--experiments_per_gpu={self.experiments_per_gpu} is invalid; use a positive count, or -1 to leave CUDA_VISIBLE_DEVICES unset."
            )
        if self.experiments_per_gpu > 0 and self.num_gpus == 0:
            raise ConfigError(
                "--experiments_per_gpu > 0 needs --num_gpus >= 1; for CPU-only runs use --experiments_per_gpu=-1."
            )
        if (
            self.experiments_per_gpu > 0
            and self.num_gpus is None
            and os.environ.get(MASK) is not None
            and not mask_entries(os.environ[MASK])
        ):
            raise ConfigError(
                f"--experiments_per_gpu > 0 but {MASK} is empty: this launcher was given no GPU. "
                "For CPU-only runs use --experiments_per_gpu=-1."
            )
        if self.max_restarts < 0:
            raise ConfigError(
                f"--max_restarts={self.max_restarts} is negative; use 0 to never restart a crashed member."
            )
        for name, value in (
            ("--pause_between", self.pause_between),
            ("--restart_delay", self.restart_delay),
            ("--kill_timeout", self.kill_timeout),
        ):
            if value < 0:
                raise ConfigError(f"{name}={value} is negative; give seconds >= 0.")
        if self.progress not in MODES:
            raise ConfigError(f"--progress={self.progress!r} is not one of {list(MODES)}.")
        if self.progress_interval is not None and not self.progress_interval > 0:
            raise ConfigError(f"--progress_interval={self.progress_interval} must be a number of seconds > 0.")


def options_from_args(args: argparse.Namespace) -> ProcessesOptions:
    return ProcessesOptions(
        max_parallel=args.max_parallel,
        num_gpus=args.num_gpus,
        experiments_per_gpu=args.experiments_per_gpu,
        pause_between=args.pause_between,
        max_restarts=args.max_restarts,
        restart_delay=args.restart_delay,
        kill_timeout=args.kill_timeout,
        progress=args.progress,
        progress_interval=args.progress_interval,
        summary=args.summary,
        added=getattr(args, "add", 0) > 0,
    )


def _make_preexec() -> Optional[Callable[[], None]]:
    """On Linux, ask the kernel to SIGTERM a member if the launcher dies without cleaning up (SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return preexec


class _Worker:
    def __init__(self, member: Member) -> None:
        self.member = member
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.gpu: Optional[int] = None
        self.starts = 0
        self.restarts = 0
        self.ready_at = 0.0
        self.log_file: Optional[IO[bytes]] = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def note(self, text: str) -> None:
        """Append a launcher line to the member's log file."""
        if self.log_file is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self.log_file.write(f"[launcher {stamp}] {text}\n".encode())
            self.log_file.flush()


class ProcessesBackend:
    """Runs members locally; ``run()`` returns the exit status."""

    def __init__(self, members: List[Member], options: ProcessesOptions) -> None:
        self.members = members
        self.options = options
        devices = visible_gpus(options.num_gpus, os.environ)
        held = held_gpus(m.experiment_dir for m in members)  # members another launcher runs (--add)
        self.gpus = GpuAllocator(len(devices), options.experiments_per_gpu, devices, held)
        limit = options.max_parallel or len(members)
        if self.gpus.capacity is not None:
            limit = min(limit, max(1, self.gpus.capacity - sum(held.get(d, 0) for d in devices)))
        self.limit = max(1, limit)
        self._pending: Deque[_Worker] = collections.deque(_Worker(m) for m in members)
        self._running: List[_Worker] = []
        self._done: List[_Worker] = []
        self._failed: List[_Worker] = []
        self._stop_signal: Optional[int] = None
        self._signal_count = 0
        self._last_start = -float("inf")
        self._preexec = _make_preexec()
        self._warn_partial_populations()

    def _warn_partial_populations(self) -> None:
        sizes: Dict[str, int] = collections.Counter(m.experiment for m in self.members if m.workspace)
        for experiment, size in sizes.items():
            if size > self.limit:
                log.warning(
                    "experiment %s is a PBT population of %d members but at most %d run at once "
                    "(--max_parallel/--num_gpus/--experiments_per_gpu): members that wait cannot compete",
                    experiment,
                    size,
                    self.limit,
                )

    # --- signals -------------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only set flags here; the main loop does the work (no logging or I/O in a signal handler).
        self._signal_count += 1
        if self._stop_signal is None:
            self._stop_signal = signum

    def _install_handlers(self) -> Dict[int, Any]:
        previous: Dict[int, Any] = {}
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> int:
        previous = self._install_handlers()
        progress = ProgressReporter(self.members, self.options.progress, self.options.progress_interval)
        try:
            log.info(
                "starting %d member(s), at most %d at a time%s",
                len(self.members),
                self.limit,
                (
                    f", {self.options.experiments_per_gpu if self.gpus.per_gpu else 'any number'} per GPU on GPU(s) "
                    f"{','.join(self.gpus.devices)}"
                )
                if self.gpus.managed
                else "",
            )
            log.info("stop them all with Ctrl-C or: kill -TERM %d", os.getpid())
            progress.start()
            while (self._pending or self._running) and self._stop_signal is None:
                self._reap()
                if self._stop_signal is None:
                    self._start_ready()
                time.sleep(self.options.poll_interval)
        finally:
            progress.stop()
            try:
                if self._running:
                    if self._stop_signal is not None:
                        log.warning(
                            "received %s: stopping %d running member(s)",
                            kill_signal_name(self._stop_signal),
                            len(self._running),
                        )
                    self._stop_all()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                for worker in self._done + self._failed + list(self._pending):
                    self._close_log(worker)
        if self.options.summary:
            log_summaries(self.members)
        return self._summary()

    def _summary(self) -> int:
        if self._stop_signal is not None:
            log.warning(
                "stopped by %s; %d member(s) had finished", kill_signal_name(self._stop_signal), len(self._done)
            )
            return 128 + int(self._stop_signal)
        for worker in self._failed:
            log.error(
                "member %s failed for good after %d restart(s); see %s",
                worker.member.name,
                worker.restarts,
                worker.member.log_path,
            )
        if self._failed:
            log.error("%d of %d member(s) failed", len(self._failed), len(self.members))
            return 1
        log.info("all %d member(s) finished", len(self.members))
        return 0

    def _start_ready(self) -> None:
        now = time.monotonic()
        while self._pending and len(self._running) < self.limit and self.gpus.has_capacity():
            if now - self._last_start < self.options.pause_between:
                return
            worker = next((w for w in self._pending if w.ready_at <= now), None)
            if worker is None:
                return
            self._pending.remove(worker)
            self._start(worker)
            now = time.monotonic()

    def _start(self, worker: _Worker) -> None:
        member = worker.member
        worker.gpu = self.gpus.acquire()
        env = dict(os.environ)
        env.update(member.env)
        entry = self.gpus.devices[worker.gpu] if worker.gpu is not None else None
        argv = member_argv(member.argv, entry)
        if entry is not None:
            env[MASK] = entry  # the entry of the launcher's mask, never an index into it
            device = f"{MASK}={entry}"
        else:
            device = f"{MASK} " + (f"inherited ({os.environ[MASK]})" if MASK in os.environ else "unset")
        os.makedirs(os.path.dirname(member.log_path), exist_ok=True)
        os.makedirs(member.experiment_dir, exist_ok=True)
        if worker.log_file is None:
            worker.log_file = open(member.log_path, "ab")
        worker.starts += 1
        attempt = "" if worker.starts == 1 else f" (restart {worker.restarts}/{self.options.max_restarts})"
        command = dataclasses.replace(member, argv=argv).shell_cmd
        worker.note(f"start{attempt} {device}: {command}")
        log.info("[%s]%s %s: %s", member.name, attempt, device, command)
        self._last_start = time.monotonic()
        try:
            worker.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=worker.log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=self._preexec,
            )
        except OSError as exc:
            self._release_gpu(worker)
            worker.note(f"could not start: {exc}")
            log.error("[%s] could not start %r: %s. Check the experiment's command.", member.name, member.argv[0], exc)
            self._failed.append(worker)
            self._close_log(worker)
            return
        log.debug("[%s] pid %d, log %s", member.name, worker.pid, member.log_path)
        if entry is not None:
            claim(member.experiment_dir, member.name, worker.pid, entry)
        self._running.append(worker)

    def _reap(self) -> None:
        for worker in list(self._running):
            assert worker.proc is not None
            code = worker.proc.poll()
            if code is None:
                continue
            self._running.remove(worker)
            self._release_gpu(worker)
            self._kill_leftovers(worker)
            member = worker.member
            if code == 0:
                worker.note("exited with status 0")
                log.info("[%s] finished (exit status 0)", member.name)
                self._done.append(worker)
                self._close_log(worker)
                continue
            how = f"was killed by {kill_signal_name(-code)}" if code < 0 else f"exited with status {code}"
            if worker.restarts < self.options.max_restarts:
                worker.restarts += 1
                worker.ready_at = time.monotonic() + self.options.restart_delay
                worker.note(
                    f"{how}: restarting ({worker.restarts}/{self.options.max_restarts}) in {self.options.restart_delay:g} s"
                )
                log.warning(
                    "[%s] %s: restarting it (%d/%d); it resumes from its workspace. Log: %s",
                    member.name,
                    how,
                    worker.restarts,
                    self.options.max_restarts,
                    member.log_path,
                )
                self._pending.appendleft(worker)
            else:
                worker.note(f"{how}: no restarts left (--max_restarts={self.options.max_restarts})")
                log.error(
                    "[%s] %s; no restarts left (--max_restarts=%d). Log: %s",
                    member.name,
                    how,
                    self.options.max_restarts,
                    member.log_path,
                )
                self._failed.append(worker)
                self._close_log(worker)

    def _kill_leftovers(self, worker: _Worker) -> None:
        """A member has exited: end whatever it started that is still running in its session."""
        leftovers = related_processes(worker.pid)
        if leftovers:
            log.warning(
                "[%s] exited but left %d process(es) running (%s): killing them",
                worker.member.name,
                len(leftovers),
                leftovers,
            )
            signal_processes(leftovers, signal.SIGKILL)

    def _stop_all(self) -> None:
        """SIGTERM every member's process group and descendants; SIGKILL what is left after the timeout."""
        workers = list(self._running)
        tracked: Dict[int, List[int]] = {}
        for worker in workers:
            tracked[worker.pid] = related_processes(worker.pid)
            worker.note("stopping: sending SIGTERM to the member's process group")
            signal_group(worker.pid, signal.SIGTERM)
            signal_processes(tracked[worker.pid], signal.SIGTERM)
        deadline = time.monotonic() + self.options.kill_timeout
        signals_seen = self._signal_count

        def still_alive() -> List[int]:
            alive = []
            for worker in workers:
                assert worker.proc is not None
                if worker.proc.poll() is None:
                    alive.append(worker.pid)
                tracked[worker.pid] = sorted(set(tracked[worker.pid]) | set(related_processes(worker.pid)))
                alive.extend(p for p in tracked[worker.pid] if is_alive(p))
            return alive

        alive = still_alive()
        while alive and time.monotonic() < deadline and self._signal_count == signals_seen:
            time.sleep(0.05)
            alive = still_alive()
        if alive:
            log.warning(
                "%d process(es) still running %s after SIGTERM: sending SIGKILL",
                len(alive),
                "(second signal)" if self._signal_count > signals_seen else f"{self.options.kill_timeout:g} s",
            )
            for worker in workers:
                signal_group(worker.pid, signal.SIGKILL)
                signal_processes(tracked[worker.pid] + related_processes(worker.pid), signal.SIGKILL)
        for worker in workers:
            assert worker.proc is not None
            try:
                code = worker.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
                log.error("[%s] pid %d did not exit even after SIGKILL", worker.member.name, worker.pid)
            self._release_gpu(worker)
            worker.note(f"stopped by the launcher (exit status {code})")
            log.info("[%s] stopped (exit status %s)", worker.member.name, code)
            self._close_log(worker)
        self._running = []

    def _release_gpu(self, worker: _Worker) -> None:
        if worker.gpu is not None:
            unclaim(worker.member.experiment_dir, worker.member.name)
        self.gpus.release(worker.gpu)
        worker.gpu = None

    @staticmethod
    def _close_log(worker: _Worker) -> None:
        if worker.log_file is not None:
            worker.log_file.close()
            worker.log_file = None


class RunLock:
    """``<experiment_dir>/launcher.lock`` (host, pid, start time): one launcher per experiment directory.

    Two launchers on one run would start two copies of each member on one workspace. A lock left
    by a launcher that died on this host is taken over; one from another host must be removed by hand.
    """

    def __init__(self, directories: List[str], names: Optional[List[str]] = None) -> None:
        """One lock per directory, ``launcher.lock``; with ``names`` (members added to a running
        run by ``--add``), ``launcher.<name>.lock`` per member instead."""
        if names is None:
            self.paths = [os.path.join(d, "launcher.lock") for d in sorted(set(directories))]
        else:
            self.paths = sorted(os.path.join(d, f"launcher.{n}.lock") for d, n in zip(directories, names))
        self.held: List[str] = []

    def __enter__(self) -> "RunLock":
        try:
            for path in self.paths:
                self._acquire(path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for path in self.held:
            remove_quietly(path)
        self.held = []

    def _acquire(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # The start time tells this launcher from a later process that reuses its pid.
        me = f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid()) or ''}".rstrip()
        for _ in range(2):
            if create_exclusive(path, (me + "\n").encode()):
                self.held.append(path)
                return
            owner = _read_owner(path)
            if owner is None:
                continue  # removed meanwhile
            host, pid, start_time = owner
            if host == socket.gethostname() and pid.isdigit() and not is_alive(int(pid), start_time):
                log.warning("taking over %s left by launcher pid %s, which is gone", path, pid)
                remove_quietly(path)
                continue
            where = f"pid {pid} on this host" if host == socket.gethostname() else f"pid {pid} on host {host}"
            raise ConfigError(
                f"another launcher ({where}) is running this experiment ({path}); two launchers would start two "
                f"copies of each member on one workspace. Stop it first, or delete {path} if it is no longer running."
            )
        raise ConfigError(
            f"could not take the launcher lock {path}; delete it if no launcher is running this experiment."
        )


def _read_owner(path: str) -> Optional[Tuple[str, str, Optional[str]]]:
    """(host, pid, start time or None) written in a lock file; None if it cannot be read.

    Locks written before the start time was recorded hold only ``host pid``."""
    try:
        with open(path) as f:
            host, _, rest = f.read().strip().partition(" ")
    except OSError:
        return None
    pid, _, start_time = rest.partition(" ")
    return host, pid, start_time or None


def run(run_name: str, members: List[Member], options: ProcessesOptions) -> int:
    """Run ``members`` locally and return the exit status (see the module docstring)."""
    backend = ProcessesBackend(members, options)
    names = [m.name for m in members] if options.added else None
    with RunLock([m.experiment_dir for m in members], names):
        return backend.run()
