"""Who is alive in the workspace: one lock per member index and a heartbeat per running member.

Files (next to the member's records, written only through :func:`pbt.workspace.atomic_write_bytes`
or exclusive creation; no torch, Python 3.8)::

    <root>/<idx:03d>/lock            the owner of member idx: {"pid", "host", "token", "proc_start", "time"}
    <root>/<idx:03d>/heartbeat       rewritten atomically every pbt.heartbeat_interval seconds by a
                                     daemon thread of the owner: {"pid", "host", "token", "time",
                                     "frame", "state", "started", "policy_idx"}
    <root>/<idx:03d>/lock.takeover   exists for an instant while a process takes over a stale lock

The lock
    is created with ``O_CREAT | O_EXCL``, which has one winner on local filesystems, NFS and sshfs
    (``flock`` is not exclusive across network-filesystem clients, so nothing here uses it). A
    process finding the lock held decides who the owner is:

    * itself (same host and PID: the member re-executed itself with ``os.execv``): it keeps the lock;
    * a process on the same host: if that PID is gone, or is now another process (its start time in
      ``/proc`` differs), the lock is stale and is taken over at once; otherwise the second process
      refuses to start (LockedError naming the owner);
    * a process on another host: its last sign of life is the newest of the lock's time and its
      heartbeat (same token). Older than ``pbt.heartbeat_timeout``: stale, taken over. Otherwise the
      newcomer watches the heartbeat: if it advances the owner is alive and the newcomer refuses;
      if it does not, the newcomer waits until it is older than the limit and takes over.

    Taking over is serialised by exclusively creating ``lock.takeover``: the winner re-reads the
    lock, checks it is still the stale one it judged, removes it and creates its own. The owner's
    heartbeat thread re-reads the lock at every beat; should it ever find another token there (a
    takeover of a lock that was not stale, e.g. a host whose clock is far off), it stops beating and
    flags the lock as lost so the member stops training instead of two processes sharing an index.

Clocks. Ages compare the reader's clock with the writer's ``time`` field and the file's mtime (the
newer wins); hosts sharing a workspace should run NTP. Same-host checks assume one PID namespace per
host name: do not run two containers with the same host name on one workspace.
"""
import atexit
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from pbt.errors import WorkspaceError
from pbt.workspace import PathLike, atomic_write_bytes

logger = logging.getLogger(__name__)

LOCK_FILE = "lock"
HEARTBEAT_FILE = "heartbeat"
TAKEOVER_FILE = "lock.takeover"
MAX_LIVENESS_BYTES = 64 * 1024
"""A lock or heartbeat larger than this is not ours."""
TAKEOVER_STALE_SECONDS = 60.0
"""A ``lock.takeover`` file older than this was left by a process killed while taking over."""
EMPTY_LOCK_GRACE_SECONDS = 10.0
"""An empty or unreadable lock older than this was left by a process killed while creating it."""

RUNNING = "running"
FINISHED = "finished"
"""Heartbeat state of a member that trained to the end: its records are final, it is not dead."""
STOPPED = "stopped"
"""Heartbeat state of a member stopped by SIGTERM/SIGINT after saving its state."""
EXITED = "exited"
"""Heartbeat state of a member whose process ended otherwise (an error)."""

ALIVE = "alive"
STALE = "stale"
UNKNOWN = "unknown"

HOST = socket.gethostname()


class LockedError(WorkspaceError):
    """Another live process trains this member index on this workspace."""


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def process_start_time(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), or None if unknown.

    Used to tell a live owner from an unrelated process that got the same PID later.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fobj:
            data = fobj.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2:].split()  # the command name may contain spaces and ')'
    return fields[19] if len(fields) > 19 else None  # field 22 of stat; fields[0] is field 3


def pid_alive(pid: int, proc_start: Optional[str] = None) -> bool:
    """True when ``pid`` runs on this host and (when ``proc_start`` is given and /proc knows it) is
    the same process that wrote ``proc_start``. Zombies count as dead."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fobj:
            stat = fobj.read().decode("ascii", "replace")
        if stat[stat.rfind(")") + 2:].startswith("Z"):
            return False
    except OSError:
        pass
    if proc_start is not None:
        now_start = process_start_time(pid)
        if now_start is not None and now_start != proc_start:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Reading and writing the liveness files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Beat:
    """The content of a heartbeat file."""

    pid: int
    host: str
    token: str
    time: float
    """Writer's clock when it wrote the beat."""
    frame: Optional[int]
    """Frames the member had trained at that time (None: not known yet, e.g. still starting)."""
    state: str = RUNNING
    started: float = 0.0
    policy_idx: int = -1
    mtime: float = 0.0
    """The file's modification time as read (not written)."""

    @property
    def last_seen(self) -> float:
        return max(self.time, self.mtime)

    def to_json(self) -> bytes:
        return (json.dumps({"pid": self.pid, "host": self.host, "token": self.token, "time": self.time,
                            "frame": self.frame, "state": self.state, "started": self.started,
                            "policy_idx": self.policy_idx}, sort_keys=True) + "\n").encode("utf-8")


@dataclass(frozen=True)
class LockInfo:
    """The content of a lock file (``raw``: its bytes, compared before a takeover)."""

    pid: int
    host: str
    token: str
    proc_start: Optional[str]
    time: float
    raw: bytes
    mtime: float


def _read_small(path: Path) -> Optional[bytes]:
    """Bytes of a small file, or None when it does not exist."""
    try:
        with open(str(path), "rb") as fobj:
            return fobj.read(MAX_LIVENESS_BYTES + 1)
    except FileNotFoundError:
        return None


def _mtime(path: Path) -> float:
    try:
        return os.stat(str(path)).st_mtime
    except OSError:
        return 0.0


def _parse_json(data: bytes, source: str) -> Dict[str, Any]:
    if len(data) > MAX_LIVENESS_BYTES:
        raise ValueError(f"{source}: {len(data)} bytes, far too large; not ours")
    parsed = json.loads(data.decode("utf-8"))
    if not isinstance(parsed, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(parsed).__name__}")
    return parsed


def read_heartbeat(path: PathLike) -> Optional[Beat]:
    """The heartbeat at ``path``; None when missing. Raises ValueError naming the file when it is
    torn or foreign (callers log it and treat the member's liveness as unknown)."""
    path = Path(path)
    try:
        data = _read_small(path)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read heartbeat: {exc}") from exc
    if data is None:
        return None
    mtime = _mtime(path)
    try:
        d = _parse_json(data, str(path))
        frame = d.get("frame")
        return Beat(pid=int(d["pid"]), host=str(d["host"]), token=str(d["token"]), time=float(d["time"]),
                    frame=None if frame is None else int(frame), state=str(d.get("state", RUNNING)),
                    started=float(d.get("started", 0.0)), policy_idx=int(d.get("policy_idx", -1)), mtime=mtime)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a heartbeat ({exc!r}); torn or foreign") from exc


def read_lock(path: PathLike) -> Optional[LockInfo]:
    """The lock at ``path``; None when missing. Raises ValueError for an empty/torn/foreign lock."""
    path = Path(path)
    data = _read_small(path)
    if data is None:
        return None
    mtime = _mtime(path)
    try:
        d = _parse_json(data, str(path))
        start = d.get("proc_start")
        return LockInfo(pid=int(d["pid"]), host=str(d["host"]), token=str(d["token"]),
                        proc_start=None if start is None else str(start), time=float(d["time"]), raw=data,
                        mtime=mtime)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a lock file ({exc!r})") from exc


def _create_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` if it does not exist (O_CREAT|O_EXCL); False if it exists."""
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create {path}: {exc}. The workspace must be writable (check permissions, free "
            "space and that it is mounted read-write)."
        ) from exc
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        try:
            os.unlink(str(path))
        except OSError:
            pass
        raise WorkspaceError(f"writing {path} failed: {exc}. Check free disk space.") from exc
    os.close(fd)
    return True


def _unlink(path: Path) -> None:
    try:
        os.unlink(str(path))
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------------------------
# Peers: alive, stale or unknown
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerStatus:
    """What a member knows about a peer's liveness."""

    state: str
    """"alive" (fresh heartbeat, or the member finished training), "stale" (heartbeat older than
    the limit) or "unknown" (no readable heartbeat)."""
    age: Optional[float] = None
    """Seconds since the last heartbeat (None: unknown)."""
    beat: Optional[Beat] = None

    def describe(self) -> str:
        if self.beat is None:
            return "no heartbeat"
        b = self.beat
        frame = "?" if b.frame is None else str(b.frame)
        return (f"last heartbeat {self.age:.0f} s ago from pid {b.pid} on {b.host} at frame {frame}, "
                f"state {b.state}")


def peer_status(member_dir: PathLike, timeout: float, now: Optional[float] = None) -> PeerStatus:
    """Liveness of the member whose directory is ``member_dir``.

    A member that finished training is alive for good (its records are final, not abandoned).
    A torn heartbeat is logged and counts as unknown (the member is judged again next time).
    """
    now = time.time() if now is None else now
    try:
        beat = read_heartbeat(Path(member_dir) / HEARTBEAT_FILE)
    except ValueError as exc:
        logger.warning("ignoring heartbeat: %s", exc)
        return PeerStatus(UNKNOWN)
    if beat is None:
        return PeerStatus(UNKNOWN)
    age = max(0.0, now - beat.last_seen)
    if beat.state == FINISHED:
        return PeerStatus(ALIVE, age, beat)
    return PeerStatus(STALE if age > timeout else ALIVE, age, beat)


# --------------------------------------------------------------------------------------------
# The member's own lock and heartbeat
# --------------------------------------------------------------------------------------------


class MemberLiveness:
    """The lock and heartbeat of the member this process trains.

    Args:
        member_dir: ``<workspace>/<idx:03d>``.
        policy_idx: the member index (for messages and the heartbeat).
        heartbeat_interval: seconds between two heartbeats.
        heartbeat_timeout: a heartbeat older than this marks a member dead (pbt.heartbeat_timeout).
        sleep: injectable for tests.
    """

    def __init__(self, member_dir: PathLike, policy_idx: int, heartbeat_interval: float, heartbeat_timeout: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.dir = Path(member_dir)
        self.policy_idx = policy_idx
        self.interval = float(heartbeat_interval)
        self.timeout = float(heartbeat_timeout)
        self.sleep = sleep
        self.token = os.urandom(8).hex()
        self.frame: Optional[int] = None
        """Set by the trainer after every epoch; the heartbeat thread publishes it."""
        self.final_state = EXITED
        """Written in the last heartbeat when the process ends (FINISHED, STOPPED or EXITED)."""
        self.lost: Optional[str] = None
        """Set (to the reason) by the heartbeat thread when another process took the lock."""
        self.started = time.time()
        self._held = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._write_failing: Optional[str] = None
        self._atexit_registered = False

    @property
    def lock_path(self) -> Path:
        return self.dir / LOCK_FILE

    @property
    def heartbeat_path(self) -> Path:
        return self.dir / HEARTBEAT_FILE

    # ---- the lock ------------------------------------------------------------------------------

    def _lock_bytes(self) -> bytes:
        return (json.dumps({"pid": os.getpid(), "host": HOST, "token": self.token,
                            "proc_start": process_start_time(os.getpid()), "time": time.time(),
                            "policy_idx": self.policy_idx}, sort_keys=True) + "\n").encode("utf-8")

    def acquire(self) -> None:
        """Become the one process training this member, or raise LockedError saying who is.

        Returns at once when the lock is free, ours (after an exec restart) or left by a dead
        process on this host; waits while a lock from another host may be stale (see the module
        docstring). Raises WorkspaceError when the lock cannot be written.
        """
        watched: Optional[float] = None  # owner's last sign of life when we started watching
        announced = False
        while True:
            if _create_exclusive(self.lock_path, self._lock_bytes()):
                self._held = True
                logger.info("member %d: locked %s (pid %d on %s)", self.policy_idx, self.lock_path, os.getpid(), HOST)
                return
            try:
                owner = read_lock(self.lock_path)
            except (OSError, ValueError) as exc:
                age = time.time() - _mtime(self.lock_path)
                if age > EMPTY_LOCK_GRACE_SECONDS:
                    logger.warning("member %d: %s is unreadable (%s) and %.0f s old: a process was killed while "
                                   "creating it; taking it over", self.policy_idx, self.lock_path, exc, age)
                    self._take_over(None)
                else:
                    self.sleep(min(1.0, self.interval))
                continue
            if owner is None:
                continue  # released meanwhile
            if owner.host == HOST and owner.pid == os.getpid():
                # Our own lock: this process re-executed itself (os.execv keeps the PID).
                self.token = owner.token
                self._held = True
                logger.info("member %d: keeping own lock %s across a restart (pid %d)", self.policy_idx,
                            self.lock_path, owner.pid)
                return
            heartbeat = self._owner_heartbeat(owner)
            last_seen = max(owner.time, owner.mtime, heartbeat.last_seen if heartbeat is not None else 0.0)
            age = time.time() - last_seen
            who = self._describe_owner(owner, heartbeat, age)
            if owner.host == HOST:
                if pid_alive(owner.pid, owner.proc_start):
                    raise LockedError(
                        f"policy {self.policy_idx} of workspace {self.dir.parent} is already being trained by "
                        f"{who}. Two processes with the same pbt.policy_idx would overwrite each other's "
                        f"records. Stop that process (kill {owner.pid}) or start this one with another "
                        "pbt.policy_idx or pbt.workspace."
                    )
                logger.warning("member %d: taking over the lock of %s, which is no longer running",
                               self.policy_idx, who)
                self._take_over(owner)
                continue
            if age > self.timeout:
                logger.warning("member %d: taking over the stale lock of %s (no sign of life for more than "
                               "pbt.heartbeat_timeout=%g s)", self.policy_idx, who, self.timeout)
                self._take_over(owner)
                continue
            if watched is None:
                watched = last_seen
            elif last_seen > watched:
                raise LockedError(
                    f"policy {self.policy_idx} of workspace {self.dir.parent} is already being trained by "
                    f"{who}, and its heartbeat is advancing. Stop that process or start this one with "
                    "another pbt.policy_idx or pbt.workspace."
                )
            if not announced:
                announced = True
                logger.warning(
                    "member %d: %s holds the lock; waiting up to %.0f s for its heartbeat to either advance "
                    "(then this process refuses to start) or pass pbt.heartbeat_timeout=%g s (then it is taken "
                    "over). Delete %s by hand if you know that process is gone.", self.policy_idx, who,
                    max(0.0, self.timeout - age), self.timeout, self.lock_path)
            self.sleep(max(0.05, min(self.interval, self.timeout - age + 0.05)))

    def _owner_heartbeat(self, owner: LockInfo) -> Optional[Beat]:
        try:
            beat = read_heartbeat(self.heartbeat_path)
        except ValueError:
            return None
        return beat if beat is not None and beat.token == owner.token else None

    @staticmethod
    def _describe_owner(owner: LockInfo, beat: Optional[Beat], age: float) -> str:
        frame = "" if beat is None or beat.frame is None else f", frame {beat.frame}"
        return f"pid {owner.pid} on host {owner.host} (last sign of life {age:.0f} s ago{frame})"

    def _take_over(self, stale: Optional[LockInfo]) -> None:
        """Remove the stale lock ``stale`` (None: an unreadable one) if it is still the one on disk.

        Serialised by ``lock.takeover``; the caller loops and creates its own lock exclusively.
        """
        guard = self.dir / TAKEOVER_FILE
        guard_data = json.dumps({"pid": os.getpid(), "host": HOST, "time": time.time()}).encode("utf-8")
        if not _create_exclusive(guard, guard_data):
            if time.time() - _mtime(guard) > TAKEOVER_STALE_SECONDS:
                logger.warning("member %d: removing %s, left by a process killed while taking over the lock",
                               self.policy_idx, guard)
                _unlink(guard)
            else:
                self.sleep(min(0.5, self.interval))
            return
        try:
            current = _read_small(self.lock_path)
            if current is None:
                return
            if stale is None or current == stale.raw:
                _unlink(self.lock_path)
        finally:
            _unlink(guard)

    def owns_lock(self) -> bool:
        """True while the lock file still carries this process's token (also when it cannot be
        read for an I/O error: that says nothing about who holds it)."""
        try:
            owner = read_lock(self.lock_path)
        except OSError:
            return True
        except ValueError:
            return False
        return owner is not None and owner.token == self.token

    def release(self) -> None:
        """Remove the lock if it is still ours."""
        if self._held and self.owns_lock():
            try:
                _unlink(self.lock_path)
            except OSError as exc:
                logger.warning("member %d: could not remove its lock %s (%s); the next process started "
                               "for this member takes it over", self.policy_idx, self.lock_path, exc)
        self._held = False

    # ---- the heartbeat -------------------------------------------------------------------------

    def beat(self, state: str = RUNNING) -> bool:
        """Write one heartbeat now; False (logged once per change) when the write failed."""
        data = Beat(pid=os.getpid(), host=HOST, token=self.token, time=time.time(), frame=self.frame, state=state,
                    started=self.started, policy_idx=self.policy_idx).to_json()
        try:
            atomic_write_bytes(self.heartbeat_path, data)
        except WorkspaceError as exc:
            if self._write_failing is None:
                logger.warning("member %d: cannot write its heartbeat (%s); peers may report it as dead after "
                               "pbt.heartbeat_timeout=%g s. Retrying every %g s.", self.policy_idx, exc,
                               self.timeout, self.interval)
            self._write_failing = str(exc)
            return False
        if self._write_failing is not None:
            logger.info("member %d: heartbeat written again", self.policy_idx)
            self._write_failing = None
        return True

    def start(self) -> None:
        """Write the first heartbeat and start the daemon thread that keeps it fresh; the last
        heartbeat (``final_state``) is written and the lock released when the process exits."""
        self.beat()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"pbt-heartbeat-{self.policy_idx}", daemon=True)
        self._thread.start()
        if not self._atexit_registered:
            atexit.register(self.close)
            self._atexit_registered = True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.owns_lock():
                try:
                    owner = read_lock(self.lock_path)
                    who = "nobody" if owner is None else f"pid {owner.pid} on host {owner.host}"
                except (OSError, ValueError) as exc:
                    who = f"an unreadable lock ({exc})"
                self.lost = (f"member {self.policy_idx} lost its lock {self.lock_path} (now held by {who}); "
                             "another process was started with the same pbt.policy_idx and took it over")
                logger.error("%s; this process stops writing heartbeats", self.lost)
                return
            self.beat()

    def stop_thread(self) -> None:
        """Stop the heartbeat thread (before an exec restart); the lock stays held."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, 2 * self.interval))
        self._thread = None

    def close(self, state: Optional[str] = None) -> None:
        """Stop beating, write the final heartbeat (``state`` or ``final_state``) and release the lock."""
        if state is not None:
            self.final_state = state
        self.stop_thread()
        if self._held and self.lost is None and self.owns_lock():
            self.beat(self.final_state)
        self.release()
