"""What a PBT member (:class:`pbt.member.PbtMember`) does with its curriculum, kept here so the
member holds only calls: building its stage state at start-up, restoring it from the workspace,
and the decision of an iteration at which it moves on. No torch (Python 3.8).
"""

import logging
import random
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

from pbt.curriculum.stages import StageState, Transition, check_curriculum, redraw
from pbt.errors import ConfigError
from pbt.selection.base import MUTATE, Decision

if TYPE_CHECKING:
    from pbt.config import PbtConfig
    from pbt.storage.workspace import Workspace

log = logging.getLogger(__name__)


def curriculum_state(pbt: "PbtConfig", cfg: Mapping[str, Any], params: Mapping[str, Any]) -> Optional[StageState]:
    """The member's stage state (None without ``pbt.curriculum``), its stages checked against the
    composed config; ConfigError for what cannot work."""
    course = pbt.course
    if not course.curriculum:
        return None
    if pbt.elastic:
        raise ConfigError(
            "pbt.curriculum with an elastic population (pbt.num_policies=auto) is not supported: a joiner "
            "would take a member's weights without its stage. Give pbt.num_policies a number, or drop the curriculum."
        )
    stages = check_curriculum(course, cfg, params, pbt.explore)
    return StageState(course, stages, pbt.policy_idx)


def restore_stage(state: StageState, workspace: "Workspace") -> None:
    """Put a resumed or restarted member back into its stage (a fresh member starts in stage 0)."""
    record = workspace.latest_record(state.policy_idx)
    state.restore(record, workspace.read_lineage())
    log.info(
        "PBT policy %d: curriculum stage %d of %d %s (entered at frame %d; pbt.curriculum_mode=%s)",
        state.policy_idx,
        state.stage,
        len(state.stages),
        state.current.describe(),
        state.since,
        state.mode,
    )


def stage_decision(
    state: StageState,
    transition: Transition,
    params: Mapping[str, Any],
    configured: Mapping[str, Any],
    pbt: "PbtConfig",
    rng: random.Random,
) -> Decision:
    """The decision of an iteration at which the member moves on: a mutate of its own weights,
    with its hyperparameters kept (``continue``) or redrawn for the new stage (``reset``). It is
    carried out by :func:`pbt.rl_games.curriculum.enter_stage`."""
    after: Dict[str, Any] = dict(params)
    how = "hyperparameters kept (pbt.curriculum_mode=continue)"
    if state.reset_mode():
        # A generator of its own: the member's is re-seeded where it started, so its next draws would
        # repeat the sample a fresh member took there (measured: the first reset changed nothing).
        own = random.Random(hash((rng.getrandbits(32), transition.after, transition.frame)))
        after, source = redraw(state.stages[transition.after], pbt.explore, configured, params, own)
        how = f"hyperparameters reset: {source} (pbt.curriculum_mode=reset)"
    return Decision(MUTATE, None, f"curriculum: {transition.reason}; {how}", dict(params), after)
