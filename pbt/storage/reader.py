"""Reading a workspace: records, checkpoints, lineages, heartbeats and best copies.

:class:`WorkspaceReader` never writes or creates anything, so the tools (``pbt.status``,
``pbt.analyze``) can open a workspace that is being trained without disturbing it, and a wrong path
is an error instead of a new empty workspace. :class:`pbt.storage.workspace.Workspace` (a member's
writer) extends it.

Readers scan records only (no checkpoint is read during a scan; its existence and non-zero size are
checked). The sha256 check happens when a checkpoint is loaded or copied.

Every file is read through the Store with a size cap per kind (:class:`ReadLimits`): a planted
FIFO, symlink, device or huge file is refused (:class:`~pbt.storage.backend.Refused`, logged once
by the store) and skipped like a corrupt file; nothing here blocks or follows a link.
"""

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from pbt.errors import CorruptRecordError, WorkspaceError
from pbt.storage.backend import NotFound, Refused, Store, exists, holds_prefix
from pbt.storage.best import read_best
from pbt.storage.checkpoints import deserialize_checkpoint, sha256_hex
from pbt.storage.format import (
    HEARTBEAT_FILE,
    LINEAGE_FILE,
    RECORD_SUFFIX,
    best_dir_name,
    iteration_of,
    member_dir_name,
    member_idx_of,
)
from pbt.storage.lineage import LineageEntry, parse_lineage
from pbt.storage.liveness import Beat, read_heartbeat
from pbt.storage.local import LocalStore
from pbt.storage.record import MAX_RECORD_BYTES, Record, check_checkpoint_name, parse_record
from pbt.storage.s3_client import is_s3_url

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ReadLimits:
    """Size caps of what a reader reads (a file over its cap is refused unread)."""

    checkpoint_factor: float = 4.0
    """A peer's checkpoint may be this many times the size of the member's own last one ..."""
    checkpoint_floor: int = 64 * 1024 * 1024
    """... but the cap is never below this many bytes."""
    checkpoint_unknown: int = 1024 * 1024 * 1024
    """Cap while the member's own checkpoint size is not known yet (resume, tools)."""
    lineage_bytes: int = 64 * 1024 * 1024
    """A ``lineage.jsonl`` is read whole up to this size (~200 bytes per PBT event)."""


def open_store(root: Union[PathLike, Store]) -> Store:
    """A Store for ``root``: a Store as it is, ``s3://bucket/prefix`` as an
    :class:`~pbt.storage.s3.S3Store`, a path as a :class:`LocalStore`."""
    if is_s3_url(root):
        from pbt.storage.s3 import S3Store  # boto3 only where an s3:// workspace is used

        return S3Store(str(root))
    if isinstance(root, (str, os.PathLike)):
        return LocalStore(root)
    return root


def workspace_location(root: PathLike) -> Union[Path, str]:
    """A ``pbt.workspace`` value as the tools hold it: the URL of an object store as it is (a Path
    would fold its ``//``), a directory as a Path."""
    return str(root) if is_s3_url(str(root)) else Path(root)


def resolved(root: Union[Path, str]) -> Union[Path, str]:
    """An absolute form of a workspace location, for reports (a URL is absolute already)."""
    return root.resolve() if isinstance(root, Path) else root


def workspace_root(store: Store) -> Union[Path, str]:
    """The workspace's location as users write it: a Path on a filesystem, the URL on an object store."""
    return Path(store.root) if isinstance(store, LocalStore) else store.root


class _CacheEntry:
    """The last bytes read from one record file and what they parsed to (None: corrupt)."""

    __slots__ = ("data", "record", "error")

    def __init__(self, data: bytes, record: Optional[Record], error: Optional[str]) -> None:
        self.data = data
        self.record = record
        self.error = error


class _AlreadyLogged(CorruptRecordError):
    """Internal: a corrupt record whose warning was already logged (once per file content)."""


class WorkspaceReader:
    """Read-only view of a workspace.

    Args:
        root: the workspace (a directory path or a Store).
        num_policies: population size; None: the member directories found.
    """

    def __init__(
        self, root: Union[PathLike, Store], num_policies: Optional[int] = None, limits: Optional[ReadLimits] = None
    ) -> None:
        self.store = open_store(root)
        self.limits = limits or ReadLimits()
        self.own_checkpoint_size: Optional[int] = None
        """Size of the last checkpoint this process published (sets the checkpoint cap)."""
        self.root = workspace_root(self.store)
        """A Path for a directory workspace, the ``s3://`` URL for an object-store one."""
        self._num_policies = num_policies
        self._cache: Dict[int, Dict[str, _CacheEntry]] = {}
        self._refused: Set[Tuple[str, str]] = set()

    @property
    def num_policies(self) -> int:
        if self._num_policies is not None:
            return self._num_policies
        indices = self.member_indices()
        return max(indices) + 1 if indices else 0

    def population_indices(self) -> Sequence[int]:
        """The members to scan: 0..N-1, or (no N given: an elastic population, a tool) the member
        directories present (never range(largest index): a planted ``999999/`` costs one entry)."""
        return range(self._num_policies) if self._num_policies is not None else self.member_indices()

    # ---- names -------------------------------------------------------------------------------

    def located(self, key: str) -> Union[Path, str]:
        """Where ``key`` is, as users write it: a Path in a directory workspace, a URL in an object store."""
        where = self.store.path(key)
        return Path(where) if isinstance(self.root, Path) else where

    def member_dir(self, member_idx: int) -> Union[Path, str]:
        return self.located(member_dir_name(member_idx))

    def member_key(self, member_idx: int, name: str = "") -> str:
        """Store key of member ``member_idx``'s directory, or of file ``name`` in it."""
        base = member_dir_name(member_idx)
        return f"{base}/{name}" if name else base

    def checkpoint_key(self, record: Record, member_idx: Optional[int] = None) -> str:
        """Where ``record``'s checkpoint lies (in member ``member_idx``'s dir, default its own)."""
        check_checkpoint_name(record.checkpoint, f"record of member {record.policy_idx}")
        return self.member_key(record.policy_idx if member_idx is None else member_idx, record.checkpoint)

    def checkpoint_path(self, record: Record, member_idx: Optional[int] = None) -> Union[Path, str]:
        return self.located(self.checkpoint_key(record, member_idx))

    def member_indices(self) -> List[int]:
        """Indices of the member directories (``000``, ``001``, ...) present."""
        indices = []
        for name in self.store.list(""):
            idx = member_idx_of(name)
            if idx is not None and holds_prefix(self.store, name):
                indices.append(idx)
        return sorted(indices)

    # ---- records -----------------------------------------------------------------------------

    def _record_names(self, member_idx: int) -> List[Tuple[int, str]]:
        """(iteration, name) of member's record files, newest first; [] when it has no directory."""
        names = self.store.list(self.member_key(member_idx))
        found = sorted(
            ((it, n) for it, n in ((iteration_of(n, RECORD_SUFFIX), n) for n in names) if it is not None), reverse=True
        )
        cache = self._cache.get(member_idx)
        if cache:
            present = set(names)
            for stale in [n for n in cache if n not in present]:
                del cache[stale]
        return found

    def _cached_record(self, member_idx: int, name: str, iteration: int) -> Record:
        """Read one record; parse it unless its bytes equal the last ones seen there.

        Raises CorruptRecordError (warned once per file content), NotFound or WorkspaceError.
        """
        key = self.member_key(member_idx, name)
        data = self.store.get(key, MAX_RECORD_BYTES)
        cache = self._cache.setdefault(member_idx, {})
        entry = cache.get(name)
        if entry is not None and entry.data == data:
            if entry.record is None:  # warned when first seen; do not repeat every scan
                raise _AlreadyLogged(entry.error or f"{key}: corrupt record")
            return entry.record
        source = self.store.path(key)
        try:
            record = parse_record(data, source, member_idx, iteration)
        except CorruptRecordError as exc:
            cache[name] = _CacheEntry(data, None, str(exc))
            logger.warning("skipping corrupt record %s: %s", source, exc)
            raise _AlreadyLogged(str(exc)) from exc
        cache[name] = _CacheEntry(data, record, None)
        return record

    def intact_records(
        self, member_idx: int, names: Iterable[str], max_iteration: Optional[int] = None
    ) -> Dict[int, Record]:
        """iteration -> record of the record files among ``names`` (a member's listing) that parse,
        up to ``max_iteration``; the others are logged once per content and left out."""
        intact: Dict[int, Record] = {}
        for name in names:
            iteration = iteration_of(name, RECORD_SUFFIX)
            if iteration is None or (max_iteration is not None and iteration > max_iteration):
                continue
            try:
                intact[iteration] = self._cached_record(member_idx, name, iteration)
            except (NotFound, Refused, CorruptRecordError):  # gone, refused or corrupt: logged where found
                continue
        return intact

    def check_checkpoint_present(self, record: Record, directory_key: str, source: str) -> None:
        """Raise CorruptRecordError unless the record's checkpoint exists next to it and is not empty."""
        key = f"{directory_key}/{record.checkpoint}"
        info = self.store.stat(key)
        if info is None:
            raise CorruptRecordError(f"{source}: its checkpoint {self.store.path(key)} is missing")
        if info.size == 0:
            raise CorruptRecordError(f"{source}: its checkpoint {self.store.path(key)} is empty")
        if not info.regular or info.size > self.checkpoint_cap():
            cap = self.checkpoint_cap()
            why = "not a regular file" if not info.regular else f"{info.size} bytes, over the {cap} cap"
            message = f"{source}: its checkpoint {self.store.path(key)} is refused ({why}); the record is skipped"
            if (key, why) not in self._refused:
                self._refused.add((key, why))
                logger.warning("%s", message)
            raise Refused(message)

    def latest_record(
        self, member_idx: int, max_iteration: Optional[int] = None, verify: bool = False
    ) -> Optional[Record]:
        """Member's newest intact record with iteration <= max_iteration, or None.

        Corrupt or foreign records are skipped with a warning naming the file (once per file
        content) and the next older one is tried. Only records whose checkpoint exists and is
        non-empty are returned; ``verify`` also hashes each candidate's checkpoint (for resuming,
        not for the per-iteration scan).
        """
        directory = self.member_key(member_idx)
        for iteration, name in self._record_names(member_idx):
            if max_iteration is not None and iteration > max_iteration:
                continue
            source = self.store.path(f"{directory}/{name}")
            try:
                record = self._cached_record(member_idx, name, iteration)
                self.check_checkpoint_present(record, directory, source)
                if verify:
                    self.read_checkpoint_bytes(record, member_idx)
            except NotFound:
                logger.info("record %s vanished while reading (deleted by its member); trying an older one", source)
                continue
            except (_AlreadyLogged, Refused):  # logged once where it was found
                continue
            except CorruptRecordError as exc:
                if not exists(self.store, f"{directory}/{name}"):
                    logger.info("record %s was deleted while reading; trying an older one", source)
                else:
                    logger.warning("skipping record %s: %s", source, exc)
                continue
            except WorkspaceError as exc:
                logger.warning("skipping record %s: cannot read it: %s", source, exc)
                continue
            return record
        return None

    def latest_records(self, max_iteration: Optional[int] = None, verify: bool = False) -> Dict[int, Record]:
        """For every member 0..N-1, its newest intact record with iteration <= max_iteration.

        Members with no usable record are absent. A member whose directory cannot be listed is
        logged and left out, so one bad peer does not stop the population.
        """
        result: Dict[int, Record] = {}
        with self.store.scan(self._num_policies):  # one listing on an object store, not one per member
            for member_idx in self.population_indices():
                try:
                    record = self.latest_record(member_idx, max_iteration, verify)
                except Refused:  # e.g. its directory is a symlink: logged once by the store
                    continue
                except WorkspaceError as exc:
                    logger.warning("leaving member %d out of this PBT step: %s", member_idx, exc)
                    continue
                if record is not None:
                    result[member_idx] = record
        return result

    # ---- checkpoints -------------------------------------------------------------------------

    def checkpoint_cap(self) -> int:
        """Largest checkpoint this reader reads (see :class:`ReadLimits`)."""
        limits = self.limits
        if self.own_checkpoint_size is None:
            return limits.checkpoint_unknown
        return max(limits.checkpoint_floor, int(limits.checkpoint_factor * self.own_checkpoint_size))

    def read_checkpoint_bytes(self, record: Record, member_idx: Optional[int] = None) -> bytes:
        """The checkpoint's bytes, verified against the record's sha256 (``member_idx``: the
        directory holding it, default the record's policy_idx). Raises CorruptRecordError when the
        file is gone (peers delete old files at any time) or fails its checksum."""
        key = self.checkpoint_key(record, member_idx)
        path = self.store.path(key)
        try:
            data = self.store.get(key, self.checkpoint_cap())
        except Refused:
            raise
        except NotFound as exc:
            raise CorruptRecordError(
                f"{path}: checkpoint no longer exists (its member deleted it); pick a newer record"
            ) from exc
        except WorkspaceError as exc:
            raise CorruptRecordError(f"{path}: cannot read checkpoint: {exc}") from exc
        digest = sha256_hex(data)
        if digest != record.checksum:
            raise CorruptRecordError(
                f"{path}: checksum mismatch (record {record.checksum[:12]}..., file {digest[:12]}..., "
                f"{len(data)} bytes); the file was replaced or damaged. Use another record."
            )
        return data

    def load_checkpoint(self, record: Record, member_idx: Optional[int] = None) -> Dict[str, Any]:
        """Verify and load a checkpoint onto the CPU with ``torch.load(weights_only=True)``."""
        data = self.read_checkpoint_bytes(record, member_idx)
        return deserialize_checkpoint(data, self.store.path(self.checkpoint_key(record, member_idx)))

    # ---- lineage, heartbeat, best ------------------------------------------------------------

    def read_lineage(self, member_idx: int) -> List[LineageEntry]:
        """All entries of a member's lineage; [] when it has none. Torn lines are skipped (logged)."""
        key = self.member_key(member_idx, LINEAGE_FILE)
        try:
            data = self.store.read_appended(key, self.limits.lineage_bytes)
        except NotFound:
            return []
        except Refused:  # logged once by the store
            return []
        return parse_lineage(data, self.store.path(key))

    def read_heartbeat(self, member_idx: int) -> Optional[Beat]:
        """The member's heartbeat; None when missing. ValueError when torn or foreign."""
        return read_heartbeat(self.store, self.member_key(member_idx, HEARTBEAT_FILE))

    def best_record(self, member_idx: int) -> Optional[Record]:
        """The record of member ``member_idx``'s copy of the population best, or None."""
        return read_best(self, best_dir_name(member_idx))


def read_record(path: PathLike, member_idx: Optional[int] = None) -> Record:
    """Read and validate one record file of a local workspace (``.../007/000012.yaml``).

    ``member_idx`` defaults to the index in the directory name. Raises CorruptRecordError naming the
    file when it is missing, torn, truncated or foreign, when its policy_idx or iteration do not match
    its directory or file name, or when its checkpoint is missing or empty.
    """
    path = Path(path)
    reader = WorkspaceReader(path.parent.parent)
    directory = path.parent.name
    if member_idx is None:
        member_idx = member_idx_of(directory)
    try:
        data = reader.store.get(f"{directory}/{path.name}", MAX_RECORD_BYTES)
    except NotFound as exc:
        raise CorruptRecordError(f"{path}: record file does not exist (its member may have deleted it)") from exc
    except WorkspaceError as exc:
        raise CorruptRecordError(f"{path}: cannot read record: {exc}") from exc
    record = parse_record(data, str(path), member_idx, iteration_of(path.name, RECORD_SUFFIX))
    reader.check_checkpoint_present(record, directory, str(path))
    return record
