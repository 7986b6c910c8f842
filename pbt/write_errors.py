"""What a member does when a workspace write fails (``pbt.on_write_error``): with "retry" an I/O
failure (disk full, read-only filesystem) is logged and tried again at the next interval, so a
week-long run outlives a full disk; bad data, or "fail", raises."""

import logging
from typing import List, Optional

from pbt.config import PbtConfig
from pbt.errors import WorkspaceError
from pbt.storage import LineageEntry, Workspace
from pbt.storage.lineage import weights_origin

log = logging.getLogger(__name__)


def is_io_error(exc: BaseException) -> bool:
    """True when ``exc`` (a WorkspaceError) was caused by the OS refusing a read or write (disk
    full, read-only filesystem, permissions, I/O error), not by bad data."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 10:
        if isinstance(current, OSError):
            return True
        current = current.__cause__
        seen += 1
    return False


def retried(on_write_error: str, exc: BaseException) -> bool:
    """Whether a failed workspace write is logged and tried again (``pbt.on_write_error=retry`` and an
    I/O error) rather than raised."""
    return on_write_error != "fail" and is_io_error(exc)


def outlive(cfg: PbtConfig, exc: WorkspaceError, what: str, iteration: int) -> None:
    """Log a workspace I/O error and return under ``pbt.on_write_error=retry`` (training goes on, the
    next interval tries again); raise it otherwise."""
    if not retried(cfg.on_write_error, exc):
        raise exc
    log.error(
        "PBT policy %d: %s: %s. Training goes on; the next PBT interval (frame %d) tries again "
        "(pbt.on_write_error=retry; set it to fail to stop instead).",
        cfg.policy_idx,
        what,
        str(exc).rstrip("."),
        (iteration + 1) * cfg.interval_steps,
    )


class LineageLog:
    """A member's lineage writes under ``pbt.on_write_error``: with "retry" an I/O failure keeps the
    entries pending (logged) for the next try, so a full disk loses no PBT event while the process
    lives. It also follows the family of the member's weights (:attr:`Record.family`)."""

    def __init__(self, workspace: Workspace, on_write_error: str) -> None:
        self.workspace = workspace
        self.on_write_error = on_write_error
        self.pending: List[LineageEntry] = []
        self.family: Optional[int] = workspace.policy_idx  # a fresh member carries its own weights

    def restore(self) -> int:
        """After a (re)start: the family from the lineage written so far; returns the frame of the
        last replace (0: none)."""
        replaced_at, self.family = weights_origin(
            self.workspace.read_lineage() + self.pending, self.workspace.policy_idx
        )
        return replaced_at

    def append(self, entry: LineageEntry) -> None:
        if entry.donor is not None:  # the event took a checkpoint: the weights are of its family now
            self.family = entry.family
        self.pending.append(entry)
        self.flush()

    def flush(self) -> bool:
        """Append the pending entries in order; True when nothing is pending."""
        while self.pending:
            try:
                self.workspace.append_lineage(self.pending[0])
            except WorkspaceError as exc:
                if not retried(self.on_write_error, exc):
                    raise
                log.error(
                    "PBT policy %d: could not append to its lineage (%s); %d entr%s kept in memory and "
                    "written at the next PBT interval",
                    self.workspace.policy_idx,
                    str(exc).rstrip("."),
                    len(self.pending),
                    "y" if len(self.pending) == 1 else "ies",
                )
                return False
            self.pending.pop(0)
        return True
