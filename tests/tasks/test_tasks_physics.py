"""Physics and bookkeeping of the built-in torch tasks (Pendulum, Cartpole, Reacher).

The equations of motion are checked against an independent derivation: the Euler-Lagrange equations
of a Lagrangian written from the bodies' positions, differentiated with autograd. Energy must be
conserved with no actuation and no friction; resets, terminations, time-outs and ``true_objective``
must follow the documented rules exactly.
"""
import math
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

import pytest

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.tasks import BUILTIN_TASKS  # noqa: E402
from pbt.tasks.vectask import VecTask  # noqa: E402
from pbt.tasks.cartpole import Cartpole  # noqa: E402
from pbt.tasks.pendulum import Pendulum  # noqa: E402
from pbt.tasks.pendulum_image import PendulumImage  # noqa: E402
from pbt.tasks.reacher import Reacher  # noqa: E402

Tensor = torch.Tensor
Kinetic = Callable[[Any, Any], Any]
Potential = Callable[[Any], Any]
TASKS: List[Type[VecTask]] = [Pendulum, Cartpole, Reacher]


def make(cls: Type[VecTask], num_envs: int = 16, seed: Optional[int] = 0, **env: Any) -> VecTask:
    """A task reset and ready; episodes start in step (``desyncEpisodes`` off) unless asked."""
    task = cls({"env": {"numEnvs": num_envs, "desyncEpisodes": False, **env}, "seed": seed})
    task.reset()
    return task


def zeros(task: VecTask) -> Tensor:
    return torch.zeros((task.num_envs, task.num_actions))


# -- the equations of motion, derived independently ------------------------------------------------
def lagrangian_acceleration(
    kinetic: Callable[[Tensor, Tensor], Tensor],
    potential: Callable[[Tensor], Tensor],
    q: Tensor,
    qd: Tensor,
    force: Tensor,
) -> Tensor:
    """q_ddot from the Euler-Lagrange equations d/dt(dL/dqd) - dL/dq = force, L = T - V, per env.

    M = d2T/dqd2 and the velocity terms come from autograd, so nothing here shares code (or a
    typo) with the tasks' closed forms.
    """
    out = []
    for i in range(q.shape[0]):
        qi, qdi = q[i].clone().requires_grad_(True), qd[i].clone().requires_grad_(True)

        def lag(a: Tensor, b: Tensor) -> Tensor:
            return kinetic(a, b) - potential(a)

        dl_dqd = torch.autograd.grad(lag(qi, qdi), qdi, create_graph=True)[0]
        n = q.shape[1]
        mass = torch.stack([torch.autograd.grad(dl_dqd[j], qdi, retain_graph=True)[0] for j in range(n)])
        mixed = torch.stack([torch.autograd.grad(dl_dqd[j], qi, retain_graph=True)[0] for j in range(n)])
        dl_dq = torch.autograd.grad(lag(qi, qdi), qi)[0]
        rhs = force[i] + dl_dq - mixed @ qdi
        out.append(torch.linalg.solve(mass.detach(), rhs.detach()))
    return torch.stack(out)


def rod_kinetic(com_velocity: Tensor, mass: float, inertia: float, omega: Tensor) -> Tensor:
    return 0.5 * mass * (com_velocity**2).sum() + 0.5 * inertia * omega**2


def velocity_of(position: Callable[[Tensor], Tensor], q: Tensor, qd: Tensor) -> Tensor:
    jac = torch.autograd.functional.jacobian(position, q, create_graph=True)
    return jac @ qd


def pendulum_lagrangian(t: Pendulum) -> Tuple[Kinetic, Potential]:
    m, l, g = t.m, t.length, t.g

    def com(q: Tensor) -> Tensor:  # rod centre, hinge at the origin, theta from upright
        return torch.stack([0.5 * l * torch.sin(q[0]), 0.5 * l * torch.cos(q[0])])

    def kinetic(q: Tensor, qd: Tensor) -> Tensor:
        return rod_kinetic(velocity_of(com, q, qd), m, m * l * l / 12.0, qd[0])

    def potential(q: Tensor) -> Tensor:
        return m * g * com(q)[1]

    return kinetic, potential


def cartpole_lagrangian(t: Cartpole) -> Tuple[Kinetic, Potential]:
    mc, mp, l, g = t.m_cart, t.m_pole, t.half_length, t.g

    def pole_com(q: Tensor) -> Tensor:  # q = (x, theta); theta positive clockwise from upright
        return torch.stack([q[0] + l * torch.sin(q[1]), l * torch.cos(q[1])])

    def kinetic(q: Tensor, qd: Tensor) -> Tensor:
        cart = 0.5 * mc * qd[0] ** 2
        return cart + rod_kinetic(velocity_of(pole_com, q, qd), mp, mp * (2 * l) ** 2 / 12.0, qd[1])

    def potential(q: Tensor) -> Tensor:
        return mp * g * pole_com(q)[1]

    return kinetic, potential


def reacher_lagrangian(t: Reacher) -> Tuple[Kinetic, Potential]:
    l1, l2, m1, m2 = t.l1, t.l2, t.m1, t.m2

    def com1(q: Tensor) -> Tensor:
        return 0.5 * l1 * torch.stack([torch.cos(q[0]), torch.sin(q[0])])

    def com2(q: Tensor) -> Tensor:
        elbow = l1 * torch.stack([torch.cos(q[0]), torch.sin(q[0])])
        return elbow + 0.5 * l2 * torch.stack([torch.cos(q[0] + q[1]), torch.sin(q[0] + q[1])])

    def kinetic(q: Tensor, qd: Tensor) -> Tensor:
        return rod_kinetic(velocity_of(com1, q, qd), m1, m1 * l1 * l1 / 12.0, qd[0]) + rod_kinetic(
            velocity_of(com2, q, qd), m2, m2 * l2 * l2 / 12.0, qd[0] + qd[1]
        )

    def potential(q: Tensor) -> Tensor:  # horizontal plane
        return torch.zeros((), dtype=q.dtype)

    return kinetic, potential


def state_of(t: VecTask) -> Tuple[Tensor, Tensor]:
    if isinstance(t, Pendulum):
        return t.theta[:, None].clone(), t.theta_dot[:, None].clone()
    if isinstance(t, Cartpole):
        return torch.stack([t.x, t.theta], -1), torch.stack([t.x_dot, t.theta_dot], -1)
    assert isinstance(t, Reacher)
    return t.q.clone(), t.q_dot.clone()


def randomize_state(t: VecTask, gen: "torch.Generator") -> None:
    """Put every env in a generic state (away from the small reset ranges)."""
    n = t.num_envs

    def u(lo: float, hi: float, *shape: int) -> Tensor:
        return torch.rand((n, *shape), generator=gen) * (hi - lo) + lo

    if isinstance(t, Pendulum):
        t.theta, t.theta_dot = u(-3.0, 3.0), u(-2.0, 2.0)
    elif isinstance(t, Cartpole):
        t.x, t.x_dot, t.theta, t.theta_dot = u(-1, 1), u(-1, 1), u(-3.0, 3.0), u(-2.0, 2.0)
    else:
        t.q, t.q_dot = u(-3.0, 3.0, 2), u(-3.0, 3.0, 2)


LAGRANGIANS: Dict[type, Callable[[Any], Tuple[Kinetic, Potential]]] = {
    Pendulum: pendulum_lagrangian,
    Cartpole: cartpole_lagrangian,
    Reacher: reacher_lagrangian,
}


def generalized_force(t: VecTask, actions: Tensor) -> Tensor:
    if isinstance(t, Pendulum):
        return actions * t.max_torque
    if isinstance(t, Cartpole):
        return torch.stack([actions[:, 0] * t.force_max, torch.zeros(t.num_envs)], -1)
    assert isinstance(t, Reacher)
    return actions * t.max_torque


# Frictionless versions of each task with room to move (no terminations, no speed clipping in play).
FREE: Dict[type, Dict[str, Any]] = {
    Pendulum: {"damping": 0.0, "maxSpeed": 1e6, "episodeLength": 100000},
    Cartpole: {"thetaLimit": 1e9, "xLimit": 1e9, "episodeLength": 100000},
    Reacher: {"damping": 0.0, "maxSpeed": 1e6, "episodeLength": 100000},
}


@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
def test_equations_of_motion_match_euler_lagrange(cls: Type[VecTask]) -> None:
    """One tiny semi-implicit Euler step changes the velocities by h * q_ddot(q, q_dot, force)."""
    torch.set_default_dtype(torch.float64)
    try:
        t = make(cls, num_envs=6, dt=1e-6, substeps=1, **FREE[cls])
        randomize_state(t, torch.Generator().manual_seed(3))
        actions = torch.rand((t.num_envs, t.num_actions), generator=torch.Generator().manual_seed(4)) * 2 - 1
        q, qd = state_of(t)
        expected = lagrangian_acceleration(*LAGRANGIANS[cls](t), q, qd, generalized_force(t, actions))
        t._physics(actions)
        _, qd_new = state_of(t)
        got = (qd_new - qd) / 1e-6
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
def test_energy_method_matches_independent_lagrangian(cls: Type[VecTask]) -> None:
    t = make(cls, num_envs=5, **FREE[cls])
    randomize_state(t, torch.Generator().manual_seed(5))
    kinetic, potential = LAGRANGIANS[cls](t)
    q, qd = state_of(t)
    expected = torch.stack([(kinetic(q[i], qd[i]) + potential(q[i])).detach() for i in range(t.num_envs)])
    torch.testing.assert_close(t.energy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "cls, env, steps, tolerance",
    [
        # Pendulum: separable, so semi-implicit Euler is symplectic: bounded error, no drift.
        (Pendulum, {"substeps": 10}, 1000, 0.01),
        (Cartpole, {"integrator": "rk4", "substeps": 1}, 1000, 1e-4),
        # Cartpole's default integrator is first order here (documented: ~1.4% of the scale per 10 s).
        (Cartpole, {"integrator": "semi_implicit_euler", "substeps": 10}, 500, 0.03),
        # Reacher's defaults (rk4, 2 substeps); speeds up to 3 rad/s, faster than the task reaches.
        (Reacher, {"integrator": "rk4", "substeps": 2}, 500, 2e-3),
    ],
    ids=["Pendulum", "Cartpole-rk4", "Cartpole-euler", "Reacher-rk4"],
)
def test_energy_conserved_without_actuation_or_friction(
    cls: Type[VecTask], env: Dict[str, Any], steps: int, tolerance: float
) -> None:
    """Control steps with zero action: the energy error stays within ``tolerance`` of its scale."""
    t = make(cls, num_envs=64, **{**FREE[cls], **env})
    randomize_state(t, torch.Generator().manual_seed(6))
    e0 = t.energy().clone()
    worst = torch.zeros_like(e0)
    actions = zeros(t)
    for _ in range(steps):  # the physics alone: resets and rewards play no part here
        t._physics(actions)
        worst = torch.maximum(worst, (t.energy() - e0).abs())
    # Scale: the potential energy range where there is gravity, plus the energy itself.
    if isinstance(t, Pendulum):
        scale = torch.full_like(e0, t.m * t.g * t.length)
    elif isinstance(t, Cartpole):
        scale = torch.full_like(e0, 2 * t.m_pole * t.g * t.half_length) + e0.abs()
    else:
        scale = e0.abs()
    assert (worst / scale).max() < tolerance


def test_cartpole_conserves_horizontal_momentum_without_force() -> None:
    t = make(Cartpole, num_envs=64, integrator="rk4", substeps=1, **FREE[Cartpole])
    randomize_state(t, torch.Generator().manual_seed(7))
    p0 = t.momentum().clone()
    actions = zeros(t)
    for _ in range(500):
        t._physics(actions)
    scale = (t.m_cart + t.m_pole) * 1.0 + t.m_pole * t.half_length * 2.0
    assert ((t.momentum() - p0).abs() / scale).max() < 1e-4


def test_damping_dissipates_energy() -> None:
    for cls, env in ((Pendulum, {"damping": 0.5}), (Reacher, {"damping": 0.05})):
        t = make(cls, num_envs=32, **{**FREE[cls], **env})
        randomize_state(t, torch.Generator().manual_seed(8))
        e0 = t.energy().clone()
        for _ in range(100):
            t.step(zeros(t))
        assert (t.energy() < e0).all(), cls.__name__


def test_reacher_holds_still_and_torque_accelerates_the_right_way() -> None:
    t = make(Reacher, num_envs=4)
    t.q_dot.zero_()
    q0 = t.q.clone()
    t.step(zeros(t))
    torch.testing.assert_close(t.q, q0)
    # A positive shoulder torque on a resting arm gives a positive shoulder acceleration.
    t.q_dot.zero_()
    t.step(torch.tensor([[1.0, 0.0]]).repeat(4, 1))
    assert (t.q_dot[:, 0] > 0).all()


# -- reset distributions ------------------------------------------------------------------------------
def test_pendulum_reset_ranges() -> None:
    t = make(Pendulum, num_envs=4096)
    assert t.theta.min() >= -math.pi and t.theta.max() < math.pi
    assert t.theta_dot.abs().max() <= 1.0
    assert t.theta.std() > 1.5  # spread over the circle, not a constant


def test_cartpole_reset_ranges() -> None:
    t = make(Cartpole, num_envs=4096)
    for v in (t.x, t.x_dot, t.theta, t.theta_dot):
        assert v.abs().max() <= 0.05
        assert v.std() > 0.02


def test_reacher_reset_ranges_and_goal_uniform_over_annulus() -> None:
    t = make(Reacher, num_envs=8192)
    assert t.q.abs().max() <= math.pi
    assert t.q_dot.abs().max() <= 0.1
    r = torch.linalg.vector_norm(t.goal, dim=-1)
    assert r.min() >= t.goal_min_radius - 1e-6 and r.max() <= t.goal_max_radius + 1e-6
    # Uniform over the area: E[r^2] is the midpoint of r_min^2 and r_max^2.
    expected = (t.goal_min_radius**2 + t.goal_max_radius**2) / 2
    assert abs((r**2).mean().item() - expected) < 0.03 * expected
    # The goal is always reachable.
    assert r.max() <= t.l1 + t.l2


def test_reacher_rejects_unreachable_goals() -> None:
    with pytest.raises(ConfigError, match="reach"):
        make(Reacher, goalMaxRadius=0.5)


# -- terminations, time-outs and true_objective -----------------------------------------------------
@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
def test_time_out_fires_exactly_at_episode_length(cls: Type[VecTask]) -> None:
    t = make(cls, num_envs=3, episodeLength=7)
    if isinstance(t, Cartpole):  # keep the pole balanced: the upright rest state is an equilibrium
        for v in (t.x, t.x_dot, t.theta, t.theta_dot):
            v.zero_()
    for step in range(1, 8):
        _, _, done, extras = t.step(zeros(t))
        if step < 7:
            assert not done.any() and not extras["time_outs"].any()
            assert (t.progress_buf == step).all()
        else:
            assert done.all() and extras["time_outs"].all()
            assert (t.progress_buf == 0).all()  # auto-reset


def test_cartpole_terminates_when_the_pole_falls_or_the_cart_leaves() -> None:
    t = make(Cartpole, num_envs=4)
    for v in (t.x, t.x_dot, t.theta, t.theta_dot):
        v.zero_()
    t.theta[1] = t.theta_limit + 0.01  # fallen
    t.x[2] = -(t.x_limit + 0.01)  # off the track
    t.theta[3] = t.theta_limit - 0.05  # tilted but still up
    _, rew, done, extras = t.step(zeros(t))
    assert done.tolist() == [False, True, True, False]
    assert not extras["time_outs"].any()
    assert rew.tolist() == [1.0, 0.0, 0.0, 1.0]
    # The terminated envs were reset into the reset range, the others kept going.
    assert t.theta[1].abs() <= 0.05 and t.x[2].abs() <= 0.05
    assert t.progress_buf.tolist() == [1, 0, 0, 1]


def test_termination_on_the_last_step_is_not_a_time_out() -> None:
    t = make(Cartpole, num_envs=2, episodeLength=3)
    for v in (t.x, t.x_dot, t.theta, t.theta_dot):
        v.zero_()
    t.step(zeros(t))
    t.step(zeros(t))
    t.theta[0] = 1.0
    _, _, done, extras = t.step(zeros(t))
    assert done.tolist() == [True, True]
    assert extras["time_outs"].tolist() == [False, True]


def test_cartpole_true_objective_is_fraction_survived_only_at_episode_end() -> None:
    t = make(Cartpole, num_envs=3, episodeLength=10)
    for v in (t.x, t.x_dot, t.theta, t.theta_dot):
        v.zero_()
    for step in range(1, 5):
        _, _, done, extras = t.step(zeros(t))
        assert not done.any()
        assert torch.isnan(extras["true_objective"]).all()
    t.theta[1] = 1.0  # env 1 falls on step 5: it survived 4 of 10 steps
    _, _, done, extras = t.step(zeros(t))
    obj = extras["true_objective"]
    assert done.tolist() == [False, True, False]
    assert obj[1].item() == pytest.approx(0.4)
    assert torch.isnan(obj[[0, 2]]).all()
    t.theta[1] = 0.0
    t.theta_dot[1] = 0.0
    t.x[1] = 0.0
    t.x_dot[1] = 0.0
    for _ in range(5):
        _, _, done, extras = t.step(zeros(t))
    assert done.tolist() == [True, False, True]  # envs 0 and 2 reach the time limit
    assert extras["true_objective"][[0, 2]].tolist() == [1.0, 1.0]


def test_true_objective_of_a_desynced_first_episode_is_a_fraction_of_its_own_length() -> None:
    """With ``desyncEpisodes`` the first episodes start part-way; balancing to the limit still scores 1."""
    t = make(Cartpole, num_envs=64, episodeLength=20, desyncEpisodes=True)
    assert t.progress_buf.max() > 0  # the episodes really were spread
    for v in (t.x, t.x_dot, t.theta, t.theta_dot):
        v.zero_()
    seen = torch.zeros(64, dtype=torch.bool)
    for _ in range(20):
        _, _, done, extras = t.step(zeros(t))
        first = done & ~seen
        assert (extras["true_objective"][first] == 1.0).all()
        seen |= done
    assert seen.all()


def test_reacher_reward_and_true_objective_count_time_in_goal() -> None:
    t = make(Reacher, num_envs=2, episodeLength=5, actionCost=0.0)
    t.q_dot.zero_()
    tip = t.fingertip()
    t.goal[0] = tip[0]  # env 0: goal at the resting fingertip
    t.goal[1] = -tip[1] if tip[1].norm() > 0.1 else torch.tensor([0.3, 0.0])  # env 1: far away
    assert torch.linalg.vector_norm(t.goal[1] - tip[1]) > t.goal_radius
    for step in range(1, 6):
        _, rew, done, extras = t.step(zeros(t))
        assert rew.tolist() == [1.0, 0.0]
        if step < 5:
            assert torch.isnan(extras["true_objective"]).all()
    assert done.all() and extras["time_outs"].all()
    assert extras["true_objective"].tolist() == [1.0, 0.0]
    # The counter restarts with the new episode.
    assert (t.in_goal_steps == 0).all()


def test_reacher_action_cost() -> None:
    t = make(Reacher, num_envs=1, actionCost=0.1)
    t.goal[0] = torch.tensor([10.0, 10.0])  # never inside
    _, rew, _, _ = t.step(torch.tensor([[1.0, -0.5]]))
    assert rew.item() == pytest.approx(-0.1 * 1.25)
    _, rew, _, _ = t.step(torch.tensor([[3.0, 0.0]]))  # actions are clipped to [-1, 1] first
    assert rew.item() == pytest.approx(-0.1)


def test_reacher_distance_cost_shapes_the_reward_not_the_objective() -> None:
    t = make(Reacher, num_envs=2, episodeLength=3, actionCost=0.0, distanceCost=2.0)
    t.q_dot.zero_()
    tip = t.fingertip()
    t.goal[0] = tip[0]
    t.goal[1] = tip[1] + torch.tensor([0.1, 0.0])  # 10 cm away: outside the disc
    for _ in range(3):
        _, rew, _, extras = t.step(zeros(t))
    assert rew[0].item() == pytest.approx(1.0, abs=1e-5) and rew[1].item() == pytest.approx(-0.2, abs=1e-5)
    assert extras["true_objective"].tolist() == [1.0, 0.0]


def test_reacher_rejects_a_negative_distance_cost() -> None:
    with pytest.raises(ConfigError, match="distanceCost must be >= 0"):
        make(Reacher, distanceCost=-0.5)


def test_pendulum_reports_no_true_objective() -> None:
    t = make(Pendulum, num_envs=2)
    _, _, _, extras = t.step(zeros(t))
    assert "true_objective" not in extras and "time_outs" in extras


# -- interface: shapes, dtypes, seeds, devices ------------------------------------------------------
@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("num_envs", [1, 5])
def test_shapes_and_dtypes(cls: Type[VecTask], num_envs: int) -> None:
    t = cls({"env": {"numEnvs": num_envs}, "seed": 1})
    first = t.reset()
    assert first["obs"].shape == (num_envs, cls.num_obs) and first["obs"].dtype == torch.float32
    for _ in range(3):
        obs, rew, done, extras = t.step(torch.rand((num_envs, cls.num_actions)) * 2 - 1)
        assert obs["obs"].shape == (num_envs, cls.num_obs) and obs["obs"].dtype == torch.float32
        assert torch.isfinite(obs["obs"]).all()
        assert rew.shape == (num_envs,) and rew.dtype == torch.float32
        assert done.shape == (num_envs,) and done.dtype == torch.bool
        assert extras["time_outs"].shape == (num_envs,) and extras["time_outs"].dtype == torch.bool
        if "true_objective" in extras:
            assert extras["true_objective"].shape == (num_envs,)
            assert extras["true_objective"].dtype == torch.float32


@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
def test_same_seed_same_rollout_other_seed_differs(cls: Type[VecTask]) -> None:
    def rollout(seed: int) -> Tensor:
        t = cls({"env": {"numEnvs": 8, "episodeLength": 20}, "seed": seed})
        obs = [t.reset()["obs"]]
        gen = torch.Generator().manual_seed(123)
        for _ in range(50):  # crosses episode ends: resets are seeded too
            obs.append(t.step(torch.rand((8, cls.num_actions), generator=gen) * 2 - 1)[0]["obs"])
        return torch.stack(obs)

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("name", ["Pendulum", "Cartpole", "Reacher"])
def test_registered_as_builtin(name: str) -> None:
    module, cls = BUILTIN_TASKS[name].split(":")
    assert cls == name and module == f"pbt.tasks.{name.lower()}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", TASKS, ids=lambda c: c.__name__)
def test_runs_on_cuda(cls: Type[VecTask]) -> None:
    t = cls({"env": {"numEnvs": 64}, "seed": 0}, sim_device="cuda:0", rl_device="cuda:0")
    obs = t.reset()["obs"]
    assert obs.device.type == "cuda"
    obs, rew, done, _ = t.step(torch.zeros((64, cls.num_actions), device="cuda:0"))
    assert rew.device.type == "cuda" and done.device.type == "cuda"


@pytest.mark.parametrize("cls", [Cartpole, Reacher])
def test_unknown_integrator_names_the_valid_ones(cls):
    with pytest.raises(ConfigError, match=r"unknown integrator 'euler'\. Set env\.integrator=.*rk4"):
        make(cls, num_envs=2, integrator="euler")


def test_reacher_goal_radii_change_in_the_running_task() -> None:
    """The setters a curriculum uses in place: the next step rewards with the new radius; an
    annulus outside the arm's reach is refused."""
    from pbt.errors import ConfigError
    from pbt.tasks.reacher import Reacher

    task = Reacher({"env": {"numEnvs": 4, "goalRadius": 0.03}, "seed": 1})
    task.reset()
    setters = task.live_setters()
    assert sorted(setters) == [
        "task.env.distanceCost",
        "task.env.goalMaxRadius",
        "task.env.goalMinRadius",
        "task.env.goalRadius",
    ]
    setters["task.env.goalRadius"](0.8)  # twice the reach: every fingertip is inside
    _, reward, _, _ = task.step(torch.zeros(4, 2))
    assert task.goal_radius == 0.8 and bool((reward == 1.0).all())
    with pytest.raises(ConfigError, match="goalMinRadius <= env.goalMaxRadius"):
        setters["task.env.goalMaxRadius"](0.9)


# -- env state in checkpoints ---------------------------------------------------------------------
@pytest.mark.parametrize("cls", [*TASKS, PendulumImage])
def test_a_task_restored_from_its_env_state_steps_as_the_original(cls: Type[VecTask]) -> None:
    """Episodes part-way, the goals and the generator come back: the restored task (another seed)
    then steps exactly as the original, through time-outs and the auto-resets they draw."""
    original = make(cls, num_envs=8, seed=1, desyncEpisodes=True)
    actions = torch.rand((400, 8, original.num_actions), generator=torch.Generator().manual_seed(0)) * 2 - 1
    for t in range(150):
        original.step(actions[t])
    restored = make(cls, num_envs=8, seed=99)
    restored.set_env_state(original.get_env_state())
    assert torch.equal(restored.reset()["obs"], original.obs_buf)
    ends = 0
    for t in range(150, 400):
        (obs_a, rew_a, done_a, _), (obs_b, rew_b, done_b, _) = original.step(actions[t]), restored.step(actions[t])
        assert torch.equal(obs_a["obs"], obs_b["obs"]) and torch.equal(rew_a, rew_b) and torch.equal(done_a, done_b)
        ends += int(done_a.sum())
    assert ends >= 8  # every env went through a reset drawn after the restore
    assert not bool((restored.reset()["obs"] == original.obs_buf).all())  # only one reset goes on


def bad_states(task: VecTask) -> List[Tuple[str, Dict[str, Any]]]:
    state = task.get_env_state()
    assert state is not None
    name = task.episode_state[0]
    return [
        ("another num_envs", {**state, name: torch.cat([state[name], state[name]])}),
        ("NaN", {**state, name: torch.full_like(state[name], float("nan"))}),
        ("another episode length", {**state, "progress_buf": state["progress_buf"] + task.max_episode_length}),
        ("a missing entry", {k: v for k, v in state.items() if k != name}),
        ("not a tensor", {**state, "generator": [1, 2]}),
    ]


@pytest.mark.parametrize("cls", TASKS)
def test_an_env_state_that_does_not_fit_is_not_loaded_and_episodes_start_afresh(
    cls: Type[VecTask], caplog: pytest.LogCaptureFixture
) -> None:
    source = make(cls, num_envs=4, seed=1)
    for _ in range(7):
        source.step(zeros(source))
    for why, state in bad_states(source):
        task = make(cls, num_envs=4, seed=2)
        caplog.clear()
        task.set_env_state(state)
        assert "env state is not loaded" in caplog.text and "episodes start afresh" in caplog.text, why
        task.reset()
        assert bool((task.progress_buf == 0).all()), why  # a fresh reset (desyncEpisodes off here)
    task = make(cls, num_envs=4, seed=2)
    task.set_env_state("junk")  # type: ignore[arg-type]
    assert "a str, not a mapping" in caplog.text
