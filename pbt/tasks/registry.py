"""One registry behind ``task=``: built-in tasks, the user's own classes, Isaac Gym, envpool.

Accepted values of ``task=`` on the command line:

* a built-in name: ``Pendulum``, ``Cartpole``, ... (:data:`BUILTIN_TASKS`);
* an import path to the user's own vectorized task class: ``my_package.my_module:MyTask``;
* ``isaacgym/<Name>``: an IsaacGymEnvs task (needs ``isaacgym`` and ``isaacgymenvs``);
* ``envpool/<EnvId>``: a MuJoCo (or other) envpool environment, e.g. ``envpool/HalfCheetah-v4``;
* ``isaaclab/<TaskId>``: an Isaac Lab 3.0 task, e.g. ``isaaclab/Isaac-Cartpole-Direct`` (pbt/tasks/isaaclab.py).

The non-built-in forms are rewritten before Hydra composes the config into a config-group
choice plus ``task.name`` (``task=imported task.name=my_package.my_module:MyTask``), so Hydra only
ever sees options that exist under ``configs/task/``. Nothing here imports torch.
"""

import fnmatch
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError, TaskError, did_you_mean
from pbt.mutation.shaping import RewardShaping
from pbt.tasks.base import check_task_interface
from pbt.tasks.isaacgym import build_isaacgym_task, import_isaacgym

log = logging.getLogger(__name__)

#: Built-in task name (the value of ``task=``) -> "module:Class" (imported only when built).
BUILTIN_TASKS: Dict[str, str] = {
    "Pendulum": "pbt.tasks.pendulum:Pendulum",
    "Cartpole": "pbt.tasks.cartpole:Cartpole",
    "Reacher": "pbt.tasks.reacher:Reacher",
    "PendulumImage": "pbt.tasks.pendulum_image:PendulumImage",
}

#: config-group options under configs/task/ that stand for a family of tasks, keyed by prefix.
FAMILY_OPTIONS = {"isaacgym": "isaacgym", "envpool": "envpool", "isaaclab": "isaaclab"}
IMPORTED_OPTION = "imported"


@dataclass(frozen=True)
class TaskRef:
    """What ``task=`` resolved to: a config-group option and the task's name within it."""

    option: str
    """The file under configs/task/ Hydra composes (``Pendulum``, ``imported``, ``envpool``...)."""
    name: str
    """The task's name: built-in name, ``module:Class``, Isaac Gym task name or envpool id."""

    @property
    def kind(self) -> str:
        if self.option == IMPORTED_OPTION:
            return "imported"
        if self.option in FAMILY_OPTIONS.values():
            return self.option
        return "builtin"


def valid_task_help() -> str:
    builtins = ", ".join(sorted(BUILTIN_TASKS))
    return (
        f"Built-in tasks: {builtins}. Your own task: task=my_package.my_module:MyTask. "
        "Isaac Gym: task=isaacgym/<Name>. envpool/MuJoCo: task=envpool/<EnvId> (e.g. envpool/HalfCheetah-v4). "
        "Isaac Lab: task=isaaclab/<TaskId> (e.g. isaaclab/Isaac-Cartpole-Direct)."
    )


def parse_task(value: str) -> TaskRef:
    """Parse the value of ``task=``; raise TaskError listing the valid tasks when it matches none."""
    value = value.strip().strip("'\"")
    if value in BUILTIN_TASKS:
        return TaskRef(value, value)
    if value in (IMPORTED_OPTION, *FAMILY_OPTIONS.values()):
        return TaskRef(value, "")
    prefix, sep, rest = value.partition("/")
    if sep and prefix in FAMILY_OPTIONS:
        if not rest:
            raise TaskError(f"task={value}: missing the task name after '{prefix}/'. {valid_task_help()}")
        return TaskRef(FAMILY_OPTIONS[prefix], rest)
    module, sep, cls = value.partition(":")
    if sep:
        if not module or not cls.isidentifier():
            raise TaskError(
                f"task={value}: an import path must look like my_package.my_module:MyTask. {valid_task_help()}"
            )
        return TaskRef(IMPORTED_OPTION, value)
    hint = did_you_mean(value, BUILTIN_TASKS)
    raise TaskError(f"Unknown task '{value}'.{hint} {valid_task_help()}")


def rewrite_task_overrides(argv: Sequence[str]) -> List[str]:
    """Rewrite a ``task=<value>`` override into ``task=<option> task.name=<name>`` when needed, and
    IsaacGymEnvs' ``task/<group>=<option>`` (a config group of the task YAML, e.g. ``task/env=regrasping``
    of AllegroKuka) into ``++task.groups.<group>=<option>``.

    Built-in names pass unchanged; an unknown name raises TaskError at once, before Hydra runs.
    """
    out: List[str] = []
    isaaclab_task = ""
    ref = None
    groups: List[Tuple[str, str]] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "task":
            ref = parse_task(value)
            isaaclab_task = ref.name if ref.option == "isaaclab" else ""
            out.append(f"task={ref.option}")
            if ref.name and ref.option != ref.name:
                out.append(
                    f"task.name={ref.name!r}" if any(c in ref.name for c in ",[]{}()=") else f"task.name={ref.name}"
                )
            continue
        if sep and key.lstrip("+").startswith("task/"):
            groups.append((key.lstrip("+")[len("task/") :], value))
            continue
        out.append(arg)
    for group, option in groups:
        out.append(_isaacgym_group_override(group, option, ref))
    # --- isaaclab: the task's own agent config as overrides before the user's (pbt/tasks/isaaclab.py) ---
    if isaaclab_task:
        from pbt.tasks.isaaclab import rewrite_isaaclab_overrides

        out = rewrite_isaaclab_overrides(isaaclab_task, out)
    # --- end isaaclab ---
    return out


def _isaacgym_group_override(group: str, option: str, ref: Any) -> str:
    """``task/<group>=<option>`` as the override of ``task.groups`` that configs/task/isaacgym.yaml declares;
    TaskError when the task is not an Isaac Gym task or the names are not plain."""
    spelled = f"task/{group}={option}"
    if ref is None or ref.kind != "isaacgym":
        chosen = "no task= was given" if ref is None else f"task={ref.name or ref.option} is not one"
        raise TaskError(
            f"{spelled}: chooses an option of a config group of an IsaacGymEnvs task YAML (as "
            f"`task=AllegroKuka task/env=regrasping` in IsaacGymEnvs), so it needs an Isaac Gym task and "
            f"{chosen}: give task=isaacgym/<Name> (e.g. task=isaacgym/AllegroKuka {spelled})."
        )
    plain = [part for part in (group, option) if not part or not part.replace("_", "").replace("-", "").isalnum()]
    if plain:
        raise TaskError(
            f"{spelled}: a group and an option are plain names (letters, digits, _ and -), as the files "
            "<group>/<option>.yaml beside the task YAML."
        )
    return f"++task.groups.{group}={option}"


def import_task_class(path: str) -> Callable[..., Any]:
    """Import ``module:Class``; TaskError saying what to fix when it cannot."""
    module_name, _, cls_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(
            f"task={path}: cannot import module '{module_name}' ({exc}). Install the package that provides it "
            "or add its directory to PYTHONPATH."
        ) from exc
    try:
        return getattr(module, cls_name)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise TaskError(
            f"task={path}: module '{module_name}' has no attribute '{cls_name}'.{did_you_mean(cls_name, names)}"
        ) from None


def task_ref_of(task_cfg: Mapping[str, Any]) -> TaskRef:
    """Which task the composed config's ``task`` block describes (``kind`` is set by the family configs)."""
    kind = str(task_cfg.get("kind", "builtin"))
    name = str(task_cfg.get("name", "") or "")
    if kind == "builtin":
        return parse_task(name)
    if not name:
        example = {
            "imported": "my_package.my_module:MyTask",
            "isaacgym": "Ant",
            "envpool": "HalfCheetah-v4",
            "isaaclab": "Isaac-Cartpole-Direct",
        }
        raise ConfigError(
            f"task={kind} needs the task's name: task={kind}/{example.get(kind, '<name>')}"
            if kind != "imported"
            else f"task=imported needs task.name={example[kind]}"
        )
    return TaskRef(kind, name)


#: Reward-shaping config keys of the task families whose classes declare none: Isaac Gym tasks' reward
#: scales, bonuses, penalties, costs and weights (IsaacGymEnvs' Ant headingWeight/actionsCost,
#: AllegroKuka's *RewScale, ShadowHand's *RewardScale/fallPenalty ...), Isaac Lab's reward term weights
#: and direct envs' rew_scale_*, and the MuJoCo reward weights envpool takes as kwargs.
FAMILY_REWARD_SHAPING: Dict[str, Tuple[str, ...]] = {
    "isaacgym": ("task.env.*rew*", "task.env.*bonus*", "task.env.*penalty*", "task.env.*cost*", "task.env.*weight*"),
    "isaaclab": ("task.env.rewards.*.weight", "task.env.rew_scale_*"),
    "envpool": ("task.env.kwargs.*reward*", "task.env.kwargs.*cost*"),
}
#: IsaacGymEnvs tasks known to report ``extras["true_objective"]`` (DexPBT's AllegroKuka family).
ISAACGYM_TRUE_OBJECTIVE = ("AllegroKuka*",)


def reward_shaping(ref: TaskRef) -> RewardShaping:
    """Which config keys shape the task's reward, and whether it reports its own objective: a built-in or
    user task class's ``reward_shaping_keys`` and ``reports_true_objective`` (pbt/tasks/base.py; the
    class is imported, not built), the family's keys otherwise."""
    if ref.kind in ("builtin", "imported"):
        cls = import_task_class(BUILTIN_TASKS[ref.name] if ref.kind == "builtin" else ref.name)
        keys = getattr(cls, "reward_shaping_keys", ()) or ()
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise TaskError(
                f"task={ref.name}: reward_shaping_keys must be a sequence of config keys "
                f"(e.g. ('task.env.actionCost',)), got {keys!r}."
            )
        return RewardShaping(ref.name, tuple(keys), bool(getattr(cls, "reports_true_objective", False)))
    reports = ref.kind == "isaacgym" and any(fnmatch.fnmatchcase(ref.name, p) for p in ISAACGYM_TRUE_OBJECTIVE)
    return RewardShaping(f"{ref.kind}/{ref.name}", FAMILY_REWARD_SHAPING.get(ref.kind, ()), reports)


def build_task(
    ref: TaskRef,
    task_cfg: Mapping[str, Any],
    sim_device: str,
    rl_device: str,
    headless: bool,
    graphics_device_id: int = 0,
) -> Any:
    """Construct the task object (built-in or imported); Isaac Gym / envpool are built by their adapters."""
    if ref.kind == "builtin":
        cls = import_task_class(BUILTIN_TASKS[ref.name])
    elif ref.kind == "imported":
        if not ref.name:
            raise TaskError(f"task=imported needs task.name=my_package.my_module:MyTask. {valid_task_help()}")
        cls = import_task_class(ref.name)
    elif ref.kind == "isaacgym":
        return build_isaacgym_task(ref.name, task_cfg, sim_device, rl_device, headless, graphics_device_id)
    elif ref.kind == "envpool":
        from pbt.tasks.envpool import EnvpoolTask  # imports torch; envpool itself is imported when built

        return EnvpoolTask(cfg=task_cfg, sim_device=sim_device, rl_device=rl_device, headless=headless, env_id=ref.name)
    elif ref.kind == "isaaclab":  # --- isaaclab (pbt/tasks/isaaclab.py; imports Isaac Lab when built) ---
        from pbt.tasks.isaaclab import build_isaaclab_task

        return build_isaaclab_task(ref.name, task_cfg, sim_device, rl_device, headless)
    else:
        raise TaskError(f"build_task cannot build {ref.kind} tasks; they are created by their rl_games adapter.")
    task = cls(cfg=dict(task_cfg), sim_device=sim_device, rl_device=rl_device, headless=headless)
    check_task_interface(task, ref.name)
    return task


def build_configured_task(plain: Mapping[str, Any], task_cfg: Optional[Mapping[str, Any]] = None) -> Any:
    """:func:`build_task` for a worker's plain (resolved) config: its ``task`` block, or ``task_cfg``
    in its place (an evaluation's second instance), on the config's devices."""
    task_cfg = plain["task"] if task_cfg is None else task_cfg
    return build_task(
        task_ref_of(task_cfg),
        task_cfg,
        plain["sim_device"],
        plain["rl_device"],
        bool(plain.get("headless", True)),
        int(plain.get("graphics_device_id", 0)),
    )


def prepare_backend(ref: TaskRef) -> None:
    """Import what a task's backend must import before torch. Call before torch/rl_games are imported.

    Isaac Gym refuses to load once torch is imported ("PyTorch was imported before isaacgym
    modules"), so the worker imports it first; a missing Isaac Gym fails here, before rl_games loads.
    A user's class (``task=my_pkg.mod:Cls``) is imported here too: an Isaac Gym task module imports
    ``isaacgym`` itself, which must happen before anything of ours imports torch.
    """
    if ref.kind == "isaacgym":
        import_isaacgym(ref.name)
    elif ref.kind == "imported" and ref.name:
        import_task_class(ref.name)
