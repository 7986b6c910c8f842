"""The data PB2 fits, from what members publish: each interval's hyperparameters and objective
change, read from records (``param_history`` and ``gains``; ``history`` for records older than
``gains``), and the member-side log of both. Pure functions, standard library only (Python 3.8).

A record at iteration i carries the hyperparameters trained with in the interval ending at i (a
decision at i changes them for the next interval). The member's data point for interval k is
``(params in force over k, k, objective(k) - objective(k - 1))`` when both objectives are known,
finite and measured on the same weights (no gain for the interval after a weight replacement), so
a replacement never counts as an improvement. The log survives replacements: the intervals a
replaced member trained are data too (bad hyperparameters are what the model must learn about).
"""

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from pbt.mutation.space import LOGUNIFORM, Dimension
from pbt.storage.record import MAX_GAINS, MAX_PARAM_HISTORY

if TYPE_CHECKING:
    from pbt.storage.record import Record


@dataclass(frozen=True)
class Point:
    """One interval of one member: normalised hyperparameters, the iteration it ended at, and the
    objective change over it."""

    x: Tuple[float, ...]
    time: int
    change: float
    policy_idx: int


def normalise(dim: Dimension, value: Any) -> Optional[float]:
    """``value`` mapped to [0, 1] over the dimension's bounds (loguniform: in log space); None when
    it is no finite number. Values outside the bounds are clipped (an older run's wider space)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    (low, high), v = dim.bounds(), float(value)
    if dim.type == LOGUNIFORM:
        if v <= 0:
            return None
        low, high, v = math.log(low), math.log(high), math.log(v)
    return min(1.0, max(0.0, (v - low) / (high - low)))


def denormalise(dim: Dimension, x: float) -> float:
    """The value at ``x`` in [0, 1] of the dimension, inside its bounds."""
    low, high = dim.bounds()
    x = min(1.0, max(0.0, float(x)))
    if dim.type == LOGUNIFORM:
        value = math.exp(math.log(low) + x * (math.log(high) - math.log(low)))
    else:
        value = low + x * (high - low)
    return float(dim.clamp(value))  # exp/log rounding must not leave the bounds


def params_at(record: "Record", iteration: int) -> Optional[Mapping[str, Any]]:
    """The hyperparameters ``record``'s member trained with in the interval ending at
    ``iteration``: the newest change point at or before it; the record's params for its own
    iteration when it has no change points (an older record); None when unknown."""
    if iteration > record.iteration:
        return None
    points = [i for i in record.param_history if i <= iteration]
    if points:
        return record.param_history[max(points)]
    if iteration == record.iteration:
        return record.params
    return None


def point_x(params: Mapping[str, Any], dims: Sequence[Dimension]) -> Optional[Tuple[float, ...]]:
    """The normalised coordinates of ``params`` (None when a key is missing or not a number)."""
    out: List[float] = []
    for dim in dims:
        value = normalise(dim, params.get(dim.key))
        if value is None:
            return None
        out.append(value)
    return tuple(out)


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


def data_points(records: Iterable["Record"], dims: Sequence[Dimension]) -> List[Point]:
    """Every interval of every record whose objective change and hyperparameters are known, oldest
    first (ties: lower policy_idx)."""
    points: List[Point] = []
    for record in records:
        changes = sorted(record.param_history)
        coordinates = {i: point_x(record.param_history[i], dims) for i in changes}  # once per change point
        newest_x = point_x(record.params, dims)
        for k, gain in sorted(gains_of(record).items()):
            if k > record.iteration:
                continue
            at = bisect.bisect_right(changes, k)  # the newest change point at or before k (see params_at)
            x = coordinates[changes[at - 1]] if at else (newest_x if k == record.iteration else None)
            if x is not None:
                points.append(Point(x, k, gain, record.policy_idx))
    points.sort(key=lambda p: (p.time, p.policy_idx))
    return points


def gains_of(record: "Record") -> Dict[int, float]:
    """Interval -> objective change: the record's ``gains``, or, for a record written before them,
    the changes between consecutive finite objectives of its ``history``."""
    if record.gains:
        return {k: g for k, g in record.gains.items() if math.isfinite(g)}
    history = dict(record.history)
    history.setdefault(record.iteration, record.objective)
    return {
        k: after - before
        for k, after, before in ((k, history[k], history.get(k - 1)) for k in history)
        if after is not None and before is not None and _finite(before) and _finite(after)
    }


def newest(points: Sequence[Point], max_points: int) -> List[Point]:
    """The newest ``max_points`` (the time-varying kernel gives old data little weight anyway, and
    the fit costs O(n^3))."""
    return list(points[-max_points:]) if max_points > 0 else []


class IntervalHistory:
    """A member's own hyperparameter change points and interval gains, across weight replacements:
    what its records carry as ``param_history`` and ``gains``."""

    def __init__(
        self, params: Optional[Dict[int, Dict[str, Any]]] = None, gains: Optional[Dict[int, float]] = None
    ) -> None:
        self.params: Dict[int, Dict[str, Any]] = {i: dict(p) for i, p in (params or {}).items()}
        self.gains: Dict[int, float] = dict(gains or {})

    @classmethod
    def restored(cls, record: Optional["Record"]) -> "IntervalHistory":
        """The log of the member's newest own record (after a resume or an exec restart)."""
        return cls() if record is None else cls(record.param_history, record.gains)

    def note(self, iteration: int, params: Mapping[str, Any], objectives: Mapping[int, Optional[float]]) -> None:
        """The params trained with in the interval ending at ``iteration`` (a change point only when
        they differ from the newest one), and its gain from ``objectives`` (the member's objective
        history since its last weight replacement: no gain across a replacement)."""
        before, after = objectives.get(iteration - 1), objectives.get(iteration)
        if before is not None and after is not None and _finite(before) and _finite(after):
            self.gains[iteration] = after - before
        for old in sorted(self.gains)[:-MAX_GAINS]:
            del self.gains[old]
        if self.params:
            last = max(self.params)
            if last <= iteration and self.params[last] == dict(params):
                return
        self.params[iteration] = dict(params)
        for old in sorted(self.params)[:-MAX_PARAM_HISTORY]:
            del self.params[old]
