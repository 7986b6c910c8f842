"""Reacher: a torque-controlled planar 2-link arm must bring its fingertip to a random goal and hold it.

The arm moves in the horizontal plane (no gravity). Link i is a uniform rod of mass ``m_i`` and length
``l_i`` (centre of mass at ``c_i = l_i / 2``, inertia about the centre ``I_i = m_i l_i^2 / 12``).
``q1`` is the shoulder angle from the x axis, ``q2`` the elbow angle relative to link 1, and
``tau = action * max_torque`` the joint torques. Fingertip position::

    p = (l1 cos q1 + l2 cos(q1 + q2),  l1 sin q1 + l2 sin(q1 + q2))

Equations of motion (Lagrangian of the two rods; Spong, Hutchinson & Vidyasagar, ch. 7)::

    M(q) q_ddot + C(q, q_dot) + b q_dot = tau

    M11 = I1 + I2 + m1 c1^2 + m2 (l1^2 + c2^2 + 2 l1 c2 cos q2)
    M12 = M21 = I2 + m2 (c2^2 + l1 c2 cos q2)
    M22 = I2 + m2 c2^2
    C   = (-h q2_dot (2 q1_dot + q2_dot),  h q1_dot^2),   h = m2 l1 c2 sin q2

with viscous joint damping ``b``. ``q_ddot`` comes from the closed-form inverse of the 2x2 mass
matrix (:meth:`Reacher.acceleration`); the state is integrated with classic 4th-order Runge-Kutta
(``integrator: rk4``, default) or semi-implicit Euler (``semi_implicit_euler``) in ``substeps``
steps of ``dt / substeps`` per control step; joint speeds are clipped to ``+-maxSpeed`` after each
substep. With tau = 0 and b = 0 the kinetic energy ``E = q_dot^T M(q) q_dot / 2`` (the whole
mechanical energy: the plane is horizontal) is conserved (see :meth:`Reacher.energy`). RK4 is used
because the velocity-dependent Coriolis terms make semi-implicit Euler in (q, q_dot) non-symplectic:
measured, its energy drifts secularly (27% after 1000 free steps at 10 substeps), RK4's does not
(< 0.01%).

Goal: a point drawn uniformly over the annulus ``goalMinRadius <= |g| <= goalMaxRadius`` around the
shoulder at every reset. Reward per step (the real goal, not a proxy)::

    r = 1[|p - g| < goalRadius] - actionCost * |action|^2 - distanceCost * |p - g|

i.e. +1 for every step the fingertip is inside the goal disc (radius 0.03 m, 3/40 of the 0.4 m
reach) and a small cost on effort, which also rewards *holding* the fingertip still in the goal
rather than sweeping through it. There is no distance shaping by default (``distanceCost: 0``; a
positive cost per metre from the goal makes the reward dense: every run learns to approach the goal,
and the objective, which never counts the shaping, measures precision). By default the policy is not
told where its fingertip is either: it sees its joint angles and the goal and must learn the arm's kinematics
to place the fingertip within 3 cm. That precision is what PPO's defaults stall on and what its
hyperparameters decide (see benchmarks/results/tasks_notes.md). Episodes last 200 control steps
(dt = 0.05 s, 10 s) and never terminate early.

Observation (8): ``[cos q1, sin q1, cos q2, sin q2, q1_dot / maxSpeed, q2_dot / maxSpeed, g_x, g_y]``
(metres), plus ``[p_x - g_x, p_y - g_y]`` with ``env.observeTip: true`` (10; an easier variant that
PPO solves in about 2M frames). Action (2): joint torques in [-1, 1], scaled by ``maxTorque``.
Resets: ``q1, q2 ~ U(-pi, pi)``, ``q_dot ~ U(-0.1, 0.1)``, a new goal.

``extras["true_objective"]``: the fraction of the episode's steps with the fingertip inside the
goal disc, in [0, 1]; set for envs whose episode ended this step, NaN for the others. (A first
episode shortened by ``env.desyncEpisodes`` counts as a fraction of its own length.)
"""

import math
from typing import Any, Dict, Mapping, Tuple

import torch

from pbt.errors import ConfigError
from pbt.tasks.vectask import Tensor, VecTask


class Reacher(VecTask):
    """Planar 2-link arm; +1 per step with the fingertip inside a small random goal disc."""

    num_obs = 8  # 10 with env.observeTip
    num_actions = 2
    default_episode_length = 200
    episode_state = ("q", "q_dot", "goal", "in_goal_steps", "episode_start")
    reward_shaping_keys = ("task.env.actionCost", "task.env.distanceCost")
    reports_true_objective = True
    live_env = {
        "goalRadius": "goal_radius",
        "goalMinRadius": "goal_min_radius",
        "goalMaxRadius": "goal_max_radius",
        "distanceCost": "distance_cost",
    }

    def __init__(
        self, cfg: Mapping[str, Any], sim_device: str = "cpu", rl_device: str = "cpu", headless: bool = True
    ) -> None:
        self.observe_tip = bool(dict(cfg.get("env", {}) or {}).get("observeTip", False))
        self.num_obs = 10 if self.observe_tip else 8
        super().__init__(cfg, sim_device, rl_device, headless)
        e = self.env_cfg
        self.l1 = float(e.get("length1", 0.2))
        self.l2 = float(e.get("length2", 0.2))
        self.m1 = float(e.get("mass1", 1.0))
        self.m2 = float(e.get("mass2", 1.0))
        self.damping = float(e.get("damping", 0.05))
        self.dt = float(e.get("dt", 0.05))
        self.substeps = int(e.get("substeps", 2))
        self.integrator = self.env_choice("integrator", "rk4", ("rk4", "semi_implicit_euler"))
        self.max_speed = float(e.get("maxSpeed", 20.0))
        self.max_torque = float(e.get("maxTorque", 0.2))
        self.goal_radius = float(e.get("goalRadius", 0.03))
        self.goal_min_radius = float(e.get("goalMinRadius", 0.05))
        self.goal_max_radius = float(e.get("goalMaxRadius", 0.35))
        self.action_cost = float(e.get("actionCost", 0.05))
        self.distance_cost = float(e.get("distanceCost", 0.0))
        self.check_env()
        # Constant parts of the mass matrix (uniform rods, centre of mass at half length).
        c1, c2 = self.l1 / 2.0, self.l2 / 2.0
        i1, i2 = self.m1 * self.l1**2 / 12.0, self.m2 * self.l2**2 / 12.0
        self._a = i1 + i2 + self.m1 * c1**2 + self.m2 * (self.l1**2 + c2**2)
        self._b = self.m2 * self.l1 * c2
        self._d = i2 + self.m2 * c2**2

        n, dev = self.num_envs, self.device
        self.q = torch.zeros((n, 2), device=dev)
        self.q_dot = torch.zeros((n, 2), device=dev)
        self.goal = torch.zeros((n, 2), device=dev)
        self.in_goal_steps = torch.zeros(n, device=dev)
        self.episode_start = torch.zeros(n, dtype=torch.long, device=dev)

    def check_env(self) -> None:
        reach = self.l1 + self.l2
        if not 0.0 <= self.goal_min_radius <= self.goal_max_radius <= reach:
            raise ConfigError(
                f"Reacher goal annulus [{self.goal_min_radius}, {self.goal_max_radius}] must lie within the "
                f"arm's reach [0, {reach}]. Set env.goalMinRadius <= env.goalMaxRadius <= length1 + length2."
            )
        if not 0.0 < self.goal_radius <= 2 * reach:
            raise ConfigError(
                f"Reacher env.goalRadius must be in (0, {2 * reach}] (twice the arm's reach: any larger disc holds "
                f"every fingertip position), got {self.goal_radius}."
            )
        if not self.distance_cost >= 0.0:
            raise ConfigError(
                f"Reacher env.distanceCost must be >= 0 (a cost per metre from the goal), got {self.distance_cost}."
            )

    # -- physics ------------------------------------------------------------------------------------
    def mass_matrix(self) -> Tensor:
        """M(q) of each env, shape (N, 2, 2)."""
        cos2 = torch.cos(self.q[:, 1])
        m11 = self._a + 2.0 * self._b * cos2
        m12 = self._d + self._b * cos2
        m22 = torch.full_like(cos2, self._d)
        return torch.stack([torch.stack([m11, m12], -1), torch.stack([m12, m22], -1)], -2)

    def energy(self) -> Tensor:
        """Kinetic energy q_dot^T M q_dot / 2 of each env (conserved with no torque and no damping)."""
        m = self.mass_matrix()
        return 0.5 * torch.einsum("ni,nij,nj->n", self.q_dot, m, self.q_dot)

    def fingertip(self) -> Tensor:
        """Fingertip position (N, 2) in metres, shoulder at the origin."""
        q1, q12 = self.q[:, 0], self.q[:, 0] + self.q[:, 1]
        return torch.stack(
            [self.l1 * torch.cos(q1) + self.l2 * torch.cos(q12), self.l1 * torch.sin(q1) + self.l2 * torch.sin(q12)], -1
        )

    def acceleration(self, q: Tensor, q_dot: Tensor, tau: Tensor) -> Tensor:
        """q_ddot = M(q)^-1 (tau - C(q, q_dot) - b q_dot), shape (N, 2) (closed-form 2x2 inverse)."""
        a, b, d = self._a, self._b, self._d
        cos2, sin2 = torch.cos(q[:, 1]), torch.sin(q[:, 1])
        qd1, qd2 = q_dot[:, 0], q_dot[:, 1]
        m11, m12 = a + 2.0 * b * cos2, d + b * cos2
        hc = b * sin2
        rhs1 = tau[:, 0] + hc * qd2 * (2.0 * qd1 + qd2) - self.damping * qd1
        rhs2 = tau[:, 1] - hc * qd1 * qd1 - self.damping * qd2
        det = m11 * d - m12 * m12
        return torch.stack([(d * rhs1 - m12 * rhs2) / det, (m11 * rhs2 - m12 * rhs1) / det], -1)

    def _physics(self, actions: Tensor) -> None:
        tau = actions * self.max_torque
        h = self.dt / self.substeps
        q, qd = self.q, self.q_dot
        for _ in range(self.substeps):
            if self.integrator == "rk4":
                a1 = self.acceleration(q, qd, tau)
                v2 = qd + 0.5 * h * a1
                a2 = self.acceleration(q + 0.5 * h * qd, v2, tau)
                v3 = qd + 0.5 * h * a2
                a3 = self.acceleration(q + 0.5 * h * v2, v3, tau)
                v4 = qd + h * a3
                a4 = self.acceleration(q + h * v3, v4, tau)
                q = q + (h / 6.0) * (qd + 2.0 * v2 + 2.0 * v3 + v4)
                qd = qd + (h / 6.0) * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
            else:  # semi-implicit Euler
                qd = qd + h * self.acceleration(q, qd, tau)
                q = q + h * qd
            qd = torch.clamp(qd, -self.max_speed, self.max_speed)
        # Keep the angles bounded (the dynamics only see them through sin/cos).
        self.q = torch.remainder(q + math.pi, 2.0 * math.pi) - math.pi
        self.q_dot = qd

    # -- the VecTask hooks --------------------------------------------------------------------------
    def reset(self) -> Dict[str, Tensor]:
        out = super().reset()
        # With env.desyncEpisodes the first episodes start part-way (progress_buf > 0): remember
        # where, so the objective of such a shortened episode is a fraction of its own length.
        self.episode_start = self.progress_buf.clone()
        return out

    def _reset_idx(self, env_ids: Tensor) -> None:
        n = env_ids.numel()
        self.q[env_ids] = self.uniform((n, 2), -math.pi, math.pi)
        self.q_dot[env_ids] = self.uniform((n, 2), -0.1, 0.1)
        # Uniform over the annulus area: r = sqrt(U(r_min^2, r_max^2)).
        r = torch.sqrt(self.uniform((n,), self.goal_min_radius**2, self.goal_max_radius**2))
        phi = self.uniform((n,), -math.pi, math.pi)
        self.goal[env_ids] = torch.stack([r * torch.cos(phi), r * torch.sin(phi)], -1)
        self.in_goal_steps[env_ids] = 0.0
        self.episode_start[env_ids] = 0

    def _compute(self, actions: Tensor) -> Tuple[Tensor, Tensor]:
        dist = torch.linalg.vector_norm(self.fingertip() - self.goal, dim=-1)
        inside = (dist < self.goal_radius).float()
        self.in_goal_steps += inside
        reward = inside - self.action_cost * (actions**2).sum(-1) - self.distance_cost * dist
        return reward, torch.zeros_like(self.reset_buf)

    def _episode_end_extras(self, done: Tensor) -> None:
        frac = self.in_goal_steps / (self.max_episode_length - self.episode_start).float()
        self.extras["true_objective"] = torch.where(done, frac, torch.full_like(frac, float("nan")))

    def _observe(self) -> None:
        self.obs_buf[:, 0] = torch.cos(self.q[:, 0])
        self.obs_buf[:, 1] = torch.sin(self.q[:, 0])
        self.obs_buf[:, 2] = torch.cos(self.q[:, 1])
        self.obs_buf[:, 3] = torch.sin(self.q[:, 1])
        self.obs_buf[:, 4:6] = self.q_dot / self.max_speed
        self.obs_buf[:, 6:8] = self.goal
        if self.observe_tip:
            self.obs_buf[:, 8:10] = self.fingertip() - self.goal
