"""PBT across a curriculum: stages of task settings, members ranked within their stage.

- :mod:`pbt.curriculum.config`: ``pbt.curriculum`` / ``pbt.curriculum_mode`` as a config section;
- :mod:`pbt.curriculum.stages`: advancing, stage-aware ranking, resets, a member's stage state.

The rl_games side (carrying a transition out in place or by restart) is :mod:`pbt.rl_games.curriculum`.
"""

from pbt.curriculum.config import CONTINUE, CURRICULUM_MODES, MAX_STAGES, RESET, CurriculumConfig, Stage, parse_stages
from pbt.curriculum.stages import (
    StageState,
    Transition,
    check_curriculum,
    furthest_stage,
    next_stage,
    record_stage,
    redraw,
    same_stage,
)

__all__ = [
    "CONTINUE",
    "CURRICULUM_MODES",
    "MAX_STAGES",
    "RESET",
    "CurriculumConfig",
    "Stage",
    "StageState",
    "Transition",
    "check_curriculum",
    "furthest_stage",
    "next_stage",
    "parse_stages",
    "record_stage",
    "redraw",
    "same_stage",
]
