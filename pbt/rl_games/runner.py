"""The one place that builds an rl_games Runner from the composed config: training (:func:`run`),
``python -m pbt.play`` and ``python -m pbt.replay`` all go through :func:`build_runner`.

The rl_games traps are handled here so users never meet them (docs/rl_games.md): ``torch_compile``
off on CPU, ``device``/``device_name`` from ``rl_device``, a deterministic ``full_experiment_name``
(parallel members never collide, a restarted member finds its run dir again), a plain dict to
``Runner.load``, torch threads per worker. Importing this module does not import torch: Isaac Gym
must be imported first (:func:`pbt.tasks.registry.prepare_backend`).
"""

import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, cast

from omegaconf import DictConfig, OmegaConf, open_dict

from pbt.config import ELASTIC
from pbt.devices import default_torch_threads, global_rank, physical_gpu, rank_device, resolve_device
from pbt.errors import ConfigError
from pbt.rl_games.evaluation import evaluation_problem
from pbt.rl_games.trpo.settings import resolve_aliases
from pbt.tasks.registry import TaskRef, build_configured_task, prepare_backend, task_ref_of

if TYPE_CHECKING:
    from pbt.rl_games.observer import WorkerObserver

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What one worker run achieved (also logged as the final summary line)."""

    frames: int
    """The member's total frames (counted across restarts and resumes)."""
    wall_time: float
    mean_reward: float
    objective: Optional[float]
    """The objective PBT ranks by (the task's ``pbt.objective``, else the mean episode return) at the
    end; None while unknown (new weights in the last moments of the run)."""
    start_frame: int = 0
    """Frames already trained when this process started (restored from a checkpoint)."""

    @property
    def fps(self) -> float:
        """Frames trained by this process per second of its training wall time."""
        return (self.frames - self.start_frame) / self.wall_time if self.wall_time > 0 else 0.0

    def line(self) -> str:
        obj = "n/a" if self.objective is None else f"{self.objective:.4g}"
        return (
            f"SUMMARY frames={self.frames} wall_time={self.wall_time:.1f}s fps={self.fps:.0f} "
            f"mean_reward={self.mean_reward:.4g} objective={obj}"
        )


def experiment_name(cfg: DictConfig) -> str:
    """The run name: ``experiment`` or ``<task>_<date>_<time>``; PBT members get ``_pbt<idx:03d>``."""
    base = str(cfg.experiment) or f"{cfg.task_name}_{time.strftime('%Y%m%d_%H%M%S')}".replace(":", "_").replace(
        "/", "_"
    )
    if cfg.pbt.get("enabled", False):
        return f"{base}_pbt{int(cfg.pbt.policy_idx):03d}"
    return base


def prepare_config(cfg: DictConfig) -> Dict[str, Any]:
    """Resolve devices and defaults in place and return the config as a plain, resolved dict."""
    cfg.sim_device = resolve_device(cfg.sim_device)
    cfg.rl_device = resolve_device(cfg.rl_device)
    multi_process = bool(OmegaConf.select(cfg, "train.params.config.multi_gpu", default=False))
    if multi_process:  # under torchrun: this rank's GPU for the task too, not only the agent's
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        cfg.sim_device = rank_device(cfg.sim_device, local_rank)
        cfg.rl_device = rank_device(cfg.rl_device, local_rank)
        graphics = physical_gpu(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if (
            graphics is not None
            and str(cfg.sim_device).startswith("cuda")
            and int(cfg.get("graphics_device_id", 0)) >= 0
        ):
            cfg.graphics_device_id = graphics  # Vulkan ignores CUDA's mask: the rank's physical GPU
    if cfg.seed is None or int(cfg.seed) < 0:
        cfg.seed = int.from_bytes(os.urandom(4), "little") % (2**31)
    if not cfg.experiment:
        # Fix the run name now so a PBT restart (which re-reads argv) finds the same directory.
        cfg.experiment = experiment_name(cast(DictConfig, OmegaConf.merge(cfg, {"pbt": {"enabled": False}})))
    config = cfg.train.params.config
    with open_dict(config):
        config.device = cfg.rl_device
        config.device_name = cfg.rl_device
        config.full_experiment_name = experiment_name(cfg)
        config.train_dir = str(cfg.train_dir)
        if not str(cfg.rl_device).startswith("cuda"):
            config.torch_compile = False
    try:
        plain = cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=True))  # a DictConfig's is a dict
    except Exception as exc:  # omegaconf raises several unrelated types for bad interpolations
        raise ConfigError(f"Could not resolve the configuration: {exc}. Check the overrides you passed.") from exc
    if str(plain["train"]["params"].get("algo", {}).get("name")) == "trpo":
        for note in resolve_aliases(plain["train"]["params"]["config"], command_line_keys(TRAIN_CONFIG)):
            log.info("trpo: %s", note)
    minibatch_size(plain["train"]["params"]["config"])  # an impossible minibatch fails now, not in rl_games
    refuse_other_learners_keys(plain)
    task_seed = plain.get("task", {}).get("seed")
    if multi_process and isinstance(task_seed, int) and not isinstance(task_seed, bool) and task_seed >= 0:
        # Each rank's envs their own stream (rl_games offsets only torch's seed by RANK).
        plain["task"]["seed"] = task_seed + global_rank()
    return plain


TRPO = "trpo"


def refuse_other_learners_keys(plain: Mapping[str, Any]) -> None:
    """ConfigError for TRPO's own ``train.params.config`` keys under another learner, which
    rl_games would ignore without a word (e.g. ``+train.params.config.max_kl_divergence=0.02`` with PPO)."""
    from dataclasses import fields

    from pbt.rl_games.registry import algo_name
    from pbt.rl_games.trpo.settings import TrpoSettings

    name = algo_name(plain)
    if name == TRPO:
        return
    config = plain["train"]["params"].get("config") or {}
    stray = sorted(f.name for f in fields(TrpoSettings) if f.name in config)
    if stray:
        raise ConfigError(
            f"train.params.config.{stray[0]} is a setting of the TRPO learner (train=<task>TRPO, "
            f"train.params.algo.name=trpo); the learner is {name}: choose a TRPO train config (e.g. "
            f"train=PendulumTRPO) or remove the key{'s ' + ', '.join(stray) if len(stray) > 1 else ''}."
        )


TRAIN_CONFIG = "train.params.config."


def command_line_keys(prefix: str) -> List[str]:
    """The keys under ``prefix`` that this run's command line overrides (Hydra's record of them; none
    outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    keys = [str(o).split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task]
    return [k[len(prefix) :] for k in keys if k.startswith(prefix)]


#: ``minibatch_size: auto`` (the shipped train configs): the batch split into ``num_minibatches``.
AUTO = "auto"


def minibatch_size(config: Mapping[str, Any]) -> int:
    """The minibatch size rl_games gets for a train config (``train.params.config``).

    ``auto``: ``num_actors * horizon_length / num_minibatches`` (the divisor of the batch nearest to
    it when that is not whole), so any ``num_envs`` and ``horizon_length`` work and the number of
    minibatches per epoch stays the train config's. A number was set on purpose: it must divide the
    batch, else ConfigError listing values that would.
    """
    batch = int(config["num_actors"]) * int(config["horizon_length"])
    value = config.get("minibatch_size", AUTO)
    if value is None or str(value).lower() == AUTO:
        parts = config.get("num_minibatches", 1)
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise ConfigError(
                f"train.params.config.num_minibatches={parts!r} must be a whole number >= 1 "
                "(minibatches per PPO epoch when minibatch_size is auto)."
            )
        return nearest_divisors(batch, batch / parts, 1)[0]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= batch or batch % value:
        works = ", ".join(str(d) for d in sorted(nearest_divisors(batch, value, 6)))
        raise ConfigError(
            f"train.params.config.minibatch_size={value!r} does not split the batch of num_envs "
            f"({config['num_actors']}) x horizon_length ({config['horizon_length']}) = {batch} samples into "
            f"whole minibatches. Values that work: {works}; or leave it out (minibatch_size=auto: the batch "
            f"in train.params.config.num_minibatches={config.get('num_minibatches', 1)} parts)."
        )
    return value


def nearest_divisors(batch: int, near: Any, count: int) -> List[int]:
    """The ``count`` divisors of ``batch`` nearest to ``near`` (by ratio), nearest first."""
    divisors = {d for i in range(1, math.isqrt(batch) + 1) if batch % i == 0 for d in (i, batch // i)}
    target = float(near) if isinstance(near, (int, float)) and not isinstance(near, bool) and near > 0 else batch / 4
    return sorted(divisors, key=lambda d: (abs(math.log(d / target)), d))[:count]


ELASTIC_SHARING = 4
"""Members per machine assumed for the torch thread count of an elastic population's member."""


def torch_threads_for(cfg: Dict[str, Any]) -> int:
    pbt = cfg.get("pbt", {})
    size = pbt.get("num_policies", 1)
    # An elastic population (num_policies=auto) has no fixed size: count on a few members per
    # machine (torch_threads= sets it exactly).
    sharing = (ELASTIC_SHARING if str(size) == ELASTIC else int(size)) if pbt.get("enabled") else 1
    return default_torch_threads(int(cfg.get("torch_threads", 0) or 0), sharing)


def rl_games_params(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The ``train`` block as rl_games' Runner.load wants it: a plain dict with ``params``."""
    params = cfg["train"]["params"]
    config = params["config"]
    # Resolved last: a member's start-up may have changed horizon_length or num_envs since prepare_config.
    auto = str(config.get("minibatch_size", AUTO)).lower() in (AUTO, "none")
    config["minibatch_size"] = minibatch_size(config)
    config.pop("num_minibatches", None)  # this project's key, not rl_games'
    batch = int(config["num_actors"]) * int(config["horizon_length"])
    log.info(
        "minibatch_size=%d%s: %d envs x %d steps = %d samples in %d minibatches",
        config["minibatch_size"],
        " (auto)" if auto else "",
        int(config["num_actors"]),
        int(config["horizon_length"]),
        batch,
        batch // config["minibatch_size"],
    )
    params["torch_threads"] = torch_threads_for(cfg)
    params["seed"] = int(cfg["seed"])
    return {"params": params}


def build_runner(cfg: DictConfig, observer: Any = None, prepare: Optional[Callable[[], Dict[str, Any]]] = None) -> Any:
    """Build the task and an rl_games Runner (loaded with the config) for ``cfg``.

    ``prepare()`` (default: :func:`prepare_config`) returns the plain config the task and agent are
    built from; training passes its observer's, which may change it (a PBT member's start-up).
    """
    ref = task_ref(cfg)
    prepare_backend(ref)  # Isaac Gym must be imported before torch
    from rl_games.torch_runner import Runner  # imports torch: keep it off the config path

    from pbt.rl_games.registry import register_learners
    from pbt.rl_games.vecenv import register_task

    plain = prepare() if prepare is not None else prepare_config(cfg)
    register_task(build_configured_task(plain))
    runner = Runner(algo_observer=observer)
    register_learners(runner)  # learners this project adds (trpo)
    runner.load(rl_games_params(plain))
    return runner


def create_agent(runner: Any, base_name: str) -> Any:
    """An agent of the loaded config's algo, built outside ``Runner.run`` (pbt.play evaluates it)."""
    return runner.algo_factory.create(runner.algo_name, base_name=base_name, params=runner.params)


def run(cfg: DictConfig, observer_factory: Optional[Callable[[Dict[str, Any]], "WorkerObserver"]] = None) -> RunSummary:
    """Train one worker as configured; return (and log) its summary.

    ``observer_factory(plain_config)`` builds the rl_games observer (default: WorkerObserver, which
    runs PBT when it is on); pbt.replay passes one that follows a recorded schedule.
    """
    problem = evaluation_problem(cfg)  # before a simulator is imported or started
    if problem is not None:
        raise ConfigError(problem)
    prepare_task_backend(cfg)  # Isaac Gym must be imported before torch (the observer imports it)
    from pbt.rl_games.observer import WorkerObserver

    observer = (observer_factory or WorkerObserver)(prepare_config(cfg))
    if threading.current_thread() is threading.main_thread():  # one member per process: its stop signal
        signal.signal(signal.SIGTERM, observer.on_stop_signal)
    runner = build_runner(cfg, observer, prepare=observer.prepare)
    start = time.time()
    runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    summary = summarize(observer, time.time() - start)
    multi = bool(cfg.train.params.config.get("multi_gpu", False))
    rank = global_rank() if multi else 0
    if multi:
        from pbt.rl_games.trpo import spmd  # torch is imported by now

        spmd.leave()
    if rank == 0:
        log.info(summary.line())
    else:  # one SUMMARY per run: a follower's own frame counter is not the run's
        log.info("rank %d of a multi-process run finished (rank 0 logs the run's SUMMARY)", rank)
    return summary


def summarize(observer: "WorkerObserver", wall_time: float) -> RunSummary:
    """The summary of a finished training run, from its observer."""
    return RunSummary(
        frames=int(observer.algo.frame),
        wall_time=wall_time,
        mean_reward=observer.mean_reward(),
        objective=observer.objective(),
        start_frame=observer.start_frame,
    )


def prepare_task_backend(cfg: DictConfig) -> TaskRef:
    """:func:`prepare_backend` for the composed config: every entry point (train, play, replay) calls
    it before anything that imports torch (checkpoints, adapters, the observer)."""
    ref = task_ref(cfg)
    prepare_backend(ref)
    return ref


def task_ref(cfg: DictConfig) -> TaskRef:
    """Which task the composed config describes (``task.kind`` is set by the family configs)."""
    return task_ref_of(cfg.task)
