"""A member's lineage: one typed entry per PBT event, stored as JSON lines in ``lineage.jsonl``.

:class:`LineageEntry` is the only definition of an entry's fields: the member writes entries
through :meth:`LineageEntry.to_json_line`, and every reader (status, analyze, TensorBoard, resume)
gets entries back through :func:`parse_lineage`. No torch.
"""

import json
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.storage.bounds import MAX_FRAMES, bounded_float, is_number, wall_time

MAX_PARAM_INT = 2**63
"""A hyperparameter int has a magnitude below this (as in records: plotting it never overflows)."""

log = logging.getLogger(__name__)

STARTUP = "startup"
"""``mode`` of the entry a fresh member writes for its initial hyperparameters."""
INPLACE, EXEC = "inplace", "exec"
"""``mode`` of a change carried out in the running agent, or by re-executing the process."""
ROLLBACK = "rollback"
"""``action`` of the entry a diverged member writes when it goes back to finite weights."""
EXPLOIT_ACTIONS = ("replace", "mutate")


def _number(value: Any) -> Optional[float]:
    """A lineage objective: None unless a number; NaN/inf kept (diverged); a finite value beyond
    MAX_ABS_VALUE (or an int too large for a float) raises ValueError: the line is refused."""
    if not is_number(value):
        return None
    return bounded_float(value, "a number", allow_nonfinite=True)


def _time(value: Any) -> float:
    """A lineage time: 0.0 unless a number; a number outside 0..MAX_TIME raises ValueError."""
    return wall_time(value, "time") if is_number(value) else 0.0


def _int(value: Any, default: int = 0) -> int:
    number = _opt_int(value)
    return default if number is None else number


def _opt_int(value: Any) -> Optional[int]:
    """An int field: None unless a number; a finite float is truncated; one outside
    -1..MAX_FRAMES (NaN and inf included) raises ValueError: the line is refused."""
    if not is_number(value):
        return None
    if type(value) is float:
        if not math.isfinite(value) or abs(value) > MAX_FRAMES:
            raise ValueError(f"{value!r} is not a count")
        value = int(value)
    if not -1 <= value <= MAX_FRAMES:
        raise ValueError(f"an int of {len(str(abs(value)))} digits is not a count")
    return value


MAX_STAGE = 63
"""The highest curriculum stage a lineage line may name (:data:`pbt.curriculum.MAX_STAGES` - 1)."""


def _stage(value: Any) -> Optional[int]:
    """A curriculum stage: None when absent; an int in 0..MAX_STAGE, else ValueError (line refused)."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_STAGE:
        raise ValueError(f"stage must be an int in 0..{MAX_STAGE}, got {value!r:.40}")
    return value


def _params(value: Any) -> Dict[str, Any]:
    """Hyperparameters as written (lenient on types); an int too large for a float anywhere in them
    raises ValueError: the line is refused (the tools plot these values)."""
    if not isinstance(value, Mapping):
        return {}
    out = {str(k): v for k, v in value.items()}
    pending: List[Any] = list(out.values())
    while pending:  # iterative: a deep value cannot exhaust the stack
        item = pending.pop()
        if type(item) is int and abs(item) >= MAX_PARAM_INT:
            raise ValueError(f"a hyperparameter is an int of {len(str(abs(item)))} digits")
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return out


@dataclass(frozen=True)
class LineageEntry:
    """One PBT event of one member."""

    policy_idx: int
    """The member the entry belongs to."""
    iteration: int
    """PBT iteration at which the event happened."""
    frame: int
    """The member's own frame count at the event."""
    action: str
    """"keep", "mutate", "replace" or "rollback" (after a divergence)."""
    reason: str = ""
    """Which rule fired, with its numbers."""
    objective: Optional[float] = None
    """The member's objective when it decided (None: unknown; NaN: diverged)."""
    donor: Optional[int] = None
    """policy_idx whose weights were taken (replace, rollback), else None."""
    donor_iteration: Optional[int] = None
    donor_objective: Optional[float] = None
    mode: Optional[str] = None
    """How the change was carried out: "inplace", "exec" or "startup" (a fresh member's initial
    hyperparameters); None for keep."""
    mode_reason: str = ""
    """Why that mode (e.g. which keys needed a rebuild)."""
    params_before: Dict[str, Any] = field(default_factory=dict)
    params_after: Dict[str, Any] = field(default_factory=dict)
    time: float = 0.0
    """Unix time the entry was written."""
    decided_at: float = 0.0
    """Unix time of the decision (exploit latency = first step with new weights - decided_at)."""
    network: Optional[Dict[str, Any]] = None
    """The network in force after the event (units, activation, parameters) when members evolve it
    (``pbt/mutation=agilerl``); None otherwise."""
    stage: Optional[int] = None
    """The member's curriculum stage after the event (``pbt.curriculum``); None without a curriculum
    (and in older lineages)."""
    family: Optional[int] = None
    """The family of the member's weights after the event (:attr:`pbt.storage.record.Record.family`),
    written when the event took a checkpoint (replace, rollback); None otherwise, and when unknown."""

    @property
    def is_startup(self) -> bool:
        return self.mode == STARTUP

    @property
    def is_exploit(self) -> bool:
        """A replace or mutate of a running member (not a fresh member's initial mutation)."""
        return self.action in EXPLOIT_ACTIONS and not self.is_startup

    @property
    def changed_params(self) -> Dict[str, Any]:
        """key -> (before, after) for every hyperparameter the event changed."""
        keys = sorted(set(self.params_before) | set(self.params_after))
        return {
            k: (self.params_before.get(k), self.params_after.get(k))
            for k in keys
            if self.params_before.get(k) != self.params_after.get(k)
        }

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        for name in ("stage", "family"):  # lines without them stay as before them
            if data[name] is None:
                del data[name]
        return data

    def to_json_line(self) -> bytes:
        """One line of ``lineage.jsonl`` (NaN/inf as JSON's NaN/Infinity extension)."""
        return (json.dumps(self.to_dict(), sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LineageEntry":
        """Lenient: a missing or mistyped field takes its default (lineages are diagnostics, and old
        or hand-edited files must not stop a tool); a number outside its bounds
        (:mod:`pbt.storage.bounds`) raises ValueError, and :func:`parse_lineage` skips that line."""
        return cls(
            policy_idx=_int(data.get("policy_idx"), -1),
            iteration=_int(data.get("iteration")),
            frame=_int(data.get("frame")),
            action=str(data.get("action") or ""),
            reason=str(data.get("reason") or ""),
            objective=_number(data.get("objective")),
            donor=_opt_int(data.get("donor")),
            donor_iteration=_opt_int(data.get("donor_iteration")),
            donor_objective=_number(data.get("donor_objective")),
            mode=None if data.get("mode") is None else str(data.get("mode")),
            mode_reason=str(data.get("mode_reason") or ""),
            params_before=_params(data.get("params_before")),
            params_after=_params(data.get("params_after")),
            time=_time(data.get("time")),
            decided_at=_time(data.get("decided_at")),
            network=_params(data.get("network")) or None,
            stage=_stage(data.get("stage")),
            family=_opt_int(data.get("family")),
        )


FIELD_NAMES = tuple(f.name for f in fields(LineageEntry))


def weights_origin(lineage: Sequence[LineageEntry], policy_idx: int) -> Tuple[int, Optional[int]]:
    """(frame of the last replace, family of the weights) of member ``policy_idx`` after its
    ``lineage``: (0, its own index) until it took a checkpoint; the family is the newest such event's
    (None when that line does not say: older lineages)."""
    replaced_at = ([0] + [entry.frame for entry in lineage if entry.action == "replace"])[-1]
    took = [entry for entry in lineage if entry.donor is not None]
    if not took:
        return replaced_at, policy_idx
    family = took[-1].family
    return replaced_at, family if family is not None and family >= 0 else None


def parse_lineage(data: bytes, source: str) -> List[LineageEntry]:
    """The entries of a ``lineage.jsonl`` file's bytes. A torn or invalid line (the last one, when
    its writer was killed) is skipped with a warning naming ``source`` and the line number."""
    entries: List[LineageEntry] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        torn = number == len(lines)  # the last chunk has no newline: its writer did not finish
        try:
            parsed = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            log.warning("skipping %s line %d in %s: %s", "torn last" if torn else "invalid", number, source, exc)
            continue
        if not isinstance(parsed, dict):
            log.warning("skipping line %d in %s: expected a JSON object, got %s", number, source, type(parsed).__name__)
            continue
        try:
            entries.append(LineageEntry.from_dict(parsed))
        except (ValueError, TypeError, ArithmeticError) as exc:
            log.warning("skipping line %d in %s: %s", number, source, exc)
    return entries
