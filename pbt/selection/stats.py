"""Small statistics for noise-aware PBT decisions, in pure Python (no numpy/scipy: the core runs on
Isaac Gym's Python 3.8 without them)."""

import math
from typing import List, Optional, Sequence, Tuple

from pbt.storage.bounds import is_sample


def mean_var(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and unbiased sample variance (two-pass, math.fsum)."""
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, var


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def welch_greater(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """One-sided Welch t-test p-value for mean(a) > mean(b); None with fewer than 2 values each.

    Identical constant samples give p = 0 when mean(a) > mean(b), else 1. Only finite values within
    MAX_ABS_VALUE count (readers refuse others; a caller's list may still hold them), so nothing
    here overflows.
    """
    a = [float(v) for v in a if is_sample(v)]
    b = [float(v) for v in b if is_sample(v)]
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, var_a = mean_var(a)
    mean_b, var_b = mean_var(b)
    se2 = var_a / len(a) + var_b / len(b)
    if se2 <= 0.0:
        return 0.0 if mean_a > mean_b else 1.0
    t = (mean_a - mean_b) / math.sqrt(se2)
    df_den = (var_a / len(a)) ** 2 / (len(a) - 1) + (var_b / len(b)) ** 2 / (len(b) - 1)
    df = se2 * se2 / df_den if df_den > 0 else float(len(a) + len(b) - 2)
    return student_t_sf(t, df)


def group_means(values: Sequence[float], size: int) -> List[float]:
    """Means of consecutive groups of ``size`` values counted from the end (the newest group last);
    a partial group at the start is left out. A pooled evaluation window holds whole evaluations of
    ``size`` episodes each, oldest first, so each mean is one evaluation's: one snapshot of weights."""
    if size < 1:
        raise ValueError(f"group size must be >= 1, got {size}")
    whole = len(values) - len(values) % size
    tail = list(values)[len(values) - whole :]
    return [math.fsum(tail[i : i + size]) / size for i in range(0, whole, size)]
