"""Carry out a member's move to the next curriculum stage (:mod:`pbt.curriculum`) in a running agent.

The stage's task settings go into the running task when it has a live setter for every one of
them (``live_setters()``: a built-in task's declared keys, an Isaac Lab task's ``task.liveEnvKeys``),
with the new stage's hyperparameters put in force as any in-place exploit does; otherwise the
member restarts from its own newest checkpoint (exec), and the restarted process takes its stage,
and the stage's task settings, from its lineage (:func:`pbt.curriculum.member.restore_stage`).
"""

import logging
import time
from typing import Any, Optional

from pbt.curriculum.stages import StageState
from pbt.selection import KEEP, Decision

log = logging.getLogger(__name__)

INPLACE = "inplace"  # pbt.rl_games.exploit.INPLACE (importing that module here would be a cycle)


def enter_stage(exploiter: Any, decision: Decision, frame: int, objective: Optional[float], final: bool) -> bool:
    """Carry out the member's pending stage transition (:class:`pbt.rl_games.exploit.Exploiter`
    ``exploiter``; ``decision`` from :func:`pbt.curriculum.member.stage_decision`); False when no
    transition is pending (the caller acts on ``decision`` as usual). On the last epoch the
    transition is logged, not made."""
    member = exploiter.member
    state: Optional[StageState] = getattr(member, "curriculum", None)
    if state is None or state.pending is None:
        return False
    transition = state.pending
    state.pending = None
    if final:
        exploiter.log_decision(
            KEEP, decision, f"{decision.reason}; not acted on: training ends this epoch", frame, objective
        )
        return True
    member.enter_stage(transition)
    overrides = state.overrides()
    member.apply_params(overrides)  # the config a later rebuild starts from
    mode, why = exploiter.restart_mode(decision)
    missing = sorted(key for key in overrides if key not in exploiter.task_setters)
    if mode == INPLACE and not missing:
        start = time.perf_counter()
        for key, value in overrides.items():
            exploiter.task_setters[key](value)
        exploiter.finish_inplace(decision, frame, objective, start, new_policy=True)
        log.info("PBT policy %d: entered curriculum stage %d in place", member.pbt.policy_idx, state.stage)
        return True
    if mode == INPLACE:
        why = f"{', '.join(missing)} cannot change in the running task (no live setter)"
    exploiter.restart(decision, frame, objective, why)
    return True
