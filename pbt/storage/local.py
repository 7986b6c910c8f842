"""The POSIX workspace backend: the only module that touches workspace files with ``os``.

Correctness rests only on ``os.replace`` being atomic, never on file locks: every object is written
to a unique temp file in the same directory, fsynced, and renamed over its final name
(:func:`atomic_write_bytes`); a reader sees the old file or the new one, never a torn one, and the
directory is fsynced after the rename. Exclusive creation (locks) is ``O_CREAT | O_EXCL``.

Every peer can write the workspace, so :class:`LocalStore` trusts nothing it finds there: each
directory below the root is opened ``O_DIRECTORY | O_NOFOLLOW`` and every operation is made relative
to that descriptor (a member or best directory replaced by a symlink is refused, never listed,
written into or deleted in); files are opened ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``-ed: only
regular files no larger than the caller's cap are read (a FIFO, socket, device or symlink is
refused, never blocks); names with NUL, control characters, ``.`` or ``..`` are refused. Each
refusal raises :class:`~pbt.storage.backend.Refused` and is logged once per file.
"""

import contextlib
import errno
import logging
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import ContextManager, Dict, Iterator, List, Optional, Tuple, Union

from pbt.errors import WorkspaceError
from pbt.storage.backend import NotFound, ObjectInfo, RefusalLog, Refused, no_scan

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
            log.info(
                "fsync of directory %s is not supported here (%s); renames rely on the filesystem's own durability",
                directory,
                exc,
            )
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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, "short write")
        view = view[written:]


def _append_fd(fd: int, data: bytes, path: str) -> None:
    """Append ``data`` to the open file in one write, then fsync. If a previous writer died mid-line
    (the file does not end with a newline), the torn fragment is closed with a newline first so it
    cannot swallow ``data``."""
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            log.warning("%s ended with a torn line; closing it before appending", path)
            data = b"\n" + data
        _write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise WorkspaceError(f"appending to {path} failed: {exc}. Check free disk space.") from exc


def append_bytes(path: PathLike, data: bytes) -> None:
    """Append ``data`` to ``path`` (created when missing; a symlink there is refused)."""
    try:
        fd = os.open(str(path), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise WorkspaceError(f"cannot open {path} to append to it: {exc}") from exc
    try:
        _append_fd(fd, data, str(path))
    finally:
        os.close(fd)


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_WRITE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class LocalStore(RefusalLog):
    """A workspace directory on a local or shared POSIX filesystem (see :class:`Store`).

    The root itself is the user's choice and may be a symlink; nothing below it is followed.
    """

    def __init__(self, root: PathLike) -> None:
        self.root_path = Path(root)
        self.root = str(self.root_path)
        super().__init__()

    def _p(self, key: str) -> Path:
        return self.root_path / key if key else self.root_path

    def path(self, key: str) -> str:
        return str(self._p(key))

    # ---- refusals and names ------------------------------------------------------------------

    def _split(self, key: str) -> List[str]:
        return self.split_key(key)

    # ---- directories -------------------------------------------------------------------------

    def _open_root(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as exc:
            raise NotFound(f"{self.root}: no such directory") from exc
        except OSError as exc:
            raise WorkspaceError(
                f"cannot open the workspace {self.root}: {exc}. Check the path and permissions."
            ) from exc

    def _open_sub(self, parent: int, name: str, key: str) -> int:
        """Open directory ``name`` under ``parent`` without following a symlink."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError as exc:
            raise NotFound(f"{self.path(key)}: no such directory") from exc
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                try:
                    mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                except OSError:
                    mode = 0
                raise self.refuse(key, f"{_kind(mode)} where a directory belongs") from exc
            raise WorkspaceError(f"cannot open directory {self.path(key)}: {exc}") from exc

    @contextlib.contextmanager
    def _dir(self, parts: List[str]) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the root, each level opened O_NOFOLLOW."""
        fd = self._open_root()
        try:
            for depth, name in enumerate(parts):
                sub = self._open_sub(fd, name, "/".join(parts[: depth + 1]))
                os.close(fd)
                fd = sub
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _parent(self, key: str) -> Iterator[Tuple[int, str]]:
        """(descriptor of ``key``'s verified directory, ``key``'s last name)."""
        parts = self._split(key)
        if not parts:
            raise WorkspaceError("the workspace root is not an object")
        with self._dir(parts[:-1]) as fd:
            yield fd, parts[-1]

    def _fsync(self, fd: int, key: str) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            if key not in _DIR_FSYNC_UNSUPPORTED:
                _DIR_FSYNC_UNSUPPORTED[key] = True
                log.info("fsync of a directory in %s is not supported here (%s)", self.root, exc)

    # ---- the Store protocol ------------------------------------------------------------------

    def put_atomic(self, key: str, data: bytes) -> None:
        with self._parent(key) as (dfd, name):
            tmp = f".{name}.{HOST}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _WRITE_FLAGS, 0o644, dir_fd=dfd)
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot create a temp file in {self.path(key)}'s directory to write it: {exc}. Check that the "
                    "directory exists, is writable and the disk is not full."
                ) from exc
            try:
                _write_all(fd, data)
                os.fsync(fd)
                os.close(fd)
                fd = -1
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException as exc:
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                if isinstance(exc, OSError):
                    raise WorkspaceError(
                        f"writing {self.path(key)} failed: {exc}. Check free disk space and permissions."
                    ) from exc
                raise
            self._fsync(dfd, key)

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        with self._parent(key) as (dfd, name):
            try:
                mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
                if not stat.S_ISREG(mode):  # refused before it is opened: a device is never opened
                    raise self.refuse(key, _kind(mode))
                fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
            except FileNotFoundError as exc:
                raise NotFound(f"{self.path(key)}: no such file") from exc
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self.refuse(key, "a symlink") from exc
                raise WorkspaceError(f"{self.path(key)}: cannot read it: {exc}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # replaced between the stat and the open
                raise self.refuse(key, _kind(info.st_mode))
            if max_bytes is not None and info.st_size > max_bytes:
                raise self.refuse(key, f"{info.st_size} bytes, more than the {max_bytes} such a file may have")
            limit = info.st_size if max_bytes is None else max_bytes + 1
            chunks: List[bytes] = []
            size = 0
            while size < limit:
                chunk = os.read(fd, min(limit - size, 1 << 24))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except MemoryError as exc:
            raise self.refuse(key, "too large to read into memory") from exc
        except OSError as exc:
            raise WorkspaceError(f"{self.path(key)}: cannot read it: {exc}") from exc
        finally:
            os.close(fd)

    def list(self, prefix: str) -> List[str]:
        try:
            with self._dir(self._split(prefix)) as fd:
                names = os.listdir(fd)
        except NotFound:
            return []
        except OSError as exc:
            raise WorkspaceError(f"cannot list {self.path(prefix)}: {exc}. Check permissions and the mount.") from exc
        return self.good_names(prefix, names)

    def stat(self, key: str) -> Optional[ObjectInfo]:
        """``key`` '' is the root itself (the path the user gave, so a symlink to it is followed)."""
        try:
            if not key:
                st = os.stat(self.root_path)
            else:
                with self._parent(key) as (dfd, name):
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except (NotFound, FileNotFoundError):
            return None
        except OSError as exc:
            raise WorkspaceError(f"cannot stat {self.path(key)}: {exc}") from exc
        return ObjectInfo(
            st.st_size, st.st_mtime, f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", stat.S_ISREG(st.st_mode)
        )

    def delete(self, key: str) -> None:
        try:
            with self._parent(key) as (dfd, name):
                os.unlink(name, dir_fd=dfd)  # a symlink is removed itself, never what it points to
        except (NotFound, FileNotFoundError):
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", self.path(key), exc)

    def append(self, key: str, data: bytes) -> None:
        with self._parent(key) as (dfd, name):
            try:
                fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | _WRITE_FLAGS, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO):
                    raise self.refuse(key, "a symlink or FIFO") from exc
                raise WorkspaceError(f"cannot open {self.path(key)} to append to it: {exc}") from exc
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self.refuse(key, _kind(mode))
            _append_fd(fd, data, self.path(key))
        finally:
            os.close(fd)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        with self._parent(key) as (dfd, name):
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _WRITE_FLAGS, 0o644, dir_fd=dfd)
            except FileExistsError:
                return False
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot create {self.path(key)}: {exc}. The directory must be writable (check permissions, "
                    "free space and that it is mounted read-write)."
                ) from exc
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError as exc:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
                raise WorkspaceError(f"writing {self.path(key)} failed: {exc}. Check free disk space.") from exc
            os.close(fd)
            return True

    def ensure_dir(self, prefix: str) -> None:
        """Create ``prefix`` (a member's own directory) level by level. Something else at its
        name (a symlink a peer planted, a file) is moved aside, never followed."""
        try:
            self.root_path.mkdir(parents=True, exist_ok=True)
            parts = self._split(prefix)
            fd = self._open_root()
            try:
                for depth, name in enumerate(parts):
                    key = "/".join(parts[: depth + 1])
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                    try:
                        sub = self._open_sub(fd, name, key)
                    except Refused:
                        aside = f"{name}.foreign-{os.urandom(4).hex()}"
                        log.warning("moving %s aside to %s: it was not a directory", self.path(key), aside)
                        os.rename(name, aside, src_dir_fd=fd, dst_dir_fd=fd)
                        os.mkdir(name, 0o755, dir_fd=fd)
                        sub = self._open_sub(fd, name, key)
                    os.close(fd)
                    fd = sub
            finally:
                os.close(fd)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create workspace directory {self.path(prefix)}: {exc}. Set pbt.workspace to a writable "
                "directory shared by all members."
            ) from exc

    def rename(self, src: str, dst: str) -> None:
        with self._parent(src) as (sfd, sname), self._parent(dst) as (dfd, dname):
            try:
                os.stat(dname, dir_fd=dfd, follow_symlinks=False)
                raise WorkspaceError(f"cannot move {self.path(src)} to {self.path(dst)}: the target exists")
            except FileNotFoundError:
                pass
            try:
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot move {self.path(src)} to {self.path(dst)}: {exc}. Move or delete it by hand."
                ) from exc
            self._fsync(dfd, dst)

    def copy(self, src: str, dst: str) -> None:
        self.put_atomic(dst, self.get(src))

    def is_dir(self, key: str) -> bool:
        if not key:  # the root: the path the user gave (a file there is no workspace, not an I/O error)
            return self.root_path.is_dir()
        try:
            with self._dir(self._split(key)):
                return True
        except (NotFound, Refused):
            return False

    def remove_stale_temps(self, prefix: str, max_age: float) -> List[str]:
        return remove_stale_temps(self, prefix, max_age)

    def read_appended(self, key: str, max_bytes: int) -> bytes:
        return self.get(key, max_bytes)

    def scan(self, population: Optional[int] = None) -> ContextManager[None]:
        return no_scan()


def remove_stale_temps(store: LocalStore, prefix: str, max_age: float) -> List[str]:
    """Temp files under ``prefix`` left by killed writers (see :meth:`pbt.storage.backend.DirectoryStore.remove_stale_temps`)."""
    removed: List[str] = []
    now = time.time()
    for name in store.list(prefix):
        match = TMP_RE.fullmatch(name)
        if match is None:
            continue
        key = f"{prefix}/{name}" if prefix else name
        ours = (
            match.group("host") == HOST
            and int(match.group("pid")) == os.getpid()
            and match.group("target") not in CONCURRENT_TARGETS
        )
        if not ours:
            info = store.stat(key)
            if info is None or now - info.mtime < max_age:
                continue
        log.info("removing stale temp file %s (left by a killed writer)", store.path(key))
        store.delete(key)
        removed.append(key)
    return removed
