"""``best<idx>/``: each member's copy of the best checkpoint it has seen (the all-time best is kept, as
upstream), so the winner survives retention and its member's death."""

import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from pbt.errors import CorruptRecordError, WorkspaceError
from pbt.storage.backend import Refused, ensure_dir
from pbt.storage.format import CHECKPOINT_SUFFIX, RECORD_SUFFIX, best_stem
from pbt.storage.record import MAX_RECORD_BYTES, Record, parse_record, record_to_yaml

if TYPE_CHECKING:
    from pbt.storage.reader import WorkspaceReader

logger = logging.getLogger(__name__)


def objective_key(record: Record) -> float:
    return record.objective if record.objective is not None and record.has_objective else -math.inf


def read_best(reader: "WorkspaceReader", directory: str) -> Optional[Record]:
    """The best intact record in ``directory`` (a best copy), or None."""
    store = reader.store
    best: Optional[Record] = None
    try:
        names = sorted(store.list(directory))
    except Refused:  # a symlink planted in its place: never listed (logged once by the store)
        return None
    for name in names:
        if name.startswith(".") or not name.endswith(RECORD_SUFFIX):
            continue
        key = f"{directory}/{name}"
        source = store.path(key)
        try:
            record = parse_record(store.get(key, MAX_RECORD_BYTES), source)
            reader.check_checkpoint_present(record, directory, source)
        except Refused:
            continue
        except CorruptRecordError as exc:
            logger.warning("ignoring best copy %s: %s", source, exc)
            continue
        except WorkspaceError as exc:  # vanished or unreadable: a copy being replaced right now
            logger.info("ignoring best copy %s: %s", source, exc)
            continue
        if best is None or objective_key(record) > objective_key(best):
            best = record
    return best


def is_better(candidate: Record, current: Optional[Record]) -> bool:
    """Should ``candidate`` (the population best now) replace the stored copy ``current``?
    Only a finite, strictly higher objective does; the same record never does."""
    if not candidate.has_objective:
        return False
    if current is None:
        return True
    if (current.policy_idx, current.iteration, current.checksum) == (
        candidate.policy_idx,
        candidate.iteration,
        candidate.checksum,
    ):
        return False
    return not (current.has_objective and current.objective >= candidate.objective)  # type: ignore[operator]  # both has_objective: finite floats


def write_best(reader: "WorkspaceReader", directory: str, record: Record, checkpoint: bytes) -> None:
    """Replace the copy in ``directory`` with ``record`` and its (verified) checkpoint bytes:
    the new pair is written first, then every other file is removed, records first. A symlink a
    peer put in the directory's place is moved aside first; every write and delete is made inside
    the verified directory (never through a link), so nothing outside the workspace is touched."""
    store = reader.store
    ensure_dir(store, directory)
    stem = best_stem(float(record.objective), record.iteration, record.policy_idx)  # type: ignore[arg-type]  # only a record that has_objective is copied
    copy = replace(record, checkpoint=stem + CHECKPOINT_SUFFIX)
    store.put_atomic(f"{directory}/{copy.checkpoint}", checkpoint)
    store.put_atomic(f"{directory}/{stem}{RECORD_SUFFIX}", record_to_yaml(copy))
    keep = {stem + RECORD_SUFFIX, copy.checkpoint}
    old = [n for n in store.list(directory) if n not in keep and not n.startswith(".")]
    for name in sorted(old, key=lambda n: not n.endswith(RECORD_SUFFIX)):  # records first
        store.delete(f"{directory}/{name}")
