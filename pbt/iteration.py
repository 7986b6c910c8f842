"""The values passed between the steps of one PBT iteration (docs/architecture.md, "One PBT
iteration"): decide yields an :class:`Iteration` (the :class:`Decision` and the population it was
made on), act returns an :class:`Outcome` (what was carried out, and how), record writes both."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pbt.mutation.network import NetworkChange
from pbt.selection import KEEP, Decision
from pbt.storage import Record


@dataclass(frozen=True)
class RestartPlan:
    """What a member restarts into: the checkpoint to load and the full new argv."""

    checkpoint: Path
    argv: List[str]


@dataclass(frozen=True)
class Outcome:
    """What the act step did with a :class:`Decision`, and why: the record step
    (:meth:`PbtMember.record`) writes it into the member's state and lineage."""

    action: str
    """keep, mutate or replace, as carried out (a decision not carried out: keep)."""
    reason: str
    """The decision's reason and what happened carrying it out."""
    params_after: Dict[str, Any]
    """The hyperparameters in force next (the decision's ``params_before`` when kept)."""
    mode: Optional[str] = None
    """inplace or exec; None when kept."""
    mode_reason: str = ""
    """Why exec (the keys that need a rebuild, or pbt.restart_mode=exec)."""
    network: Optional[NetworkChange] = None
    """The network change carried out on the agent (None: the network is as it was)."""
    parameters: Optional[int] = None
    """The agent's parameter count after ``network``."""
    refused: Optional[Tuple[int, str, str]] = None
    """(member, why, checksum) of a donor whose checkpoint does not fit this agent: refused from now on."""
    restart: Optional[RestartPlan] = None
    """An exec restart: the process re-executes into this plan once the outcome is recorded."""


@dataclass(frozen=True)
class Iteration:
    """What the decide step of one PBT iteration produced: the :class:`Decision`, and the population
    it was made on, which the record step needs too (the best copy, retention)."""

    decision: Decision
    frame: int
    objective: Optional[float]
    """The objective published with this iteration's record."""
    decided_at: float
    peers: Mapping[int, Record]
    """The newest records the decision saw, this member's own included (retention keeps by them)."""
    best: Mapping[int, Record]
    """The records the population best is copied from (in a curriculum: the furthest stage's)."""


def kept(decision: Decision, reason: str, refused: Optional[Tuple[int, str, str]] = None) -> Outcome:
    """The outcome of a decision not carried out (or a keep): own weights and hyperparameters."""
    return Outcome(KEEP, reason, dict(decision.params_before), refused=refused)


def carried_out(
    decision: Decision,
    mode: str,
    parameters: Optional[int] = None,
    mode_reason: str = "",
    restart: Optional[RestartPlan] = None,
) -> Outcome:
    """The outcome of a decision carried out (``mode``: inplace or exec); its network change counts
    as carried out only where the agent reports a parameter count after it."""
    network = decision.network if parameters is not None else None
    return Outcome(
        decision.action,
        decision.reason,
        dict(decision.params_after),
        mode,
        mode_reason,
        network=network,
        parameters=parameters,
        restart=restart,
    )
