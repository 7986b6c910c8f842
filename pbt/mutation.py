"""Hyperparameter mutation: the DexPBT mutation functions, a registry, and scheme validation.

Every function takes the value, an explicit ``random.Random`` and the change range, so a mutation is
reproducible from a seed. Functions are looked up by name in ``MUTATION_FUNCS`` (never ``eval``);
``validate_scheme`` checks a scheme against the resolved config before training starts.
"""
import logging
import math
import random
from typing import Any, Callable, Dict, List, Mapping

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
"""Fixed change range of ``mutate_discount`` (as upstream: large gamma changes upset the critic)."""


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
    """``1 - mutate_float(1 - x)`` with the change range fixed at [1.1, 1.2] (change_min/max unused).

    For x in (0, 1) the result stays in (0, 1): when growing 1-x would reach 1 (x <= 0) the change
    goes the other way, and if float rounding still leaves the interval, x is returned unchanged.
    """
    current = _as_float(value)
    inverse = 1.0 - current
    factor = rng.uniform(*DISCOUNT_CHANGE_RANGE)
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
) -> Dict[str, Any]:
    """Return a copy of ``params`` with each scheme key mutated independently w.p. ``mutation_rate``.

    Keys are visited in sorted order (reproducible for a seed whatever the dict order). Keys of
    ``params`` that are not in ``scheme`` are copied unchanged.
    """
    mutated = dict(params)
    for key in sorted(params):
        if key not in scheme:
            continue
        if rng.random() >= mutation_rate:
            continue
        func = get_mutation_func(scheme[key])
        try:
            mutated[key] = func(params[key], rng, change_min, change_max)
        except ConfigError as exc:
            raise ConfigError(f"Mutating '{key}' failed: {exc}") from exc
        logger.info("PBT mutation: %s %r -> %r (%s)", key, params[key], mutated[key], scheme[key])
    return mutated


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

