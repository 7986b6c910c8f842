"""Cart-pole balancing with a continuous force (Barto, Sutton & Anderson 1983; gym's CartPole, batched).

A cart of mass ``m_c`` moves on a frictionless horizontal track; a uniform pole of mass ``m_p`` and
half-length ``l`` is hinged on it. ``x`` is the cart position, ``theta`` the pole angle from upright
(positive clockwise, as in gym), ``F = action * force_max`` the horizontal force on the cart.

Equations of motion (Lagrangian of cart + uniform rod, pole inertia about its centre m_p l^2 / 3;
M = m_c + m_p)::

    temp        = (F + m_p l theta_dot^2 sin(theta)) / M
    theta_ddot  = (g sin(theta) - cos(theta) temp) / (l (4/3 - m_p cos(theta)^2 / M))
    x_ddot      = temp - m_p l theta_ddot cos(theta) / M

integrated in ``substeps`` steps of ``dt / substeps`` per control step with semi-implicit Euler
(``integrator: semi_implicit_euler``, the default, gym's "semi-implicit euler": velocities first,
then positions with the new velocities) or classic 4th-order Runge-Kutta (``rk4``). With F = 0 the
energy

    E = M x_dot^2 / 2 + m_p l x_dot theta_dot cos(theta) + (2/3) m_p l^2 theta_dot^2 + m_p g l cos(theta)

and the horizontal momentum ``p = M x_dot + m_p l theta_dot cos(theta)`` are conserved (see
:meth:`Cartpole.energy` and :meth:`Cartpole.momentum`). RK4 conserves them to < 0.01% over 1000
free steps; semi-implicit Euler is only first order here (the mass matrix depends on theta, so it is
not symplectic in these coordinates): its energy error grows ~linearly, about 1.4% of the energy
scale per 10 s simulated at 10 substeps (negligible near upright, where the task lives).

Episode: a step terminates the episode when ``|theta| > theta_limit`` (12 degrees) or
``|x| > x_limit`` (2.4 m); otherwise it lasts 500 control steps (dt = 0.02 s, 10 s) and ends by
time-out. Reward per step: ``1 - action_cost * action^2`` for every step after which the pole is
still up, 0 on the terminating step (so the return of an undisturbed episode is 500 with the
default ``actionCost: 0``). Observation: ``[x, x_dot, theta, theta_dot]``; action in [-1, 1]
scaled to ``+-force_max`` (10 N). Resets: each state variable ~ U(-0.05, 0.05) (``resetNoise``).

``extras["true_objective"]``: the fraction of the episode's 500 steps survived, in [0, 1] (1 =
balanced to the time limit); set for envs whose episode ended this step, NaN for the others. (A
first episode shortened by ``env.desyncEpisodes`` counts as a fraction of its own length.)
"""

import math
from typing import Any, Dict, Mapping, Tuple

import torch

from pbt.tasks.vectask import Tensor, VecTask


class Cartpole(VecTask):
    """Balance a pole on a cart with a continuous horizontal force; +1 per step alive."""

    num_obs = 4
    num_actions = 1
    default_episode_length = 500
    episode_state = ("x", "x_dot", "theta", "theta_dot", "episode_start")
    reward_shaping_keys = ("task.env.actionCost",)
    reports_true_objective = True

    def __init__(
        self, cfg: Mapping[str, Any], sim_device: str = "cpu", rl_device: str = "cpu", headless: bool = True
    ) -> None:
        super().__init__(cfg, sim_device, rl_device, headless)
        e = self.env_cfg
        self.g = float(e.get("gravity", 9.8))
        self.m_cart = float(e.get("massCart", 1.0))
        self.m_pole = float(e.get("massPole", 0.1))
        self.half_length = float(e.get("halfLength", 0.5))
        self.force_max = float(e.get("forceMax", 10.0))
        self.dt = float(e.get("dt", 0.02))
        self.substeps = int(e.get("substeps", 1))
        self.integrator = self.env_choice("integrator", "semi_implicit_euler", ("semi_implicit_euler", "rk4"))
        self.theta_limit = float(e.get("thetaLimit", math.radians(12.0)))
        self.x_limit = float(e.get("xLimit", 2.4))
        self.action_cost = float(e.get("actionCost", 0.0))
        self.reset_noise = float(e.get("resetNoise", 0.05))
        n, dev = self.num_envs, self.device
        self.x = torch.zeros(n, device=dev)
        self.x_dot = torch.zeros(n, device=dev)
        self.theta = torch.zeros(n, device=dev)
        self.theta_dot = torch.zeros(n, device=dev)
        self.episode_start = torch.zeros(n, dtype=torch.long, device=dev)

    # -- physics ------------------------------------------------------------------------------------
    def energy(self) -> Tensor:
        """Mechanical energy of each env (conserved with zero force)."""
        m_total = self.m_cart + self.m_pole
        mp, l = self.m_pole, self.half_length  # noqa: E741 - the textbook symbol for the pole (half) length
        kinetic = (
            0.5 * m_total * self.x_dot**2
            + mp * l * self.x_dot * self.theta_dot * torch.cos(self.theta)
            + (2.0 / 3.0) * mp * l * l * self.theta_dot**2
        )
        return kinetic + mp * self.g * l * torch.cos(self.theta)

    def momentum(self) -> Tensor:
        """Horizontal momentum of each env (conserved with zero force)."""
        m_total = self.m_cart + self.m_pole
        return m_total * self.x_dot + self.m_pole * self.half_length * self.theta_dot * torch.cos(self.theta)

    def acceleration(self, theta: Tensor, theta_dot: Tensor, force: Tensor) -> Tuple[Tensor, Tensor]:
        """(x_ddot, theta_ddot) from the equations of motion above (they do not depend on x, x_dot)."""
        m_total = self.m_cart + self.m_pole
        mp_l = self.m_pole * self.half_length
        sin_t, cos_t = torch.sin(theta), torch.cos(theta)
        temp = (force + mp_l * theta_dot**2 * sin_t) / m_total
        theta_acc = (self.g * sin_t - cos_t * temp) / (
            self.half_length * (4.0 / 3.0 - self.m_pole * cos_t**2 / m_total)
        )
        return temp - mp_l * theta_acc * cos_t / m_total, theta_acc

    def _physics(self, actions: Tensor) -> None:
        force = actions[:, 0] * self.force_max
        h = self.dt / self.substeps
        x, x_dot, th, th_dot = self.x, self.x_dot, self.theta, self.theta_dot
        for _ in range(self.substeps):
            if self.integrator == "rk4":
                xa1, ta1 = self.acceleration(th, th_dot, force)
                xv2, tv2 = x_dot + 0.5 * h * xa1, th_dot + 0.5 * h * ta1
                xa2, ta2 = self.acceleration(th + 0.5 * h * th_dot, tv2, force)
                xv3, tv3 = x_dot + 0.5 * h * xa2, th_dot + 0.5 * h * ta2
                xa3, ta3 = self.acceleration(th + 0.5 * h * tv2, tv3, force)
                xv4, tv4 = x_dot + h * xa3, th_dot + h * ta3
                xa4, ta4 = self.acceleration(th + h * tv3, tv4, force)
                x = x + (h / 6.0) * (x_dot + 2.0 * xv2 + 2.0 * xv3 + xv4)
                th = th + (h / 6.0) * (th_dot + 2.0 * tv2 + 2.0 * tv3 + tv4)
                x_dot = x_dot + (h / 6.0) * (xa1 + 2.0 * xa2 + 2.0 * xa3 + xa4)
                th_dot = th_dot + (h / 6.0) * (ta1 + 2.0 * ta2 + 2.0 * ta3 + ta4)
            else:  # semi-implicit Euler: velocities first, then positions with the new velocities
                x_acc, th_acc = self.acceleration(th, th_dot, force)
                x_dot = x_dot + h * x_acc
                th_dot = th_dot + h * th_acc
                x = x + h * x_dot
                th = th + h * th_dot
        self.x, self.x_dot, self.theta, self.theta_dot = x, x_dot, th, th_dot

    # -- the VecTask hooks --------------------------------------------------------------------------
    def reset(self) -> Dict[str, Tensor]:
        out = super().reset()
        # With env.desyncEpisodes the first episodes start part-way (progress_buf > 0): remember
        # where, so the objective of such a shortened episode is a fraction of its own length.
        self.episode_start = self.progress_buf.clone()
        return out

    def _reset_idx(self, env_ids: Tensor) -> None:
        n, r = env_ids.numel(), self.reset_noise
        self.x[env_ids] = self.uniform((n,), -r, r)
        self.x_dot[env_ids] = self.uniform((n,), -r, r)
        self.theta[env_ids] = self.uniform((n,), -r, r)
        self.theta_dot[env_ids] = self.uniform((n,), -r, r)
        self.episode_start[env_ids] = 0

    def _compute(self, actions: Tensor) -> Tuple[Tensor, Tensor]:
        terminated = (self.theta.abs() > self.theta_limit) | (self.x.abs() > self.x_limit)
        reward = (1.0 - self.action_cost * actions[:, 0] ** 2) * (~terminated).float()
        return reward, terminated

    def _episode_end_extras(self, done: Tensor) -> None:
        # Steps with the pole still up (the terminating step does not count), as a fraction of the
        # steps this episode could have lasted.
        alive = self.progress_buf - self.episode_start - (self.reset_buf & ~self.timeout_buf).long()
        survived = alive.float() / (self.max_episode_length - self.episode_start).float()
        self.extras["true_objective"] = torch.where(done, survived, torch.full_like(survived, float("nan")))

    def _observe(self) -> None:
        self.obs_buf[:, 0] = self.x
        self.obs_buf[:, 1] = self.x_dot
        self.obs_buf[:, 2] = self.theta
        self.obs_buf[:, 3] = self.theta_dot
