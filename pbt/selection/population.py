"""The population as one member sees it: which record counts for each peer, the ranking, group
sizes, spread, and who may be a donor. Pure functions; peers are visited in policy_idx order, so
everything here is reproducible."""

import math
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

if TYPE_CHECKING:
    from pbt.storage.record import Record

_EPS = 1e-9  # guards ceil(fraction * N) against float fuzz such as 0.3 * 10 = 3.0000000000000004

View = Mapping[int, Optional["Record"]]
"""policy_idx -> the record to compare with (None: unknown)."""


def population_view(
    own: "Record", peers: Sequence["Record"], members: Union[int, Iterable[int]]
) -> Dict[int, Optional["Record"]]:
    """policy_idx -> the record to compare with: own record for self, else the peer's newest record
    with no more iterations than own (None: unknown). ``members``: N (the members are 0..N-1) or
    the members' indices (an elastic population); peers outside them are ignored."""
    indices = range(members) if isinstance(members, int) else members
    view: Dict[int, Optional[Record]] = {idx: None for idx in sorted(indices)}
    for record in peers:
        idx = record.policy_idx
        if idx == own.policy_idx or idx not in view or record.iteration > own.iteration:
            continue
        current = view[idx]
        if current is None or _age_key(record) > _age_key(current):
            view[idx] = record
    view[own.policy_idx] = own
    return view


def _age_key(record: "Record") -> Tuple[int, int, float, str, str, str]:
    """Newest first by iteration, frame, time; the rest only makes the order total."""
    return (record.iteration, record.frame, record.time, record.checksum, record.checkpoint, repr(record.objective))


def is_diverged(record: "Record") -> bool:
    """True when the record's objective is NaN or inf (training diverged, or the env reported it):
    such a member ranks last, skips the gates that protect a member's standing and is replaced
    from a leader. None (not measured yet) is not diverged."""
    objective = record.objective
    return objective is not None and not (isinstance(objective, (int, float)) and math.isfinite(objective))


def diverged_significance(own: "Record") -> Optional[Tuple[bool, str]]:
    """(True, why) for a diverged member: it has no episode returns to test (the rollback cleared
    them) and any finite leader beats NaN, so the significance test is skipped. None otherwise."""
    if is_diverged(own):
        return True, "; own objective not finite: significance test skipped"
    return None


def known_objective(record: Optional["Record"]) -> Optional[float]:
    """The record's objective when finite; None for missing records, None, NaN and inf."""
    if record is None or record.objective is None or not record.has_objective:
        return None
    return float(record.objective)


def rank(view: View, own_idx: int) -> List[int]:
    """Policy indices best first. Known objectives descending (ties: lower index first), then the
    unknown ones by index, then this member last if its own objective is unknown."""

    def key(idx: int) -> Tuple[int, float, int]:
        objective = known_objective(view[idx])
        if objective is not None:
            return (0, -objective, idx)
        return (2 if idx == own_idx else 1, 0.0, idx)

    return sorted(view, key=key)


def group_size(fraction: float, num_policies: int) -> int:
    """ceil(fraction * N), at least 1 and at most N."""
    return min(num_policies, max(1, math.ceil(fraction * num_policies - _EPS)))


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and population std (numpy's default) of finite values; (0, 0) when empty.

    Two-pass over values scaled to [-1, 1], so it neither overflows nor trips Python 3.8's
    ``statistics.pstdev`` assertion on nearly equal floats.
    """
    if not values:
        return 0.0, 0.0
    scale = max(abs(v) for v in values) or 1.0
    scaled = [v / scale for v in values]
    mean = math.fsum(scaled) / len(scaled)
    variance = math.fsum((v - mean) ** 2 for v in scaled) / len(scaled)
    return mean * scale, math.sqrt(variance) * scale


def trimmed_std(objectives: Sequence[float]) -> float:
    """Population std of the objectives after dropping the lowest floor(0.2 * n) (crashed members
    would otherwise inflate it). 0.0 for fewer than two values."""
    values = sorted(objectives)[int(math.floor(0.2 * len(objectives))) :]
    return mean_std(values)[1]


def records(view: View, indices: Iterable[int]) -> List["Record"]:
    """The records of ``indices`` in that order, skipping unknown members."""
    return [record for record in (view[i] for i in indices) if record is not None]


def is_ready(record: "Record", ready_after: int) -> bool:
    """The ready rule: has this member trained ``ready_after`` frames since it started or last took
    a donor's weights?"""
    return record.frames_since_replace >= ready_after


def eligible_donors(
    candidates: Iterable["Record"], ready_after: int, refused: AbstractSet[int] = frozenset()
) -> List["Record"]:
    """The candidates that may be donors: ready, and not refused (a refused member still counts in
    the ranking, its groups and spread; it is only never copied)."""
    return [r for r in candidates if r.policy_idx not in refused and is_ready(r, ready_after)]


def refused_for_params(view: View, own_idx: int, check: Callable[[Any], Sequence[str]]) -> Dict[int, str]:
    """policy_idx -> why that member's record cannot be a donor: ``check(record.params)`` found
    problems (hyperparameters no member may train with). Such a member stays ranked; neither its
    hyperparameters nor its weights are taken."""
    refused: Dict[int, str] = {}
    for idx in sorted(view):
        record = view[idx]
        if idx == own_idx or record is None:
            continue
        problems = list(check(record.params))
        if problems:
            refused[idx] = "; ".join(problems)
    return refused


def merge_params(own: Mapping[str, Any], donor: "Record") -> Dict[str, Any]:
    """Own keys with the donor's values where the donor has them (a scheme edit cannot add keys)."""
    return {key: donor.params.get(key, value) for key, value in own.items()}
