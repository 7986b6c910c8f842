"""The record a member publishes at every PBT iteration, next to its checkpoint.

A record is the only thing peers read to rank a member. It is plain data (YAML-safe types only) so
it can be loaded with ``yaml.safe_load`` and compared on any Python >= 3.8 without torch.
"""
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from pbt.errors import CorruptRecordError

RECORD_VERSION = 1


@dataclass(frozen=True)
class Record:
    """One member's state at one PBT iteration."""

    policy_idx: int
    """Index of the member in the population, 0 .. num_policies-1."""
    iteration: int
    """PBT iteration: ``frame // interval_steps`` when the record was written."""
    frame: int
    """Env frames this member (its own lineage of training, not its donors') has trained."""
    objective: Optional[float]
    """The member's objective (higher is better); None when not yet known. NaN/inf rank last."""
    params: Dict[str, Any]
    """The mutable hyperparameters in force, keyed by full config key (``train.params.config.gamma``)."""
    checkpoint: str
    """File name of the checkpoint, relative to the member's directory."""
    checksum: str
    """sha256 hex digest of the checkpoint's bytes; a reader trusts the record only if it matches."""
    time: float = 0.0
    """Unix time the record was written."""
    episode_returns: List[float] = field(default_factory=list)
    """Recent per-episode objectives, kept for noise-aware comparisons."""
    frames_since_replace: int = 0
    """Frames this member trained since its weights last came from a donor (or since it started
    fresh): the "ready" rule keeps younger members from being replaced or used as donors."""
    version: int = RECORD_VERSION

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["params"] = dict(self.params)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<record>") -> "Record":
        """Build a record from parsed YAML, raising CorruptRecordError naming ``source`` on any defect."""
        if not isinstance(data, Mapping):
            raise CorruptRecordError(f"{source}: expected a mapping, got {type(data).__name__}")
        try:
            objective = data.get("objective")
            return cls(
                policy_idx=int(data["policy_idx"]),
                iteration=int(data["iteration"]),
                frame=int(data["frame"]),
                objective=None if objective is None else float(objective),
                params=dict(data.get("params") or {}),
                checkpoint=str(data["checkpoint"]),
                checksum=str(data["checksum"]),
                time=float(data.get("time", 0.0)),
                episode_returns=[float(x) for x in data.get("episode_returns") or []],
                frames_since_replace=int(data.get("frames_since_replace", 0)),
                version=int(data.get("version", RECORD_VERSION)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(f"{source}: not a valid PBT record ({exc!r})") from exc

    @property
    def has_objective(self) -> bool:
        """True when the objective is a finite number (None, NaN and inf never lead)."""
        return self.objective is not None and math.isfinite(self.objective)
