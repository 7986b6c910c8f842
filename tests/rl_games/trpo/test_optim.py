"""TRPO's math against references: conjugate gradient against a direct solve, the Fisher-vector
product against the explicit Hessian of the mean KL, the KL against torch.distributions, the full
step on the trust region's boundary, and the line search's acceptance rule and restore."""
import math
from typing import List, Tuple

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pbt.rl_games.trpo import optim  # noqa: E402


def random_spd(n: int, seed: int, condition: float = 50.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    eig = torch.logspace(0, math.log10(condition), n, dtype=torch.float64)
    return q @ torch.diag(eig) @ q.T


@pytest.mark.parametrize("n, seed", [(2, 0), (10, 1), (40, 2), (40, 3)])
def test_conjugate_gradient_solves_random_spd_systems(n: int, seed: int) -> None:
    a = random_spd(n, seed)
    b = torch.randn(n, generator=torch.Generator().manual_seed(seed + 100), dtype=torch.float64)
    calls: List[int] = []

    def avp(v: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return a @ v

    x = optim.conjugate_gradient(avp, b, steps=4 * n, residual_tol=1e-20)
    exact = torch.linalg.solve(a, b)
    assert torch.allclose(x, exact, rtol=1e-8, atol=1e-10)
    assert float(torch.dot(b - a @ x, b - a @ x)) < 1e-16
    assert len(calls) <= 4 * n


def test_conjugate_gradient_stops_at_the_tolerance_and_the_step_limit() -> None:
    a = random_spd(30, 7, condition=1e4)
    b = torch.ones(30, dtype=torch.float64)
    calls: List[int] = []

    def avp(v: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return a @ v

    optim.conjugate_gradient(avp, b, steps=3, residual_tol=0.0)
    assert len(calls) == 3
    calls.clear()
    x = optim.conjugate_gradient(avp, b, steps=200, residual_tol=1e-6)
    residual = float(torch.dot(b - a @ x, b - a @ x))
    assert residual < 1e-6 and len(calls) < 200
    # Identity: exact after one product, then the residual is 0 and it stops.
    calls.clear()
    x = optim.conjugate_gradient(lambda v: (calls.append(1), v)[1], b, steps=10, residual_tol=1e-12)
    assert torch.allclose(x, b) and len(calls) == 1


def test_gaussian_kl_matches_torch_distributions() -> None:
    gen = torch.Generator().manual_seed(0)
    mu0, mu1 = torch.randn(64, 3, generator=gen), torch.randn(64, 3, generator=gen)
    s0, s1 = torch.rand(64, 3, generator=gen) + 0.2, torch.rand(64, 3, generator=gen) + 0.2
    ours = optim.gaussian_kl(mu0, s0, mu1, s1)
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(mu0, s0), torch.distributions.Normal(mu1, s1))
    assert torch.allclose(ours, ref.sum(-1), atol=1e-5)
    assert torch.allclose(optim.gaussian_kl(mu0, s0, mu0, s0), torch.zeros(64), atol=1e-6)


class TinyPolicy(torch.nn.Module):
    """obs -> (mu, sigma): a 2-layer tanh MLP and a state-independent log std (rl_games' fixed sigma)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.body = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
        self.logstd = torch.nn.Parameter(torch.tensor([-0.3, 0.2]))

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.body(obs), self.logstd.exp().expand(obs.shape[0], 2)


def test_fisher_vector_product_equals_the_explicit_hessian_of_the_mean_kl() -> None:
    net = TinyPolicy().double()
    obs = torch.randn(32, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    params = list(net.parameters())
    theta = optim.flat(params).detach().clone()
    with torch.no_grad():
        mu_old, sigma_old = net(obs)
    shapes = [p.shape for p in params]

    def mean_kl_of(flat_theta: torch.Tensor) -> torch.Tensor:
        chunks, offset = [], 0
        for shape in shapes:
            n = int(torch.Size(shape).numel())
            chunks.append(flat_theta[offset:offset + n].view(shape))
            offset += n
        logstd, w1, b1, w2, b2 = chunks  # a module yields its own parameters before its children's
        mu = torch.tanh(obs @ w1.T + b1) @ w2.T + b2
        sigma = logstd.exp().expand(obs.shape[0], 2)
        return optim.gaussian_kl(mu_old, sigma_old, mu, sigma).mean()

    hessian = torch.autograd.functional.hessian(mean_kl_of, theta)
    mu, sigma = net(obs)
    damping = 0.1
    fvp = optim.fisher_vector_product(optim.gaussian_kl(mu_old, sigma_old, mu, sigma).mean(), params, damping)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):  # one KL graph serves several products
        v = torch.randn(theta.numel(), generator=gen, dtype=torch.float64)
        assert torch.allclose(fvp(v), hessian @ v + damping * v, rtol=1e-7, atol=1e-9)
    # At theta_old the KL's Hessian is the Fisher matrix: symmetric positive semi-definite.
    assert torch.allclose(hessian, hessian.T, atol=1e-10)
    assert float(torch.linalg.eigvalsh(hessian).min()) > -1e-9


def test_full_step_reaches_the_trust_region_boundary_of_the_quadratic_model() -> None:
    h = random_spd(6, 4)
    x = torch.randn(6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    step = optim.full_step(x, lambda v: h @ v, max_kl=0.01)
    assert float(0.5 * step @ h @ step) == pytest.approx(0.01, rel=1e-9)
    assert torch.allclose(step / step.norm(), x / x.norm())
    assert torch.equal(optim.full_step(x, lambda v: -h @ v, 0.01), torch.zeros(6, dtype=torch.float64))


def quadratic_problem(grad: torch.Tensor, curvature: torch.Tensor, hess: torch.Tensor, params: List[torch.Tensor]):
    """Surrogate ``g.d - d^T C d / 2`` and KL ``d^T H d / 2`` of the displacement d from the start."""
    start = optim.flat(params).detach().clone()

    def evaluate() -> Tuple[float, float]:
        d = optim.flat(params).detach() - start
        return float(grad @ d - 0.5 * d @ curvature @ d), float(0.5 * d @ hess @ d)

    return evaluate


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), max_kl=st.floats(1e-4, 0.1), scale=st.floats(0.1, 50.0),
       overshoot=st.floats(0.5, 8.0), accept=st.floats(0.0, 0.9), backtracks=st.integers(1, 12),
       fraction=st.floats(0.05, 1.0))
def test_line_search_accepts_only_safe_improving_steps_and_restores_otherwise(
        seed: int, max_kl: float, scale: float, overshoot: float, accept: float, backtracks: int,
        fraction: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = 4
    param = torch.nn.Parameter(torch.randn(n, generator=gen, dtype=torch.float64))
    before = param.detach().clone()
    grad = torch.randn(n, generator=gen, dtype=torch.float64)
    hess = random_spd(n, seed, condition=20.0)
    curvature = random_spd(n, seed + 1, condition=20.0) * scale  # a surrogate that bends down: big steps lose
    direction = torch.linalg.solve(hess, grad)
    step = optim.full_step(direction, lambda v: hess @ v, max_kl) * overshoot  # may overshoot the region
    evaluate = quadratic_problem(grad, curvature, hess, [param])
    result = optim.line_search([param], step, float(grad @ step), evaluate, 0.0, max_kl, fraction, backtracks, accept)
    surrogate, kl = evaluate()
    if result.accepted:
        assert kl < max_kl and surrogate > 0.0
        assert surrogate / (result.fraction * float(grad @ step)) > accept
        assert torch.allclose(param.detach(), before + result.fraction * step)
        assert result.tries <= backtracks
    else:
        assert torch.equal(param.detach(), before)  # restored exactly
        assert result.tries == backtracks and result.fraction == 0.0


def test_line_search_refuses_a_non_improving_surrogate_and_restores() -> None:
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    before = param.detach().clone()
    seen: List[Tuple[float, float]] = []

    def evaluate() -> Tuple[float, float]:  # any move lowers the surrogate, the KL stays tiny
        d = param.detach() - before
        seen.append((-float(d.norm()), 1e-9))
        return seen[-1]

    result = optim.line_search([param], torch.tensor([0.5, 0.5], dtype=torch.float64), 1.0, evaluate, 0.0,
                               max_kl=0.01, max_backtrack_steps=6, accept_ratio=0.0)
    assert not result.accepted and torch.equal(param.detach(), before) and len(seen) == 6


def test_line_search_backtracks_out_of_a_kl_violation() -> None:
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def evaluate() -> Tuple[float, float]:  # linear surrogate, KL = x^2: x = 1 gives KL 1 > 0.3
        x = float(param.detach()[0])
        return x, x * x

    result = optim.line_search([param], torch.ones(1, dtype=torch.float64), 1.0, evaluate, 0.0, max_kl=0.3,
                               max_backtrack_steps=5, accept_ratio=0.5)
    assert result.accepted and result.fraction == 0.5 and result.tries == 2 and result.kl == pytest.approx(0.25)
    assert float(param[0]) == pytest.approx(0.5)


def test_line_search_treats_nan_as_a_failure() -> None:
    param = torch.nn.Parameter(torch.zeros(2))
    result = optim.line_search([param], torch.ones(2), 1.0, lambda: (float("nan"), 0.0), 0.0, 0.01, 1.0, 3, 0.1)
    assert not result.accepted and torch.equal(param.detach(), torch.zeros(2))


def test_split_parameters_by_name() -> None:
    a, b, c = (torch.nn.Parameter(torch.zeros(1)) for _ in range(3))
    frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
    policy, value = optim.split_parameters([("net.actor.w", a), ("net.value.w", b), ("net.mu", c), ("net.f", frozen)],
                                           ["net.value"])
    assert policy == [a, c] and value == [b]
