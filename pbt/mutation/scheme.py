"""Applying a mutation scheme (config key -> mutation name) to a member's hyperparameters.

The code here is generic: it reads each mutation's declared properties (its change range, its value
type, linear-bound support) from :mod:`pbt.mutation.registry` and never special-cases a name.
``validate_scheme`` checks a scheme against the resolved config before training starts.
"""
import logging
import math
import random
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from pbt.errors import ConfigError
from pbt.keys import get_by_key, has_key, missing_key_error
from pbt.mutation.base import (DISCOUNT_RANGE, GENERAL_RANGE, UNBOUNDED, HyperparameterMutation, InvalidValueError,
                               Mutation, as_float)
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
    if isinstance(new, bool) or not isinstance(new, (int, float)) or not math.isfinite(new):
        # e.g. x*k overflowed: a non-finite value is never published
        logger.warning("PBT mutation: %s %r -> %r is not a finite number; kept %r", key, value, new, value)
        return value
    # One rule for every value: inside the function's own range narrowed by pbt.bounds (so a linear
    # step of mutate_float_min_1 never goes below 1, whatever bounds.min says).
    new = clamp(new, *allowed_range(mutation, bound))
    logger.info("PBT mutation: %s %r -> %r (%s)", key, value, new, name)
    return new


def allowed_range(mutation: Mutation, bound: Optional[Mapping[str, Any]]) -> Tuple[float, float]:
    """The values ``mutation`` may hold under ``bound`` (see HyperparameterMutation.allowed_range)."""
    if isinstance(mutation, HyperparameterMutation):
        return mutation.allowed_range(bound)
    low, high = UNBOUNDED
    if bound is not None:
        low = low if bound.get("min") is None else float(bound["min"])
        high = high if bound.get("max") is None else float(bound["max"])
    return low, high


def clamp(value: Any, low: Optional[float], high: Optional[float]) -> Any:
    """Clamp into [low, high] (either may be None); ints stay ints (and inside the range).

    NaN has no place in a range: InvalidValueError (a NaN is never published as a hyperparameter).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError(f"cannot clamp {value!r} ({type(value).__name__}): not a number")
    if math.isnan(value):
        raise InvalidValueError("cannot clamp NaN: a hyperparameter must be a finite number")
    is_int = isinstance(value, int)
    if is_int:  # an int clamped to [2.5, 7.5] must land on 3..7, not round out of the range
        low = None if low is None or not math.isfinite(low) else math.ceil(low)
        high = None if high is None or not math.isfinite(high) else math.floor(high)
    result = value
    if low is not None and result < low:
        result = low
    if high is not None and result > high:
        result = high
    return int(result) if is_int else float(result)


def check_value(key: str, value: Any, scheme: Mapping[str, str],
                bounds: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Any:
    """``value`` of the hyperparameter ``key`` as a member may train with it: a number of the type
    its mutation keeps (int: a whole number), finite, inside the mutation's own range and the
    key's ``pbt.bounds``. InvalidValueError naming the key otherwise. A key outside the scheme
    only needs to be a finite number."""
    bound = (bounds or {}).get(key)
    name = scheme.get(key)
    mutation = get_mutation(name) if name is not None else HyperparameterMutation("(no mutation)", _unused)
    try:
        return mutation.check(value, bound)
    except InvalidValueError as exc:
        raise InvalidValueError(f"'{key}': {exc}") from None


def _unused(value: Any, rng: random.Random, low: float, high: float) -> Any:
    return value


def checked_params(params: Any, keys: Iterable[str], scheme: Mapping[str, str],
                   bounds: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Tuple[Dict[str, Any], List[str]]:
    """(the values of ``keys`` that ``params`` holds, checked by :func:`check_value`; the problems).

    Pure; never raises for junk input: ``params`` that is not a mapping is one problem. Used on a
    donor's hyperparameters before any of them (or its weights) is taken.
    """
    if not isinstance(params, Mapping):
        return {}, [f"its params are a {type(params).__name__}, not a mapping of key -> value"]
    clean: Dict[str, Any] = {}
    problems: List[str] = []
    for key in sorted(keys):
        if key not in params:
            continue
        try:
            clean[key] = check_value(key, params[key], scheme, bounds)
        except ConfigError as exc:  # get_mutation: an unknown name in a hand-made scheme
            problems.append(str(exc))
    return clean, problems


def mutate_params(params: Mapping[str, Any], explore: ExploreConfig, rng: random.Random) -> Dict[str, Any]:
    """:func:`mutate` with every setting taken from the ``explore`` config section."""
    return mutate(params, explore.mutation, explore.mutation_rate, explore.change_min, explore.change_max, rng,
                  min_mutations=explore.min_mutations, bounds=explore.bounds,
                  discount_range=(explore.discount_change_min, explore.discount_change_max))


def validate_scheme(scheme: Mapping[str, str], resolved_config: Mapping[str, Any],
                    bounds: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
    """Check every entry of a mutation scheme against the resolved config; report all problems.

    Raises ConfigError for an unknown function name, a key missing from the config (naming the
    nearest existing keys) or a value the mutation cannot take (not a number, or outside the
    function's own range and ``bounds``: a value peers would refuse from a donor).
    """
    problems: List[str] = []
    for key in sorted(scheme):
        problems.extend(_entry_problems(key, scheme[key], resolved_config, (bounds or {}).get(key)))
    if problems:
        raise ConfigError("Invalid PBT mutation scheme (pbt.mutation):\n  - " + "\n  - ".join(problems))


def _entry_problems(key: str, name: str, resolved_config: Mapping[str, Any],
                    bound: Optional[Mapping[str, Any]] = None) -> List[str]:
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
            try:
                mutation.check(mutation.validate(value), bound)
            except InvalidValueError as exc:
                raise ConfigError(f"{exc}. Start it inside that range (or widen pbt.bounds['{key}']).") from None
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
