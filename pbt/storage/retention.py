"""Which of a member's own records and checkpoints to keep: a pure rule, and its application.

Disk bound. After every cleanup a member directory holds at most ``max_records`` (default 25)
record + checkpoint pairs plus ``lineage.jsonl``, ``lock`` and ``heartbeat``. Between two cleanups
one more pair is published, a write in flight holds one temp file, and a writer killed mid-write
leaves one temp file that cleanup removes (at once if it carries this process's PID, which survives
a restart by exec; otherwise once untouched for ``stale_tmp_seconds``). ``best<idx>/`` holds one
pair (two for an instant while it is replaced). So at any time, with C the largest checkpoint::

    total bytes <= N * (max_records + 2) * C           member directories
                 + N * 2 * C                           best copies
                 + N * lineage (~200 bytes per PBT event) + records (~1 kB each)

Records younger than ``keep_records`` (default 8) are always kept; older ones are kept while a
slower peer may still need them (iteration >= the oldest peer's latest iteration - ``peer_margin``,
as upstream's "oldest peer iteration - 20"), but never more than ``max_records``; a peer lagging
further behind then finds no record of this member at or below its iteration and counts it as
missing.
"""

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Set

DEFAULT_KEEP_RECORDS = 8
"""Newest own records always kept."""
DEFAULT_MAX_RECORDS = 25
"""Hard cap on the records a member keeps, however far behind its slowest peer is."""
DEFAULT_PEER_MARGIN = 20
"""Records down to (oldest peer's latest iteration - margin) are kept for slow peers."""
DEFAULT_STALE_TMP_SECONDS = 300.0
"""A temp file of another process untouched this long is a leftover of a killed writer."""


@dataclass(frozen=True)
class RetentionPolicy:
    keep_records: int = DEFAULT_KEEP_RECORDS
    max_records: int = DEFAULT_MAX_RECORDS
    peer_margin: int = DEFAULT_PEER_MARGIN
    stale_tmp_seconds: float = DEFAULT_STALE_TMP_SECONDS


def peer_threshold(peer_iterations: Sequence[int], peer_margin: int) -> Optional[int]:
    """Oldest iteration a slow peer may still need (None: no peers)."""
    return (min(peer_iterations) - peer_margin) if peer_iterations else None


def iterations_to_keep(own: Iterable[int], peer_iterations: Sequence[int], policy: RetentionPolicy) -> Set[int]:
    """The own record iterations to keep (see the module docstring). A peer with no record counts as
    iteration 0: it may start late."""
    records = sorted(own, reverse=True)
    threshold = peer_threshold(peer_iterations, policy.peer_margin)
    needed = 0 if threshold is None else sum(1 for it in records if it >= threshold)
    n_keep = min(policy.max_records, max(policy.keep_records, needed))
    return set(records[:n_keep])


def removal_order(names: Iterable[str], record_suffix: str) -> List[str]:
    """Records before checkpoints, so a record never names a deleted checkpoint."""
    return sorted(names, key=lambda n: (not n.endswith(record_suffix), n))
