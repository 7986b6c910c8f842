"""Isaac Gym tasks (``task=isaacgym/<Name>``): IsaacGymEnvs' task classes built with its task YAMLs.

Needs NVIDIA Isaac Gym and IsaacGymEnvs; neither is imported until such a task is prepared or built,
and Isaac Gym must be imported before torch (:func:`pbt.tasks.registry.prepare_backend`). No torch here.
"""

import importlib.util
import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, cast

from pbt.errors import TaskError, did_you_mean
from pbt.tasks.base import check_task_interface

log = logging.getLogger(__name__)

ISAACGYM_INSTALL = (
    "Isaac Gym tasks need NVIDIA Isaac Gym (Preview 4, Python 3.6-3.8, an NVIDIA GPU; download it from "
    "NVIDIA and `pip install -e isaacgym/python`) and IsaacGymEnvs (`pip install -e IsaacGymEnvs`)."
)

#: Resolvers IsaacGymEnvs' task YAMLs use; ``isaacgymenvs/__init__.py`` registers all four unconditionally.
_ISAACGYMENVS_RESOLVERS: Dict[str, Callable[..., Any]] = {
    "eq": lambda x, y: str(x).lower() == str(y).lower(),
    "contains": lambda x, y: str(x).lower() in str(y).lower(),
    "if": lambda pred, a, b: a if pred else b,
    "resolve_default": lambda default, arg: default if arg in ("", None) else arg,
}

#: Root keys of IsaacGymEnvs' cfg/config.yaml that its task YAMLs interpolate (``${..physics_engine}``...).
_ISAACGYMENVS_ROOT: Dict[str, Any] = {
    "experiment": "",
    "torch_deterministic": False,
    "max_iterations": "",
    "physics_engine": "physx",
    "num_threads": 4,
    "solver_type": 1,
    "num_subscenes": 4,
    "test": False,
    "checkpoint": "",
    "sigma": "",
    "multi_gpu": False,
    "capture_video": False,
    "force_render": False,
}


def import_isaacgym(name: str) -> None:
    """Import ``isaacgym``; TaskError with the install steps when it is missing."""
    try:
        import isaacgym  # noqa: F401
    except ImportError as exc:
        if "before isaacgym" in str(exc):
            raise TaskError(
                f"task=isaacgym/{name}: {exc} Isaac Gym must be imported before torch: the worker calls "
                "pbt.tasks.registry.prepare_backend() first; in your own script, `import isaacgym` before torch."
            ) from exc
        raise TaskError(f"task=isaacgym/{name}: cannot import isaacgym ({exc}). {ISAACGYM_INSTALL}") from exc


def _isaacgym_task_map(name: str) -> Mapping[str, Any]:
    """``isaacgymenvs.tasks.isaacgym_task_map``, imported without clashing with our OmegaConf resolvers."""
    from omegaconf import OmegaConf

    import_isaacgym(name)
    # isaacgymenvs/__init__.py calls OmegaConf.register_new_resolver('eq'/'resolve_default'/...), which
    # raises when a resolver of that name exists (ours, registered by pbt.train): clear ours first.
    ours = [n for n in _ISAACGYMENVS_RESOLVERS if OmegaConf.has_resolver(n)]
    for resolver in ours:
        OmegaConf.clear_resolver(resolver)
    try:
        from isaacgymenvs.tasks import isaacgym_task_map
    except ImportError as exc:
        raise TaskError(f"task=isaacgym/{name}: cannot import isaacgymenvs.tasks ({exc}). {ISAACGYM_INSTALL}") from exc
    finally:
        _register_isaacgymenvs_resolvers(replace=True)
    return isaacgym_task_map


def _register_isaacgymenvs_resolvers(replace: bool) -> None:
    """Ours are supersets of IsaacGymEnvs' (same results on strings; also accept non-strings)."""
    from omegaconf import OmegaConf

    for resolver, fn in _ISAACGYMENVS_RESOLVERS.items():
        if replace or not OmegaConf.has_resolver(resolver):
            OmegaConf.register_new_resolver(resolver, fn, replace=True)


def isaacgymenvs_cfg_dir() -> Optional[Path]:
    """``<installed isaacgymenvs>/cfg`` (None when isaacgymenvs is not installed)."""
    spec = importlib.util.find_spec("isaacgymenvs")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "cfg"


def load_task_yaml(path: Path, _seen: Optional[List[Path]] = None, choices: Optional[Mapping[str, str]] = None) -> Any:
    """Load an IsaacGymEnvs task YAML, composing its Hydra ``defaults`` list the way Hydra would:
    sibling task files (``AllegroKukaLSTM.yaml``: ``defaults: [AllegroKuka, _self_]``) and config
    groups beside it (``AllegroKuka.yaml``: ``- env: reorientation`` merges ``env/reorientation.yaml``
    under ``env``). ``choices`` (group -> option, IsaacGymEnvs' ``task/<group>=<option>``) replaces a
    group's default option; :func:`unused_choices` says which choices no defaults list named."""
    from omegaconf import DictConfig, OmegaConf

    seen = list(_seen or [])
    if path in seen:
        raise TaskError(
            f"Isaac Gym task config {path}: its defaults list includes itself ({' -> '.join(map(str, seen))})."
        )
    cfg = OmegaConf.load(path)
    if not isinstance(cfg, DictConfig):
        raise TaskError(f"Isaac Gym task config {path} is a YAML list; a task config is a mapping of keys to values.")
    defaults = cfg.pop("defaults", None) or []
    parts: List[Any] = []
    self_added = False
    for entry in defaults:
        if entry == "_self_":
            parts.append(cfg)
            self_added = True
        elif isinstance(entry, str) and "/" not in entry and " " not in entry:
            sibling = path.parent / f"{entry}.yaml"
            if not sibling.is_file():
                raise TaskError(f"Isaac Gym task config {path}: defaults entry '{entry}' has no file {sibling}.")
            parts.append(load_task_yaml(sibling, seen + [path], choices))
        elif isinstance(entry, DictConfig) and len(entry) == 1 and _is_group_name(str(next(iter(entry)))):
            group = str(next(iter(entry)))
            parts.append(OmegaConf.create({group: _group_option(path, group, entry[group], choices or {})}))
        else:
            log.warning(
                "Isaac Gym task config %s: ignoring defaults entry %r (only sibling task files and config "
                "groups beside it are composed)",
                path,
                entry,
            )
    if not self_added:
        parts.append(cfg)  # Hydra 1.1+: _self_ last unless placed
    return OmegaConf.merge(*parts) if parts else cfg


def _is_group_name(name: str) -> bool:
    return name.replace("_", "").isalnum()


def _group_option(path: Path, group: str, default: Any, choices: Mapping[str, str]) -> Any:
    """The content of ``<group>/<option>.yaml`` beside ``path``: the chosen option, else the default."""
    from omegaconf import DictConfig, OmegaConf

    option = str(choices.get(group, default))
    folder = path.parent / group
    file = folder / f"{option}.yaml"
    if not file.is_file():
        options = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
        raise TaskError(
            f"task/{group}={option}: no {file} (the '{group}' group of {path.name})."
            f"{did_you_mean(option, options)} Options: {', '.join(options) or 'none'}."
        )
    content = OmegaConf.load(file)
    if not isinstance(content, DictConfig):
        raise TaskError(f"Isaac Gym task config {file} is a YAML list; a config group option is a mapping.")
    return content


def group_names(path: Path, _seen: Optional[List[Path]] = None) -> List[str]:
    """The config groups the defaults lists of ``path`` and its sibling task files name."""
    from omegaconf import DictConfig, OmegaConf

    seen = list(_seen or [])
    if path in seen or not path.is_file():
        return []
    cfg = OmegaConf.load(path)
    names: List[str] = []
    for entry in (cfg.get("defaults") or []) if isinstance(cfg, DictConfig) else []:
        if isinstance(entry, str) and entry != "_self_" and "/" not in entry and " " not in entry:
            names.extend(group_names(path.parent / f"{entry}.yaml", seen + [path]))
        elif isinstance(entry, DictConfig) and len(entry) == 1:
            names.append(str(next(iter(entry))))
    return sorted(set(names))


def isaacgym_task_config(
    name: str, task_cfg: Mapping[str, Any], sim_device: str, rl_device: str, headless: bool, graphics_device_id: int
) -> Dict[str, Any]:
    """The task cfg an IsaacGymEnvs task is built with.

    Base: ``task.cfgFile`` when set, else IsaacGymEnvs' own ``isaacgymenvs/cfg/task/<name>.yaml``
    (none: our task config alone). Our task config (``num_envs`` and any ``+task.env.X=...``
    override) is merged over it, and the base's interpolations of IsaacGymEnvs' root config
    (``${...num_envs}``, ``${..physics_engine}``, ``${eq:${...pipeline},"gpu"}`` ...) resolve against
    IsaacGymEnvs' defaults with our devices.
    """
    from omegaconf import OmegaConf

    overlay = {k: v for k, v in dict(task_cfg).items() if k not in ("kind", "cfgFile", "groups")}
    choices = {str(k): str(v) for k, v in dict(task_cfg.get("groups") or {}).items()}
    overlay["name"] = name
    env = dict(overlay.get("env") or {})
    if env.get("numEnvs") in ("", None):
        env.pop("numEnvs", None)
    overlay["env"] = env
    cfg_file = str(task_cfg.get("cfgFile") or "")
    path: Optional[Path] = None
    if cfg_file:
        path = Path(cfg_file).expanduser()
        if not path.is_file():
            raise TaskError(f"task.cfgFile={cfg_file}: no such file. Point it at an IsaacGymEnvs task YAML.")
    else:
        cfg_dir = isaacgymenvs_cfg_dir()
        candidate = cfg_dir / "task" / f"{name}.yaml" if cfg_dir is not None else None
        if candidate is not None and candidate.is_file():
            path = candidate
        else:
            log.warning(
                "no IsaacGymEnvs task config %s; building isaacgym/%s from our task config alone", candidate, name
            )
    _check_choices(name, path, choices)
    _register_isaacgymenvs_resolvers(replace=False)
    root = OmegaConf.create(dict(_ISAACGYMENVS_ROOT))
    root.task_name = name
    root.num_envs = env.get("numEnvs", "")
    root.seed = task_cfg.get("seed", 42)
    root.pipeline = "gpu" if str(sim_device).startswith("cuda") else "cpu"
    root.sim_device, root.rl_device = str(sim_device), str(rl_device)
    root.graphics_device_id, root.headless = int(graphics_device_id), bool(headless)
    try:
        base = load_task_yaml(path, choices=choices) if path is not None else OmegaConf.create({})
        root.task = OmegaConf.merge(base, overlay)
        resolved = cast(Dict[str, Any], OmegaConf.to_container(root, resolve=True))  # a DictConfig's is a dict
    except TaskError:
        raise
    except Exception as exc:  # omegaconf raises several unrelated types for bad YAML / interpolations
        raise TaskError(
            f"Could not load the Isaac Gym task config for {name} from {path or 'our task config'}: {exc}"
        ) from exc
    log.info(
        "isaacgym/%s: task config %s with %d envs", name, path or "(ours)", resolved["task"]["env"].get("numEnvs", 0)
    )
    return resolved["task"]


def _check_choices(name: str, path: Optional[Path], choices: Mapping[str, str]) -> None:
    """Refuse a ``task/<group>=<option>`` whose group no defaults list of the task YAML names
    (Hydra refuses it the same way in IsaacGymEnvs)."""
    if not choices:
        return
    groups = group_names(path) if path is not None else []
    for group, option in sorted(choices.items()):
        if group not in groups:
            where = f"{path}'s defaults list" if path is not None else "no task YAML (IsaacGymEnvs has none for it)"
            raise TaskError(
                f"task/{group}={option}: isaacgym/{name} has no '{group}' config group in {where}. "
                f"Its groups: {', '.join(groups) or 'none'}."
            )


def build_isaacgym_task(
    name: str, task_cfg: Mapping[str, Any], sim_device: str, rl_device: str, headless: bool, graphics_device_id: int
) -> Any:
    """Build an IsaacGymEnvs task through its task map (imports isaacgym lazily, before torch if it can)."""
    task_map = _isaacgym_task_map(name)
    if name not in task_map:
        raise TaskError(
            f"Unknown Isaac Gym task '{name}'.{did_you_mean(name, task_map)} Available: {', '.join(sorted(task_map))}."
        )
    cfg = isaacgym_task_config(name, task_cfg, sim_device, rl_device, headless, graphics_device_id)
    task = task_map[name](
        cfg=cfg,
        rl_device=rl_device,
        sim_device=sim_device,
        graphics_device_id=graphics_device_id,
        headless=headless,
        virtual_screen_capture=False,
        force_render=False,
    )
    check_task_interface(task, f"isaacgym/{name}")
    wanted = cfg.get("env", {}).get("numEnvs")
    if wanted not in ("", None) and int(task.num_envs) != int(wanted):
        raise TaskError(
            f"isaacgym/{name} built {task.num_envs} envs but the config asked for {wanted} (rl_games' num_actors). "
            "Set num_envs=<n> to what the task supports."
        )
    return task
