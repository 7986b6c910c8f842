"""Pendulum seen through a few pixels: the swing-up of :mod:`pbt.tasks.pendulum`, observed as a tiny
image, the built-in task for convolutional policies (rl_games' ``cnn`` block; fast on a CPU).

Observation: ``(size, size, 2)`` (height, width, channels; rl_games' ``permute_input`` makes it
channels-first), pixel values in [0, 1]. Channel 0 draws the rod's tip as a Gaussian blob (sd
``blobWidth`` pixels) on a ``size`` x ``size`` grid spanning [-1.2, 1.2]^2 (up is row 0); channel 1
the tip one control step earlier, so the angular velocity can be read off the two frames, as from
stacked Atari frames. Dynamics, reward and resets are Pendulum's.
"""

from typing import Any, Mapping

import torch

from pbt.tasks.pendulum import Pendulum
from pbt.tasks.vectask import Tensor

EXTENT = 1.2
"""The grid spans [-EXTENT, EXTENT] in both directions (the rod has length 1)."""


class PendulumImage(Pendulum):
    episode_state = (*Pendulum.episode_state, "prev_theta")  # the first image of a pair shows it

    def __init__(
        self, cfg: Mapping[str, Any], sim_device: str = "cpu", rl_device: str = "cpu", headless: bool = True
    ) -> None:
        env = dict(cfg.get("env", {}) or {})
        self.size = int(env.get("imageSize", 6))
        self.blob = float(env.get("blobWidth", 0.6))
        super().__init__({**cfg, "env": {**env, "observeVelocity": False}}, sim_device, rl_device, headless)
        self.num_obs = self.size * self.size * 2
        self.obs_shape = (self.size, self.size, 2)  # the observation space's shape (pbt/rl_games/vecenv.py)
        self.obs_buf = torch.zeros((self.num_envs, self.size, self.size, 2), device=self.device)
        self.prev_theta = torch.zeros(self.num_envs, device=self.device)
        centres = torch.linspace(-EXTENT, EXTENT, self.size, device=self.device)
        self.cols = centres.view(1, 1, -1)  # x grows to the right
        self.rows = centres.flip(0).view(1, -1, 1)  # y grows upwards: row 0 is the top

    def _reset_idx(self, env_ids: Tensor) -> None:
        super()._reset_idx(env_ids)
        self.prev_theta[env_ids] = self.theta[env_ids]

    def _physics(self, actions: Tensor) -> None:
        self.prev_theta = self.theta.clone()
        super()._physics(actions)

    def render(self, theta: Tensor) -> Tensor:
        """(N, size, size) images of the tip at angle ``theta`` (0: up)."""
        pixel = 2 * EXTENT / (self.size - 1)
        x, y = torch.sin(theta).view(-1, 1, 1), torch.cos(theta).view(-1, 1, 1)
        distance = (self.cols - x) ** 2 + (self.rows - y) ** 2
        return torch.exp(-distance / (2 * (self.blob * pixel) ** 2))

    def _observe(self) -> None:
        self.obs_buf[..., 0] = self.render(self.theta)
        self.obs_buf[..., 1] = self.render(self.prev_theta)
