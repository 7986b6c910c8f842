"""Carry out a member's move to the next curriculum stage (:mod:`pbt.curriculum`) in a running agent.

The stage's task settings go into the running task when it has a live setter for every one of
them (``live_setters()``: a built-in task's declared keys, an Isaac Lab task's ``task.liveEnvKeys``),
with the new stage's hyperparameters put in force as any in-place exploit does; otherwise the
member restarts from its own newest checkpoint (exec), and the restarted process takes its stage,
and the stage's task settings, from its lineage (:func:`pbt.curriculum.member.restore_stage`).
"""

import logging
import time
from typing import TYPE_CHECKING, Optional

from pbt.curriculum.stages import StageState
from pbt.iteration import Outcome, kept
from pbt.selection import Decision
from pbt.storage.lineage import INPLACE

if TYPE_CHECKING:
    from pbt.rl_games.exploit import Exploiter

log = logging.getLogger(__name__)


def enter_stage(exploiter: "Exploiter", decision: Decision, frame: int, final: bool) -> Optional[Outcome]:
    """Carry out the member's pending stage transition (``decision`` from
    :func:`pbt.curriculum.member.stage_decision`); None when no transition is pending (the caller
    acts on ``decision`` as usual). On the last epoch the transition is recorded, not made."""
    member = exploiter.member
    state: Optional[StageState] = member.curriculum
    if state is None or state.pending is None:
        return None
    transition = state.pending
    state.pending = None
    if final:
        return kept(decision, f"{decision.reason}; not acted on: training ends this epoch")
    member.enter_stage(transition)
    overrides = state.overrides()
    member.apply_params(overrides)  # the config a later rebuild starts from
    mode, why = exploiter.restart_mode(decision)
    missing = sorted(key for key in overrides if key not in exploiter.task_setters)
    if mode == INPLACE and not missing:
        start = time.perf_counter()
        rate = exploiter.carried_rate(decision, None)
        for key, value in overrides.items():
            exploiter.task_setters[key](value)
        outcome = exploiter.finish_inplace(decision, None, rate)
        log.info(
            "PBT policy %d: entered curriculum stage %d in place in %.1f ms",
            member.pbt.policy_idx,
            state.stage,
            (time.perf_counter() - start) * 1000,
        )
        return outcome
    if mode == INPLACE:
        why = f"{', '.join(missing)} cannot change in the running task (no live setter)"
    return exploiter.plan_exec(decision, frame, why)
