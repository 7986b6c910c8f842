"""Who is in an elastic population (``pbt.num_policies=auto``), as one member sees it. Pure
functions: the member (:mod:`pbt.elastic`) feeds them the records, heartbeats and clock it read.

A peer is ranked while its newest record is younger than the window (``pbt.elastic_window``
intervals at the ranking member's own pace, in seconds), or while its heartbeat says it is
training: a slow member is not dropped while it lives. Finished, stopped and dead members drop out
once their newest record is older than the window; members that never published are not ranked.
"""

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.storage.bounds import is_future

if TYPE_CHECKING:
    from pbt.storage.record import Record


@dataclass(frozen=True)
class Membership:
    """The members one member ranks at one iteration, and why the others are left out."""

    members: Tuple[int, ...]
    """Policy indices ranked, ascending; the ranking member is always one of them."""
    left_out: Dict[int, str] = field(default_factory=dict)
    """policy_idx -> why that member (it has a record) is not ranked."""


def ranked_members(
    own_idx: int, records: Mapping[int, "Record"], training: AbstractSet[int], now: float, window_seconds: float
) -> Membership:
    """The elastic population at ``now``: own index, plus every peer with a record that is younger
    than ``window_seconds`` or whose heartbeat says it is ``training``."""
    members = {own_idx}
    left_out: Dict[int, str] = {}
    for idx in sorted(records):
        if idx == own_idx:
            continue
        stamp = records[idx].time
        age = max(0.0, now - stamp)
        if idx in training:
            members.add(idx)
        elif is_future(stamp, now):  # a clock far ahead, or a lie: not ranked for ever
            left_out[idx] = f"newest record dated {stamp - now:.0f} s in the future, not training"
        elif age <= window_seconds:
            members.add(idx)
        else:
            left_out[idx] = f"newest record {age:.0f} s old > window {window_seconds:.0f} s, not training"
    return Membership(tuple(sorted(members)), left_out)


def seconds_per_interval(progress: Sequence[Tuple[int, float]], interval_steps: int) -> Optional[float]:
    """This member's pace: seconds per ``interval_steps`` frames, the median over consecutive
    ``(frame, time)`` points of its own progress (None: fewer than two points, or no frames)."""
    rates: List[float] = []
    for (frame_a, time_a), (frame_b, time_b) in zip(progress, progress[1:]):
        if frame_b > frame_a and time_b >= time_a:
            rates.append((time_b - time_a) / (frame_b - frame_a))
    if not rates:
        return None
    rates.sort()
    middle = len(rates) // 2
    rate = rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2
    return rate * interval_steps


def window_seconds(window: int, pace: Optional[float], since_start: float) -> float:
    """``window`` intervals at ``pace`` seconds each; before a pace is known, the time since this
    process started (a member that just started counts everyone who published since, and more)."""
    if pace is None or not math.isfinite(pace):
        return max(window * since_start, since_start)
    return window * pace


def plausible_frame(record: "Record", interval_steps: int, max_frames: Optional[int]) -> Optional[str]:
    """Why ``record``'s frame count cannot be a joiner's (None: it can): it must say the iteration
    the record says (``frame // interval_steps``) and lie below ``max_frames`` (a joiner taking
    more would end at once)."""
    if record.frame // interval_steps != record.iteration:
        return f"its frame {record.frame} is not iteration {record.iteration} at pbt.interval_steps={interval_steps}"
    if max_frames is not None and max_frames > 0 and record.frame >= max_frames:
        return f"its frame {record.frame} is not below max_frames={max_frames}"
    return None


def join_donor(
    own_idx: int, records: Mapping[int, "Record"], alive: AbstractSet[int], refused: AbstractSet[int] = frozenset()
) -> Optional["Record"]:
    """The record a member joining with ``pbt.join=best`` starts from: the best finite objective
    among ``alive`` peers (the caller passes those whose heartbeat is fresh and says training: a
    finished member's frames are spent) not ``refused``; ties go to the lower index. None: no such
    peer (the member starts fresh)."""
    candidates = [r for i, r in records.items() if i != own_idx and i in alive and i not in refused and r.has_objective]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (float(r.objective), -r.policy_idx))  # type: ignore[arg-type]  # candidates filtered on has_objective
