"""Applying a mutation scheme (config key -> mutation name) to a member's hyperparameters.

The code here is generic: it reads each mutation's declared properties (its change range, its value
type, linear-bound support) from :mod:`pbt.mutation.registry` and never special-cases a name.
``validate_scheme`` checks a scheme against the resolved config before training starts.
"""

import logging
import math
import random
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError
from pbt.keys import get_by_key, has_key, missing_key_error
from pbt.mutation.base import (
    DISCOUNT_RANGE,
    GENERAL_RANGE,
    UNBOUNDED,
    HyperparameterMutation,
    InvalidValueError,
    Mutation,
    as_float,
)
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.hyperparameters import DISCOUNT_CHANGE_RANGE
from pbt.mutation.registry import get_mutation
from pbt.mutation.space import Dimension, SearchSpace

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
    space: Optional[SearchSpace] = None,
) -> Dict[str, Any]:
    """Return a copy of ``params`` with each scheme key mutated independently w.p. ``mutation_rate``.

    Keys are visited in sorted order (reproducible for a seed whatever the dict order). Keys of
    ``params`` that are not in ``scheme`` are copied unchanged. When fewer than ``min_mutations``
    values changed, further keys (drawn at random among the unchanged ones) are mutated until
    enough changed or none is left. ``bounds`` (``{key: {min, max, scale}}``) clamps every mutated
    value; ``scale: linear`` turns mutate_float's x*k into an additive step of (k-1)*(max-min).
    Keys of the search ``space`` mutate inside it (:func:`_mutate_in_space`), scheme or not; its fixed
    keys do not mutate.
    """
    bounds = bounds or {}
    space = space or SearchSpace({})
    ranges = {GENERAL_RANGE: (change_min, change_max), DISCOUNT_RANGE: tuple(discount_range)}
    mutated = dict(params)
    keys = explored_keys(params, scheme, space)

    def one(key: str) -> Any:
        if key in space:
            return _mutate_in_space(space.dims[key], params[key], scheme.get(key), rng, ranges)
        return _mutate_one(key, params[key], scheme[key], rng, ranges, bounds)

    for key in keys:
        if rng.random() < mutation_rate:
            mutated[key] = one(key)
    unchanged = [key for key in keys if mutated[key] == params[key]]
    changed = len(keys) - len(unchanged)
    while changed < min_mutations and unchanged:
        key = unchanged.pop(rng.randrange(len(unchanged)))
        for _ in range(2):  # a value at a clamp (or 0 under mutate_float) may not move: the next key will
            mutated[key] = one(key)
            if mutated[key] != params[key]:
                changed += 1
                break
    return mutated


def explored_keys(params: Iterable[str], scheme: Mapping[str, str], space: SearchSpace) -> List[str]:
    """The keys of ``params`` a mutation step may change, sorted: the scheme's and the search
    space's, whether the scheme names a space key or not, less the space's fixed keys (a resumed
    member keeps a value recorded before it was fixed)."""
    return [
        key
        for key in sorted(params)
        if (key in scheme or key in space) and not (key in space and space.dims[key].fixed)
    ]


def describe_explored(params: Iterable[str], explore: ExploreConfig) -> str:
    """What start-up logs: how many keys a member explores, each with where it comes from."""
    space = explore.search_space
    keys = explored_keys(params, explore.mutation, space)
    named = [f"{key} ({'search space' if key in space else 'pbt.mutation'})" for key in keys]
    return f"{len(keys)} key(s): {', '.join(named)}" if keys else "no key (the scheme and the search space are empty)"


def _mutate_one(
    key: str,
    value: Any,
    name: str,
    rng: random.Random,
    ranges: Mapping[str, Any],
    bounds: Mapping[str, Mapping[str, Any]],
) -> Any:
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


def _mutate_in_space(
    dim: Dimension, value: Any, name: Optional[str], rng: random.Random, ranges: Mapping[str, Any]
) -> Any:
    """A key of the search space: a float through its scheme function (default x*k or x/k), then
    clamped; 0 (which no factor moves) and non-numbers resampled; ints and choices one step up or
    down (their scheme function's own range would fight the space's)."""
    if not dim.continuous:
        new = dim.step(value, up=rng.random() < 0.5)
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        new = dim.sample(rng)
    else:
        mutation = get_mutation(name) if name is not None else None
        if isinstance(mutation, HyperparameterMutation) and mutation.value_type is float:
            proposed = mutation.func(value, rng, *ranges[mutation.change_range])
        else:
            low, high = ranges[GENERAL_RANGE]
            factor = rng.uniform(low, high)
            proposed = value / factor if rng.random() < 0.5 else value * factor
        new = dim.confine(value, proposed, rng)
    logger.info("PBT mutation: %s %r -> %r (search space %s)", dim.key, value, new, dim.describe())
    return new


def perturb(
    params: Mapping[str, Any],
    explore: ExploreConfig,
    rng: random.Random,
    factors: Sequence[float],
    resample_probability: float,
    perturb_probability: float = 1.0,
) -> Dict[str, Any]:
    """PBT's perturbation (truncation selection): keys of the search space are resampled with
    ``resample_probability`` or multiplied by one of ``factors`` (discrete: one step that way);
    other keys of the scheme are multiplied by a factor (a discount: 1 - x is) or, when they keep an
    int, moved one step, then clamped to their function's range and ``pbt.bounds``. Each key changes
    only with ``perturb_probability`` (1: every key; no draw is made then, so seeds reproduce)."""
    space = explore.search_space
    out = space.perturb(params, rng, factors, resample_probability, perturb_probability)
    for key in sorted(params):
        if key in space or key not in explore.mutation:
            continue
        if perturb_probability < 1.0 and rng.random() >= perturb_probability:
            continue
        mutation = get_mutation(explore.mutation[key])
        factor = factors[rng.randrange(len(factors))]
        value = params[key]
        if (
            not isinstance(mutation, HyperparameterMutation)
            or isinstance(value, bool)
            or not isinstance(value, (int, float))
        ):
            continue
        if mutation.value_type is int:
            new: Any = int(value) + (1 if factor > 1.0 else -1 if factor < 1.0 else 0)
        elif mutation.change_range == DISCOUNT_RANGE:
            new = 1.0 - (1.0 - float(value)) * factor
        else:
            new = float(value) * factor
        out[key] = clamp(new, *allowed_range(mutation, explore.bounds.get(key)))
    return out


def zero_valued_keys(params: Mapping[str, Any], explore: ExploreConfig) -> List[str]:
    """Keys of the scheme, outside the search space, whose value is 0 under a multiplicative
    mutation (no factor ever moves 0; a search space would resample them)."""
    stuck: List[str] = []
    for key in sorted(params):
        if key in explore.search_space or key not in explore.mutation:
            continue
        mutation = get_mutation(explore.mutation[key])
        linear = explore.bounds.get(key, {}).get("scale") == "linear"
        if (
            isinstance(mutation, HyperparameterMutation)
            and mutation.value_type is float
            and mutation.change_range == GENERAL_RANGE
            and not linear
            and params[key] == 0
        ):
            stuck.append(key)
    return stuck


def warn_zero_valued(params: Mapping[str, Any], explore: ExploreConfig) -> None:
    """Warn (start-up) about every key :func:`zero_valued_keys` finds."""
    for key in zero_valued_keys(params, explore):
        logger.warning(
            "PBT: %s is 0 and mutates multiplicatively (%s), so it stays 0 in every member. Start it "
            "above 0, give it a linear pbt.bounds entry, or use a search space "
            "(pbt/search_space=<name>): there a mutation at 0 resamples.",
            key,
            explore.mutation[key],
        )


def report_explore(params: Mapping[str, Any], explore: ExploreConfig, policy_idx: int) -> None:
    """Start-up's word on the explore step: the keys a member explores, and a warning for each
    zero that never moves (:func:`warn_zero_valued`)."""
    logger.info("PBT policy %d explores %s", policy_idx, describe_explored(params, explore))
    warn_zero_valued(params, explore)


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


def check_value(
    key: str,
    value: Any,
    scheme: Mapping[str, str],
    bounds: Optional[Mapping[str, Mapping[str, Any]]] = None,
    space: Optional[SearchSpace] = None,
) -> Any:
    """``value`` of the hyperparameter ``key`` as a member may train with it: a number of the type
    its mutation keeps (int: a whole number), finite, inside the mutation's own range and the
    key's ``pbt.bounds``. InvalidValueError naming the key otherwise. A key outside the scheme
    only needs to be a finite number. A key of the search ``space`` must lie inside it instead,
    except that a fixed key binds fresh members only: another value there (recorded by a member
    that started before the key was fixed) is checked as if the key were outside the space."""
    if space is not None and key in space:
        dim = space.dims[key]
        if not dim.fixed or dim.contains(value):
            return dim.check(value)
    bound = (bounds or {}).get(key)
    name = scheme.get(key)
    mutation = get_mutation(name) if name is not None else HyperparameterMutation("(no mutation)", _unused)
    try:
        return mutation.check(value, bound)
    except InvalidValueError as exc:
        raise InvalidValueError(f"'{key}': {exc}") from None


def _unused(value: Any, rng: random.Random, low: float, high: float) -> Any:
    return value


def checked_params(
    params: Any,
    keys: Iterable[str],
    scheme: Mapping[str, str],
    bounds: Optional[Mapping[str, Mapping[str, Any]]] = None,
    space: Optional[SearchSpace] = None,
) -> Tuple[Dict[str, Any], List[str]]:
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
            clean[key] = check_value(key, params[key], scheme, bounds, space)
        except ConfigError as exc:  # get_mutation: an unknown name in a hand-made scheme
            problems.append(str(exc))
    return clean, problems


def mutate_params(params: Mapping[str, Any], explore: ExploreConfig, rng: random.Random) -> Dict[str, Any]:
    """:func:`mutate` with every setting taken from the ``explore`` config section."""
    return mutate(
        params,
        explore.mutation,
        explore.mutation_rate,
        explore.change_min,
        explore.change_max,
        rng,
        min_mutations=explore.min_mutations,
        bounds=explore.bounds,
        discount_range=(explore.discount_change_min, explore.discount_change_max),
        space=explore.search_space,
    )


def validate_scheme(
    scheme: Mapping[str, str],
    resolved_config: Mapping[str, Any],
    bounds: Optional[Mapping[str, Mapping[str, Any]]] = None,
    space: Optional[SearchSpace] = None,
) -> None:
    """Check every entry of a mutation scheme against the resolved config; report all problems.

    Raises ConfigError for an unknown function name, a key missing from the config (naming the
    nearest existing keys) or a value the mutation cannot take (not a number, or outside the
    function's own range and ``bounds``: a value peers would refuse from a donor). A key of the
    search ``space`` is only checked to exist here (:func:`pbt.mutation.space.resolve_space` checks
    its value against the space).
    """
    problems: List[str] = []
    for key in sorted(scheme):
        if space is not None and key in space:
            if not has_key(resolved_config, key):
                problems.append(str(missing_key_error(key, resolved_config, f"Mutated key '{key}'")))
            continue
        problems.extend(_entry_problems(key, scheme[key], resolved_config, (bounds or {}).get(key)))
    if problems:
        raise ConfigError("Invalid PBT mutation scheme (pbt.mutation):\n  - " + "\n  - ".join(problems))


def _entry_problems(
    key: str, name: str, resolved_config: Mapping[str, Any], bound: Optional[Mapping[str, Any]] = None
) -> List[str]:
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


def current_params(
    resolved_config: Mapping[str, Any], scheme: Mapping[str, str], space: Optional[SearchSpace] = None
) -> Dict[str, Any]:
    """The values of the scheme's and the search space's keys in the resolved config (numeric
    strings become floats; a space key keeps a word such as ``auto``, which its sample replaces)."""
    validate_scheme(scheme, resolved_config, space=space)
    params: Dict[str, Any] = {}
    space_keys = [] if space is None else [key for key in space.dims if key not in scheme]
    for key in list(scheme) + space_keys:
        value = get_by_key(resolved_config, key)
        if isinstance(value, (int, float)):
            params[key] = value
        elif space is not None and key in space:
            try:
                params[key] = as_float(value)
            except ConfigError:
                params[key] = value
        else:
            params[key] = as_float(value)
    return params
