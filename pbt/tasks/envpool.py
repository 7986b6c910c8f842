"""envpool environments (MuJoCo's HalfCheetah, Ant, ...) as a vectorized task: ``task=envpool/<EnvId>``.

Needs the optional extra ``pip install -e ".[mujoco]"`` (envpool 1.2.5); envpool is imported only when
such a task is built.

Auto-reset. envpool 1.2.5 follows gymnasium's ``AutoresetMode.NEXT_STEP`` (its envs' metadata says
so; checked by stepping HalfCheetah with ``max_episode_steps=4``): the step that ends an episode
returns the episode's last observation with ``terminated``/``truncated`` set, and the env is reset
only by the *next* ``step`` call, which ignores that env's action and returns the first observation
of the new episode with reward 0 and both flags False. Passed straight to rl_games, that would add
one bogus transition per episode (an action that did nothing, reward 0, the last observation of
one episode followed by the first of the next, not marked done) and show the policy a terminal
observation as if it were a live state. So this task resets finished envs itself, at once, with
``env.reset(env_ids)`` (a partial reset is allowed in envpool's synchronous mode and does not wait
for the other envs), and returns the new episode's first observation for them, as Isaac Gym tasks
do. The next ``step`` then advances every env normally: rl_games never sees a no-op step.

Time limits: ``truncated`` (and the desync cut below) is reported as ``extras["time_outs"]`` so
rl_games bootstraps the value there (``value_bootstrap``); ``terminated`` is a true terminal state.
envpool reports only ``truncated`` when an episode terminates on its very last allowed step.

Desynchronised episodes (``env.desyncEpisodes``, default on, as for the built-in tasks): every env
starts at once, so without it all envs of a 1000-step MuJoCo task would end their episodes on the
same step forever. The first episode of each env is cut (as a time-out) after a random number of
steps in [1, max_episode_steps], which spreads episode boundaries evenly over time.
"""

import logging
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch

from pbt.devices import available_cores
from pbt.errors import TaskError, did_you_mean

log = logging.getLogger(__name__)

Tensor = torch.Tensor

MUJOCO_INSTALL = 'envpool tasks need the optional MuJoCo extra: pip install -e ".[mujoco]" (envpool==1.2.5).'


def import_envpool() -> Any:
    """Import envpool; TaskError naming the extra to install when it is missing or broken."""
    try:
        import envpool
    except ImportError as exc:
        raise TaskError(f"Cannot import envpool ({exc}). {MUJOCO_INSTALL}") from exc
    return envpool


def mujoco_env_ids(envpool: Any) -> List[str]:
    """The gym-style MuJoCo ids (HalfCheetah-v4, Ant-v4, ...) among envpool's envs."""
    try:
        specs = envpool.registration.registry.specs
        return sorted(k for k, entry in specs.items() if entry[0] == "envpool.mujoco.gym")
    except AttributeError:  # registry layout of another envpool version
        return sorted(k for k in envpool.list_all_envs() if k.split("-")[0] in {"HalfCheetah", "Ant", "Hopper"})


def check_env_id(envpool: Any, env_id: str) -> None:
    """TaskError with close envpool ids (did you mean) when ``env_id`` is not an envpool env."""
    all_ids = list(envpool.list_all_envs())
    if env_id in all_ids:
        return
    hint = did_you_mean(env_id, all_ids, n=5)
    raise TaskError(
        f"Unknown envpool env id '{env_id}'.{hint} MuJoCo envs: {', '.join(mujoco_env_ids(envpool))}. "
        'All ids: python -c "import envpool; print(envpool.list_all_envs())".'
    )


class EnvpoolTask:
    """``num_envs`` copies of one envpool env stepped together, presented like the built-in tasks:
    ``reset() -> {"obs": obs}``; ``step(actions in [-1, 1]) -> ({"obs": obs}, rew, done, extras)``
    with float32 torch tensors on ``rl_device`` and ``extras["time_outs"]`` (bool)."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        sim_device: str = "cpu",
        rl_device: str = "cpu",
        headless: bool = True,
        env_id: Optional[str] = None,
    ) -> None:
        env_cfg = dict(cfg.get("env", {}) or {})
        self.env_id = str(env_id or cfg.get("name") or "")
        if not self.env_id:
            raise TaskError(
                "envpool task without an env id: use task=envpool/<EnvId>, e.g. task=envpool/HalfCheetah-v4."
            )
        self.num_envs = int(env_cfg.get("numEnvs", 64))
        if self.num_envs < 1:
            raise TaskError(f"num_envs must be >= 1, got {self.num_envs}. Set num_envs=<positive int>.")
        if not str(sim_device).startswith("cpu"):
            log.info("envpool steps its envs on the CPU; sim_device=%s is ignored", sim_device)
        self.rl_device = torch.device(rl_device)
        self.headless = headless
        seed = cfg.get("seed")
        seed = (
            int(seed) % (2**31)
            if seed is not None and int(seed) >= 0
            else int.from_bytes(os.urandom(4), "little") % (2**31)
        )
        threads = int(env_cfg.get("numThreads", 0) or 0)
        if threads <= 0:
            threads = max(1, min(available_cores(), self.num_envs))
        kwargs = dict(env_cfg.get("kwargs", {}) or {})

        envpool = import_envpool()
        check_env_id(envpool, self.env_id)
        try:
            self.env = envpool.make_gymnasium(
                self.env_id, num_envs=self.num_envs, batch_size=self.num_envs, num_threads=threads, seed=seed, **kwargs
            )
        except (TypeError, ValueError, AssertionError, KeyError) as exc:
            raise TaskError(
                f"envpool could not make '{self.env_id}' with {kwargs or 'no extra arguments'} ({exc}). "
                "Check task.env.kwargs against envpool.make_spec(id).config."
            ) from exc
        obs_space, act_space = self.env.observation_space, self.env.action_space
        if len(getattr(obs_space, "shape", None) or ()) != 1:
            raise TaskError(
                f"envpool env '{self.env_id}' has observation space {obs_space}; only flat vector observations "
                "are supported (rl_games MLP policy). Pick a MuJoCo env, e.g. envpool/HalfCheetah-v4."
            )
        if not hasattr(act_space, "low") or len(act_space.shape or ()) != 1:
            raise TaskError(
                f"envpool env '{self.env_id}' has action space {act_space}; only continuous (Box) actions are "
                "supported (rl_games a2c_continuous). Pick a MuJoCo env, e.g. envpool/HalfCheetah-v4."
            )
        self.num_obs = int(obs_space.shape[0])
        self.num_actions = int(act_space.shape[0])
        self.action_dtype = np.dtype(act_space.dtype)
        low = np.asarray(act_space.low, dtype=np.float64)
        high = np.asarray(act_space.high, dtype=np.float64)
        finite = np.isfinite(low) & np.isfinite(high)
        # a in [-1, 1] -> offset + scale * a = [low, high]; unbounded dims pass through unscaled.
        self.action_scale = torch.tensor(np.where(finite, (high - low) / 2.0, 1.0), dtype=torch.float32)
        self.action_offset = torch.tensor(np.where(finite, (high + low) / 2.0, 0.0), dtype=torch.float32)
        self.max_episode_length = int(self.env.config.get("max_episode_steps", 0) or 0)
        self.desync_episodes = bool(env_cfg.get("desyncEpisodes", True)) and self.max_episode_length > 1
        self.rng = np.random.default_rng(seed)
        self.progress = np.zeros(self.num_envs, dtype=np.int64)
        self.cut_at = np.full(self.num_envs, np.iinfo(np.int64).max, dtype=np.int64)
        self._all_ids = np.arange(self.num_envs, dtype=np.int32)
        log.info(
            "envpool %s: %d envs, %d threads, obs %d, actions %d in [%s, %s], episodes of %d steps%s",
            self.env_id,
            self.num_envs,
            threads,
            self.num_obs,
            self.num_actions,
            low.min(),
            high.max(),
            self.max_episode_length,
            " (desynchronised)" if self.desync_episodes else "",
        )

    # -- helpers ------------------------------------------------------------------------------------
    def _ordered(self, values: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        """Rows of a batch in env-id order (envpool reports which env each row belongs to)."""
        if np.array_equal(env_ids, self._all_ids[: len(env_ids)]):
            return values
        out = np.empty_like(values)
        out[env_ids] = values
        return out

    def _obs_tensor(self, obs: np.ndarray) -> Tensor:
        return torch.from_numpy(np.asarray(obs, dtype=np.float32)).to(self.rl_device)

    def scale_actions(self, actions: Tensor) -> np.ndarray:
        """Actions in [-1, 1] (clamped) -> the env's bounds, as the numpy array envpool expects."""
        a = torch.clamp(actions.detach().to("cpu", torch.float32), -1.0, 1.0)
        a = a * self.action_scale + self.action_offset
        return np.ascontiguousarray(a.numpy(), dtype=self.action_dtype)

    # -- the interface --------------------------------------------------------------------------
    def reset(self) -> Dict[str, Tensor]:
        """Reset every env and return the first observations."""
        obs, info = self.env.reset()
        obs = self._ordered(obs, np.asarray(info["env_id"]))
        self.progress[:] = 0
        if self.desync_episodes:
            self.cut_at = self.rng.integers(1, self.max_episode_length + 1, size=self.num_envs)
        return {"obs": self._obs_tensor(obs)}

    def step(self, actions: Tensor) -> Tuple[Dict[str, Tensor], Tensor, Tensor, Dict[str, Tensor]]:
        """Advance every env one step; finished envs are reset at once (see the module docstring)."""
        obs, rew, terminated, truncated, info = self.env.step(self.scale_actions(actions))
        ids = np.asarray(info["env_id"])
        obs, rew = self._ordered(obs, ids), self._ordered(np.asarray(rew), ids)
        terminated, truncated = self._ordered(np.asarray(terminated), ids), self._ordered(np.asarray(truncated), ids)
        self.progress += 1
        cut = self.progress >= self.cut_at  # the desync cut of a first episode
        time_outs = (truncated | cut) & ~terminated
        done = terminated | time_outs
        done_ids = np.flatnonzero(done).astype(np.int32)
        if done_ids.size:
            new_obs, new_info = self.env.reset(done_ids)
            obs = np.array(obs, copy=True)
            obs[np.asarray(new_info["env_id"])] = new_obs
            self.progress[done_ids] = 0
            self.cut_at[done_ids] = np.iinfo(np.int64).max
        rl = self.rl_device
        extras = {"time_outs": torch.from_numpy(time_outs).to(rl)}
        return (
            {"obs": self._obs_tensor(obs)},
            torch.from_numpy(np.asarray(rew, dtype=np.float32)).to(rl),
            torch.from_numpy(done).to(rl),
            extras,
        )

    def close(self) -> None:
        self.env.close()

    # -- optional state for checkpoints -----------------------------------------------------------
    def get_env_state(self) -> Optional[Dict[str, Any]]:
        return None

    def set_env_state(self, state: Optional[Dict[str, Any]]) -> None:
        return None
