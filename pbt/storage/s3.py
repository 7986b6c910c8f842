"""The object-storage workspace backend: ``pbt.workspace=s3://bucket/prefix`` on any S3 API server.

How it keeps the local workspace's guarantees without a filesystem:

- a PUT replaces an object whole (readers see the old or the new one), so ``put_atomic`` is one
  PUT; the protocol of :mod:`pbt.storage.format` (checkpoint before record) is unchanged;
- exclusive creation (locks, takeover guards, log parts) is a conditional PUT (``If-None-Match: *``):
  one winner, the others get 412;
- there is no append: a lineage is a series of small objects, compacted by its writer
  (:mod:`pbt.storage.objectlog`);
- there are no directories: a "directory" is a key prefix (nothing to create, no temp objects to
  clean: it is no :class:`~pbt.storage.backend.DirectoryStore`), and moving a member aside
  (``pbt.overwrite=true``) copies then deletes each of its objects;
- every name, size cap and refusal goes through the same code as the local store
  (:class:`~pbt.storage.backend.RefusalLog`; capped reads are ranged GETs refused from the headers);
- one PBT iteration takes one listing of the whole workspace (``scan``): ``list`` and ``stat`` are
  answered from it and a record or heartbeat whose ETag did not change is not fetched again
  (:mod:`pbt.storage.listing`); the changed ones (each member's newest record and heartbeat) are
  fetched concurrently right after the listing, so the step's reads wait for one round trip, not N.
  The request count per iteration is in the README.

Errors are :class:`~pbt.errors.WorkspaceError` chained to an ``OSError`` (:mod:`pbt.storage.s3_client`),
so an unreachable server is an I/O error the member rides out under ``pbt.on_write_error=retry``.
"""

import contextlib
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Tuple

from pbt.errors import WorkspaceError
from pbt.storage.backend import NotFound, ObjectInfo, RefusalLog
from pbt.storage.format import HEARTBEAT_FILE, RECORD_SUFFIX, iteration_of, member_idx_of
from pbt.storage.listing import Listing, SmallObjectCache
from pbt.storage.objectlog import ObjectLog
from pbt.storage.s3_client import is_precondition_failed, make_client, parse_s3_url, translate

log = logging.getLogger(__name__)

PREFETCH_THREADS = 16
"""Concurrent GETs of a scan's prefetch (boto3's default connection pool holds 10; more wait)."""


def _info(size: Any, modified: Any, etag: Any) -> ObjectInfo:
    stamp = modified.timestamp() if hasattr(modified, "timestamp") else time.time()
    tag = str(etag or "")
    return ObjectInfo(int(size or 0), stamp, f"{tag}@{stamp}", True)


def _etag(info: Optional[ObjectInfo]) -> str:
    return "" if info is None else info.version.rpartition("@")[0]


class S3Store(RefusalLog):
    """A workspace under ``s3://bucket/prefix`` (see :class:`~pbt.storage.backend.Store`).

    Args:
        url: ``s3://bucket/prefix``.
        client: a boto3 S3 client (default: one configured from the AWS environment variables).
    """

    def __init__(self, url: str, client: Any = None) -> None:
        super().__init__()
        self.bucket, self.prefix = parse_s3_url(url)
        self.root = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self._client = client
        self._client_lock = threading.Lock()
        self._scan = threading.local()
        self._cache = SmallObjectCache()
        self._log = ObjectLog(self)
        self._count_lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        """Requests sent, by S3 operation (for benchmarks and the documented request budget)."""
        self.bytes_sent = 0
        self.bytes_received = 0

    # ---- names and requests ------------------------------------------------------------------

    @property
    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                self._client = make_client()
            return self._client

    def _k(self, key: str) -> str:
        """The full object key of ``key`` (its names checked first: Refused for foreign ones)."""
        self.split_key(key)
        if not key:
            return self.prefix
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def _call(self, operation: str, what: str, key: str, **kwargs: Any) -> Any:
        """One request; boto3 errors become workspace errors (NotFound for a missing object)."""
        with self._count_lock:
            self.requests[operation] += 1
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **kwargs)
        except Exception as exc:  # noqa: BLE001 - botocore raises many unrelated classes; all are translated
            if is_precondition_failed(exc):
                raise
            raise _chained(translate(exc, what, self.path(key), self.bucket))  # noqa: B904 - translate sets the cause

    def _listing(self) -> Optional[Listing]:
        return getattr(self._scan, "listing", None)

    # ---- the Store protocol ------------------------------------------------------------------

    def put_atomic(self, key: str, data: bytes) -> None:
        response = self._call("put_object", "writing", key, Key=self._k(key), Body=data)
        self._written(key, data, response)

    def _written(self, key: str, data: bytes, response: Dict[str, Any]) -> None:
        self.bytes_sent += len(data)
        etag = str(response.get("ETag", ""))
        self._cache.put(key, etag, data)
        listing = self._listing()
        if listing is not None:
            listing.add(key, _info(len(data), None, etag))

    def create_exclusive(self, key: str, data: bytes) -> bool:
        try:
            response = self._call("put_object", "creating", key, Key=self._k(key), Body=data, IfNoneMatch="*")
        except WorkspaceError:
            raise
        except Exception as exc:  # noqa: BLE001 - only a lost condition reaches here
            if is_precondition_failed(exc):
                return False
            raise _chained(translate(exc, "creating", self.path(key), self.bucket))  # noqa: B904 - translate sets the cause
        self._written(key, data, response)
        return True

    def get(self, key: str, max_bytes: Optional[int] = None) -> bytes:
        full = self._k(key)
        listing = self._listing()
        listed = None if listing is None else listing.info(key)
        if listed is not None:
            cached = self._cache.get(key, _etag(listed))
            if cached is not None and (max_bytes is None or len(cached) <= max_bytes):
                return cached
        ranged = {} if max_bytes is None else {"Range": f"bytes=0-{max_bytes}"}
        try:
            response = self._call("get_object", "reading", key, Key=full, **ranged)
        except WorkspaceError as exc:
            if isinstance(exc, NotFound) or "InvalidRange" not in str(exc):
                raise
            response = self._call("get_object", "reading", key, Key=full)  # an empty object has no byte 0
        total = _total_size(response)
        if max_bytes is not None and total > max_bytes:
            response["Body"].close()  # refused from the headers: the body is never read
            raise self.refuse(key, f"{total} bytes, more than the {max_bytes} such a file may have")
        try:
            data = response["Body"].read()
        except Exception as exc:  # noqa: BLE001 - a connection lost mid-body
            raise _chained(translate(exc, "reading", self.path(key), self.bucket))  # noqa: B904 - translate sets the cause
        with self._count_lock:  # also called from the scan's prefetch threads
            self.bytes_received += len(data)
        self._cache.put(key, str(response.get("ETag", "")), data)
        return data

    def list(self, prefix: str) -> List[str]:
        listing = self._listing()
        if listing is not None:
            self.split_key(prefix)
            return self.good_names(prefix, [n for n in listing.children(prefix) if n not in ("", ".", "..")])
        full = self._k(prefix)
        start = f"{full}/" if full else ""
        names: List[str] = []
        for page in self._pages(prefix, start, Delimiter="/"):
            names += [c["Key"][len(start) :] for c in page.get("Contents", ())]
            names += [p["Prefix"][len(start) :].rstrip("/") for p in page.get("CommonPrefixes", ())]
        names = [n for n in names if n not in ("", ".", "..")]  # planted keys like "a//b" name nothing
        return self.good_names(prefix, names)

    def _pages(self, key: str, start: str, **kwargs: Any) -> Iterator[Dict[str, Any]]:
        token: Dict[str, str] = {}
        while True:
            page = self._call("list_objects_v2", "listing", key, Prefix=start, **token, **kwargs)
            yield page
            if not page.get("IsTruncated") or not page.get("NextContinuationToken"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def list_all(self, prefix: str) -> List[Tuple[str, ObjectInfo]]:
        """(key, info) of every object whose key starts with the string ``prefix`` (recursive)."""
        base = self._k("")
        start = (f"{base}/" if base else "") + prefix
        found = []
        for page in self._pages(prefix, start):
            for c in page.get("Contents", ()):
                key = self._rel(c["Key"])
                if key and not key.endswith("/"):
                    found.append((key, _info(c.get("Size"), c.get("LastModified"), c.get("ETag"))))
        return found

    def list_objects(self, prefix: str, fresh: bool = True) -> List[Tuple[str, int]]:
        listing = None if fresh else self._listing()
        found = listing.with_prefix(prefix) if listing is not None else self.list_all(prefix)
        return [(key, info.size) for key, info in found]

    def stat(self, key: str) -> Optional[ObjectInfo]:
        listing = self._listing()
        listed = None if listing is None else listing.info(key)
        if listed is not None:
            return listed
        try:
            head = self._call("head_object", "checking", key, Key=self._k(key))
        except NotFound:
            return None
        return _info(head.get("ContentLength"), head.get("LastModified"), head.get("ETag"))

    def delete(self, key: str) -> None:
        full = self._k(key)
        self._cache.drop(key)
        listing = self._listing()
        if listing is not None:
            listing.remove(key)
        try:
            self._call("delete_object", "deleting", key, Key=full)
        except WorkspaceError as exc:
            log.warning("could not remove %s: %s", self.path(key), exc)

    def append(self, key: str, data: bytes) -> None:
        self._k(key)
        self._log.append(key, data)

    def read_appended(self, key: str, max_bytes: int) -> bytes:
        self._k(key)
        return self._log.read(key, max_bytes)

    def copy(self, src: str, dst: str) -> None:
        self._call(
            "copy_object", "copying", src, Key=self._k(dst), CopySource={"Bucket": self.bucket, "Key": self._k(src)}
        )

    @contextlib.contextmanager
    def scan(self, population: Optional[int] = None) -> Iterator[None]:
        """One listing of the whole workspace answers this thread's list/stat calls until the end;
        the newest records and heartbeats of member directories (0..population-1 when given) are
        prefetched."""
        if self._listing() is not None:  # nested: the outer scan's listing serves
            yield
            return
        try:
            self._scan.listing = Listing(self.list_all(""))
        except WorkspaceError as exc:
            log.warning("cannot list %s (%s); reading it object by object this time", self.root, exc)
        else:
            self._prefetch(self._scan.listing, population)
        try:
            yield
        finally:
            self._scan.listing = None

    def _prefetch(self, listing: Listing, population: Optional[int] = None) -> None:
        """GET, concurrently, what a PBT step reads from every member directory (its newest record
        and its heartbeat) where the listed version is not cached: the step's reads, which follow
        one by one, are then answered from the cache. The same GETs the step would send (one more
        only for a peer whose newest record lies beyond the reader's iteration). A failed GET is
        left to the step's own read, which reports it."""
        newest: Dict[str, Tuple[int, str, ObjectInfo]] = {}
        wanted: List[Tuple[str, ObjectInfo]] = []
        for key, info in listing.with_prefix(""):
            directory, _, name = key.partition("/")
            idx = member_idx_of(directory)
            if idx is None or "/" in name or info.size > self._cache.max_object_bytes:
                continue
            if population is not None and idx >= population:  # a planted 999/ costs nothing
                continue
            iteration = iteration_of(name, RECORD_SUFFIX)
            if name == HEARTBEAT_FILE:
                wanted.append((key, info))
            elif iteration is not None and iteration > newest.get(directory, (-1, "", info))[0]:
                newest[directory] = (iteration, key, info)
        wanted += [(key, info) for _, key, info in newest.values()]
        wanted = [(key, info) for key, info in wanted if self._cache.get(key, _etag(info)) is None]
        if len(wanted) < 2:
            return
        with ThreadPoolExecutor(min(PREFETCH_THREADS, len(wanted))) as pool:
            list(pool.map(self._prefetch_one, [key for key, _ in wanted]))

    def _prefetch_one(self, key: str) -> None:
        """:meth:`get` of one small object into the cache (a prefetch thread); a failure is left to
        the step's own read of it, which reports it."""
        try:
            self.get(key, self._cache.max_object_bytes)
        except Exception:  # noqa: BLE001 - see above
            pass


def _chained(error: WorkspaceError) -> WorkspaceError:
    """``error`` with its cause kept (the OSError saying why) and boto3's traceback context dropped."""
    error.__suppress_context__ = True
    return error


def _total_size(response: Dict[str, Any]) -> int:
    """The object's whole size from a (ranged) GET's headers."""
    content_range = str(response.get("ContentRange") or "")
    if "/" in content_range:
        total = content_range.rpartition("/")[2]
        if total.isdigit():
            return int(total)
    return int(response.get("ContentLength") or 0)
