"""TRPO's numerical core as pure functions of tensors and callables (no agent, no rl_games).

- :func:`gaussian_kl`: KL(old || new) between diagonal Gaussians, summed over action dims;
- :func:`conjugate_gradient`: solve ``A x = b`` given only ``v -> A v``;
- :func:`fisher_vector_product`: ``v -> (H + damping I) v`` with H the Hessian of a mean KL;
- :func:`full_step`: the step ``sqrt(2 delta / x^T H x) x`` of the trust region's boundary;
- :func:`line_search`: backtracking along that step, accepting only a step inside the trust region
  that improves the surrogate enough, and restoring the parameters when none does.

The agent (:mod:`pbt.rl_games.trpo.agent`) wires these to an rl_games model; the tests check each one
against a reference (an explicit Hessian, a direct solve).
"""

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch

Vector = torch.Tensor
LinearOp = Callable[[Vector], Vector]


def gaussian_kl(mu_old: torch.Tensor, sigma_old: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(mu_old, sigma_old) || N(mu, sigma)) per sample, summed over the last (action) dim.

    ``log(s/s_old) + (s_old^2 + (mu_old - mu)^2) / (2 s^2) - 1/2``: zero with a zero gradient at
    ``(mu, sigma) == (mu_old, sigma_old)``, so its Hessian there is the Fisher information.
    """
    var = sigma.pow(2)
    kl = torch.log(sigma / sigma_old) + (sigma_old.pow(2) + (mu_old - mu).pow(2)) / (2.0 * var) - 0.5
    return kl.sum(dim=-1)


def flat(tensors: Sequence[torch.Tensor]) -> Vector:
    """One 1-D vector of ``tensors`` (parameters or their gradients), in order."""
    return torch.cat([t.reshape(-1) for t in tensors])


def flat_grad(
    output: torch.Tensor,
    params: Sequence[torch.Tensor],
    create_graph: bool = False,
    retain_graph: Optional[bool] = None,
) -> Vector:
    """d output / d params as one flat vector (zeros for parameters ``output`` does not depend on)."""
    grads = torch.autograd.grad(
        output, list(params), create_graph=create_graph, retain_graph=retain_graph, allow_unused=True
    )
    return flat([torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)])


def set_flat(params: Sequence[torch.Tensor], vector: Vector) -> None:
    """Copy ``vector`` (as made by :func:`flat`) into ``params`` in place."""
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vector[offset : offset + n].view_as(p))
            offset += n
    if offset != vector.numel():
        raise ValueError(f"set_flat: the vector has {vector.numel()} entries, the parameters {offset}")


def conjugate_gradient(avp: LinearOp, b: Vector, steps: int, residual_tol: float = 1e-10) -> Vector:
    """Approximately solve ``A x = b`` for symmetric positive definite A, given ``avp(v) = A v``.

    At most ``steps`` iterations; stops early once the squared residual ``|b - A x|^2`` drops below
    ``residual_tol``. One matrix-vector product per iteration.
    """
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = torch.dot(r, r)
    for _ in range(steps):
        if float(rr) < residual_tol:
            break
        ap = avp(p)
        alpha = rr / torch.dot(p, ap)
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = torch.dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def fisher_vector_product(
    mean_kl: torch.Tensor,
    params: Sequence[torch.Tensor],
    damping: float,
    reduce: Optional[Callable[[Vector], Vector]] = None,
) -> LinearOp:
    """``v -> H v + damping v``, H the Hessian of ``mean_kl`` (a scalar built with a graph from
    ``params``) with respect to ``params``.

    The KL's gradient is taken once with a graph; each product is one more backward pass through it
    (Pearlmutter's trick), never the Hessian itself. ``reduce`` averages a product across processes
    (distributed training) before the damping is added.
    """
    grad_kl = flat_grad(mean_kl, params, create_graph=True)

    def product(v: Vector) -> Vector:
        hv = flat_grad(torch.dot(grad_kl, v.detach()), params, retain_graph=True)
        if reduce is not None:
            hv = reduce(hv)
        return hv + damping * v

    return product


def full_step(direction: Vector, hvp: LinearOp, max_kl: float) -> Vector:
    """The step along ``direction`` (x) whose quadratic KL model ``x^T H x / 2`` equals ``max_kl``:
    ``sqrt(2 max_kl / x^T H x) x``. Zero when the curvature is not positive (no safe step)."""
    curvature = float(torch.dot(direction, hvp(direction)))
    if not curvature > 0.0 or not torch.isfinite(direction).all():
        return torch.zeros_like(direction)
    return direction * (2.0 * max_kl / curvature) ** 0.5


@dataclass
class LineSearchResult:
    """What :func:`line_search` did."""

    accepted: bool
    """A step was taken (False: the parameters were restored)."""
    fraction: float
    """The fraction of the full step taken (0 when restored)."""
    kl: float
    """The KL of the accepted step (or of the last one tried)."""
    improvement: float
    """Surrogate gain of the accepted step (or of the last one tried)."""
    tries: int
    """Steps evaluated."""


def line_search(
    params: Sequence[torch.Tensor],
    step: Vector,
    expected_improvement: float,
    surrogate_and_kl: Callable[[], Tuple[float, float]],
    surrogate_before: float,
    max_kl: float,
    step_fraction: float = 1.0,
    max_backtrack_steps: int = 10,
    accept_ratio: float = 0.5,
) -> LineSearchResult:
    """Backtrack along ``step`` from the current ``params``: try ``theta + a * step`` for
    ``a = step_fraction * 0.5**i``, ``i = 0 .. max_backtrack_steps - 1``, and keep the first one with
    ``kl < max_kl``, a surrogate gain > 0, and gain / (a * expected_improvement) > ``accept_ratio``.

    ``surrogate_and_kl()`` evaluates (surrogate, KL to the old policy) at the parameters in force.
    ``expected_improvement`` is the gradient times ``step`` (the linear model's gain). When no step
    qualifies (or a value is not finite), the parameters are restored exactly and ``accepted`` is
    False.
    """
    with torch.no_grad():
        old = flat(params).clone()
    fraction = step_fraction
    kl, gain = float("nan"), float("nan")
    tries = 0
    for _ in range(max_backtrack_steps):
        set_flat(params, old + fraction * step)
        tries += 1
        surrogate, kl = surrogate_and_kl()
        gain = surrogate - surrogate_before
        expected = fraction * expected_improvement
        finite = all(map(_finite, (surrogate, kl, gain, expected)))
        if finite and kl < max_kl and gain > 0.0 and expected > 0.0 and gain / expected > accept_ratio:
            return LineSearchResult(True, fraction, kl, gain, tries)
        fraction *= 0.5
    set_flat(params, old)
    return LineSearchResult(False, 0.0, kl, gain, tries)


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def split_parameters(
    named: Sequence[Tuple[str, torch.nn.Parameter]], value_prefixes: Sequence[str]
) -> Tuple[List[torch.nn.Parameter], List[torch.nn.Parameter]]:
    """(policy, value) parameters of a model: names starting with one of ``value_prefixes`` are the
    value function's, every other trainable one the policy's."""
    policy: List[torch.nn.Parameter] = []
    value: List[torch.nn.Parameter] = []
    for name, param in named:
        if not param.requires_grad:
            continue
        (value if any(name.startswith(p) for p in value_prefixes) else policy).append(param)
    return policy, value
