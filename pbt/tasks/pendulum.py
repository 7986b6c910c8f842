"""Pendulum swing-up (the classic control benchmark, batched in torch).

A point mass m on a massless rod of length l, hinged at the top of the rod's other end; angle
``theta`` measured from upright (0 = balanced up, pi = hanging down), torque ``u`` at the hinge.

Equation of motion (uniform rod as in gym's Pendulum-v1, inertia I = m l^2 / 3)::

    theta_ddot = (3 g / (2 l)) sin(theta) + (3 / (m l^2)) u - b theta_dot

integrated with semi-implicit (symplectic) Euler: ``theta_dot += dt * theta_ddot`` then
``theta += dt * theta_dot``, in ``substeps`` steps per control step. With u = 0 and b = 0 the
energy ``E = (m l^2 / 6) theta_dot^2 + (m g l / 2) cos(theta)`` is conserved up to O(dt) bounded
oscillation (symplectic integrator: no drift). ``theta_dot`` is clipped to +-max_speed.

Reward per step: ``-(wrap(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` (0 is best). Episodes last 200
steps and never terminate early; a good policy scores about -150 per episode, a random one about
-1200. Observation: ``[cos theta, sin theta, theta_dot / max_speed]``; action in [-1, 1] scaled to
+-max_torque. Resets: theta ~ U(-pi, pi), theta_dot ~ U(-1, 1).

``env.observeVelocity: False`` drops ``theta_dot`` from the observation (``[cos theta, sin theta]``):
a partially observed task where the velocity must be inferred from the history, so a recurrent
policy beats a feed-forward one.
"""

import math
from typing import Any, Mapping, Tuple

import torch

from pbt.tasks.vectask import Tensor, VecTask


def wrap_angle(x: Tensor) -> Tensor:
    """Map angles to [-pi, pi)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(VecTask):
    num_obs = 3
    num_actions = 1
    default_episode_length = 200
    episode_state: Tuple[str, ...] = ("theta", "theta_dot", "last_u")

    def __init__(
        self, cfg: Mapping[str, Any], sim_device: str = "cpu", rl_device: str = "cpu", headless: bool = True
    ) -> None:
        self.observe_velocity = bool((cfg.get("env", {}) or {}).get("observeVelocity", True))
        self.num_obs = 3 if self.observe_velocity else 2  # before VecTask allocates obs_buf
        super().__init__(cfg, sim_device, rl_device, headless)
        e = self.env_cfg
        self.g = float(e.get("gravity", 10.0))
        self.m = float(e.get("mass", 1.0))
        self.length = float(e.get("length", 1.0))
        self.damping = float(e.get("damping", 0.0))
        self.dt = float(e.get("dt", 0.05))
        self.substeps = int(e.get("substeps", 1))
        self.max_speed = float(e.get("maxSpeed", 8.0))
        self.max_torque = float(e.get("maxTorque", 2.0))
        self.theta = torch.zeros(self.num_envs, device=self.device)
        self.theta_dot = torch.zeros(self.num_envs, device=self.device)
        self.last_u = torch.zeros(self.num_envs, device=self.device)

    def energy(self) -> Tensor:
        """Mechanical energy of each env (conserved with no torque and no damping)."""
        m, l, g = self.m, self.length, self.g  # noqa: E741 - the textbook symbol for the pole length
        return m * l * l / 6.0 * self.theta_dot**2 + m * g * l / 2.0 * torch.cos(self.theta)

    def _reset_idx(self, env_ids: Tensor) -> None:
        n = env_ids.numel()
        self.theta[env_ids] = self.uniform((n,), -math.pi, math.pi)
        self.theta_dot[env_ids] = self.uniform((n,), -1.0, 1.0)
        self.last_u[env_ids] = 0.0

    def _physics(self, actions: Tensor) -> None:
        u = actions[:, 0] * self.max_torque
        self.last_u = u
        h = self.dt / self.substeps
        a = 3.0 * self.g / (2.0 * self.length)
        b = 3.0 / (self.m * self.length**2)
        for _ in range(self.substeps):
            acc = a * torch.sin(self.theta) + b * u - self.damping * self.theta_dot
            self.theta_dot = torch.clamp(self.theta_dot + h * acc, -self.max_speed, self.max_speed)
            self.theta = self.theta + h * self.theta_dot

    def _compute(self, actions: Tensor) -> Tuple[Tensor, Tensor]:
        th = wrap_angle(self.theta)
        cost = th**2 + 0.1 * self.theta_dot**2 + 0.001 * self.last_u**2
        return -cost, torch.zeros_like(self.reset_buf)

    def _observe(self) -> None:
        self.obs_buf[:, 0] = torch.cos(self.theta)
        self.obs_buf[:, 1] = torch.sin(self.theta)
        if self.observe_velocity:
            self.obs_buf[:, 2] = self.theta_dot / self.max_speed
