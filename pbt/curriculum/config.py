"""The curriculum as declared in config: ``pbt.curriculum`` (a list of stages) and
``pbt.curriculum_mode``.

A stage is a set of task overrides (``task.env.goalRadius: 0.08``) and when a member leaves it:
after ``frames`` env frames in the stage, or once its objective reaches ``objective`` (whichever
comes first); the last stage has neither (training ends in it). A stage may carry its own
``search_space`` that ``curriculum_mode=reset`` redraws from. Everything is checked here (types,
ranges, names) and against the composed config at start-up (:func:`pbt.curriculum.stages.check_curriculum`).

No torch: Python 3.8, standard library and the search-space parser only.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pbt.errors import ConfigError, did_you_mean
from pbt.mutation.space import SearchSpace, parse_space
from pbt.sections import PARSER, Section, require_choice

CONTINUE, RESET = "continue", "reset"
CURRICULUM_MODES: Tuple[str, ...] = (CONTINUE, RESET)
"""Names accepted by ``pbt.curriculum_mode``."""
MAX_STAGES = 64
"""A curriculum has at most this many stages (records refuse a stage number beyond it)."""
STAGE_FIELDS: Tuple[str, ...] = ("name", "task", "frames", "objective", "search_space")
HELP = (
    "Write pbt.curriculum as a list of stages, e.g. [{name: wide, task: {task.env.goalRadius: 0.08}, "
    "frames: 400000}, ..., {name: final, task: {task.env.goalRadius: 0.03}}] (configs/pbt/curriculum/)."
)


@dataclass(frozen=True)
class Stage:
    """One stage of the curriculum."""

    name: str
    task: Dict[str, Any]
    """Full task config key (``task.env.goalRadius``) -> the value in force during this stage."""
    frames: Optional[int] = None
    """Leave the stage after this many env frames trained in it (None: no frame limit)."""
    objective: Optional[float] = None
    """Leave the stage once the member's objective (a whole interval's, not mixed) reaches this."""
    search_space: SearchSpace = field(default_factory=lambda: SearchSpace({}))
    """Where ``curriculum_mode=reset`` redraws from on entering this stage (empty: pbt.search_space)."""

    @property
    def final(self) -> bool:
        return self.frames is None and self.objective is None

    def to_spec(self) -> Dict[str, Any]:
        """Plain data that :func:`parse_stages` reads back (YAML-safe)."""
        spec: Dict[str, Any] = {"name": self.name, "task": dict(self.task)}
        if self.frames is not None:
            spec["frames"] = self.frames
        if self.objective is not None:
            spec["objective"] = self.objective
        if self.search_space:
            spec["search_space"] = self.search_space.to_spec()
        return spec

    def describe(self) -> str:
        """``wide (task.env.goalRadius=0.08)`` for logs and lineage reasons."""
        values = ", ".join(f"{k}={v!r}" for k, v in sorted(self.task.items()))
        return f"'{self.name}' ({values})" if values else f"'{self.name}'"


def _stage_error(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {problem}. {HELP}")


def _frames(where: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.replace("_", ""))
        except ValueError:
            pass
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _stage_error(f"{where}.frames", f"must be a whole number of env frames > 0, got {value!r}")
    return value


def _threshold(where: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _stage_error(f"{where}.objective", f"must be a finite number (the objective to reach), got {value!r}")
    return float(value)


def _task(where: str, value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _stage_error(f"{where}.task", f"must map task config keys to values, got {type(value).__name__}")
    out: Dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.startswith("task.") or key == "task.":
            raise _stage_error(
                f"{where}.task",
                f"{key!r} is not a task key: a stage overrides task config keys only, written in full "
                "(task.env.goalRadius)",
            )
        if isinstance(item, (Mapping, list)):
            raise _stage_error(f"{where}.task['{key}']", f"must be a plain value (number, bool, string), got {item!r}")
        out[key] = item
    return out


def _stage(index: int, value: Any, last: bool) -> Stage:
    where = f"pbt.curriculum[{index}]"
    if not isinstance(value, Mapping):
        raise _stage_error(where, f"must be a mapping with {', '.join(STAGE_FIELDS)}, got {value!r}")
    unknown = sorted(str(k) for k in value if k not in STAGE_FIELDS)
    if unknown:
        raise _stage_error(
            where,
            f"unknown field {unknown[0]!r}.{did_you_mean(unknown[0], list(STAGE_FIELDS))} Fields: {', '.join(STAGE_FIELDS)}",
        )
    name = value.get("name")
    name = f"stage{index}" if name is None else name
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise _stage_error(f"{where}.name", f"must be a short non-empty string, got {name!r}")
    stage = Stage(
        name=name,
        task=_task(where, value.get("task")),
        frames=_frames(where, value.get("frames")),
        objective=_threshold(where, value.get("objective")),
        search_space=parse_space(f"curriculum[{index}].search_space", value.get("search_space")),
    )
    if last and not stage.final:
        raise _stage_error(
            where,
            "the last stage is where training ends, so it takes no frames or objective to leave it; "
            "remove them, or add the stage that follows",
        )
    if not last and stage.final:
        raise _stage_error(
            where, "a stage before the last needs frames and/or objective: when its members move on to the next stage"
        )
    return stage


def parse_stages(name: str, value: Any) -> Tuple[Stage, ...]:
    """``pbt.curriculum``: empty (no curriculum) or 2..MAX_STAGES stages, each checked field by field."""
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(v, Stage) for v in value):
        return value
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"pbt.{name} must be a list of stages, got {type(value).__name__}. {HELP}")
    if not value:
        return ()
    if len(value) < 2 or len(value) > MAX_STAGES:
        raise ConfigError(
            f"pbt.{name} has {len(value)} stage(s); a curriculum has 2 to {MAX_STAGES}. {HELP} "
            "For a single task setting, set the task keys directly and drop pbt.curriculum."
        )
    stages = tuple(_stage(i, item, i == len(value) - 1) for i, item in enumerate(value))
    names = [s.name for s in stages]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"pbt.{name}: stage name {twice[0]!r} is used twice; give every stage its own name.")
    return stages


@dataclass
class CurriculumConfig(Section):
    """A curriculum of task settings that members move through (``pbt/curriculum=<name>``)."""

    curriculum: Tuple[Stage, ...] = field(default_factory=tuple, metadata={PARSER: parse_stages})
    """Stages, in order (``configs/pbt/curriculum/``): each ``{name, task: {task.<key>: value},
    frames, objective, search_space}``. A member starts in the first and moves on after ``frames``
    env frames in a stage or once its objective reaches ``objective``; it is ranked only against
    members in the same stage. Empty: no curriculum."""
    curriculum_mode: str = CONTINUE
    """On entering a stage: "continue" (the member keeps its hyperparameters) or "reset" (it redraws
    them from the stage's ``search_space``, else ``pbt.search_space``, else the configured values
    mutated once, as a fresh member)."""

    def __post_init__(self) -> None:
        self.curriculum = parse_stages("curriculum", self.curriculum)
        require_choice("curriculum_mode", self.curriculum_mode, CURRICULUM_MODES, noun="modes")

    def to_flat(self) -> Dict[str, Any]:
        stages: List[Dict[str, Any]] = [s.to_spec() for s in self.curriculum]
        return {"curriculum": stages, "curriculum_mode": self.curriculum_mode}
