"""The narrow interface every workspace backend implements: a flat namespace of small objects
named by ``/``-separated keys relative to the workspace root (``000/000012.yaml``).

:class:`pbt.storage.local.LocalStore` is the POSIX implementation (the only module of the project
that calls ``os`` on workspace files). A new backend (object storage, say) implements
:class:`Store` and nothing else changes: :class:`pbt.storage.workspace.Workspace` only talks to it.
"""

import contextlib
import logging
import re
from dataclasses import dataclass
from typing import ContextManager, Iterator, List, Optional, Protocol, Set, Tuple, runtime_checkable

from pbt.errors import CorruptRecordError, WorkspaceError

log = logging.getLogger(__name__)

BAD_NAME_RE = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters: no workspace name has one."""
MAX_NAME_BYTES = 255
_MAX_REFUSALS_REMEMBERED = 100000


class NotFound(WorkspaceError):
    """The object does not exist (its writer may have just deleted it: peers clean up any time)."""


class Refused(CorruptRecordError):
    """The object is not something the workspace ever holds, so it was not opened or read: a symlink,
    FIFO, socket, device or directory where a file belongs, a file over its size cap, a name with
    control characters, a member or best directory that is a symlink. Any peer can write the
    workspace; this is how a store says "foreign". The store logs each refusal once per object."""


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    mtime: float
    """Unix time of the last write."""
    version: str = ""
    """Opaque identity of this version of the object ("" if the store has none): it changes when
    the object is replaced, so a caller can tell "still the one I judged" (lock takeover)."""
    regular: bool = True
    """False for something that is not a plain object (a symlink, FIFO, device or directory)."""


class Store(Protocol):
    """Where a workspace's bytes live. Every method raises :class:`WorkspaceError` on an I/O failure
    (chained to the OS error), :class:`NotFound` where it says so, and :class:`Refused` for a key
    whose name or object is foreign (never followed, opened or acted through)."""

    root: str
    """Human-readable location, for messages."""

    def put_atomic(self, key: str, data: bytes) -> None:
        """Write ``data`` so readers see the old object or the whole new one, never a torn one."""

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        """The object's bytes. Raises NotFound; Refused when it is not a regular object or is larger
        than ``max_bytes`` (checked before reading; never blocks)."""

    def list(self, prefix: str) -> List[str]:
        """Names directly under ``prefix`` ('' for the root); [] when there is nothing there."""

    def stat(self, key: str) -> Optional[ObjectInfo]:
        """Size, mtime, version and kind (of the object itself, not what a symlink points to), or None
        when it does not exist."""

    def delete(self, key: str) -> None:
        """Remove the object (a symlink itself, never its target); a missing one is fine."""

    def append(self, key: str, data: bytes) -> None:
        """Append ``data`` to the object (created when missing), in one write; Refused when it is not
        a regular object (a symlink is never followed)."""

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Create the object with ``data`` unless it exists; False when it does."""

    def copy(self, src: str, dst: str) -> None:
        """Put a copy of the object ``src`` at ``dst`` (replacing what is there), inside the store
        where it can (an object store's server-side copy). Raises NotFound; Refused for a ``src``
        that is not a regular object."""

    def path(self, key: str) -> str:
        """A string naming the object for messages (a file path, a URL)."""

    def read_appended(self, key: str, max_bytes: int) -> bytes:
        """Everything appended to ``key`` so far, in order. Raises NotFound when nothing was; Refused
        when it is over ``max_bytes`` or not a regular object."""

    def scan(self, population: Optional[int] = None) -> ContextManager[None]:
        """A scan of the whole workspace (one PBT iteration's reads) runs inside this context: a store
        whose requests are costly may take one listing at its start and answer ``list``, ``stat`` and
        unchanged small ``get`` s from it for the calling thread (others are not affected).
        ``population``: N of a fixed-size population, whose scan reads member directories 0..N-1 only."""


@runtime_checkable
class DirectoryStore(Store, Protocol):
    """A store with real directories (:class:`pbt.storage.local.LocalStore`) and what only they need.
    An object store has none of it: its keys need no parent and its puts leave no temp objects."""

    def is_dir(self, key: str) -> bool:
        """True when ``key`` is a directory (never a symlink to one)."""

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` (a file or a directory) to ``dst``, which must not exist, in one step."""

    def ensure_dir(self, prefix: str) -> None:
        """Make ``prefix`` a directory; something else at its name (a symlink, a file) is moved
        aside, never followed."""

    def remove_stale_temps(self, prefix: str, max_age: float) -> List[str]:
        """Remove leftovers of writers killed mid-write under ``prefix``: this process's own (none of
        its writes is in flight when it calls this) and others' untouched for ``max_age`` seconds.
        Returns the keys removed."""


def holds_prefix(store: Store, key: str) -> bool:
    """True when ``key`` is a directory (a store with directories) or a prefix with objects under it
    (a name listed under it is not enough: some S3 servers list a prefix emptied a moment ago)."""
    if isinstance(store, DirectoryStore):
        return store.is_dir(key)
    return next(_objects_under(store, key), None) is not None


def exists(store: Store, key: str) -> bool:
    """True when ``key`` names an object, a directory or a prefix with objects under it (an object
    store's root always exists); False for a name or path the store refuses."""
    if key == "" and not isinstance(store, DirectoryStore):
        return True
    try:
        return store.stat(key) is not None or holds_prefix(store, key)
    except Refused:
        return False


def _objects_under(store: Store, prefix: str) -> Iterator[str]:
    for name in store.list(prefix):
        key = f"{prefix}/{name}"
        if store.stat(key) is not None:
            yield key
        else:
            yield from _objects_under(store, key)


def move(store: Store, src: str, dst: str) -> None:
    """Move the object or prefix ``src`` to ``dst``, which must not exist: one rename where the store
    has directories; else each object is copied, then the originals are deleted (a move cut off half
    way leaves both copies, never neither)."""
    if isinstance(store, DirectoryStore):
        store.rename(src, dst)
        return
    if exists(store, dst):
        raise WorkspaceError(f"cannot move {store.path(src)} to {store.path(dst)}: the target exists")
    keys = [src] if store.stat(src) is not None else list(_objects_under(store, src))
    moves = [(key, dst + key[len(src) :]) for key in keys]
    for old, new in moves:
        store.copy(old, new)
    for old, _ in moves:
        store.delete(old)


def ensure_dir(store: Store, prefix: str) -> None:
    """Make ``prefix`` a directory where the store has directories; nothing to do on an object store."""
    if isinstance(store, DirectoryStore):
        store.ensure_dir(prefix)


def remove_stale_temps(store: Store, prefix: str, max_age: float) -> List[str]:
    """:meth:`DirectoryStore.remove_stale_temps` where the store has directories, else nothing to remove."""
    return store.remove_stale_temps(prefix, max_age) if isinstance(store, DirectoryStore) else []


class RefusalLog:
    """Refusing foreign names and objects, the same way in every store: the error says what was
    refused and is logged once per (object, reason)."""

    def __init__(self) -> None:
        self._refused: Set[Tuple[str, str]] = set()

    def path(self, key: str) -> str:
        raise NotImplementedError

    def refuse(self, key: str, reason: str) -> Refused:
        """The error for a refused object; logged once per (object, reason)."""
        where = self.path(key)
        shown = repr(where) if BAD_NAME_RE.search(where) else where
        message = (
            f"{shown}: refused ({reason}); it was not followed, opened or read. Another process wrote "
            "something there that the workspace never holds: delete it"
        )
        if (where, reason) not in self._refused:
            if len(self._refused) < _MAX_REFUSALS_REMEMBERED:
                self._refused.add((where, reason))
            log.warning("%s", message)
        return Refused(message)

    def split_key(self, key: str) -> List[str]:
        """The components of ``key``; Refused for names no workspace object has (empty, ``.``,
        ``..``, control characters, over 255 bytes)."""
        if not key:
            return []
        parts = key.split("/")
        for part in parts:
            if (
                not part
                or part in (".", "..")
                or BAD_NAME_RE.search(part)
                or len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES
            ):
                raise self.refuse(key, f"bad name {part!r}")
        return parts

    def good_names(self, prefix: str, names: List[str]) -> List[str]:
        """``names`` found under ``prefix`` without the ones with control characters (refused)."""
        good = []
        for name in names:
            if BAD_NAME_RE.search(name):
                self.refuse(f"{prefix}/{name}" if prefix else name, "a name with control characters")
            else:
                good.append(name)
        return good


def no_scan() -> ContextManager[None]:
    """``Store.scan`` of a store whose requests are cheap: nothing to prepare."""
    return contextlib.nullcontext()
