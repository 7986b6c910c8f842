"""One listing of a whole object-store workspace, held for the length of a scan.

An object store answers "what is under this prefix, with sizes, dates and ETags" for up to 1000
objects per request, so one PBT iteration needs one listing (a page per 1000 objects) instead of a
request per member directory and per file. :class:`Listing` is that answer as a tree of names;
:class:`SmallObjectCache` keeps the bytes of small objects by ETag, so a record or heartbeat that did
not change since the last iteration is not fetched again. Pure data structures: no I/O, no boto3.
"""

import bisect
import threading
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Set, Tuple

from pbt.storage.backend import ObjectInfo


class Listing:
    """The objects of a workspace at one moment, by key relative to its root.

    ``entries``: (key, info) of every object. A key missing here may still exist (written after the
    listing, or listed before it was written: pages are not one atomic snapshot), so callers ask the
    store for a key this listing does not know; a key found here may have been deleted since (readers
    treat a vanished object as they always do).
    """

    def __init__(self, entries: Iterable[Tuple[str, ObjectInfo]]) -> None:
        self._info: Dict[str, ObjectInfo] = {}
        self._children: Dict[str, Set[str]] = {}
        self._sorted: Optional[List[str]] = None
        for key, info in entries:
            self.add(key, info)

    def __len__(self) -> int:
        return len(self._info)

    def add(self, key: str, info: ObjectInfo) -> None:
        """Record an object (listed, or just written by this process)."""
        if key not in self._info:
            self._sorted = None
        self._info[key] = info
        parts = key.split("/")
        for depth in range(len(parts)):
            self._children.setdefault("/".join(parts[:depth]), set()).add(parts[depth])

    def remove(self, key: str) -> None:
        """Forget an object this process just deleted (its directory stays listed while others are in it)."""
        if self._info.pop(key, None) is None:
            return
        self._sorted = None
        parent, _, name = key.rpartition("/")
        if not self.is_dir(key):
            self._children.get(parent, set()).discard(name)

    def info(self, key: str) -> Optional[ObjectInfo]:
        """The object's size, date and version as listed, or None when it was not listed."""
        return self._info.get(key)

    def with_prefix(self, prefix: str) -> List[Tuple[str, ObjectInfo]]:
        """(key, info) of the listed objects whose key starts with the string ``prefix``."""
        if self._sorted is None:
            self._sorted = sorted(self._info)
        start = bisect.bisect_left(self._sorted, prefix)
        found = []
        for key in self._sorted[start:]:
            if not key.startswith(prefix):
                break
            found.append((key, self._info[key]))
        return found

    def is_dir(self, key: str) -> bool:
        """True when some listed object lies below ``key``."""
        return bool(self._children.get(key))

    def children(self, prefix: str) -> List[str]:
        """Names directly below ``prefix`` ('' for the root): objects and directories."""
        return sorted(self._children.get(prefix, ()))


class SmallObjectCache:
    """Bytes of small objects by (key, ETag), least recently used dropped first; thread-safe.

    An ETag names one version of an object's content, so bytes cached under it are still the
    object's bytes while a listing shows the same ETag.
    """

    def __init__(self, max_object_bytes: int = 64 * 1024, max_entries: int = 8192) -> None:
        self.max_object_bytes = max_object_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, etag: str) -> Optional[bytes]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not etag or entry[0] != etag:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: str, etag: str, data: bytes) -> None:
        if not etag or len(data) > self.max_object_bytes:
            return
        with self._lock:
            self._entries[key] = (etag, data)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)
