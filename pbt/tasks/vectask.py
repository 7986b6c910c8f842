"""Base class for the built-in vectorized tasks: N environments stepped as one batch of tensors
(an implementation of the interface in :mod:`pbt.tasks.base`, in torch).

The shape follows IsaacGymEnvs' ``VecTask`` so tasks port both ways:

* buffers ``obs_buf`` (N, num_obs), ``rew_buf`` (N,), ``reset_buf`` (N,), ``progress_buf`` (N,);
* ``step(actions) -> ({"obs": obs}, rew, done, extras)`` with actions in [-1, 1];
* ``extras["time_outs"]``: bool (N,), True where an episode ended by the time limit (rl_games
  bootstraps the value there instead of treating it as a terminal state);
* ``extras["true_objective"]``: float (N,), where the task defines success; the entry of a done env
  is the objective of the episode that just finished.

A subclass implements ``_reset_idx(env_ids)`` (sample fresh states), ``_physics(actions)`` (advance
the state one control step) and ``_compute(actions) -> (reward, terminated)``, and fills
``obs_buf`` in ``_observe()``. Everything runs on ``device``; no Python loop over envs.
"""

import functools
import logging
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from pbt.errors import ConfigError

Tensor = torch.Tensor
log = logging.getLogger(__name__)
GENERATOR = "generator"
"""The env state's entry for the task's random generator (the rest are per-env tensors)."""


class VecTask:
    """A batch of ``num_envs`` environments stepped together on one torch device."""

    #: Size of one observation vector.
    num_obs: int = 0
    #: Size of one action vector; actions arrive in [-1, 1] and are scaled by the task.
    num_actions: int = 0
    #: Default episode length in control steps (overridable with ``env.episodeLength``).
    default_episode_length: int = 200
    #: Config keys that shape the reward (``task.env.actionCost``): PBT refuses to mutate them while it
    #: ranks by the shaped return (pbt/mutation/shaping.py).
    reward_shaping_keys: Tuple[str, ...] = ()
    #: True when ``extras["true_objective"]`` is reported (PBT's default objective is then not the reward).
    reports_true_objective: bool = False
    #: ``env.<key>`` -> the float attribute holding it, for keys the task reads at every step or reset:
    #: PBT and a curriculum (pbt.curriculum) change them in the running task, without a restart.
    live_env: Mapping[str, str] = {}
    #: Per-env tensors (first dimension num_envs) that, with ``progress_buf``, are where each env is in
    #: its episode: saved in checkpoints (``get_env_state``) so that a resumed run goes on mid-episode.
    episode_state: Tuple[str, ...] = ()

    def __init__(
        self, cfg: Mapping[str, Any], sim_device: str = "cpu", rl_device: str = "cpu", headless: bool = True
    ) -> None:
        env_cfg = dict(cfg.get("env", {}) or {})
        self.cfg = cfg
        self.env_cfg = env_cfg
        self.num_envs = int(env_cfg.get("numEnvs", 512))
        if self.num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {self.num_envs}. Set num_envs=<positive int>.")
        self.max_episode_length = int(env_cfg.get("episodeLength", self.default_episode_length))
        self.desync_episodes = bool(env_cfg.get("desyncEpisodes", True))
        self.device = torch.device(sim_device)
        self.rl_device = torch.device(rl_device)
        self.headless = headless
        seed = cfg.get("seed")
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed) if seed is not None and int(seed) >= 0 else torch.seed() % (2**63))

        n, dev = self.num_envs, self.device
        self.obs_buf = torch.zeros((n, self.num_obs), device=dev)
        self.rew_buf = torch.zeros(n, device=dev)
        self.reset_buf = torch.ones(n, dtype=torch.bool, device=dev)
        self.timeout_buf = torch.zeros(n, dtype=torch.bool, device=dev)
        self.progress_buf = torch.zeros(n, dtype=torch.long, device=dev)
        self.extras: Dict[str, Tensor] = {}
        self.resume_episodes = False  # set_env_state was given a state: the next reset() keeps it

    # -- helpers for subclasses -------------------------------------------------------------------
    def env_choice(self, key: str, default: str, choices: Tuple[str, ...]) -> str:
        """``env.<key>`` as one of ``choices``; ConfigError naming the valid ones otherwise."""
        value = str(self.env_cfg.get(key, default))
        if value not in choices:
            raise ConfigError(
                f"{type(self).__name__}: unknown {key} {value!r}. Set env.{key}=" + " or ".join(choices) + "."
            )
        return value

    def uniform(self, shape: Tuple[int, ...], low: float, high: float) -> Tensor:
        """Uniform samples in [low, high) from this task's generator."""
        return torch.rand(shape, generator=self.generator, device=self.device) * (high - low) + low

    # -- the interface --------------------------------------------------------------------------
    def reset(self) -> Dict[str, Tensor]:
        """Reset every env and return the first observations.

        With ``env.desyncEpisodes`` (default on) each env's first episode starts at a random step
        count, so episode boundaries are spread over time: otherwise all envs reset together and
        every rollout of ``horizon_length`` steps sees the same phase of the episode, which makes
        PPO's batches strongly correlated (measured: much higher seed variance on Pendulum).
        """
        if self.resume_episodes:  # restored from a checkpoint: go on mid-episode
            self.resume_episodes = False
            log.info(
                "%s: %d envs go on mid-episode from the checkpoint's env state", type(self).__name__, self.num_envs
            )
            self._observe()
            return {"obs": self.obs_buf.to(self.rl_device)}
        self.reset_idx(torch.arange(self.num_envs, device=self.device))
        if self.desync_episodes and self.max_episode_length > 1:
            self.progress_buf[:] = torch.randint(
                0, self.max_episode_length, (self.num_envs,), generator=self.generator, device=self.device
            )
        self._observe()
        return {"obs": self.obs_buf.to(self.rl_device)}

    def reset_idx(self, env_ids: Tensor) -> None:
        """Start new episodes in ``env_ids``."""
        if env_ids.numel() == 0:
            return
        self._reset_idx(env_ids)
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = False
        self.timeout_buf[env_ids] = False

    def step(self, actions: Tensor) -> Tuple[Dict[str, Tensor], Tensor, Tensor, Dict[str, Tensor]]:
        """Advance every env one control step. Done envs are reset at once (auto-reset)."""
        self.resume_episodes = False  # a restore mid-run (a rollback) is followed by steps, not a reset
        actions = torch.clamp(actions.to(self.device), -1.0, 1.0)
        self._physics(actions)
        self.progress_buf += 1
        reward, terminated = self._compute(actions)
        self.rew_buf[:] = reward
        self.timeout_buf[:] = (self.progress_buf >= self.max_episode_length) & ~terminated
        self.reset_buf[:] = terminated | self.timeout_buf
        self.extras = {"time_outs": self.timeout_buf.clone()}
        self._episode_end_extras(self.reset_buf)
        done = self.reset_buf.clone()
        done_ids = done.nonzero(as_tuple=False).squeeze(-1)
        self.reset_idx(done_ids)
        self._observe()
        rl = self.rl_device
        extras = {k: v.to(rl) for k, v in self.extras.items()}
        return {"obs": self.obs_buf.to(rl)}, self.rew_buf.to(rl), done.to(rl), extras

    def live_setters(self) -> Dict[str, Callable[[Any], None]]:
        """Setters of the ``live_env`` keys by full config key (``task.env.goalRadius``)."""
        return {f"task.env.{key}": functools.partial(self._set_live, key) for key in self.live_env}

    def _set_live(self, key: str, value: Any) -> None:
        setattr(self, self.live_env[key], float(value))
        self.env_cfg[key] = value
        self.check_env()

    def check_env(self) -> None:
        """Check the env settings (after construction and after a live change); ConfigError if they do not fit."""

    # -- to implement ---------------------------------------------------------------------------
    def _reset_idx(self, env_ids: Tensor) -> None:
        raise NotImplementedError

    def _physics(self, actions: Tensor) -> None:
        raise NotImplementedError

    def _compute(self, actions: Tensor) -> Tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _observe(self) -> None:
        raise NotImplementedError

    def _episode_end_extras(self, done: Tensor) -> None:
        """Hook to add per-episode entries (e.g. ``true_objective``) to ``self.extras``."""

    # -- state for checkpoints ---------------------------------------------------------------------
    def state_names(self) -> Tuple[str, ...]:
        return ("progress_buf", *self.episode_state)

    def get_env_state(self) -> Optional[Dict[str, Any]]:
        """Where every env is in its episode (``episode_state`` and ``progress_buf``) and the task's
        generator: rl_games saves it in each checkpoint. None for a task that names no episode state."""
        if not self.episode_state:
            return None
        state: Dict[str, Any] = {name: getattr(self, name).detach().cpu().clone() for name in self.state_names()}
        state[GENERATOR] = self.generator.get_state()
        return state

    def set_env_state(self, state: Optional[Dict[str, Any]]) -> None:
        """Put a checkpoint's env state back, so that the reset rl_games makes when training starts
        goes on mid-episode. A state that does not fit this task (another num_envs or episode length,
        a missing or non-finite entry: checkpoints are read from a shared workspace) is not loaded and
        the episodes start afresh, with a warning saying why; nothing else depends on it."""
        if state is None or not self.episode_state:
            return
        why = self.env_state_problem(state)
        if why is not None:
            log.warning(
                "%s: the checkpoint's env state is not loaded (%s); episodes start afresh", type(self).__name__, why
            )
            return
        for name in self.state_names():
            getattr(self, name).copy_(state[name].to(self.device))
        self.generator.set_state(state[GENERATOR])
        self._observe()
        self.resume_episodes = True

    def env_state_problem(self, state: Any) -> Optional[str]:
        """Why ``state`` cannot be this task's env state (None: it can)."""
        if not isinstance(state, Mapping):
            return f"a {type(state).__name__}, not a mapping"
        expected = {*self.state_names(), GENERATOR}
        if set(state) != expected:
            return f"entries {sorted(map(str, state))}, expected {sorted(expected)}"
        for name in self.state_names():
            own, value = getattr(self, name), state[name]
            if not isinstance(value, Tensor) or value.shape != own.shape or value.dtype != own.dtype:
                shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                return f"{name} is {shape}, this task's is {tuple(own.shape)} {own.dtype}"
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                return f"{name} holds NaN or inf"
        progress = state["progress_buf"]
        if bool((progress < 0).any()) or bool((progress >= self.max_episode_length).any()):
            return f"progress_buf outside [0, {self.max_episode_length}) (another episode length)"
        generator = state[GENERATOR]
        own_generator = self.generator.get_state()
        if (
            not isinstance(generator, Tensor)
            or generator.dtype != torch.uint8
            or generator.shape != own_generator.shape
        ):
            return "generator is not a torch generator state of this device"
        return None
