"""Thin glue between a vectorized task (built-in, user's or Isaac Gym) and rl_games' IVecEnv."""

from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from rl_games.common import env_configurations, vecenv
from rl_games.common.gym_compat import gym
from rl_games.common.ivecenv import IVecEnv

#: The rl_games env_name / vecenv type under which the current worker's task is registered.
ENV_NAME = "pbt_vecenv"
VECENV_TYPE = "PBT_VECENV"


#: infos key under which each finished episode's undiscounted return is reported (per env; the
#: entries of envs that just finished are meaningful). The objective falls back to it.
EPISODE_RETURN_KEY = "episode_return"


class TaskVecEnv(IVecEnv):
    """Presents a task object with ``reset()``/``step()`` over torch tensors to rl_games, and adds
    each finished episode's return to the infos (``episode_return``) for the PBT objective."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.returns: Optional[torch.Tensor] = None
        num_obs, num_actions = int(task.num_obs), int(task.num_actions)
        obs_space = getattr(task, "observation_space", None)
        act_space = getattr(task, "action_space", None)
        shape = tuple(getattr(task, "obs_shape", None) or (num_obs,))  # an image task: (height, width, channels)
        self.observation_space = obs_space or gym.spaces.Box(-np.inf, np.inf, shape, dtype=np.float32)
        self.action_space = act_space or gym.spaces.Box(-1.0, 1.0, (num_actions,), dtype=np.float32)

    def step(self, actions: torch.Tensor) -> Tuple[Any, torch.Tensor, torch.Tensor, Dict[str, Any]]:
        obs, reward, done, extras = self.task.step(actions)
        if self.returns is None or self.returns.shape != reward.shape or self.returns.device != reward.device:
            self.returns = torch.zeros_like(reward, dtype=torch.float32)
        self.returns += reward.float()
        extras = dict(extras) if extras is not None else {}
        extras[EPISODE_RETURN_KEY] = self.returns.clone()
        self.returns.masked_fill_(done.bool().reshape(self.returns.shape), 0.0)
        return obs, reward, done, extras

    def reset(self) -> Any:
        self.returns = None
        return self.task.reset()

    @property
    def num_envs(self) -> int:
        return int(getattr(self.task, "num_envs", 0) or 0)

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> Dict[str, Any]:
        info = {
            "action_space": self.action_space,
            "observation_space": self.observation_space,
            "agents": 1,
            "value_size": 1,
        }
        num_states = int(getattr(self.task, "num_states", 0) or 0)
        if num_states > 0:  # asymmetric actor-critic (IsaacGymEnvs tasks with a privileged state)
            info["state_space"] = gym.spaces.Box(-np.inf, np.inf, (num_states,), dtype=np.float32)
        return info

    def set_train_info(self, env_frames: int, *args: Any, **kwargs: Any) -> None:
        if hasattr(self.task, "set_train_info"):
            self.task.set_train_info(env_frames, *args, **kwargs)

    def get_env_state(self) -> Optional[Dict[str, Any]]:
        getter = getattr(self.task, "get_env_state", None)
        return getter() if getter else None

    def set_env_state(self, env_state: Optional[Dict[str, Any]]) -> None:
        setter = getattr(self.task, "set_env_state", None)
        if setter and env_state is not None:
            setter(env_state)


def register_task(task: Any) -> None:
    """Make ``env_name: pbt_vecenv`` in the rl_games config create a TaskVecEnv over ``task``.

    The task is built before rl_games starts (so bad task configs fail before training); rl_games'
    factory hands out that one instance.
    """
    vecenv.register(VECENV_TYPE, lambda config_name, num_actors, **kwargs: TaskVecEnv(task))
    env_configurations.register(ENV_NAME, {"vecenv_type": VECENV_TYPE, "env_creator": lambda **kwargs: task})
