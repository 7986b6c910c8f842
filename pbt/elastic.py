"""A member of an elastic population (``pbt.num_policies=auto``): who it ranks at each iteration,
and how it joins a population that is already running.

The rules are pure (:mod:`pbt.selection.membership`); this module keeps the member's pace, logs
each change of the ranked members once, and carries out a join: the chosen donor's checkpoint is
exported into the member's run directory (verified, at the donor's frame count: the joiner
continues the donor's experience, so it ranks at equal experience and stops at the same
``max_frames`` as the population) and its hyperparameters are mutated.
"""

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from pbt.config import PbtConfig
from pbt.errors import CorruptRecordError, WorkspaceError
from pbt.mutation import checked_params
from pbt.mutation.scheme import mutate_params
from pbt.selection.membership import (
    Membership,
    join_donor,
    plausible_frame,
    ranked_members,
    seconds_per_interval,
    window_seconds,
)
from pbt.selection.population import merge_params
from pbt.storage import Record, Workspace
from pbt.storage.liveness import ALIVE, RUNNING, PeerStatus

log = logging.getLogger(__name__)

JOIN_CHECKPOINT = Path("pbt") / "join_checkpoint.pth"
"""Where a joining member keeps the donor's checkpoint it starts from (inside its run directory)."""
_PROGRESS_POINTS = 16


class ElasticPopulation:
    """The elastic-population state of one member: its pace and the members it ranked last."""

    def __init__(self, cfg: PbtConfig) -> None:
        self.cfg = cfg
        self.progress: List[Tuple[int, float]] = []
        self.started_at = time.time()
        self.ranked: Optional[Tuple[int, ...]] = None

    def note_progress(self, frame: int, now: Optional[float] = None) -> None:
        """Own frame count at ``now`` (start-up and every iteration): the pace the window is measured in."""
        self.progress = (self.progress + [(int(frame), time.time() if now is None else now)])[-_PROGRESS_POINTS:]

    def window_seconds(self, now: float) -> float:
        pace = seconds_per_interval(self.progress, self.cfg.interval_steps)
        return window_seconds(self.cfg.elastic_window, pace, max(0.0, now - self.started_at))

    def members(
        self, records: Mapping[int, Record], statuses: Mapping[int, PeerStatus], now: Optional[float] = None
    ) -> Membership:
        """The members ranked now (own index included); a change is logged once."""
        now = time.time() if now is None else now
        training = {
            i for i, s in statuses.items() if s.state == ALIVE and s.beat is not None and s.beat.state == RUNNING
        }
        membership = ranked_members(self.cfg.policy_idx, records, training, now, self.window_seconds(now))
        if membership.members != self.ranked:
            self._log_change(membership)
            self.ranked = membership.members
        return membership

    def _log_change(self, membership: Membership) -> None:
        before = set(self.ranked or ())
        joined = sorted(set(membership.members) - before) if self.ranked is not None else []
        left = sorted(before - set(membership.members))
        parts = [f"{len(membership.members)} members ranked: {list(membership.members)}"]
        if joined:
            parts.append(f"joined: {joined}")
        if left:
            parts.append("left: " + "; ".join(f"{i} ({membership.left_out.get(i, 'no record')})" for i in left))
        log.info("PBT policy %d (elastic population): %s", self.cfg.policy_idx, ", ".join(parts))

    def join(
        self,
        workspace: Workspace,
        statuses: Mapping[int, PeerStatus],
        params: Mapping[str, Any],
        run_dir: Path,
        rng: Any,
        max_frames: Optional[int] = None,
    ) -> Optional[Tuple[Record, Path, Dict[str, Any]]]:
        """Join from the best member (``pbt.join=best``): (donor record, its checkpoint exported into
        ``run_dir`` at the donor's frame, mutated hyperparameters); None when no peer has an
        objective yet (or none can be used: each refusal is logged), so the member starts fresh.
        Donors are members alive and training whose frame count is plausible (below ``max_frames``)."""
        records = workspace.latest_records()
        training = {
            i for i, s in statuses.items() if s.state == ALIVE and s.beat is not None and s.beat.state == RUNNING
        }
        refused: Set[int] = set()
        explore = self.cfg.explore
        while True:
            donor = join_donor(self.cfg.policy_idx, records, training, refused)
            if donor is None:
                return None
            base = merge_params(params, donor)
            problems = checked_params(base, params, explore.mutation, explore.bounds, explore.search_space)[1]
            implausible = plausible_frame(donor, self.cfg.interval_steps, max_frames)
            problems = problems + ([implausible] if implausible else [])
            if problems:
                log.warning(
                    "PBT policy %d: member %d is no donor to join from: %s",
                    self.cfg.policy_idx,
                    donor.policy_idx,
                    "; ".join(problems),
                )
                refused.add(donor.policy_idx)
                continue
            try:
                path = workspace.export_checkpoint(donor, None, run_dir / JOIN_CHECKPOINT, donor.frame, None)
            except (CorruptRecordError, WorkspaceError) as exc:
                log.warning("PBT policy %d: cannot join from member %d: %s", self.cfg.policy_idx, donor.policy_idx, exc)
                refused.add(donor.policy_idx)
                continue
            clean, _ = checked_params(
                mutate_params(base, explore, rng), base, explore.mutation, explore.bounds, explore.search_space
            )
            return donor, path, {**base, **clean}
