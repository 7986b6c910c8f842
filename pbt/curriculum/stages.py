"""A member's way through the curriculum: when it moves on, whom it is ranked against, what it
restarts from. Pure functions and one small state object; no I/O, no torch (Python 3.8).

Rules (docs/guides/curriculum.md):

* **Advancing.** A member leaves stage ``s`` at a PBT iteration when it trained ``frames`` env frames
  in ``s``, or when its objective of that iteration (a whole interval measured in ``s``) reached
  ``objective``. It then enters ``s + 1`` at once; stages never go back.
* **Ranking.** Objectives of different stages are not comparable (a 3 cm goal is not an 8 cm one),
  so a member ranks, and takes donors, only among the members whose newest record is in its own
  stage. A later-stage member is never a donor for an earlier-stage one: its objective says nothing
  on the earlier stage's scale, and copying its weights back would also undo its progress through
  the curriculum. Within a stage, peers are compared at equal experience as always (pairwise, by
  frames: :mod:`pbt.selection.experience`), on objectives measured in the stage only (a member's
  objective history is forgotten when it enters a stage).
* **Resets.** With ``curriculum_mode=reset`` a member entering a stage redraws its hyperparameters
  (:func:`redraw`); with ``continue`` it keeps them.
* **The record.** Records and lineage entries carry the stage (``stage``, and ``stage_frame``: the
  frame the member entered it). A record without one (an older workspace) is stage 0.
"""

import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.curriculum.config import CONTINUE, CurriculumConfig, Stage
from pbt.errors import ConfigError
from pbt.keys import get_by_key, has_key, missing_key_error
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.scheme import checked_params, mutate_params
from pbt.mutation.space import SearchSpace, resolve_space

if TYPE_CHECKING:
    from pbt.storage.lineage import LineageEntry
    from pbt.storage.record import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transition:
    """A member moving from stage ``before`` into ``after`` at ``frame`` (why: ``reason``)."""

    before: int
    after: int
    frame: int
    reason: str


def record_stage(record: "Record") -> int:
    """The stage a record was written in (0 for a record from before curricula)."""
    return 0 if record.stage is None else int(record.stage)


def next_stage(
    stages: Sequence[Stage], stage: int, since: int, frame: int, objective: Optional[float]
) -> Optional[Transition]:
    """The transition due at this PBT iteration of a member in ``stage`` since frame ``since``, now
    at ``frame`` with the iteration's ``objective`` (None: unknown or measured partly elsewhere);
    None when it stays."""
    if stage >= len(stages) - 1:
        return None
    current = stages[stage]
    trained = frame - since
    if current.objective is not None and objective is not None and objective >= current.objective:
        reason = f"objective {objective:.4g} reached {current.objective:.4g} after {trained} frames in '{current.name}'"
    elif current.frames is not None and trained >= current.frames:
        reason = f"{trained} frames trained in '{current.name}' (limit {current.frames})"
    else:
        return None
    return Transition(stage, stage + 1, frame, f"{reason}: entered stage {stage + 1} {stages[stage + 1].describe()}")


def same_stage(peers: Mapping[int, "Record"], stage: int) -> Dict[int, "Record"]:
    """The peers' records written in ``stage``: the only ones a member in it is ranked against."""
    return {idx: record for idx, record in peers.items() if record_stage(record) == stage}


def furthest_stage(peers: Mapping[int, "Record"], last: int) -> Dict[int, "Record"]:
    """The records of the furthest stage any member reached (up to ``last``): those the
    population's best copy is chosen from (an easier stage's objective would look better)."""
    stages = [record_stage(r) for r in peers.values() if record_stage(r) <= last]
    return same_stage(peers, max(stages)) if stages else {}


def redraw(
    stage: Stage, explore: ExploreConfig, configured: Mapping[str, Any], current: Mapping[str, Any], rng: random.Random
) -> Tuple[Dict[str, Any], str]:
    """``curriculum_mode=reset``: the hyperparameters of a member entering ``stage`` (from
    ``current``), and where they came from. From the stage's search space, else ``pbt.search_space``,
    else the ``configured`` values mutated once (as a fresh member). A draw that fails the scheme's
    check (it cannot, after :func:`check_curriculum`) keeps ``current``."""
    space = stage.search_space or explore.search_space
    if space:
        drawn, source = space.sample(current, rng), "drawn from the stage's search space"
        if not stage.search_space:
            source = "drawn from pbt.search_space"
    else:
        drawn, source = mutate_params(configured, explore, rng), "the configured values mutated once"
    clean, problems = checked_params(drawn, current, explore.mutation, explore.bounds, explore.search_space)
    if problems:
        log.error("curriculum reset: the new hyperparameters fail the check (%s); keeping them", "; ".join(problems))
        return dict(current), "kept (the draw failed the check)"
    return {key: clean.get(key, value) for key, value in current.items()}, source


def check_curriculum(
    config: CurriculumConfig, resolved_config: Mapping[str, Any], params: Mapping[str, Any], explore: ExploreConfig
) -> Tuple[Stage, ...]:
    """Start-up checks against the composed config: every stage's task key exists and is no
    hyperparameter PBT changes, every stage search space names only hyperparameters the member has
    and stays inside ``pbt.search_space``. Returns the stages with their spaces resolved
    (``divisors_of`` expanded); ConfigError listing every problem, each saying how to fix it."""
    problems: List[str] = []
    stages: List[Stage] = []
    for index, stage in enumerate(config.curriculum):
        where = f"pbt.curriculum[{index}] ('{stage.name}')"
        for key in sorted(stage.task):
            if not has_key(resolved_config, key):
                problems.append(str(missing_key_error(key, resolved_config, f"{where}: task key '{key}'")))
            elif key in params:
                problems.append(
                    f"{where}: '{key}' is also a hyperparameter PBT mutates; a key is either the curriculum's or "
                    "PBT's. Remove it from the stage or from pbt.mutation / pbt.search_space."
                )
            elif isinstance(get_by_key(resolved_config, key), (Mapping, list)):
                problems.append(f"{where}: '{key}' is a config section, not a value; name a key inside it.")
        space = stage.search_space
        if space:
            foreign = sorted(k for k in space.dims if k not in params)
            if foreign:
                problems.append(
                    f"{where}.search_space: {', '.join(foreign)} is no hyperparameter of this member (not in "
                    "pbt.mutation or pbt.search_space); a stage redraws only those. Add it there or drop it."
                )
                stages.append(stage)
                continue
            try:
                space = resolve_space(space, resolved_config)
            except ConfigError as exc:
                problems.append(f"{where}.search_space: {exc}")
            problems.extend(_outside(where, space, explore.search_space))
        stages.append(Stage(stage.name, stage.task, stage.frames, stage.objective, space))
    if problems:
        raise ConfigError("Invalid curriculum (pbt.curriculum):\n  - " + "\n  - ".join(problems))
    return tuple(stages)


def _outside(where: str, space: SearchSpace, outer: SearchSpace) -> List[str]:
    """Dimensions of a stage's space that reach outside the same key's range in ``outer``."""
    problems = []
    for key, dim in sorted(space.dims.items()):
        bound = outer.dims.get(key)
        if bound is None:
            continue
        ends = list(dim.values) if not dim.continuous else [dim.low, dim.high]
        bad = [v for v in ends if v is None or not bound.contains(v)]
        if bad:
            problems.append(
                f"{where}.search_space['{key}']: {bad[0]!r} lies outside pbt.search_space's {bound.describe()}, "
                "where every later mutation would clamp it. Narrow the stage's range."
            )
    return problems


class StageState:
    """Where one member is in the curriculum: its stage, the frame it entered it, the transition
    decided at this iteration and not yet carried out (``pending``)."""

    def __init__(self, config: CurriculumConfig, stages: Tuple[Stage, ...], policy_idx: int) -> None:
        self.stages = stages
        self.mode = config.curriculum_mode
        self.policy_idx = policy_idx
        self.stage = 0
        self.since = 0
        self.pending: Optional[Transition] = None

    @property
    def current(self) -> Stage:
        return self.stages[self.stage]

    def overrides(self) -> Dict[str, Any]:
        """The task settings in force in the member's stage."""
        return dict(self.current.task)

    def restore(self, record: Optional["Record"], lineage: Sequence["LineageEntry"]) -> None:
        """The stage of a resumed or restarted member: the newest stage its lineage or its record
        names (a transition is in the lineage before the exec restart that carries it out).
        ConfigError when that stage is beyond this curriculum (the config lost stages)."""
        stage, since = 0, 0
        if record is not None and record.stage is not None:
            stage = record.stage
            since = record.stage_frame if record.stage_frame is not None and record.stage_frame <= record.frame else 0
        entered = entry_frames(lineage)
        newest = max(entered) if entered else None
        if newest is not None and newest > stage:
            stage, since = newest, entered[newest]
        if stage >= len(self.stages):
            raise ConfigError(
                f"PBT policy {self.policy_idx}: its records say it is in curriculum stage {stage}, but pbt.curriculum "
                f"has {len(self.stages)} stages (0..{len(self.stages) - 1}). Restore the curriculum it was started "
                "with, or start the member over (pbt.resume=false pbt.overwrite=true)."
            )
        self.stage, self.since = stage, since

    def check(self, frame: int, objective: Optional[float]) -> Optional[Transition]:
        """Decide (not carry out) whether the member moves on at this iteration."""
        self.pending = next_stage(self.stages, self.stage, self.since, frame, objective)
        return self.pending

    def enter(self, transition: Transition) -> None:
        self.stage, self.since, self.pending = transition.after, transition.frame, None

    def reset_mode(self) -> bool:
        return self.mode != CONTINUE


def entry_frames(lineage: Sequence["LineageEntry"]) -> Dict[int, int]:
    """Stage -> the frame of the lineage entry where the member entered it (the newest time)."""
    entered: Dict[int, int] = {}
    previous: Optional[int] = None
    for entry in lineage:
        if entry.stage is None:
            continue
        if entry.stage != previous:
            entered[entry.stage] = entry.frame
        previous = entry.stage
    return entered
