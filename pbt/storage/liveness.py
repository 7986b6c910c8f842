"""Who is alive in the workspace: one lock per member index and a heartbeat per running member.

Files (next to the member's records, written only through the workspace's Store: atomic puts and
exclusive creation; no torch, Python 3.8)::

    <root>/<idx:03d>/lock            the owner of member idx: {"pid", "host", "token", "proc_start", "time"}
    <root>/<idx:03d>/heartbeat       rewritten atomically every pbt.heartbeat_interval seconds by a
                                     daemon thread of the owner: {"pid", "host", "token", "time",
                                     "frame", "state", "started", "policy_idx"}
    <root>/<idx:03d>/lock.takeover.* exists for an instant while a process takes over a stale lock

The lock
    is created exclusively (``Store.create_exclusive``), which has one winner on local filesystems, NFS and sshfs
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

    Taking over never deletes a lock. The stale lock is named by its version (the store's identity
    of that file: inode, mtime, size) and its bytes; a taker exclusively creates
    ``lock.takeover.<id of that version>.<k>`` (one winner per stale version), re-reads the lock,
    and only if it is still that very version replaces it atomically with its own (``put_atomic``:
    a rename), then re-reads it to verify. A loser finds the guard taken or the lock changed and
    judges the new lock afresh (same host: its owner is alive, so it refuses). A guard left by a
    taker killed mid-way is passed over after ``TAKEOVER_STALE_SECONDS`` by trying ``k + 1``. The owner's
    heartbeat thread re-reads the lock at every beat; should it ever find another token there (a
    takeover of a lock that was not stale, e.g. a host whose clock is far off), it stops beating and
    flags the lock as lost so the member stops training instead of two processes sharing an index.

Clocks. Ages compare the reader's clock with the writer's ``time`` field and the file's mtime (the
newer wins); hosts sharing a workspace should run NTP. Same-host checks assume one PID namespace per
host name: do not run two containers with the same host name on one workspace.
"""

import atexit
import hashlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from pbt.errors import WorkspaceError
from pbt.procfs import is_alive, process_start_time
from pbt.storage.backend import NotFound, ObjectInfo, Refused, Store
from pbt.storage.bounds import MAX_FRAMES, bounded_int, is_future, wall_time
from pbt.storage.format import HEARTBEAT_FILE, LOCK_FILE, TAKEOVER_FILE

logger = logging.getLogger(__name__)

MAX_LIVENESS_BYTES = 64 * 1024
"""A lock or heartbeat larger than this is not ours."""
TAKEOVER_STALE_SECONDS = 60.0
"""A ``lock.takeover`` file older than this was left by a process killed while taking over."""
MAX_PID = 2**32
"""Process ids lie in 0..MAX_PID (Linux: below 2**22)."""
MAX_LIVENESS_TEXT = 1024
"""Longest host name, token or state a lock or heartbeat may carry."""
EMPTY_LOCK_GRACE_SECONDS = 10.0
"""An empty or unreadable lock older than this was left by a process killed while creating it."""

RUNNING = "running"
WAITING = "waiting"
"""Heartbeat state of a member pausing for slower peers (``pbt.max_lead``): alive, not training."""
TRAINING_STATES = (RUNNING, WAITING)
"""Heartbeat states of a member whose process is still on its way to its budget."""
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
        return (
            json.dumps(
                {
                    "pid": self.pid,
                    "host": self.host,
                    "token": self.token,
                    "time": self.time,
                    "frame": self.frame,
                    "state": self.state,
                    "started": self.started,
                    "policy_idx": self.policy_idx,
                },
                sort_keys=True,
            )
            + "\n"
        ).encode("utf-8")


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
    version: str = ""


def _read_small(store: Store, key: str) -> Optional[bytes]:
    """Bytes of a small object, or None when it does not exist."""
    try:
        return store.get(key, MAX_LIVENESS_BYTES)
    except NotFound:
        return None


def _stat(store: Store, key: str) -> Optional[ObjectInfo]:
    """The object's info, or None when it is missing or cannot be read (its age is then unknown)."""
    try:
        return store.stat(key)
    except WorkspaceError:
        return None


def _version(store: Store, key: str) -> str:
    info = _stat(store, key)
    return "" if info is None else info.version


def _read_small_quiet(store: Store, key: str) -> Optional[bytes]:
    try:
        return _read_small(store, key)
    except WorkspaceError:
        return None


def _mtime(store: Store, key: str) -> float:
    info = _stat(store, key)
    return 0.0 if info is None else info.mtime


def _parse_json(data: bytes, source: str) -> Dict[str, Any]:
    if len(data) > MAX_LIVENESS_BYTES:
        raise ValueError(f"{source}: {len(data)} bytes, far too large; not ours")
    parsed = json.loads(data.decode("utf-8"))
    if not isinstance(parsed, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(parsed).__name__}")
    return parsed


def read_heartbeat(store: Store, key: str) -> Optional[Beat]:
    """The heartbeat at ``key``; None when missing. Raises ValueError naming the file when it is
    torn or foreign (callers log it and treat the member's liveness as unknown). The one heartbeat
    reader of the project."""
    path = store.path(key)
    try:
        data = _read_small(store, key)
    except WorkspaceError as exc:
        raise ValueError(f"{path}: cannot read heartbeat: {exc}") from exc
    if data is None:
        return None
    mtime = _mtime(store, key)
    try:
        d = _parse_json(data, str(path))
        frame = d.get("frame")
        return Beat(
            pid=bounded_int(d["pid"], "pid", MAX_PID),
            host=_text(d["host"], "host"),
            token=_text(d["token"], "token"),
            time=wall_time(d["time"], "time"),
            frame=None if frame is None else bounded_int(frame, "frame"),
            state=_text(d.get("state", RUNNING), "state"),
            started=wall_time(d.get("started", 0.0), "started"),
            policy_idx=_policy_idx(d.get("policy_idx", -1)),
            mtime=mtime,
        )
    except (KeyError, TypeError, ValueError, ArithmeticError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a heartbeat ({exc!r:.300}); torn or foreign") from exc


def _text(value: Any, what: str) -> str:
    """A short string field of a liveness file (ours are host names, tokens and states)."""
    if type(value) is not str or len(value) > MAX_LIVENESS_TEXT:
        raise ValueError(f"{what} must be a string of at most {MAX_LIVENESS_TEXT} characters")
    return value


def _policy_idx(value: Any) -> int:
    if type(value) is not int or not -1 <= value < MAX_FRAMES:
        raise ValueError(f"policy_idx must be an int >= -1, got {value!r:.80}")
    return value


def read_lock(store: Store, key: str) -> Optional[LockInfo]:
    """The lock at ``key``; None when missing. Raises ValueError for an empty/torn/foreign lock and
    WorkspaceError when it cannot be read."""
    path = store.path(key)
    version = _version(store, key)
    data = _read_small(store, key)
    if data is None:
        return None
    mtime = _mtime(store, key)
    try:
        d = _parse_json(data, str(path))
        start = d.get("proc_start")
        return LockInfo(
            pid=bounded_int(d["pid"], "pid", MAX_PID),
            host=_text(d["host"], "host"),
            token=_text(d["token"], "token"),
            proc_start=None if start is None else _text(str(start), "proc_start"),
            time=wall_time(d["time"], "time"),
            raw=data,
            mtime=mtime,
            version=version,
        )
    except (KeyError, TypeError, ValueError, ArithmeticError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a lock file ({exc!r})") from exc


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
    ahead: float = 0.0
    """Seconds the heartbeat is dated after the judge's clock, when more than the allowed skew (a
    clock far ahead, or a lie: stale whatever its age says); 0 otherwise."""

    def describe(self) -> str:
        if self.beat is None:
            return "no heartbeat"
        b = self.beat
        frame = "?" if b.frame is None else str(b.frame)
        when = f"dated {self.ahead:.0f} s in the future" if self.ahead else f"{self.age:.0f} s ago"
        return f"last heartbeat {when} from pid {b.pid} on {b.host} at frame {frame}, state {b.state}"


def judge(beat: Optional[Beat], timeout: float, now: Optional[float] = None) -> PeerStatus:
    """Liveness from a heartbeat (None: none readable): the one rule, shared by members and tools.
    A member that finished training is alive for good (its records are final, not abandoned)."""
    if beat is None:
        return PeerStatus(UNKNOWN)
    now = time.time() if now is None else now
    age = max(0.0, now - beat.last_seen)
    if is_future(beat.last_seen, now):  # a clock far ahead, or a lie: never alive for ever
        return PeerStatus(STALE, age, beat, ahead=beat.last_seen - now)
    if beat.state == FINISHED:
        return PeerStatus(ALIVE, age, beat)
    return PeerStatus(STALE if age > timeout else ALIVE, age, beat)


def peer_status(store: Store, member_key: str, timeout: float, now: Optional[float] = None) -> PeerStatus:
    """Liveness of the member whose directory is ``member_key``. A torn heartbeat is logged and
    counts as unknown (the member is judged again next time)."""
    try:
        beat = read_heartbeat(store, f"{member_key}/{HEARTBEAT_FILE}")
    except ValueError as exc:
        refused = isinstance(exc.__cause__, Refused)  # the store logged it once already
        logger.log(logging.DEBUG if refused else logging.WARNING, "ignoring heartbeat: %s", exc)
        return PeerStatus(UNKNOWN)
    return judge(beat, timeout, now)


# --------------------------------------------------------------------------------------------
# The member's own lock and heartbeat
# --------------------------------------------------------------------------------------------


class MemberLiveness:
    """The lock and heartbeat of the member this process trains.

    Args:
        store: the workspace's Store.
        member_key: the member's directory in it (``<idx:03d>``).
        policy_idx: the member index (for messages and the heartbeat).
        heartbeat_interval: seconds between two heartbeats.
        heartbeat_timeout: a heartbeat older than this marks a member dead (pbt.heartbeat_timeout).
        sleep: injectable for tests.
    """

    def __init__(
        self,
        store: Store,
        member_key: str,
        policy_idx: int,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.dir = member_key
        self.policy_idx = policy_idx
        self.interval = float(heartbeat_interval)
        self.timeout = float(heartbeat_timeout)
        self.sleep = sleep
        self.token = os.urandom(8).hex()
        self.frame: Optional[int] = None
        """Set by the trainer after every epoch; the heartbeat thread publishes it."""
        self.state = RUNNING
        """What the heartbeat thread writes while the process lives (RUNNING, or WAITING for peers)."""
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
    def lock_key(self) -> str:
        return f"{self.dir}/{LOCK_FILE}"

    @property
    def heartbeat_key(self) -> str:
        return f"{self.dir}/{HEARTBEAT_FILE}"

    @property
    def lock_path(self) -> str:
        """The lock's location, for messages."""
        return self.store.path(self.lock_key)

    @property
    def workspace_path(self) -> str:
        return self.store.path("")

    # ---- the lock ------------------------------------------------------------------------------

    def _lock_bytes(self) -> bytes:
        return (
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": HOST,
                    "token": self.token,
                    "proc_start": process_start_time(os.getpid()),
                    "time": time.time(),
                    "policy_idx": self.policy_idx,
                },
                sort_keys=True,
            )
            + "\n"
        ).encode("utf-8")

    def acquire(self) -> None:
        """Become the one process training this member, or raise LockedError saying who is.

        Returns at once when the lock is free, ours (after an exec restart) or left by a dead
        process on this host; waits while a lock from another host may be stale (see the module
        docstring). Raises WorkspaceError when the lock cannot be written.
        """
        watched: Optional[float] = None  # owner's last sign of life when we started watching
        announced = False
        while True:
            if self.store.create_exclusive(self.lock_key, self._lock_bytes()):
                self._held = True
                self._remove_old_guards()
                logger.info("member %d: locked %s (pid %d on %s)", self.policy_idx, self.lock_path, os.getpid(), HOST)
                return
            version = _version(self.store, self.lock_key)
            try:
                owner = read_lock(self.store, self.lock_key)
            except (WorkspaceError, ValueError) as exc:
                age = time.time() - _mtime(self.store, self.lock_key)
                if age > EMPTY_LOCK_GRACE_SECONDS:
                    logger.warning(
                        "member %d: %s is unreadable (%s) and %.0f s old: a process was killed while "
                        "creating it; taking it over",
                        self.policy_idx,
                        self.lock_path,
                        exc,
                        age,
                    )
                    self._take_over(None, version)
                else:
                    self.sleep(min(1.0, self.interval))
                continue
            if owner is None:
                continue  # released meanwhile
            if owner.host == HOST and owner.pid == os.getpid():
                # Our own lock: this process re-executed itself (os.execv keeps the PID).
                self.token = owner.token
                self._held = True
                self._remove_old_guards()
                logger.info(
                    "member %d: keeping own lock %s across a restart (pid %d)",
                    self.policy_idx,
                    self.lock_path,
                    owner.pid,
                )
                return
            heartbeat = self._owner_heartbeat(owner)
            now = time.time()
            stamps = [owner.time, owner.mtime] + ([heartbeat.time, heartbeat.mtime] if heartbeat is not None else [])
            # A stamp dated in the future is no sign of life (it would hold the lock for ever).
            last_seen = max([0.0] + [t for t in stamps if not is_future(t, now)])
            age = now - last_seen
            who = self._describe_owner(owner, heartbeat, age)
            if owner.host == HOST:
                if is_alive(owner.pid, owner.proc_start):
                    raise LockedError(
                        f"policy {self.policy_idx} of workspace {self.workspace_path} is already being trained by "
                        f"{who}. Two processes with the same pbt.policy_idx would overwrite each other's "
                        f"records. Stop that process (kill {owner.pid}) or start this one with another "
                        "pbt.policy_idx or pbt.workspace."
                    )
                logger.warning(
                    "member %d: taking over the lock of %s, which is no longer running", self.policy_idx, who
                )
                self._take_over(owner, owner.version)
                continue
            if age > self.timeout:
                logger.warning(
                    "member %d: taking over the stale lock of %s (no sign of life for more than "
                    "pbt.heartbeat_timeout=%g s)",
                    self.policy_idx,
                    who,
                    self.timeout,
                )
                self._take_over(owner, owner.version)
                continue
            if watched is None:
                watched = last_seen
            elif last_seen > watched:
                raise LockedError(
                    f"policy {self.policy_idx} of workspace {self.workspace_path} is already being trained by "
                    f"{who}, and its heartbeat is advancing. Stop that process or start this one with "
                    "another pbt.policy_idx or pbt.workspace."
                )
            if not announced:
                announced = True
                logger.warning(
                    "member %d: %s holds the lock; waiting up to %.0f s for its heartbeat to either advance "
                    "(then this process refuses to start) or pass pbt.heartbeat_timeout=%g s (then it is taken "
                    "over). Delete %s by hand if you know that process is gone.",
                    self.policy_idx,
                    who,
                    max(0.0, self.timeout - age),
                    self.timeout,
                    self.lock_path,
                )
            self.sleep(max(0.05, min(self.interval, self.timeout - age + 0.05)))

    def _owner_heartbeat(self, owner: LockInfo) -> Optional[Beat]:
        try:
            beat = read_heartbeat(self.store, self.heartbeat_key)
        except ValueError:
            return None
        return beat if beat is not None and beat.token == owner.token else None

    @staticmethod
    def _describe_owner(owner: LockInfo, beat: Optional[Beat], age: float) -> str:
        frame = "" if beat is None or beat.frame is None else f", frame {beat.frame}"
        return f"pid {owner.pid} on host {owner.host} (last sign of life {age:.0f} s ago{frame})"

    def _take_over(self, stale: Optional[LockInfo], version: str) -> None:
        """Replace the stale lock (``stale``; None: an unreadable one) with ours, if the lock on disk
        is still that very ``version``. Never deletes a lock; the caller loops and re-reads it."""
        if not version:
            return  # gone meanwhile (or a store without versions would race: never guess)
        ident = hashlib.sha256(version.encode() + b"\0" + (stale.raw if stale else b"")).hexdigest()[:16]
        guard_data = json.dumps({"pid": os.getpid(), "host": HOST, "time": time.time()}).encode("utf-8")
        guard = ""
        for attempt in range(100):
            candidate = f"{self.dir}/{TAKEOVER_FILE}.{ident}.{attempt}"
            if self.store.create_exclusive(candidate, guard_data):
                guard = candidate
                break
            if time.time() - _mtime(self.store, candidate) <= TAKEOVER_STALE_SECONDS:
                self.sleep(min(0.5, self.interval))  # someone is taking this version over right now
                return
        if not guard:
            return
        try:
            if _version(self.store, self.lock_key) != version:
                return  # replaced or released since it was judged
            if stale is not None and _read_small_quiet(self.store, self.lock_key) != stale.raw:
                return
            self.store.put_atomic(self.lock_key, self._lock_bytes())
        finally:
            self.store.delete(guard)

    def _remove_old_guards(self) -> None:
        """Guards of takeovers of locks that no longer exist (this process holds the lock now)."""
        try:
            names = self.store.list(self.dir)
        except WorkspaceError:
            return
        for name in names:
            if name.startswith(TAKEOVER_FILE):
                key = f"{self.dir}/{name}"
                if time.time() - _mtime(self.store, key) > TAKEOVER_STALE_SECONDS:
                    self.store.delete(key)

    def owns_lock(self) -> bool:
        """True while the lock file still carries this process's token (also when it cannot be
        read for an I/O error: that says nothing about who holds it)."""
        try:
            owner = read_lock(self.store, self.lock_key)
        except Refused:
            return False  # something else was put in its place
        except (OSError, WorkspaceError):
            return True
        except ValueError:
            return False
        return owner is not None and owner.token == self.token

    def release(self) -> None:
        """Remove the lock if it is still ours."""
        if self._held and self.owns_lock():
            try:
                self.store.delete(self.lock_key)
            except WorkspaceError as exc:
                logger.warning(
                    "member %d: could not remove its lock %s (%s); the next process started "
                    "for this member takes it over",
                    self.policy_idx,
                    self.lock_path,
                    exc,
                )
        self._held = False

    # ---- the heartbeat -------------------------------------------------------------------------

    def beat(self, state: str = RUNNING) -> bool:
        """Write one heartbeat now; False (logged once per change) when the write failed."""
        data = Beat(
            pid=os.getpid(),
            host=HOST,
            token=self.token,
            time=time.time(),
            frame=self.frame,
            state=state,
            started=self.started,
            policy_idx=self.policy_idx,
        ).to_json()
        try:
            self.store.put_atomic(self.heartbeat_key, data)
        except WorkspaceError as exc:
            if self._write_failing is None:
                logger.warning(
                    "member %d: cannot write its heartbeat (%s); peers may report it as dead after "
                    "pbt.heartbeat_timeout=%g s. Retrying every %g s.",
                    self.policy_idx,
                    exc,
                    self.timeout,
                    self.interval,
                )
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
                    owner = read_lock(self.store, self.lock_key)
                    who = "nobody" if owner is None else f"pid {owner.pid} on host {owner.host}"
                except (OSError, ValueError) as exc:
                    who = f"an unreadable lock ({exc})"
                self.lost = (
                    f"member {self.policy_idx} lost its lock {self.lock_path} (now held by {who}); "
                    "another process was started with the same pbt.policy_idx and took it over"
                )
                logger.error("%s; this process stops writing heartbeats", self.lost)
                return
            self.beat(self.state)

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
