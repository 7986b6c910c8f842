"""PB2's bandit: a Gaussian process over (normalised hyperparameters, time) -> objective change,
with the time-varying squared-exponential kernel of TV-GP-UCB (Bogunovic et al., AISTATS 2016) as
PB2 uses it (Parker-Holder et al., NeurIPS 2020), and the UCB acquisition.

scikit-learn (the optional extra ``pbt-rl[pb2]``) and numpy are imported here lazily: the core
imports this module without them, and only a member that runs PB2 needs them.

Kernel: ``k((x, t), (x', t')) = c * exp(-|x - x'|^2 / (2 l^2)) * (1 - eps)^(|t - t'| / 2) + noise``:
``c`` a ConstantKernel, the product a :func:`kernel_class` (a scikit-learn ``Kernel`` with analytic
gradients, so its ``l`` and ``eps`` are fitted by marginal likelihood like the rest) and ``noise`` a
WhiteKernel (objective changes of RL runs are noisy). ``eps`` is how fast old data stops
describing the present: the objective landscape of hyperparameters drifts during training.
"""

import functools
import random
from dataclasses import dataclass
from typing import Any, Sequence, Tuple

from pbt.errors import ConfigError

INSTALL = 'pip install "pbt-rl[pb2]"'
"""What to install for PB2 (scikit-learn)."""
CANDIDATES = 256
"""Random points the acquisition is evaluated at before the local refinement."""
REFINE_STARTS = 1
"""The best candidates refined by L-BFGS-B inside [0, 1]^d (each refinement costs about as much as
the fit: numeric gradients, two predictions per evaluation)."""


def require_sklearn() -> None:
    """ConfigError saying what to install when scikit-learn is missing."""
    try:
        import sklearn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"pbt/selection=pb2 fits its Gaussian process with scikit-learn, which is not installed "
            f"here ({exc}). Install the extra: {INSTALL}, or choose another pbt/selection."
        ) from exc


@functools.lru_cache(maxsize=None)
def kernel_class() -> Any:
    """The time-varying squared-exponential kernel as a scikit-learn Kernel (built on first use:
    its base classes come from scikit-learn). The last input column is time (iterations)."""
    import numpy as np
    from sklearn.gaussian_process.kernels import Hyperparameter, Kernel, NormalizedKernelMixin, StationaryKernelMixin

    class TimeVaryingSE(StationaryKernelMixin, NormalizedKernelMixin, Kernel):
        def __init__(
            self,
            length_scale: float = 0.3,
            epsilon: float = 0.1,
            length_scale_bounds: Tuple[float, float] = (1e-2, 1e1),
            epsilon_bounds: Tuple[float, float] = (1e-4, 0.5),
        ) -> None:
            self.length_scale = length_scale
            self.epsilon = epsilon
            self.length_scale_bounds = length_scale_bounds
            self.epsilon_bounds = epsilon_bounds

        @property
        def hyperparameter_length_scale(self) -> Any:
            return Hyperparameter("length_scale", "numeric", self.length_scale_bounds)

        @property
        def hyperparameter_epsilon(self) -> Any:
            return Hyperparameter("epsilon", "numeric", self.epsilon_bounds)

        def __call__(self, X: Any, Y: Any = None, eval_gradient: bool = False) -> Any:
            X = np.atleast_2d(X)
            if Y is not None and eval_gradient:
                raise ValueError("gradient only when Y is None")
            Y = X if Y is None else np.atleast_2d(Y)
            A, B = X[:, :-1], Y[:, :-1]  # |a - b|^2 = |a|^2 + |b|^2 - 2ab: no n x n x d array
            sq = np.maximum((A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T, 0.0)
            dt = np.abs(X[:, -1][:, None] - Y[:, -1][None, :])
            length, eps = float(self.length_scale), float(self.epsilon)
            K = np.exp(-sq / (2.0 * length**2) + 0.5 * dt * np.log1p(-eps))
            if not eval_gradient:
                return K
            # d/d log(theta), in the order of self.hyperparameters (sorted by name: epsilon, length_scale)
            d_eps = K * (0.5 * dt) * (-eps / (1.0 - eps))
            d_length = K * sq / length**2
            return K, np.dstack([d_eps, d_length])

    return TimeVaryingSE


@dataclass(frozen=True)
class Acquisition:
    """The chosen point and what the model said there."""

    x: Tuple[float, ...]
    mean: float
    std: float
    points: int


def fit(X: Sequence[Sequence[float]], y: Sequence[float]) -> Any:
    """A GaussianProcessRegressor fitted to the data (inputs: normalised hyperparameters, then time)."""
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * kernel_class()() + WhiteKernel(0.1, (1e-5, 1e1))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=0, random_state=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a hyperparameter at its bound is a fine answer
        gp.fit(np.asarray(X, dtype=float), np.asarray(y, dtype=float))
    return gp


def acquire(
    X: Sequence[Sequence[float]],
    y: Sequence[float],
    pending: Sequence[Sequence[float]],
    time: float,
    kappa: float,
    rng: random.Random,
) -> Acquisition:
    """The point of [0, 1]^d maximising UCB = mean + kappa * std at ``time``.

    ``pending``: the other members' current points (at ``time``): like GP-BUCB and Ray's PB2, the
    std comes from the GP conditioned on them as if observed (at their predicted means), so members
    exploring at the same time do not all pick the same point. All randomness comes from ``rng``.
    """
    with single_threaded():
        return _acquire(X, y, pending, time, kappa, rng)


def single_threaded() -> Any:
    """BLAS on one thread: the matrices are small (hundreds), threads only add contention with the
    trainer's own threads (measured: 20x slower Cholesky solves on a loaded 2-core machine)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def _acquire(
    X: Sequence[Sequence[float]],
    y: Sequence[float],
    pending: Sequence[Sequence[float]],
    time: float,
    kappa: float,
    rng: random.Random,
) -> Acquisition:
    import numpy as np
    from scipy.optimize import minimize
    from sklearn.gaussian_process import GaussianProcessRegressor

    gp = fit(X, y)
    dims = len(X[0]) - 1
    spread = gp
    if pending:
        P = np.column_stack([np.asarray(pending, dtype=float), np.full(len(pending), float(time))])
        spread = GaussianProcessRegressor(kernel=gp.kernel_, optimizer=None, normalize_y=True)
        with np.errstate(all="ignore"):
            spread.fit(
                np.vstack([np.asarray(X, dtype=float), P]), np.concatenate([np.asarray(y, dtype=float), gp.predict(P)])
            )

    def ucb(points: Any) -> Any:
        Z = np.column_stack([np.atleast_2d(points), np.full(len(np.atleast_2d(points)), float(time))])
        mean = gp.predict(Z)
        _, std = spread.predict(Z, return_std=True)
        return mean + kappa * std

    generator = np.random.default_rng(rng.getrandbits(64))
    candidates = generator.random((CANDIDATES, dims))
    scores = ucb(candidates)
    starts = candidates[np.argsort(-scores, kind="stable")[:REFINE_STARTS]]
    best_x, best_score = starts[0], float(np.max(scores))
    for start in starts:
        result = minimize(
            lambda z: -float(ucb(z)[0]), start, method="L-BFGS-B", bounds=[(0.0, 1.0)] * dims, options={"maxiter": 50}
        )
        if np.all(np.isfinite(result.x)) and -float(result.fun) > best_score:
            best_x, best_score = np.clip(result.x, 0.0, 1.0), -float(result.fun)
    Z = np.concatenate([best_x, [float(time)]])[None, :]
    mean = float(gp.predict(Z)[0])
    _, std = spread.predict(Z, return_std=True)
    return Acquisition(tuple(float(v) for v in best_x), mean, float(std[0]), len(y))
