"""An append-only log (a member's ``lineage.jsonl``) on a store whose objects cannot be appended to.

Object stores replace whole objects, and rewriting a growing log at every PBT event would cost its
whole size each time. So each append is one small object, created only if absent, and every
``COMPACT_EVERY`` appends the writer folds them into one base object::

    <key>                     a plain log object (a workspace copied from a filesystem), read first
    <key>.d/p<seq:010d>       one appended entry (or several, when written together)
    <key>.d/b<seq:010d>       a base: the log's content up to and including part ``seq``

A reader lists ``<key>`` and ``<key>.d/`` (one request), takes the newest base and the parts after
it, in sequence order. Compaction writes the new base before deleting what it covers, so a writer
killed mid-way leaves parts or an old base that readers skip, never a gap or a duplicate. One
writer per log (the member holding the lock); a second one loses the create-if-absent race and
re-reads the sequence. No torch, Python 3.8.
"""

import logging
import re
from typing import Dict, List, Optional, Protocol, Set, Tuple

from pbt.errors import WorkspaceError
from pbt.storage.backend import NotFound, Refused

log = logging.getLogger(__name__)

COMPACT_EVERY = 16
"""Appended parts folded into a base by the writer; a reader gets at most this many + 1 objects."""
_PART_RE = re.compile(r"(?P<kind>[pb])(?P<seq>[0-9]{10})")
MAX_BASE_SEQ = 10**9
"""A base numbered above this is foreign (ignored): the parts after any base then keep ten digits
for 9 * 10**9 more appends."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""Largest log compaction reads (the readers' cap on a lineage, ``ReadLimits.lineage_bytes``)."""
MAX_PART_BYTES = 1024 * 1024
"""A part holds the entries of one append (~200 bytes each); a larger one is not folded into a base."""


def part_name(seq: int) -> str:
    return f"p{seq:010d}"


def base_name(seq: int) -> str:
    return f"b{seq:010d}"


def log_dir(key: str) -> str:
    return f"{key}.d"


def parse_log_names(names: List[str]) -> Tuple[Optional[int], List[int], List[str]]:
    """(newest base's sequence, parts after it in order, names of the parts and older bases it
    covers) from the names found under ``<key>.d/``. Foreign names are ignored: other formats, a
    base numbered above MAX_BASE_SEQ, and parts beyond the first gap after the base (the writer
    numbers its parts one by one, so a planted ``p9999999999`` is never read nor continued)."""
    parts: Set[int] = set()
    bases: List[int] = []
    for name in names:
        match = _PART_RE.fullmatch(name)
        if match is None:
            continue
        seq = int(match.group("seq"))
        if match.group("kind") == "p":
            parts.add(seq)
        elif seq <= MAX_BASE_SEQ:
            bases.append(seq)
    base = max(bases) if bases else None
    floor = -1 if base is None else base
    live: List[int] = []
    while floor + 1 + len(live) in parts:
        live.append(floor + 1 + len(live))
    covered = [part_name(seq) for seq in sorted(parts) if seq <= floor]
    covered += [base_name(seq) for seq in sorted(bases) if seq != base]
    return base, live, covered


class ObjectLog:
    """Append and read logs on ``store`` (an object store: ``list_objects``, ``get``,
    ``create_exclusive``, ``put_atomic``, ``delete``)."""

    def __init__(
        self, store: "LogStore", compact_every: int = COMPACT_EVERY, max_log_bytes: int = MAX_LOG_BYTES
    ) -> None:
        self.store = store
        self.compact_every = compact_every
        self.max_log_bytes = max_log_bytes
        self._next: Dict[str, Tuple[int, int]] = {}
        """Per log written by this process: (next sequence number, parts since the newest base)."""

    def _state(self, key: str, fresh: bool = True) -> Tuple[Optional[int], List[int], List[str], Dict[str, int]]:
        """The log's newest base, live parts, covered names and sizes (``fresh``: from the server,
        else possibly from the store's listing of the current scan)."""
        sizes = dict(self.store.list_objects(key, fresh))
        names = [name[len(log_dir(key)) + 1 :] for name in sizes if name.startswith(log_dir(key) + "/")]
        base, live, covered = parse_log_names(names)
        return base, live, covered, sizes

    def append(self, key: str, data: bytes) -> None:
        """Append ``data`` (whole lines) as one new part; compacts every ``compact_every`` parts."""
        for _ in range(3):
            if key not in self._next:
                base, live, _, _ = self._state(key)
                newest = max([-1 if base is None else base] + live)
                self._next[key] = (newest + 1, len(live))
            seq, pending = self._next[key]
            if self.store.create_exclusive(f"{log_dir(key)}/{part_name(seq)}", data):
                self._next[key] = (seq + 1, pending + 1)
                if pending + 1 >= self.compact_every:
                    self.compact(key)
                return
            log.warning(
                "%s: part %d was already written by another process; reading the log's sequence again",
                self.store.path(key),
                seq,
            )
            del self._next[key]
        raise WorkspaceError(
            f"{self.store.path(key)}: cannot append: other processes keep writing the same log "
            "parts. Two processes train one member: stop one of them."
        )

    def read(self, key: str, max_bytes: int) -> bytes:
        """The whole log, in order; NotFound when it has nothing. Refused over ``max_bytes``."""
        for attempt in range(3):
            data = self._read_once(key, max_bytes, fresh=attempt > 0)
            if data is not None:
                return data
        raise WorkspaceError(f"{self.store.path(key)}: the log kept changing while it was read; try again")

    def _read_once(self, key: str, max_bytes: int, fresh: bool) -> Optional[bytes]:
        """The log, or None when a part vanished while reading (compacted meanwhile)."""
        base, live, _, sizes = self._state(key, fresh)
        keys = ([key] if key in sizes else []) + ([f"{log_dir(key)}/{base_name(base)}"] if base is not None else [])
        keys += [f"{log_dir(key)}/{part_name(seq)}" for seq in live]
        if not keys:
            raise NotFound(f"{self.store.path(key)}: no such log")
        total = sum(sizes[k] for k in keys)
        if total > max_bytes:
            raise self.store.refuse(key, f"{total} bytes, more than the {max_bytes} such a log may have")
        chunks: List[bytes] = []
        for part in keys:
            try:
                data = self.store.get(part, max_bytes)
            except NotFound:  # compacted meanwhile: read the new state once more
                return None
            chunks.append(data if not data or data.endswith(b"\n") else data + b"\n")
        return b"".join(chunks)

    def _postpone(self, key: str) -> None:
        """Try compacting again only after another ``compact_every`` appends."""
        if key in self._next:
            self._next[key] = (self._next[key][0], 0)

    def compact(self, key: str) -> None:
        """Fold the parts into a new base, then delete what it covers (parts and older bases).
        Every GET is capped (a base at ``max_log_bytes``, a part at MAX_PART_BYTES): a log holding a
        larger object is left as it is (logged), never downloaded whole."""
        base, live, covered, _ = self._state(key)
        if not live:
            return
        keys = [f"{log_dir(key)}/{base_name(base)}"] if base is not None else []
        keys += [f"{log_dir(key)}/{part_name(seq)}" for seq in live]
        content = []
        for part in keys:
            cap = self.max_log_bytes if part.rpartition("/")[2].startswith("b") else MAX_PART_BYTES
            try:
                data = self.store.get(part, cap)
            except Refused as exc:  # the store logged it once
                self._postpone(key)
                log.debug("%s: not compacting: %s", self.store.path(key), exc)
                return
            content.append(data if not data or data.endswith(b"\n") else data + b"\n")
        if sum(len(c) for c in content) > self.max_log_bytes:
            self._postpone(key)
            log.warning("%s: not compacting: more than %d bytes", self.store.path(key), self.max_log_bytes)
            return
        newest = live[-1]
        self.store.put_atomic(f"{log_dir(key)}/{base_name(newest)}", b"".join(content))
        for seq in live:
            self.store.delete(f"{log_dir(key)}/{part_name(seq)}")
        for name in covered:
            self.store.delete(f"{log_dir(key)}/{name}")
        if base is not None:
            self.store.delete(f"{log_dir(key)}/{base_name(base)}")
        self._next[key] = (newest + 1, 0)
        log.debug("compacted %s: %d parts folded into base %d", self.store.path(key), len(live), newest)


class LogStore(Protocol):
    """What :class:`ObjectLog` needs from a store."""

    def list_objects(self, prefix: str, fresh: bool = True) -> List[Tuple[str, int]]:
        """(key, size) of every object whose key starts with ``prefix`` (a plain string prefix);
        ``fresh=False`` allows an answer from a listing taken earlier in the current scan."""

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes: ...

    def create_exclusive(self, key: str, data: bytes) -> bool: ...

    def put_atomic(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def path(self, key: str) -> str: ...

    def refuse(self, key: str, reason: str) -> Exception: ...
