"""DexPBT's hyperparameter mutation functions.

Every function takes the value, an explicit ``random.Random`` and the change range, so a mutation is
reproducible from a seed; the draw order is upstream's. Their properties (value type, change range,
linear bounds) are declared where they are registered, in :mod:`pbt.mutation.registry`.
"""

import math
import random
from typing import Any

from pbt.mutation.base import as_float, as_int

EPS_CLIP_RANGE = (0.01, 0.3)
"""Clamp of ``mutate_eps_clip``."""
MINI_EPOCHS_RANGE = (1, 8)
"""Clamp of ``mutate_mini_epochs``."""
MIN_1_RANGE = (1.0, math.inf)
"""Range of ``mutate_float_min_1``."""
DISCOUNT_VALUE_RANGE = (0.0, 1.0)
"""Range of a discount (gamma, tau) that ``mutate_discount`` changes."""
DISCOUNT_CHANGE_RANGE = (1.1, 1.2)
"""Default change range of ``mutate_discount`` (as upstream: large gamma changes upset the critic);
``pbt.discount_change_min/max`` set it."""


def _scale(value: float, rng: random.Random, change_min: float, change_max: float) -> float:
    """x*k or x/k (probability 1/2 each), k ~ U(change_min, change_max). Draw order as upstream."""
    factor = rng.uniform(change_min, change_max)
    return value / factor if rng.random() < 0.5 else value * factor


def mutate_float(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """Multiply or divide by k ~ U(change_min, change_max), with probability 1/2 each."""
    return _scale(as_float(value), rng, change_min, change_max)


def mutate_float_min_1(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``mutate_float``, then at least 1.0."""
    return max(1.0, mutate_float(value, rng, change_min, change_max))


def mutate_eps_clip(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``mutate_float``, then clamped to [0.01, 0.3] (PPO's clip epsilon)."""
    low, high = EPS_CLIP_RANGE
    return min(high, max(low, mutate_float(value, rng, change_min, change_max)))


def mutate_mini_epochs(value: Any, rng: random.Random, change_min: float, change_max: float) -> int:
    """x+1 or x-1 (probability 1/2 each), clamped to [1, 8]; stays an int. The range is unused."""
    current = as_int(value, "mutate_mini_epochs")
    low, high = MINI_EPOCHS_RANGE
    step = 1 if rng.random() < 0.5 else -1
    return min(high, max(low, current + step))


def mutate_discount(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``1 - mutate_float(1 - x)``, given the discount change range (default [1.1, 1.2]).

    For x in (0, 1) the result stays in (0, 1): when growing 1-x would reach 1 (x <= 0) the change
    goes the other way, and if float rounding still leaves the interval, x is returned unchanged.
    """
    current = as_float(value)
    inverse = 1.0 - current
    factor = rng.uniform(change_min, change_max)
    result = 1.0 - (inverse / factor if rng.random() < 0.5 else inverse * factor)
    if 0.0 < current < 1.0 and not 0.0 < result < 1.0:
        result = 1.0 - inverse / factor
        if not 0.0 < result < 1.0:
            result = current
    return result
