"""Isaac Lab 3.0 tasks (``task=isaaclab/<TaskId>``): any task registered by ``isaaclab_tasks``.

Built the way Isaac Lab's own rl_games scripts build it: the env config from Isaac Lab's registry
(``parse_env_cfg``, with Isaac Lab presets such as ``newton_mjwarp``), the simulation started by
``isaaclab.app.launch_simulation`` (kit-less with Newton, Isaac Sim when the config needs Kit),
``gym.make`` and Isaac Lab's ``RlGamesVecEnvWrapper``. The wrapper is then registered with rl_games
like every other task (:func:`pbt.rl_games.vecenv.register_task`).

Two steps, because PBT mutates the agent's hyperparameters as Hydra overrides:

* before Hydra composes the config (:func:`rewrite_isaaclab_overrides`), the task's own rl_games
  agent config (``rl_games_cfg_entry_point``) becomes ``++train.params...`` overrides placed before
  the user's, so every override on the command line (and every PBT mutation) wins over it;
* when the worker builds the task (:func:`build_isaaclab_task`), ``task.env.<dotted.field>``
  overrides are applied to Isaac Lab's env config and its assets are checked before the simulation
  starts (a missing asset otherwise fails only after a long wait).

Nothing here imports torch or Isaac Lab at import time.
"""

import functools
import importlib
import logging
import sys
from typing import Any, Callable, Dict, Iterator, List, Mapping, Sequence, Tuple

from pbt.errors import TaskError, did_you_mean
from pbt.restart import format_value
from pbt.tasks.isaaclab_assets import check_assets, use_ground_cuboid
from pbt.tasks.isaaclab_pbt import pbt_overrides, split_agent_pbt

log = logging.getLogger(__name__)

ISAACLAB_INSTALL = (
    "Isaac Lab tasks need Isaac Lab 3.0 on Python 3.12: in a Python 3.12 environment, "
    "pip install isaaclab==3.0.0 rl-games==1.6.5 gym==0.26.2 (kit-less with the Newton physics backend; "
    "Isaac Sim is optional), then pip install -e . for this project. docs/isaaclab.md has the details."
)
AGENT_ENTRY_POINT = "rl_games_cfg_entry_point"
ENV_ENTRY_POINT = "env_cfg_entry_point"

#: Agent-config keys under ``params.config`` that this project sets itself (run names, devices,
#: the env registration, checkpoints, the stopping rule) and so are not taken from Isaac Lab's.
OWN_CONFIG_KEYS = frozenset(
    [
        "minibatch_size",
        "name",
        "env_name",
        "device",
        "device_name",
        "multi_gpu",
        "num_actors",
        "max_epochs",
        "max_frames",
        "save_best_after",
        "save_frequency",
        "score_to_win",
        "games_to_track",
        "full_experiment_name",
        "train_dir",
        "print_stats",
    ]
)
#: Top-level agent-config keys not passed on (seed and checkpoint come from our config; env and pbt are mapped).
SKIPPED_PARAMS = frozenset(["seed", "load_checkpoint", "load_path", "env", "pbt"])


# ------------------------------------------------------------------------------------------------
# Imports and task ids
# ------------------------------------------------------------------------------------------------


def import_isaaclab(task_id: str) -> None:
    """Import Isaac Lab and its task registry; TaskError saying what to install when it cannot."""
    if sys.version_info[:2] < (3, 12):
        here = ".".join(map(str, sys.version_info[:3]))
        raise TaskError(f"task=isaaclab/{task_id}: this is Python {here}. {ISAACLAB_INSTALL}")
    for module in ("isaaclab.app", "isaaclab_tasks", "isaaclab_rl.rl_games", "gym.spaces"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise TaskError(f"task=isaaclab/{task_id}: cannot import {module} ({exc}). {ISAACLAB_INSTALL}") from exc


def registered_task_ids() -> List[str]:
    """The ids of the tasks ``isaaclab_tasks`` registered with gymnasium (those with an env config)."""
    import gymnasium

    return sorted(k for k, spec in gymnasium.registry.items() if ENV_ENTRY_POINT in (spec.kwargs or {}))


def check_task_id(task_id: str) -> None:
    """TaskError with close ids (did you mean) when ``task_id`` is not a registered Isaac Lab task."""
    ids = registered_task_ids()
    if task_id in ids:
        return
    hint = did_you_mean(task_id, ids, n=5)
    cartpoles = ", ".join(i for i in ids if "Cartpole" in i)
    raise TaskError(
        f"Unknown Isaac Lab task '{task_id}'.{hint} {len(ids)} tasks are registered (e.g. {cartpoles}); list them: "
        "python -c \"import gymnasium, isaaclab_tasks; print([k for k in gymnasium.registry if k.startswith('Isaac')])\""
    )


def agent_config(task_id: str) -> Dict[str, Any]:
    """The task's own rl_games agent config (its ``rl_games_cfg_entry_point``) as a dict."""
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    try:
        cfg = load_cfg_from_registry(task_id, AGENT_ENTRY_POINT)
    except (ValueError, KeyError) as exc:
        raise TaskError(
            f"Isaac Lab task '{task_id}' has no rl_games agent config ({exc}); pick a task with one, or give the "
            "whole train config yourself (train=isaaclabPPO train.params....=...)."
        ) from exc
    if not isinstance(cfg, Mapping) or "params" not in cfg:
        raise TaskError(f"Isaac Lab task '{task_id}': its rl_games agent config has no 'params' block: {cfg!r:.200}")
    return dict(cfg)


def default_num_envs(task_id: str) -> int:
    """``scene.num_envs`` of the task's registered env config."""
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    return int(load_cfg_from_registry(task_id, ENV_ENTRY_POINT).scene.num_envs)


# ------------------------------------------------------------------------------------------------
# Before Hydra: the agent config as overrides
# ------------------------------------------------------------------------------------------------


def _number(value: Any) -> Any:
    """PyYAML reads ``5e-4`` (no dot) as a string; Isaac Lab's YAMLs are full of them."""
    if isinstance(value, str):
        try:
            return float(value) if value.strip().lower() not in ("nan", "inf", "-inf", "infinity") else value
        except ValueError:
            return value
    return value


def _leaves(tree: Mapping[str, Any], prefix: str) -> Iterator[Tuple[str, Any]]:
    for key, value in tree.items():
        path = f"{prefix}.{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path)
        else:
            yield path, _number(value)


def _given(argv: Sequence[str]) -> Dict[str, str]:
    """The user's ``key=value`` overrides by key (prefixes ``+``/``++`` stripped)."""
    out = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep:
            out[key.lstrip("+~")] = value
    return out


def agent_overrides(task_id: str, agent: Mapping[str, Any], argv: Sequence[str]) -> List[str]:
    """Hydra overrides that make Isaac Lab's rl_games agent config the train config's defaults.

    ``max_epochs`` becomes ``max_frames`` (frames count across PBT restarts), ``minibatch_size``
    becomes ``num_minibatches`` (Isaac Lab's number of minibatches at its own env count; our
    ``minibatch_size: auto`` keeps it at any ``num_envs``), and ``params.env``'s clipping goes to the
    task config (Isaac Lab's wrapper clips). Keys given in ``argv`` are left to the user.
    """
    params = dict(agent["params"])
    given = _given(argv)
    out: List[str] = []
    for path, value in _leaves({k: v for k, v in params.items() if k not in SKIPPED_PARAMS}, "train.params"):
        parts = path.split(".")
        if parts[2] == "config" and parts[3] in OWN_CONFIG_KEYS:
            continue
        out.append(f"++{path}={format_value(value)}")
    config = dict(params.get("config") or {})
    env_block = dict(params.get("env") or {})
    for ours, theirs in (("clipObservations", "clip_observations"), ("clipActions", "clip_actions")):
        if theirs in env_block:
            out.append(f"task.{ours}={format_value(float(_number(env_block[theirs])))}")
    isaac_envs = default_num_envs(task_id)
    num_envs = int(given.get("num_envs") or isaac_envs)
    if "num_envs" not in given:
        out.append(f"num_envs={num_envs}")
    horizon = int(given.get("train.params.config.horizon_length") or config.get("horizon_length", 32))
    if config.get("minibatch_size"):
        isaac_batch = isaac_envs * int(config.get("horizon_length", horizon))
        out.append(f"++train.params.config.num_minibatches={max(1, isaac_batch // int(config['minibatch_size']))}")
    epochs = int(_number(config.get("max_epochs", 0)) or 0)
    if "max_frames" not in given and epochs > 0:
        out.append(f"max_frames={epochs * horizon * num_envs}")
    return out


def mark_env_overrides(argv: Sequence[str]) -> List[str]:
    """``task.env.<field>=v`` -> ``++task.env.<field>=v``: the env block is open (any Isaac Lab field)."""
    out = []
    for arg in argv:
        if arg.startswith("task.env.") and "=" in arg:
            arg = "++" + arg
        out.append(arg)
    return out


def rewrite_isaaclab_overrides(task_id: str, argv: Sequence[str]) -> List[str]:
    """``argv`` (already rewritten to ``task=isaaclab task.name=<id>``) with the task's agent config
    placed first as overrides and its env overrides made addable. Fails early on a bad setup."""
    import_isaaclab(task_id)
    check_task_id(task_id)
    agent_pbt, argv = split_agent_pbt(argv)
    agent = agent_config(task_id)
    head = agent_overrides(task_id, agent, argv) + pbt_overrides(agent.get("pbt") or {}, agent_pbt)
    log.info("isaaclab/%s: %d overrides from its rl_games agent config", task_id, len(head))
    return head + mark_env_overrides(argv)


# ------------------------------------------------------------------------------------------------
# Building the task
# ------------------------------------------------------------------------------------------------


def _env_leaves(tree: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _env_leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


def _fields(obj: Any) -> List[str]:
    if isinstance(obj, Mapping):
        return [str(k) for k in obj]
    fields = getattr(obj, "__dataclass_fields__", None)
    return list(fields) if fields else [n for n in dir(obj) if not n.startswith("_")]


def _env_parent(cfg: Any, dotted: str) -> Tuple[Any, str]:
    """(the object holding ``cfg.<dotted>``, its last part); TaskError naming the unknown part."""
    parts = dotted.split(".")
    obj = cfg
    for i, part in enumerate(parts):
        has = part in obj if isinstance(obj, dict) else hasattr(obj, part)
        if not has:
            where = ".".join(parts[:i]) or "the env config"
            raise TaskError(
                f"task.env.{dotted}: {where} has no field '{part}'.{did_you_mean(part, _fields(obj))} "
                f"Its fields: {', '.join(sorted(_fields(obj))[:40])}."
            )
        if i < len(parts) - 1:
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj, parts[-1]


def set_env_field(cfg: Any, dotted: str, value: Any) -> None:
    """Set ``cfg.<dotted>`` on an Isaac Lab config; TaskError naming the unknown part (did you mean)."""
    obj, last = _env_parent(cfg, dotted)
    old = obj[last] if isinstance(obj, dict) else getattr(obj, last)
    if isinstance(old, tuple) and isinstance(value, list):
        value = tuple(value)
    if isinstance(obj, dict):
        obj[last] = value
    else:
        setattr(obj, last, value)


def env_config(task_id: str, task_cfg: Mapping[str, Any], sim_device: str) -> Any:
    """Isaac Lab's env config for the task with our overrides applied (no simulation started)."""
    from isaaclab_tasks.utils import parse_env_cfg

    presets = str(task_cfg.get("presets") or "").strip()
    num_envs = int(task_cfg.get("numEnvs") or 0) or None
    overrides = [f"presets={presets}"] if presets else []
    with _outside_our_hydra():
        cfg = parse_env_cfg(task_id, device=sim_device, num_envs=num_envs, overrides=overrides)
    seed = task_cfg.get("seed")
    if seed is not None and hasattr(cfg, "seed"):
        cfg.seed = int(seed)
    physics = getattr(getattr(cfg, "sim", None), "physics", None)
    if physics is not None and not str(sim_device).startswith("cuda") and hasattr(physics, "use_cuda_graph"):
        physics.use_cuda_graph = False  # CUDA graphs need a GPU
    if bool(task_cfg.get("groundCuboid", False)):
        use_ground_cuboid(cfg)
    for dotted, value in _env_leaves(dict(task_cfg.get("env") or {})):
        set_env_field(cfg, dotted, value)
    return cfg


class _outside_our_hydra:
    """Isaac Lab composes presets with its own ``@hydra.main``, which refuses to run inside ours
    (GlobalHydra is a process singleton): park our Hydra state and logging for the call."""

    def __enter__(self) -> None:
        from hydra.core.singleton import Singleton

        self.state = Singleton.get_state()
        Singleton._instances = {}
        root = logging.getLogger()
        self.logging = (root.level, list(root.handlers))

    def __exit__(self, *exc: Any) -> None:
        from hydra.core.singleton import Singleton

        Singleton.set_state(self.state)
        root = logging.getLogger()
        root.setLevel(self.logging[0])
        for handler in list(root.handlers):
            if handler not in self.logging[1]:
                root.removeHandler(handler)
        for handler in self.logging[1]:
            if handler not in root.handlers:
                root.addHandler(handler)


def _set_reward_weight(manager: Any, cfg: Any, term: str, value: Any) -> None:
    """A reward term's weight in the running env (its manager's copy) and in the env config."""
    term_cfg = manager.get_term_cfg(term)
    term_cfg.weight = float(value)
    manager.set_term_cfg(term, term_cfg)
    set_env_field(cfg, f"rewards.{term}.weight", float(value))


class IsaacLabTask:
    """An Isaac Lab env behind Isaac Lab's ``RlGamesVecEnvWrapper``, presented as a vectorized task.

    ``step`` returns the wrapper's extras: ``time_outs`` and Isaac Lab's episode log under
    ``episode`` (its ``extras["log"]``), whose keys are also copied to the top level, so
    ``pbt.objective`` may name one either way (``episode.Curriculum/difficulty_level`` or
    ``Curriculum/difficulty_level``).
    """

    def __init__(self, task_id: str, env: Any, wrapper: Any, stack: Any, live_env_keys: Sequence[str] = ()) -> None:
        self.task_id = task_id
        self.live_env_keys = [str(k) for k in live_env_keys]
        self.env = env
        self.wrapper = wrapper
        self._stack = stack
        self.num_envs = int(wrapper.num_envs)
        self.observation_space = wrapper.observation_space
        self.action_space = wrapper.action_space
        self.num_obs = int(self.observation_space.shape[0]) if getattr(self.observation_space, "shape", None) else 0
        self.num_actions = int(self.action_space.shape[0]) if getattr(self.action_space, "shape", None) else 0
        self.num_states = int(getattr(wrapper, "rlg_num_states", 0) or 0)

    def reset(self) -> Any:
        return self.wrapper.reset()

    def step(self, actions: Any) -> Tuple[Any, Any, Any, Dict[str, Any]]:
        obs, reward, done, extras = self.wrapper.step(actions)
        episode = extras.get("episode")
        if isinstance(episode, Mapping):
            for key, value in episode.items():
                extras.setdefault(key, value)
        return obs, reward, done, extras

    def live_setters(self) -> Dict[str, Callable[[Any], None]]:
        """Env parameters Isaac Lab reads at every step, so PBT mutates them in place (no restart):
        a manager-based env's reward term weights (``task.env.rewards.<term>.weight``, through its
        reward manager, which holds its own copy of the config), a direct env's reward scales
        (``task.env.rew_scale_*``: Isaac Lab's direct tasks read ``self.cfg.rew_scale_*`` in
        ``_get_rewards``), and the dotted fields listed in ``task.liveEnvKeys`` (fields your env
        reads from ``self.cfg`` each step)."""
        env = self.env.unwrapped
        cfg = env.cfg
        setters: Dict[str, Callable[[Any], None]] = {}
        manager = getattr(env, "reward_manager", None)
        for term in list(getattr(manager, "active_terms", None) or []):
            setters[f"task.env.rewards.{term}.weight"] = functools.partial(_set_reward_weight, manager, cfg, term)
        for name in _fields(cfg):
            if name.startswith("rew_scale") and isinstance(getattr(cfg, name, None), (int, float)):
                setters[f"task.env.{name}"] = functools.partial(set_env_field, cfg, name)
        for dotted in self.live_env_keys:
            setters[f"task.env.{dotted}"] = functools.partial(set_env_field, cfg, dotted)
        return setters

    def close(self) -> None:
        try:
            self.wrapper.close()
        finally:
            self._stack.close()


def build_isaaclab_task(
    task_id: str, task_cfg: Mapping[str, Any], sim_device: str, rl_device: str, headless: bool
) -> IsaacLabTask:
    """Build ``task_id`` as Isaac Lab's rl_games script does, with its simulation launched for this process."""
    import atexit
    import contextlib
    import math

    import_isaaclab(task_id)
    check_task_id(task_id)
    cfg = env_config(task_id, task_cfg, sim_device)
    live_env_keys = [str(k) for k in (task_cfg.get("liveEnvKeys") or [])]
    for dotted in live_env_keys:
        _env_parent(cfg, dotted)  # an unknown field fails now, not at the first mutation
    if bool(task_cfg.get("checkAssets", True)):
        check_assets(cfg, float(task_cfg.get("assetTimeout", 5.0)))
    import gymnasium
    from isaaclab.app import launch_simulation
    from isaaclab_rl.rl_games import RlGamesVecEnvWrapper

    stack = contextlib.ExitStack()
    stack.enter_context(launch_simulation(cfg, {"device": sim_device, "headless": bool(headless)}))
    atexit.register(stack.close)
    try:
        env = gymnasium.make(task_id, cfg=cfg)
        clip_obs = float(task_cfg.get("clipObservations", math.inf))
        clip_actions = float(task_cfg.get("clipActions", math.inf))
        wrapper = RlGamesVecEnvWrapper(env, rl_device, clip_obs, clip_actions)
    except BaseException:
        stack.close()
        raise
    task = IsaacLabTask(task_id, env, wrapper, stack, live_env_keys)
    log.info(
        "isaaclab/%s: %d envs on %s, obs %d, actions %d, states %d",
        task_id,
        task.num_envs,
        sim_device,
        task.num_obs,
        task.num_actions,
        task.num_states,
    )
    return task
