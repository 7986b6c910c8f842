"""Applying a mutation scheme (config key -> mutation name) to a member's hyperparameters.

The code here is generic: it reads each mutation's declared properties (its change range, its value
type, linear-bound support) from :mod:`pbt.mutation.registry` and never special-cases a name.
``validate_scheme`` checks a scheme against the resolved config before training starts.
"""
import logging
import random
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pbt.errors import ConfigError
from pbt.keys import get_by_key, has_key, missing_key_error
from pbt.mutation.base import DISCOUNT_RANGE, GENERAL_RANGE, as_float
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.hyperparameters import DISCOUNT_CHANGE_RANGE
from pbt.mutation.registry import get_mutation

logger = logging.getLogger(__name__)


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
    ranges = {GENERAL_RANGE: (change_min, change_max), DISCOUNT_RANGE: tuple(discount_range)}
    mutated = dict(params)
    keys = [key for key in sorted(params) if key in scheme]
    for key in keys:
        if rng.random() < mutation_rate:
            mutated[key] = _mutate_one(key, params[key], scheme[key], rng, ranges, bounds)
    unchanged = [key for key in keys if mutated[key] == params[key]]
    changed = len(keys) - len(unchanged)
    while changed < min_mutations and unchanged:
        key = unchanged.pop(rng.randrange(len(unchanged)))
        for _ in range(2):  # a value at a clamp (or 0 under mutate_float) may not move: the next key will
            mutated[key] = _mutate_one(key, params[key], scheme[key], rng, ranges, bounds)
            if mutated[key] != params[key]:
                changed += 1
                break
    return mutated


def _mutate_one(key: str, value: Any, name: str, rng: random.Random, ranges: Mapping[str, Any],
                bounds: Mapping[str, Mapping[str, Any]]) -> Any:
    mutation = get_mutation(name)
    bound = bounds.get(key)
    try:
        new = mutation.apply(value, rng, ranges[mutation.change_range], bound)
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


def mutate_params(params: Mapping[str, Any], explore: ExploreConfig, rng: random.Random) -> Dict[str, Any]:
    """:func:`mutate` with every setting taken from the ``explore`` config section."""
    return mutate(params, explore.mutation, explore.mutation_rate, explore.change_min, explore.change_max, rng,
                  min_mutations=explore.min_mutations, bounds=explore.bounds,
                  discount_range=(explore.discount_change_min, explore.discount_change_max))


def validate_scheme(scheme: Mapping[str, str], resolved_config: Mapping[str, Any]) -> None:
    """Check every entry of a mutation scheme against the resolved config; report all problems.

    Raises ConfigError for an unknown function name, a key missing from the config (naming the
    nearest existing keys) or a value the mutation cannot take (e.g. not a number).
    """
    problems: List[str] = []
    for key in sorted(scheme):
        problems.extend(_entry_problems(key, scheme[key], resolved_config))
    if problems:
        raise ConfigError("Invalid PBT mutation scheme (pbt.mutation):\n  - " + "\n  - ".join(problems))


def _entry_problems(key: str, name: str, resolved_config: Mapping[str, Any]) -> List[str]:
    problems: List[str] = []
    mutation = None
    try:
        mutation = get_mutation(name)
    except ConfigError as exc:
        problems.append(f"'{key}': {exc}")
    if not has_key(resolved_config, key):
        problems.append(str(missing_key_error(key, resolved_config, f"Mutated key '{key}'")))
        return problems
    value = get_by_key(resolved_config, key)
    try:
        if mutation is not None:
            mutation.validate(value)
        else:
            as_float(value)  # unknown name: still say whether the value is a number
    except ConfigError as exc:
        problems.append(f"'{key}': {exc}")
    return problems


def current_params(resolved_config: Mapping[str, Any], scheme: Mapping[str, str]) -> Dict[str, Any]:
    """The values of the scheme's keys in the resolved config (numeric strings become floats)."""
    validate_scheme(scheme, resolved_config)
    params: Dict[str, Any] = {}
    for key in scheme:
        value = get_by_key(resolved_config, key)
        params[key] = value if isinstance(value, (int, float)) else as_float(value)
    return params
