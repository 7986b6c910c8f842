"""A read-only view of a workspace at one moment: every member's newest record, lineage and heartbeat.

What ``pbt.status`` and ``pbt.analyze`` read the population with. Reading goes through
:class:`pbt.storage.WorkspaceReader`, which never writes or creates anything, and is safe on a
workspace that is being written to: torn, half-written or vanished files are skipped (the reader
falls back to a member's previous record) and listed in :attr:`Snapshot.skipped` instead of being
logged. No torch import.
"""

import logging
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

from pbt.config import LivenessConfig
from pbt.curriculum.stages import record_stage
from pbt.errors import PbtError, WorkspaceError
from pbt.storage import LineageEntry, Record, WorkspaceReader
from pbt.storage.backend import DirectoryStore, exists
from pbt.storage.bounds import is_future
from pbt.storage.liveness import ALIVE, EXITED, FINISHED, STOPPED, UNKNOWN, WAITING, Beat, judge
from pbt.storage.reader import workspace_location

PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_STALE_AFTER = LivenessConfig().heartbeat_timeout
"""Seconds without a sign of life after which a member is shown as stale: the members' own
``pbt.heartbeat_timeout`` default, so the tools and the population agree on who is dead."""
FINAL_STATES = (FINISHED, STOPPED, EXITED)
"""Heartbeat states of a member that said goodbye: shown as they are, never as stale."""
WAITING_FOR_PEERS = "waiting for peers"
"""Shown for a live member pausing until slower peers catch up (``pbt.max_lead``)."""
STORAGE_LOGGER = "pbt.storage"
"""Parent of every storage logger (reader, lineage, best, liveness) whose warnings a snapshot collects."""


@dataclass
class MemberView:
    """What is known about one member at the moment of a snapshot."""

    policy_idx: int
    record: Optional[Record]
    """Its newest intact record (None: none yet, or all of them unreadable)."""
    lineage: List[LineageEntry]
    """Its lineage entries, oldest first (torn lines skipped)."""
    heartbeat: Optional[Beat] = None
    """Its heartbeat, when present and readable."""
    rank: Optional[int] = None
    """1 = the best objective among members with a known objective (in its record's curriculum
    stage, with a curriculum: objectives of different stages do not compare)."""

    @property
    def stage(self) -> Optional[int]:
        """Its curriculum stage now: its last lineage entry's (a transition is logged before its
        next record), else its record's; None without a curriculum."""
        last = self.last_event
        if last is not None and last.stage is not None:
            if self.record is None or self.record.stage is None or last.iteration >= self.record.iteration:
                return last.stage
        return None if self.record is None else self.record.stage

    @property
    def objective(self) -> Optional[float]:
        return self.record.objective if self.record is not None and self.record.has_objective else None

    @property
    def frame(self) -> Optional[int]:
        """Frames trained: the newest of its record, its lineage and its heartbeat."""
        candidates = [self.record.frame] if self.record is not None else []
        candidates += [e.frame for e in self.lineage[-1:]]
        if self.heartbeat is not None and self.heartbeat.frame is not None:
            candidates.append(self.heartbeat.frame)
        return max(candidates) if candidates else None

    @property
    def iteration(self) -> Optional[int]:
        return self.record.iteration if self.record is not None else None

    @property
    def params(self) -> Dict[str, object]:
        """Hyperparameters in force now: after its last decision, else those of its record."""
        last = self.last_event
        if last is not None and last.params_after:
            if self.record is None or last.iteration >= self.record.iteration:
                return dict(last.params_after)
        return dict(self.record.params) if self.record is not None else {}

    @property
    def restarts(self) -> int:
        """PBT restarts (every replace or mutate after the fresh member's initial mutation)."""
        return sum(1 for e in self.lineage if e.is_exploit)

    @property
    def replacements(self) -> int:
        return sum(1 for e in self.lineage if e.action == "replace")

    @property
    def last_event(self) -> Optional[LineageEntry]:
        return self.lineage[-1] if self.lineage else None

    @property
    def last_replace(self) -> Optional[LineageEntry]:
        for entry in reversed(self.lineage):
            if entry.action == "replace":
                return entry
        return None

    def last_seen(self) -> Optional[float]:
        """Unix time of its latest sign of life (heartbeat, else record or lineage time)."""
        if self.heartbeat is not None:
            return self.heartbeat.last_seen
        times = [self.record.time] if self.record is not None and self.record.time > 0 else []
        times += [e.time for e in self.lineage[-1:] if e.time > 0]
        return max(times) if times else None

    def record_period(self) -> Optional[float]:
        """Typical seconds between two of its PBT iterations (median over its recent lineage)."""
        times = [e.time for e in self.lineage[-12:] if e.time > 0]
        gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
        return statistics.median(gaps) if gaps else None

    def liveness(self, now: float, stale_after: float = DEFAULT_STALE_AFTER) -> str:
        """ "alive", "waiting for peers" (alive, pausing: ``pbt.max_lead``), "stale", "unknown", or the
        final state its heartbeat announced ("finished", "stopped", "exited"). A heartbeat is judged by the members' own rule
        (:func:`pbt.storage.liveness.judge`); without one a member is stale only once it is late by
        more than ``stale_after`` and three of its usual intervals between records."""
        beat = self.heartbeat
        if beat is not None:
            if beat.state in FINAL_STATES:
                return beat.state  # it said goodbye: finished, stopped (SIGTERM) or exited (an error)
            state = judge(beat, stale_after, now).state
            return WAITING_FOR_PEERS if state == ALIVE and beat.state == WAITING else state
        seen = self.last_seen()
        if seen is None:
            return UNKNOWN
        limit = stale_after
        period = self.record_period()
        if period is not None:
            limit = max(limit, 3 * period)
        return "alive" if now - seen <= limit and not is_future(seen, now) else "stale"


@dataclass
class Snapshot:
    """The whole population as read at ``time``."""

    root: Union[Path, str]
    members: List[MemberView]
    time: float
    skipped: List[str] = field(default_factory=list)
    """Problems met while reading (torn or foreign files), one message each."""

    @property
    def best(self) -> Optional[MemberView]:
        ranked = [(m.rank, -record_stage(m.record), m) for m in self.members if m.rank is not None and m.record]
        return min(ranked, key=lambda entry: entry[:2])[2] if ranked else None  # the furthest stage's first

    def member(self, policy_idx: int) -> Optional[MemberView]:
        for view in self.members:
            if view.policy_idx == policy_idx:
                return view
        return None

    @property
    def lineages(self) -> Dict[int, List[LineageEntry]]:
        return {m.policy_idx: m.lineage for m in self.members}


def open_reader(root: PathLike) -> WorkspaceReader:
    """A read-only reader on an existing workspace: a wrong path is an error, never a new workspace."""
    path = workspace_location(root)
    reader = WorkspaceReader(path)
    if not exists(reader.store, ""):
        raise WorkspaceError(f"workspace {path} does not exist. Pass the pbt.workspace directory of a run.")
    if isinstance(reader.store, DirectoryStore) and not reader.store.is_dir(""):
        raise WorkspaceError(f"{path} is a file, not a workspace directory. Pass the pbt.workspace directory.")
    if not reader.member_indices():
        raise WorkspaceError(
            f"{path} holds no member directories (000, 001, ...): it is not a PBT workspace, or no "
            "member has started yet. Pass the pbt.workspace directory of a run."
        )
    return reader


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a logging handler must never raise
            self.messages.append(str(record.msg))


@contextmanager
def collect_warnings(logger_name: str = STORAGE_LOGGER) -> Iterator[List[str]]:
    """Capture the storage readers' warnings (torn files...) instead of printing them."""
    handler = _Collect()
    target = logging.getLogger(logger_name)
    propagate = target.propagate
    target.addHandler(handler)
    target.propagate = False
    try:
        yield handler.messages
    finally:
        target.removeHandler(handler)
        target.propagate = propagate


def _read_member(reader: WorkspaceReader, idx: int, skipped: List[str]) -> MemberView:
    try:
        record = reader.latest_record(idx)
    except PbtError as exc:
        skipped.append(f"member {idx}: {exc}")
        record = None
    try:
        lineage = reader.read_lineage(idx)
    except PbtError as exc:
        skipped.append(f"member {idx} lineage: {exc}")
        lineage = []
    try:
        heartbeat = reader.read_heartbeat(idx)
    except ValueError as exc:
        skipped.append(f"{exc} (being written?)")
        heartbeat = None
    return MemberView(idx, record, lineage, heartbeat)


def read_snapshot(root: PathLike) -> Snapshot:
    """Read every member's newest intact record, lineage and heartbeat.

    Never fails on a torn, missing or foreign member file (those are skipped and listed in
    ``Snapshot.skipped``); raises WorkspaceError only when ``root`` is not a workspace.
    """
    path = workspace_location(root)
    with collect_warnings() as skipped:
        reader = open_reader(path)
        with reader.store.scan():  # one listing on an object store
            members = [_read_member(reader, idx, skipped) for idx in reader.member_indices()]
    scored = [(m.objective, m) for m in members if m.objective is not None and m.record is not None]
    known = [m for _, m in sorted(scored, key=lambda pair: (-pair[0], pair[1].policy_idx))]
    for stage in sorted({record_stage(m.record) for m in known if m.record is not None}):  # ranked within a stage
        for rank, view in enumerate((m for m in known if m.record is not None and record_stage(m.record) == stage), 1):
            view.rank = rank
    return Snapshot(path, members, time.time(), list(skipped))
