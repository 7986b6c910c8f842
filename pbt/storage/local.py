"""The POSIX workspace backend: the only module that touches workspace files with ``os``.

Correctness rests only on ``os.replace`` being atomic, never on file locks: every object is written
to a unique temp file in the same directory, fsynced, and renamed over its final name
(:func:`atomic_write_bytes`); a reader sees the old file or the new one, never a torn one, and the
directory is fsynced after the rename. Exclusive creation (locks) is ``O_CREAT | O_EXCL``.
"""
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Dict, List, Optional, Union

from pbt.errors import WorkspaceError
from pbt.storage.backend import NotFound, ObjectInfo

log = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

TMP_SUFFIX = ".tmp"
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
"""This host's name as it appears in temp file names (``.<name>.<host>.<pid>.<token>.tmp``)."""
CONCURRENT_TARGETS = frozenset(["heartbeat"])
"""Files a thread of the member rewrites while cleanup runs: their temp files are removed by age only."""
TMP_RE = re.compile(r"\.(?P<target>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.(?P<token>[0-9a-f]+)\.tmp")
_DIR_FSYNC_UNSUPPORTED: Dict[str, bool] = {}


def fsync_dir(directory: PathLike) -> None:
    """fsync a directory so a rename in it is durable; some filesystems do not support it."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError as exc:
        raise WorkspaceError(f"cannot open directory {directory} to fsync it: {exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        key = str(directory)
        if key not in _DIR_FSYNC_UNSUPPORTED:
            _DIR_FSYNC_UNSUPPORTED[key] = True
            log.info("fsync of directory %s is not supported here (%s); renames rely on the filesystem's "
                     "own durability", directory, exc)
    finally:
        os.close(fd)


def remove_quietly(path: PathLike) -> None:
    """Remove ``path`` if it exists; failures other than 'already gone' are logged."""
    try:
        os.unlink(str(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the complete new one.

    The temp file is removed on any error (a SIGKILL can leave it behind; retention removes it).
    Raises WorkspaceError on an OS error (disk full, permissions, missing directory).
    """
    target = Path(path)
    tmp = target.parent / f".{target.name}.{HOST}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}"
    try:
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create a temp file in {target.parent} to write {target.name}: {exc}. "
            "Check that the directory exists, is writable and the disk is not full."
        ) from exc
    try:
        with os.fdopen(fd, "wb") as fobj:
            fobj.write(data)
            fobj.flush()
            os.fsync(fobj.fileno())
        os.replace(str(tmp), str(target))
    except OSError as exc:
        remove_quietly(tmp)
        raise WorkspaceError(f"writing {target} failed: {exc}. Check free disk space and permissions.") from exc
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(target.parent)


def create_exclusive(path: PathLike, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists (O_CREAT|O_EXCL, fsynced); False if it exists.

    Raises WorkspaceError when the file cannot be created or written (it is removed again then).
    """
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create {path}: {exc}. The directory must be writable (check permissions, free "
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
        remove_quietly(path)
        raise WorkspaceError(f"writing {path} failed: {exc}. Check free disk space.") from exc
    os.close(fd)
    return True


def append_bytes(path: PathLike, data: bytes) -> None:
    """Append ``data`` in one write, then fsync. If a previous writer died mid-line (the file does not
    end with a newline), the torn fragment is closed with a newline first so it cannot swallow
    ``data``."""
    try:
        fd = os.open(str(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WorkspaceError(f"cannot open {path} to append to it: {exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            log.warning("%s ended with a torn line; closing it before appending", path)
            data = b"\n" + data
        written = os.write(fd, data)
        while written < len(data):  # regular files write fully unless the disk is full
            more = os.write(fd, data[written:])
            if more == 0:
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            written += more
        os.fsync(fd)
    except OSError as exc:
        raise WorkspaceError(f"appending to {path} failed: {exc}. Check free disk space.") from exc
    finally:
        os.close(fd)


class LocalStore:
    """A workspace directory on a local or shared POSIX filesystem (see :class:`Store`)."""

    def __init__(self, root: PathLike) -> None:
        self.root_path = Path(root)
        self.root = str(self.root_path)

    def _p(self, key: str) -> Path:
        return self.root_path / key if key else self.root_path

    def path(self, key: str) -> str:
        return str(self._p(key))

    def put_atomic(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self._p(key), data)

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        path = self._p(key)
        try:
            with open(str(path), "rb") as fobj:
                return fobj.read() if max_bytes is None else fobj.read(max_bytes + 1)
        except FileNotFoundError as exc:
            raise NotFound(f"{path}: no such file") from exc
        except OSError as exc:
            raise WorkspaceError(f"{path}: cannot read it: {exc}") from exc

    def list(self, prefix: str) -> List[str]:
        path = self._p(prefix)
        try:
            return os.listdir(str(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise WorkspaceError(f"cannot list {path}: {exc}. Check permissions and the mount.") from exc

    def stat(self, key: str) -> Optional[ObjectInfo]:
        path = self._p(key)
        try:
            st = os.stat(str(path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise WorkspaceError(f"cannot stat {path}: {exc}") from exc
        return ObjectInfo(st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        remove_quietly(self._p(key))

    def append(self, key: str, data: bytes) -> None:
        append_bytes(self._p(key), data)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        return create_exclusive(self._p(key), data)

    def ensure_dir(self, prefix: str) -> None:
        path = self._p(prefix)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create workspace directory {path}: {exc}. Set pbt.workspace to a writable "
                "directory shared by all members."
            ) from exc

    def rename(self, src: str, dst: str) -> None:
        source, target = self._p(src), self._p(dst)
        if os.path.lexists(str(target)):
            raise WorkspaceError(f"cannot move {source} to {target}: the target exists")
        try:
            os.rename(str(source), str(target))
        except OSError as exc:
            raise WorkspaceError(f"cannot move {source} to {target}: {exc}. Move or delete it by hand.") from exc
        fsync_dir(target.parent)

    def exists(self, key: str) -> bool:
        return os.path.lexists(str(self._p(key)))

    def is_dir(self, key: str) -> bool:
        return self._p(key).is_dir()

    def remove_stale_temps(self, prefix: str, max_age: float) -> List[str]:
        removed: List[str] = []
        now = time.time()
        for name in self.list(prefix):
            match = TMP_RE.fullmatch(name)
            if match is None:
                continue
            key = f"{prefix}/{name}" if prefix else name
            ours = (match.group("host") == HOST and int(match.group("pid")) == os.getpid()
                    and match.group("target") not in CONCURRENT_TARGETS)
            if not ours:
                info = self.stat(key)
                if info is None or now - info.mtime < max_age:
                    continue
            log.info("removing stale temp file %s (left by a killed writer)", self.path(key))
            self.delete(key)
            removed.append(key)
        return removed
