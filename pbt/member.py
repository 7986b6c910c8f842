"""One PBT member's life, without torch: start-up (resume or initial mutation), the PBT iteration
(publish, scan, decide, record lineage, keep the best, clean up) and the restart plan.

The rl_games observer (pbt/observer.py) feeds it numbers and an opaque state dict; every byte on
disk goes through :class:`pbt.workspace.Workspace`; every decision comes from
:func:`pbt.selection.decide`; the restart itself is :mod:`pbt.restart`.
"""
import logging
import random
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from pbt.config import PbtConfig, set_by_key
from pbt.errors import ConfigError, CorruptRecordError, WorkspaceError
from pbt.mutation import current_params, validate_scheme
from pbt.record import Record
from pbt.restart import build_restart_argv
from pbt.selection import KEEP, MUTATE, REPLACE, Decision, MemberState, decide, initial_mutation
from pbt.workspace import Workspace

log = logging.getLogger(__name__)

#: Where a member keeps the checkpoint it restarts from (inside its own run directory).
RESTART_CHECKPOINT = Path("pbt") / "restart_checkpoint.pth"


@dataclass(frozen=True)
class RestartPlan:
    """What a member restarts into: the checkpoint to load and the full new argv."""

    checkpoint: Path
    argv: List[str]


def pbt_seed(cfg: PbtConfig, run_seed: int, frame: int) -> int:
    """PBT's rng seed: ``pbt.seed`` or one derived from the run seed, the member and its frame count
    (deterministic for a given history; different after each restart)."""
    base = cfg.seed if cfg.seed is not None else run_seed
    return zlib.crc32(f"{base}:{cfg.policy_idx}:{frame}".encode()) & 0x7FFFFFFF


class PbtMember:
    """Start-up and per-iteration PBT logic of one member (policy_idx) of the population."""

    def __init__(self, cfg: Dict[str, Any], run_dir: Path, argv: Sequence[str]) -> None:
        self.cfg = cfg
        self.pbt = PbtConfig.from_mapping(cfg["pbt"])
        self.pbt.validate_population()
        validate_scheme(self.pbt.mutation, cfg)
        self.run_dir = Path(run_dir)
        self.argv = list(argv)
        self.workspace = Workspace(self.pbt.workspace, self.pbt.policy_idx, self.pbt.num_policies)
        self.params: Dict[str, Any] = current_params(cfg, self.pbt.mutation)
        self.resume_record: Optional[Record] = None
        self.start_frame = 0
        self.replaced_at_frame = 0
        self.last_iteration = -1
        self.best_interval_objective: Optional[float] = None
        self.rng = random.Random(pbt_seed(self.pbt, int(cfg.get("seed", 0)), 0))

    # -- start-up -----------------------------------------------------------------------------
    def startup(self) -> Dict[str, Any]:
        """Resume from the workspace, or mutate a fresh member once; return the updated config."""
        if not self.pbt.restarted and not self.cfg.get("checkpoint"):
            record = self.workspace.latest_record(self.pbt.policy_idx, verify=True) if self.pbt.resume else None
            if record is not None:
                self.resume_record = record
                self.params = {k: v for k, v in record.params.items() if k in self.pbt.mutation}
                log.info("PBT policy %d resumes from its iteration %d (frame %d) in %s",
                         self.pbt.policy_idx, record.iteration, record.frame, self.workspace.root)
            elif self.workspace.newest_iteration() is not None:
                raise ConfigError(
                    f"pbt.resume=false but policy {self.pbt.policy_idx} already has records in "
                    f"{self.workspace.root}. Use another pbt.workspace, or pbt.resume=true to continue."
                )
            else:
                before = dict(self.params)
                self.params = initial_mutation(self.params, self.pbt, self.rng)
                self.append_lineage(MUTATE, None, "initial mutation of a fresh member", before, self.params,
                                    frame=0, iteration=0, objective=None, mode="startup")
        self.apply_params(self.params)
        return self.cfg

    def apply_params(self, params: Mapping[str, Any]) -> None:
        for key, value in params.items():
            set_by_key(self.cfg, key, value)

    def started(self, frame: int) -> None:
        """Called once the agent is built and restored: the member's own frame count at start."""
        self.start_frame = int(frame)
        self.replaced_at_frame = self.last_replacement_frame()
        self.last_iteration = self.start_frame // self.pbt.interval_steps
        self.rng = random.Random(pbt_seed(self.pbt, int(self.cfg.get("seed", 0)), self.start_frame))

    def exploited(self, frame: int, params: Mapping[str, Any], replaced: bool) -> None:
        """After an in-place exploit: new hyperparameters in force, frames counted anew from here
        (as after a restart), hysteresis forgotten."""
        self.params = dict(params)
        self.apply_params(self.params)
        self.start_frame = int(frame)
        if replaced:
            self.replaced_at_frame = int(frame)
        self.best_interval_objective = None

    def last_replacement_frame(self) -> int:
        """Frame of this member's last weight replacement, from its own lineage (0: never)."""
        events = [e for e in self.workspace.read_lineage() if e.get("action") == REPLACE]
        return int(events[-1].get("frame", 0)) if events else 0

    # -- the iteration ------------------------------------------------------------------------
    def due(self, frame: int) -> bool:
        return frame // self.pbt.interval_steps > self.last_iteration

    def observe(self, objective: Optional[float]) -> None:
        """Feed the objective after every epoch (the best one within an interval is the hysteresis)."""
        if objective is not None and (self.best_interval_objective is None or objective > self.best_interval_objective):
            self.best_interval_objective = objective

    def iterate(
        self, frame: int, objective: Optional[float], state: Mapping[str, Any], episode_returns: Sequence[float]
    ) -> Decision:
        """Publish, scan the population, decide, and log the decision (the caller acts on it)."""
        iteration = frame // self.pbt.interval_steps
        self.last_iteration = iteration
        own = self.workspace.save(iteration, frame, objective, self.params, state, episode_returns,
                                  frames_since_replace=frame - self.replaced_at_frame)
        peers = self.workspace.latest_records(max_iteration=iteration)
        peers[self.pbt.policy_idx] = own
        member = MemberState(own, self.best_interval_objective, frame - self.start_frame)
        decision = decide(member, list(peers.values()), self.pbt, self.rng)
        self.best_interval_objective = None
        self.keep_best(peers)
        self.workspace.cleanup(peers)
        return decision

    def keep_best(self, records: Mapping[int, Record]) -> None:
        known = [r for r in records.values() if r.has_objective]
        if not known:
            return
        best = max(known, key=lambda r: (r.objective, -r.policy_idx))
        try:
            self.workspace.update_best(best)
        except (CorruptRecordError, WorkspaceError) as exc:  # its member may have just deleted it
            log.warning("PBT policy %d: could not copy the population best (%s); next iteration will",
                        self.pbt.policy_idx, exc)

    def plan_restart(self, decision: Decision, frame: int, epoch: int) -> Optional[RestartPlan]:
        """Copy the checkpoint to restart from into the run dir and build the new argv.

        Returns None (and the member keeps training as it is) when the donor's checkpoint vanished
        or is damaged: peers delete old files at any time.
        """
        if decision.action == KEEP:
            return None
        dest = self.run_dir / RESTART_CHECKPOINT
        source = decision.donor if decision.action == REPLACE else None
        try:
            if source is None:
                own = self.workspace.latest_record(self.pbt.policy_idx, max_iteration=self.last_iteration)
                if own is None:
                    raise CorruptRecordError(f"own record of iteration {self.last_iteration} is gone")
                source = own
            self.workspace.export_checkpoint(source, None, dest, frame=frame, epoch=epoch)
        except (CorruptRecordError, WorkspaceError) as exc:
            log.warning("PBT policy %d: cannot restart from %s's checkpoint (%s); keeping current weights",
                        self.pbt.policy_idx, "its own" if source is None else f"policy {source.policy_idx}", exc)
            return None
        overrides: Dict[str, Any] = dict(decision.params_after)
        overrides["experiment"] = self.cfg["experiment"]
        return RestartPlan(dest, build_restart_argv(self.argv, overrides, str(dest)))

    def append_lineage(
        self,
        action: str,
        donor: Optional[Record],
        reason: str,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        frame: int,
        iteration: int,
        objective: Optional[float],
        mode: Optional[str] = None,
        mode_reason: str = "",
        decided_at: Optional[float] = None,
    ) -> None:
        now = time.time()
        self.workspace.append_lineage({
            "time": now,
            "decided_at": now if decided_at is None else decided_at,
            "policy_idx": self.pbt.policy_idx,
            "iteration": iteration,
            "frame": frame,
            "objective": objective,
            "action": action,
            "donor": None if donor is None else donor.policy_idx,
            "donor_iteration": None if donor is None else donor.iteration,
            "donor_objective": None if donor is None else donor.objective,
            "reason": reason,
            "mode": mode if action != KEEP else None,
            "mode_reason": mode_reason,
            "params_before": dict(before),
            "params_after": dict(after),
        })
