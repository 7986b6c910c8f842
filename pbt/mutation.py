"""Hyperparameter mutation: the DexPBT mutation functions, a registry, and scheme validation.

Every function takes the value, an explicit ``random.Random`` and the change range, so a mutation is
reproducible from a seed. Functions are looked up by name in ``MUTATION_FUNCS`` (never ``eval``);
``validate_scheme`` checks a scheme against the resolved config before training starts.
"""
import logging
import math
import random
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from pbt.config import get_by_key, has_key, missing_key_error
from pbt.errors import ConfigError, did_you_mean

logger = logging.getLogger(__name__)

MutationFunc = Callable[[Any, random.Random, float, float], Any]
"""``func(value, rng, change_min, change_max) -> new value``."""

EPS_CLIP_RANGE = (0.01, 0.3)
"""Clamp of ``mutate_eps_clip``."""
MINI_EPOCHS_RANGE = (1, 8)
"""Clamp of ``mutate_mini_epochs``."""
DISCOUNT_CHANGE_RANGE = (1.1, 1.2)
"""Default change range of ``mutate_discount`` (as upstream: large gamma changes upset the critic);
``pbt.discount_change_min/max`` set it."""
DISCOUNT_FUNCS = frozenset(["mutate_discount"])
"""Functions that take the discount change range instead of change_min/change_max."""


def _as_float(value: Any) -> float:
    """A number as float; numeric strings too (PyYAML reads ``1e-4`` as a string)."""
    if isinstance(value, bool):
        raise ConfigError(f"Cannot mutate the boolean {value!r}: mutation functions need a number. "
                          "Remove the key from the pbt.mutation scheme.")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ConfigError(f"Cannot mutate {value!r} ({type(value).__name__}): mutation functions need a "
                      "number. Set the parameter to a number or remove it from the pbt.mutation scheme.")


def _as_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _as_float(value)
    if not math.isfinite(number) or not number.is_integer():
        raise ConfigError(f"Cannot mutate {value!r} with mutate_mini_epochs: it needs a whole number. "
                          "Set the parameter to an integer or use mutate_float for it.")
    return int(number)


def _scale(value: float, rng: random.Random, change_min: float, change_max: float) -> float:
    """x*k or x/k (probability 1/2 each), k ~ U(change_min, change_max). Draw order as upstream."""
    factor = rng.uniform(change_min, change_max)
    return value / factor if rng.random() < 0.5 else value * factor


def mutate_float(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """Multiply or divide by k ~ U(change_min, change_max), with probability 1/2 each."""
    return _scale(_as_float(value), rng, change_min, change_max)


def mutate_float_min_1(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``mutate_float``, then at least 1.0."""
    return max(1.0, mutate_float(value, rng, change_min, change_max))


def mutate_eps_clip(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``mutate_float``, then clamped to [0.01, 0.3] (PPO's clip epsilon)."""
    low, high = EPS_CLIP_RANGE
    return min(high, max(low, mutate_float(value, rng, change_min, change_max)))


def mutate_mini_epochs(value: Any, rng: random.Random, change_min: float, change_max: float) -> int:
    """x+1 or x-1 (probability 1/2 each), clamped to [1, 8]; stays an int. The range is unused."""
    current = _as_int(value)
    low, high = MINI_EPOCHS_RANGE
    step = 1 if rng.random() < 0.5 else -1
    return min(high, max(low, current + step))


def mutate_discount(value: Any, rng: random.Random, change_min: float, change_max: float) -> float:
    """``1 - mutate_float(1 - x)``; :func:`mutate` passes the discount range (default [1.1, 1.2]).

    For x in (0, 1) the result stays in (0, 1): when growing 1-x would reach 1 (x <= 0) the change
    goes the other way, and if float rounding still leaves the interval, x is returned unchanged.
    """
    current = _as_float(value)
    inverse = 1.0 - current
    factor = rng.uniform(change_min, change_max)
    result = 1.0 - (inverse / factor if rng.random() < 0.5 else inverse * factor)
    if 0.0 < current < 1.0 and not 0.0 < result < 1.0:
        result = 1.0 - inverse / factor
        if not 0.0 < result < 1.0:
            result = current
    return result


MUTATION_FUNCS: Dict[str, MutationFunc] = {
    "mutate_float": mutate_float,
    "mutate_float_min_1": mutate_float_min_1,
    "mutate_eps_clip": mutate_eps_clip,
    "mutate_mini_epochs": mutate_mini_epochs,
    "mutate_discount": mutate_discount,
}
"""Mutation functions by the name used in ``pbt.mutation`` schemes."""


def get_mutation_func(name: str) -> MutationFunc:
    """The registered function called ``name``; ConfigError listing the valid names otherwise."""
    func = MUTATION_FUNCS.get(name) if isinstance(name, str) else None
    if func is None:
        valid = sorted(MUTATION_FUNCS)
        hint = did_you_mean(name, valid, n=1) if isinstance(name, str) else ""
        raise ConfigError(
            f"Unknown mutation function {name!r}.{hint} Valid names: {', '.join(valid)}. "
            "Use one of them in the pbt.mutation scheme."
        )
    return func


def mutate(
    params: Mapping[str, Any],
    scheme: Mapping[str, str],
    mutation_rate: float,
    change_min: float,
    change_max: float,
    rng: random.Random,
    min_mutations: int = 0,
    bounds: Optional[Mapping[str, Mapping[str, Any]]] = None,
    discount_range: Tuple[float, float] = DISCOUNT_CHANGE_RANGE,
) -> Dict[str, Any]:
    """Return a copy of ``params`` with each scheme key mutated independently w.p. ``mutation_rate``.

    Keys are visited in sorted order (reproducible for a seed whatever the dict order). Keys of
    ``params`` that are not in ``scheme`` are copied unchanged. When fewer than ``min_mutations``
    values changed, further keys (drawn at random among the unchanged ones) are mutated until
    enough changed or none is left. ``bounds`` (``{key: {min, max, scale}}``) clamps every mutated
    value; ``scale: linear`` turns mutate_float's x*k into an additive step of (k-1)*(max-min).
    """
    bounds = bounds or {}
    mutated = dict(params)
    keys = [key for key in sorted(params) if key in scheme]
    for key in keys:
        if rng.random() < mutation_rate:
            mutated[key] = _mutate_one(key, params[key], scheme[key], rng, change_min, change_max, bounds,
                                       discount_range)
    unchanged = [key for key in keys if mutated[key] == params[key]]
    changed = len(keys) - len(unchanged)
    while changed < min_mutations and unchanged:
        key = unchanged.pop(rng.randrange(len(unchanged)))
        for _ in range(2):  # a value at a clamp (or 0 under mutate_float) may not move: the next key will
            mutated[key] = _mutate_one(key, params[key], scheme[key], rng, change_min, change_max, bounds,
                                       discount_range)
            if mutated[key] != params[key]:
                changed += 1
                break
    return mutated


def _mutate_one(key: str, value: Any, name: str, rng: random.Random, change_min: float, change_max: float,
                bounds: Mapping[str, Mapping[str, Any]], discount_range: Tuple[float, float]) -> Any:
    func = get_mutation_func(name)
    low, high = discount_range if name in DISCOUNT_FUNCS else (change_min, change_max)
    bound = bounds.get(key)
    try:
        if bound is not None and bound.get("scale") == "linear" and name in ("mutate_float", "mutate_float_min_1"):
            step = (rng.uniform(low, high) - 1.0) * (float(bound["max"]) - float(bound["min"]))
            new = _as_float(value) + (step if rng.random() < 0.5 else -step)
        else:
            new = func(value, rng, low, high)
    except ConfigError as exc:
        raise ConfigError(f"Mutating '{key}' failed: {exc}") from exc
    if bound is not None:
        new = clamp(new, bound.get("min"), bound.get("max"))
    logger.info("PBT mutation: %s %r -> %r (%s)", key, value, new, name)
    return new


def clamp(value: Any, low: Optional[float], high: Optional[float]) -> Any:
    """Clamp into [low, high] (either may be None); ints stay ints."""
    result = value
    if low is not None and result < low:
        result = low
    if high is not None and result > high:
        result = high
    return int(round(result)) if isinstance(value, int) and not isinstance(value, bool) else float(result)


def mutate_params(params: Mapping[str, Any], cfg: Any, rng: random.Random) -> Dict[str, Any]:
    """:func:`mutate` with every setting taken from a :class:`pbt.config.PbtConfig`."""
    return mutate(params, cfg.mutation, cfg.mutation_rate, cfg.change_min, cfg.change_max, rng,
                  min_mutations=cfg.min_mutations, bounds=cfg.bounds,
                  discount_range=(cfg.discount_change_min, cfg.discount_change_max))


def validate_scheme(scheme: Mapping[str, str], resolved_config: Mapping[str, Any]) -> None:
    """Check every entry of a mutation scheme against the resolved config; report all problems.

    Raises ConfigError for an unknown function name, a key missing from the config (naming the
    nearest existing keys) or a value that is not a number.
    """
    problems: List[str] = []
    for key in sorted(scheme):
        problems.extend(_entry_problems(key, scheme[key], resolved_config))
    if problems:
        raise ConfigError("Invalid PBT mutation scheme (pbt.mutation):\n  - " + "\n  - ".join(problems))


def _entry_problems(key: str, name: str, resolved_config: Mapping[str, Any]) -> List[str]:
    problems: List[str] = []
    try:
        get_mutation_func(name)
    except ConfigError as exc:
        problems.append(f"'{key}': {exc}")
    if not has_key(resolved_config, key):
        problems.append(str(missing_key_error(key, resolved_config, f"Mutated key '{key}'")))
        return problems
    value = get_by_key(resolved_config, key)
    try:
        if name == "mutate_mini_epochs":
            _as_int(value)
        else:
            _as_float(value)
    except ConfigError as exc:
        problems.append(f"'{key}': {exc}")
    return problems


def current_params(resolved_config: Mapping[str, Any], scheme: Mapping[str, str]) -> Dict[str, Any]:
    """The values of the scheme's keys in the resolved config (numeric strings become floats)."""
    validate_scheme(scheme, resolved_config)
    params: Dict[str, Any] = {}
    for key in scheme:
        value = get_by_key(resolved_config, key)
        params[key] = value if isinstance(value, (int, float)) else _as_float(value)
    return params

