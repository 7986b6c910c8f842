"""``pbt-replay <schedule.yaml> task=... [overrides]``: train one worker that follows a
recorded hyperparameter schedule, without a population (like Ray Tune's PBT replay).

The schedule is the ``best/schedule.yaml`` written by ``pbt-analyze`` (or any YAML with
a ``steps`` list of ``{frame, params}``, params keyed by full config key). Steps at frame 0 are
applied to the config before the agent is built (any key may change there); every later step is
applied in the running agent (through the learner's :class:`pbt.rl_games.agent.AgentAdapter`) at
the end of the first epoch whose frame count is >= the step's frame, and the values read back from
the agent are logged. Under rl_games' adaptive schedule a step scales the learning rate in force by
its change of ``learning_rate``, as a PBT change does (docs/rl_games.md). A later step that changes
a key which cannot change in a running agent (horizon_length, minibatch_size, the network, task
parameters...) is refused before training starts.

Other arguments are Hydra overrides, as for ``pbt-train``. PBT is off in a replay.
"""

import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import yaml

from pbt.errors import ConfigError, PbtError
from pbt.mutation.explore import frozen_reason
from pbt.rl_games.agent import CONFIG, AgentAdapter, rate_factor
from pbt.storage.bounds import MAX_FRAMES
from pbt.storage.record import MAX_PARAM_INT
from pbt.tools.display import printable

log = logging.getLogger("pbt.replay")

USAGE = "usage: pbt-replay <schedule.yaml> task=<task> [key=value ...]"


@dataclass(frozen=True)
class ScheduleStep:
    """From ``frame`` on, train with ``params`` (full config key -> value)."""

    frame: int
    params: Dict[str, Any]


@dataclass(frozen=True)
class TimedChange:
    """What a step changes in the running agent, relative to the values in force before it."""

    index: int
    """1-based position of the step in the schedule."""
    frame: int
    changes: Dict[str, Any]
    before: Dict[str, Any]


def _plain_value(value: Any, where: str, in_list: bool = False) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_PARAM_INT:
        raise ConfigError(
            f"{where} is an int of {len(str(abs(value)))} digits; a schedule holds what records hold (ints "
            f"below 2**63). Fix the schedule file."
        )
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, list) and len(value) <= 64:  # a list-valued key (an evolved network's units)
        return [_plain_value(item, f"{where}[{index}]", True) for index, item in enumerate(value)]
    if in_list and isinstance(value, Mapping) and len(value) <= 16 and all(isinstance(k, str) for k in value):
        # a list of small mappings: an evolved CNN's train.params.network.cnn.convs
        return {k: _plain_value(v, f"{where}[{k!r:.40}]", True) for k, v in value.items()}
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where} is {value}; a schedule holds finite numbers. Fix the schedule file.")
        return value
    raise ConfigError(
        f"{where} has type {type(value).__name__}; a schedule holds numbers, strings, booleans and "
        "short lists of them (and of small mappings: a CNN's convs) only."
    )


def parse_schedule(document: Any, source: str = "<schedule>") -> List[ScheduleStep]:
    """Validate a parsed schedule (a mapping with ``steps``, or a bare list of steps)."""
    steps_data = document.get("steps") if isinstance(document, Mapping) else document
    if not isinstance(steps_data, list) or not steps_data:
        raise ConfigError(
            f"{source}: expected a 'steps' list of {{frame, params}} (as written by pbt-analyze "
            "into best/schedule.yaml), got none. Pass a schedule file."
        )
    steps: List[ScheduleStep] = []
    for number, item in enumerate(steps_data, start=1):
        where = f"{source}: step {number}"
        if not isinstance(item, Mapping) or "frame" not in item or "params" not in item:
            raise ConfigError(f"{where} must be a mapping with 'frame' and 'params'.")
        frame = item["frame"]
        if (
            isinstance(frame, bool)
            or not isinstance(frame, (int, float))
            or not 0 <= frame <= MAX_FRAMES  # compared as it is: float() of a 400-digit int overflows; NaN fails
            or float(frame) != int(frame)
        ):
            raise ConfigError(f"{where}: frame must be a whole number in 0..{MAX_FRAMES}, got {frame!r:.80}.")
        params = item["params"]
        if not isinstance(params, Mapping):
            raise ConfigError(f"{where}: params must map full config keys to values, got {type(params).__name__}.")
        clean = {}
        for key, value in params.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"{where}: parameter name {key!r:.80} is not a config key string.")
            why = frozen_reason(key)
            if why is not None:  # a schedule comes from workspace files: never the run's identity or task
                raise ConfigError(
                    f"{where}: {key[:200]!r} never changes in PBT ({why}), so no schedule sets it. "
                    "The schedule was edited or planted; remove that key, or pass it on the command "
                    "line yourself."
                )
            clean[key] = _plain_value(value, f"{where} params['{key}']")
        if steps and int(frame) < steps[-1].frame:
            raise ConfigError(
                f"{where}: frame {int(frame)} comes before the previous step's {steps[-1].frame}; "
                "steps must be in frame order."
            )
        steps.append(ScheduleStep(int(frame), clean))
    return steps


def load_schedule(path: Any) -> List[ScheduleStep]:
    """Read and validate a schedule file (YAML, safe loader)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"schedule {path}: no such file. Pass the best/schedule.yaml written by pbt-analyze."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"schedule {path}: cannot read it ({exc}).") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"schedule {path}: not valid YAML ({exc}).") from exc
    return parse_schedule(document, str(path))


def plan(
    steps: Sequence[ScheduleStep], current: Mapping[str, Any], inplace_keys: Sequence[str]
) -> Tuple[Dict[str, Any], List[TimedChange]]:
    """Split a schedule into the config of frame 0 and the changes to make during training.

    ``current``: the config's values of the schedule's keys. Returns (initial params, timed
    changes). Raises ConfigError, before anything trains, when a step after frame 0 changes a key
    that is not in ``inplace_keys``.
    """
    initial: Dict[str, Any] = {}
    index = 0
    while index < len(steps) and steps[index].frame == 0:
        initial.update(steps[index].params)
        index += 1
    values = dict(current)
    values.update(initial)
    timed: List[TimedChange] = []
    refused: List[str] = []
    for number, step in enumerate(steps[index:], start=index + 1):
        changes = {k: v for k, v in step.params.items() if values.get(k) != v}
        bad = sorted(k for k in changes if k not in inplace_keys)
        if bad:
            refused.append(f"step {number} (frame {step.frame}): {', '.join(bad)}")
        before = {k: values.get(k) for k in changes}
        values.update(changes)
        timed.append(TimedChange(number, step.frame, changes, before))
    if refused:
        raise ConfigError(
            "the schedule changes hyperparameters that cannot change in a running agent after frame 0 ("
            + "; ".join(refused)
            + "). They can only be set in a step at frame 0 (before the agent is built). "
            f"Keys that can change during training: {', '.join(short(k) for k in sorted(inplace_keys))}. "
            "Remove those keys from the later steps of the schedule."
        )
    return initial, timed


def short(key: str) -> str:
    return key[len(CONFIG) :] if key.startswith(CONFIG) else key


def make_observer(cfg: Dict[str, Any], timed: Sequence[TimedChange], total: int) -> Any:
    """A WorkerObserver that also applies ``timed`` changes at epoch ends."""
    from pbt.rl_games.observer import WorkerObserver

    class ReplayObserver(WorkerObserver):
        def __init__(self) -> None:
            super().__init__(cfg)
            self.pending: List[TimedChange] = list(timed)
            self.applied: List[Tuple[TimedChange, int]] = []

        def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
            super().after_print_stats(frame, epoch_num, total_time)
            now = int(self.algo.frame)
            while self.agent is not None and self.pending and self.pending[0].frame <= now:
                self.apply(self.agent, self.pending.pop(0), now, int(epoch_num))

        def apply(self, agent: AgentAdapter, change: TimedChange, frame: int, epoch: int) -> None:
            rate = agent.rate_in_force()  # as a PBT change: the schedule's rate in force, scaled
            agent.set_hyperparameters(change.changes)
            carried = ""
            if rate is not None:
                factor = rate_factor(change.before, change.changes)
                agent.put_rate(rate * factor)
                carried = f"; adaptive rate in force {rate!r} -> {agent.rate_in_force()!r} (x{factor!r})"
            parts = [
                f"{short(k)} {change.before.get(k)!r} -> {v!r} (agent {agent.read(k)!r})"
                for k, v in sorted(change.changes.items())
            ]
            log.info(
                "REPLAY step %d/%d scheduled at frame %d applied at frame %d (epoch %d): %s",
                change.index,
                total,
                change.frame,
                frame,
                epoch,
                (", ".join(parts) or "no change") + carried,
            )
            self.applied.append((change, frame))

    return ReplayObserver()


def _config_values(cfg: Any, keys: Sequence[str]) -> Dict[str, Any]:
    from omegaconf import OmegaConf

    from pbt.keys import missing_key_error

    values = {}
    missing = object()
    for key in keys:
        value = OmegaConf.select(cfg, key, default=missing, throw_on_missing=False)
        if value is missing:
            raise missing_key_error(
                key, cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=False)), what=f"Schedule key '{key}'"
            )
        values[key] = value
    return values


def run(cfg: Any, steps: Sequence[ScheduleStep]) -> Any:
    """Train one worker following ``steps``; return its RunSummary."""
    from omegaconf import OmegaConf

    from pbt.rl_games.runner import prepare_task_backend

    prepare_task_backend(cfg)  # Isaac Gym before torch: the adapters import it
    from pbt.rl_games.registry import adapter_class

    if cfg.pbt.get("enabled", False):
        log.warning("PBT is off in a replay (one worker follows the schedule); ignoring pbt.enabled=true")
        cfg.pbt.enabled = False
    keys = sorted({k for step in steps for k in step.params})
    inplace_keys = adapter_class(str(cfg.train.params.algo.name)).inplace_keys()
    initial, timed = plan(steps, _config_values(cfg, keys), inplace_keys)
    for key, value in sorted(initial.items()):
        OmegaConf.update(cfg, key, value, merge=False)
    if initial:
        log.info(
            "REPLAY step 1/%d at frame 0 applied as config before training: %s",
            len(steps),
            ", ".join(f"{short(k)}={v!r}" for k, v in sorted(initial.items())),
        )
    from pbt.rl_games.runner import run as run_worker

    observers: List[Any] = []

    def factory(plain: Dict[str, Any]) -> Any:
        observers.append(make_observer(plain, timed, len(steps)))
        return observers[0]

    summary = run_worker(cfg, factory)
    observer = observers[0]
    if observer.pending:
        log.warning(
            "REPLAY: %d step(s) not reached (first at frame %d; training ended at frame %d). Raise "
            "max_frames to replay them.",
            len(observer.pending),
            observer.pending[0].frame,
            summary.frames,
        )
    log.info("REPLAY done: %d of %d timed step(s) applied", len(observer.applied), len(timed))
    return summary


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

_SCHEDULE: List[ScheduleStep] = []


def _hydra_entry() -> Callable[[], None]:
    import hydra
    from omegaconf import DictConfig

    from pbt.resolvers import CONFIG_DIR

    @hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
    def _hydra_main(cfg: DictConfig) -> None:
        try:
            run(cfg, _SCHEDULE)
        except PbtError as exc:
            log.error("%s", exc)
            sys.exit(2)

    return _hydra_main


def main(argv: Optional[Sequence[str]] = None) -> None:
    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or "=" in args[0]:
        print(
            USAGE + "\n\nThe schedule is the best/schedule.yaml written by pbt-analyze; the other "
            "arguments are Hydra overrides as for pbt-train.",
            file=sys.stderr,
        )
        sys.exit(0 if args and args[0] in ("-h", "--help") else 2)
    register_resolvers()
    try:
        _SCHEDULE[:] = load_schedule(args[0])
        sys.argv = [sys.argv[0], *rewrite_task_overrides(args[1:])]
    except PbtError as exc:
        print(f"Error: {printable(exc)}", file=sys.stderr)
        sys.exit(2)
    _hydra_entry()()


if __name__ == "__main__":
    main()
