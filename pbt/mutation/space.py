"""A typed search space: where hyperparameters may lie, how fresh members sample them, and how
mutations and perturbations stay inside.

Selected with ``pbt/search_space=<name>`` (``configs/pbt/search_space/<name>.yaml``, flat key
``pbt.search_space``): per full config key a dimension

- ``loguniform`` / ``uniform``: ``low``, ``high`` (floats; loguniform needs ``low > 0``);
- ``int``: ``low``, ``high`` (whole numbers), optional ``grow_factor`` (> 1) and ``shrink_factor``
  (in (0, 1)): a mutation multiplies by one of them and rounds, moving at least one step
  (AgileRL's ``RLParameter``); without them a mutation moves +/-1;
- ``choice``: ``values`` (a list), or ``divisors_of`` (config keys whose product is the batch,
  e.g. horizon_length and num_actors) with optional ``low``/``high``: every divisor in range;
- ``fixed: <value>`` (no type), the same as a choice of that one value: a fixed key. A fresh member
  takes its value, whatever the task's config says (:func:`fixed_overrides`); a resumed member or a
  donor keeps a recorded value of its own, checked like a key outside the space.

Inside the space every change stays inside: ranges are clamped, ints stay ints, a choice moves
to a neighbour in its list, and a value of 0 (which no multiplication moves) is resampled.
Standard library only (Python 3.8).
"""

import logging
import math
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from pbt.errors import ConfigError, did_you_mean
from pbt.keys import get_by_key, has_key, missing_key_error
from pbt.mutation.base import InvalidValueError

log = logging.getLogger(__name__)

LOGUNIFORM = "loguniform"
UNIFORM = "uniform"
INT = "int"
CHOICE = "choice"
TYPES: Tuple[str, ...] = (LOGUNIFORM, UNIFORM, INT, CHOICE)
"""Values of a dimension's ``type``."""
_FIELDS = ("type", "low", "high", "values", "divisors_of", "grow_factor", "shrink_factor", "fixed")
AUTO = "auto"
"""A configured value (the shipped train configs' ``minibatch_size``) a fresh member's sample replaces."""


@dataclass(frozen=True)
class Dimension:
    """One key of the space."""

    key: str
    type: str
    low: Optional[float] = None
    high: Optional[float] = None
    values: Tuple[Any, ...] = ()
    """The choices, in order (neighbours are adjacent)."""
    divisors_of: Tuple[str, ...] = ()
    """Config keys whose product's divisors in [low, high] become ``values`` at start-up."""
    grow_factor: Optional[float] = None
    shrink_factor: Optional[float] = None

    @property
    def continuous(self) -> bool:
        return self.type in (LOGUNIFORM, UNIFORM)

    @property
    def fixed(self) -> bool:
        """One value only (``fixed: v`` or a choice of one value): what a fresh member takes; never
        mutated. (A batch with a single divisor in range is not fixed: it depends on the batch.)"""
        return self.type == CHOICE and len(self.values) == 1 and not self.divisors_of

    def bounds(self) -> Tuple[float, float]:
        """(low, high) of a numeric dimension (a choice has none: checked at construction)."""
        assert self.low is not None and self.high is not None, f"{self.key}: a {self.type} dimension has no bounds"
        return float(self.low), float(self.high)

    def sample(self, rng: random.Random) -> Any:
        """A value drawn from the whole dimension."""
        if self.type == CHOICE:
            return self.values[rng.randrange(len(self.values))]
        low, high = self.bounds()
        if self.type == LOGUNIFORM:
            return math.exp(rng.uniform(math.log(low), math.log(high)))
        if self.type == INT:
            return rng.randint(int(low), int(high))
        return rng.uniform(low, high)

    def contains(self, value: Any) -> bool:
        if self.type == CHOICE:
            return any(_same_value(value, v) for v in self.values)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.type == INT and not float(value).is_integer():
            return False
        low, high = self.bounds()
        return low <= value <= high

    def clamp(self, value: float) -> Any:
        """A number into the range (ints rounded and kept ints); a choice: the nearest value."""
        if self.type == CHOICE:
            numeric = [v for v in self.values if _is_number(v)]
            if not numeric or not _is_number(value):
                return self.values[0]
            return min(numeric, key=lambda v: (abs(float(v) - value), float(v)))
        low, high = self.bounds()
        clamped = min(high, max(low, float(value)))
        return int(round(clamped)) if self.type == INT else clamped

    def step(self, value: Any, up: bool) -> Any:
        """One step up or down: the neighbour in a choice list, grow/shrink factor (or +/-1) for an
        int; at an end the value stays. A value outside the list moves to the nearest one."""
        if self.type == CHOICE:
            position = self._position(value)
            if position is None:
                return self.clamp(float(value)) if _is_number(value) else self.values[0]
            position = min(len(self.values) - 1, max(0, position + (1 if up else -1)))
            return self.values[position]
        if self.type == INT:
            current = int(round(float(value)))
            factor = self.grow_factor if up else self.shrink_factor
            new = int(round(current * factor)) if factor is not None else current
            if new == current:  # a factor too small to move a small int still moves one step
                new = current + (1 if up else -1)
            return self.clamp(new)
        raise ConfigError(f"'{self.key}' is {self.type}: it is scaled, not stepped")

    def scale(self, value: Any, factor: float, rng: random.Random) -> Any:
        """``value`` multiplied by ``factor`` inside the space: continuous values multiply and clamp
        (0 is resampled: no factor moves it), discrete values step in the factor's direction."""
        if factor == 1.0:
            return value if self.contains(value) else self.clamp(float(value))
        if not self.continuous:
            return self.step(value, up=factor > 1.0)
        if not _is_number(value) or float(value) == 0.0:
            return self.sample(rng)
        return self.clamp(float(value) * factor)

    def confine(self, before: Any, after: Any, rng: random.Random) -> Any:
        """A value another mutation proposed, moved inside the space: clamped; for a choice, a
        value not in the list becomes the neighbour of ``before`` in the direction of the change."""
        if self.contains(after) and not (self.type == CHOICE and not _is_number(after)):
            return after
        if self.type == CHOICE:
            if _is_number(after) and _is_number(before) and self._position(before) is not None:
                return self.step(before, up=float(after) > float(before))
            return self.clamp(float(after)) if _is_number(after) else self.sample(rng)
        if not _is_number(after):
            return self.sample(rng)
        return self.clamp(float(after))

    def check(self, value: Any) -> Any:
        """``value`` as a member may train with it (a whole float of an int key becomes an int);
        InvalidValueError saying where the space lies otherwise."""
        if not self.contains(value):
            raise InvalidValueError(f"'{self.key}': {value!r} is outside the search space ({self.describe()})")
        if self.type == INT:
            return int(value)
        return value

    def describe(self) -> str:
        if self.type == CHOICE:
            return f"choice of {list(self.values)}"
        return f"{self.type} [{self.low:g}, {self.high:g}]"

    def _position(self, value: Any) -> Optional[int]:
        for i, v in enumerate(self.values):
            if _same_value(value, v):
                return i
        return None


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _same_value(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    return bool(a == b) and type(a) is type(b)


@dataclass(frozen=True)
class SearchSpace:
    """Dimensions by full config key; empty: no search space."""

    dims: Mapping[str, Dimension]

    def __bool__(self) -> bool:
        return bool(self.dims)

    def __contains__(self, key: object) -> bool:
        return key in self.dims

    def to_spec(self) -> Dict[str, Dict[str, Any]]:
        """Plain data that :func:`parse_space` reads back (YAML-safe)."""
        spec: Dict[str, Dict[str, Any]] = {}
        for key, dim in self.dims.items():
            entry: Dict[str, Any] = {"type": dim.type}
            for name in ("low", "high", "grow_factor", "shrink_factor"):
                if getattr(dim, name) is not None:
                    entry[name] = getattr(dim, name)
            if dim.divisors_of:
                entry["divisors_of"] = list(dim.divisors_of)
            elif dim.type == CHOICE:
                entry["values"] = list(dim.values)
            spec[key] = entry
        return spec

    def sample(self, params: Mapping[str, Any], rng: random.Random) -> Dict[str, Any]:
        """``params`` with every key of the space drawn from it (keys in sorted order)."""
        out = dict(params)
        for key in sorted(self.dims):
            out[key] = self.dims[key].sample(rng)
        return out

    def perturb(
        self,
        params: Mapping[str, Any],
        rng: random.Random,
        factors: Sequence[float],
        resample_probability: float,
        perturb_probability: float = 1.0,
    ) -> Dict[str, Any]:
        """PBT's perturbation of every key of the space but the fixed ones, each with
        ``perturb_probability`` (1: every one, without a draw): resampled with
        ``resample_probability``, else multiplied by a random one of ``factors`` (discrete keys: one
        step that way)."""
        out = dict(params)
        for key in sorted(self.dims):
            if key not in out or self.dims[key].fixed:
                continue
            if perturb_probability < 1.0 and rng.random() >= perturb_probability:
                continue
            dim = self.dims[key]
            if rng.random() < resample_probability:
                out[key] = dim.sample(rng)
            else:
                out[key] = dim.scale(out[key], factors[rng.randrange(len(factors))], rng)
        return out


def parse_space(name: str, value: Any) -> SearchSpace:
    """``pbt.search_space`` (key -> {type, low, high, values, ...}) checked field by field:
    unknown types and fields (did-you-mean), empty ranges, empty lists fail naming the key."""
    if value is None:
        return SearchSpace({})
    if isinstance(value, SearchSpace):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"pbt.{name} must be a mapping of config key -> {{type, low, high | values}}, "
            f"got {type(value).__name__}. Select one with pbt/search_space=<name>."
        )
    return SearchSpace({str(key): _dimension(f"pbt.{name}['{key}']", str(key), spec) for key, spec in value.items()})


def _dimension(where: str, key: str, spec: Any) -> Dimension:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a mapping with type and low/high or values, got {spec!r}.")
    unknown = sorted(set(map(str, spec)) - set(_FIELDS))
    if unknown:
        hint = did_you_mean(unknown[0], list(_FIELDS))
        raise ConfigError(f"{where} has unknown field(s) {', '.join(unknown)}.{hint} Fields: {', '.join(_FIELDS)}.")
    if "fixed" in spec:
        others = sorted(set(map(str, spec)) - {"fixed"})
        if others:
            raise ConfigError(
                f"{where}: fixed takes no other field (got {', '.join(others)}); write "
                f"{{fixed: <value>}}, or a type with its fields."
            )
        return Dimension(key, CHOICE, values=(_fixed_value(where, spec["fixed"]),))
    kind = str(spec.get("type", ""))
    if kind not in TYPES:
        raise ConfigError(
            f"{where}.type {kind!r} is not a search space type.{did_you_mean(kind, list(TYPES))} "
            f"Types: {', '.join(TYPES)}."
        )
    low = _number(where, "low", spec.get("low"))
    high = _number(where, "high", spec.get("high"))
    if kind == CHOICE:
        return _choice(where, key, spec, low, high)
    if low is None or high is None:
        raise ConfigError(f"{where}: type {kind} needs both low and high.")
    if not low < high:
        raise ConfigError(
            f"{where}: the range [{low:g}, {high:g}] is empty (low must be below high). "
            "Fix the bounds, or use type: choice with one value to fix the key."
        )
    if kind == LOGUNIFORM and low <= 0:
        raise ConfigError(f"{where}: loguniform needs low > 0, got {low:g}; use uniform for a range from 0.")
    grow = _number(where, "grow_factor", spec.get("grow_factor"))
    shrink = _number(where, "shrink_factor", spec.get("shrink_factor"))
    if kind != INT and (grow is not None or shrink is not None):
        raise ConfigError(f"{where}: grow_factor/shrink_factor belong to type int only.")
    if kind == INT:
        if not (float(low).is_integer() and float(high).is_integer()):
            raise ConfigError(f"{where}: type int needs whole numbers for low and high, got {low:g}, {high:g}.")
        if grow is not None and not grow > 1.0:
            raise ConfigError(f"{where}.grow_factor must be > 1, got {grow:g}.")
        if shrink is not None and not 0.0 < shrink < 1.0:
            raise ConfigError(f"{where}.shrink_factor must be in (0, 1), got {shrink:g}.")
        return Dimension(key, kind, int(low), int(high), grow_factor=grow, shrink_factor=shrink)
    return Dimension(key, kind, low, high)


def _choice(where: str, key: str, spec: Mapping[str, Any], low: Optional[float], high: Optional[float]) -> Dimension:
    values = spec.get("values")
    divisors = spec.get("divisors_of")
    if (values is None) == (divisors is None):
        raise ConfigError(f"{where}: type choice needs either values (a list) or divisors_of (config keys).")
    if divisors is not None:
        if isinstance(divisors, str):
            divisors = [divisors]
        if not isinstance(divisors, (list, tuple)) or not divisors:
            raise ConfigError(f"{where}.divisors_of must be a list of config keys, got {divisors!r}.")
        if low is not None and high is not None and low > high:
            raise ConfigError(f"{where}: the range [{low:g}, {high:g}] is empty (low must not exceed high).")
        return Dimension(key, CHOICE, low, high, divisors_of=tuple(str(k) for k in divisors))
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(f"{where}.values must be a non-empty list, got {values!r}.")
    return Dimension(key, CHOICE, values=tuple(values))


def _fixed_value(where: str, value: Any) -> Any:
    """A fixed value as given; a numeric string (PyYAML reads 1e-5 as one) becomes a float."""
    if value is None or isinstance(value, (Mapping, list, tuple)):
        raise ConfigError(f"{where}.fixed must be a single value (a number or a word), got {value!r}.")
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value


def _number(where: str, field_name: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)  # PyYAML reads 1e-5 as a string
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}.{field_name} must be a finite number, got {value!r}.")
    return value


def resolve_space(space: SearchSpace, resolved_config: Mapping[str, Any]) -> SearchSpace:
    """The space checked against the resolved config, with ``divisors_of`` expanded into values.

    ConfigError listing every problem, each naming its key: a key the config does not have (with
    the nearest existing keys), a ``divisors_of`` key that is not a positive whole number or leaves
    no divisor in range, a configured value missing from a choice list of several values (``auto``
    excepted: a fresh member's sample replaces it). A fixed key (one value) may differ from the
    configured value: a fresh member takes the fixed one (:func:`fixed_overrides`).
    """
    problems: List[str] = []
    dims: Dict[str, Dimension] = {}
    for key in sorted(space.dims):
        dim = space.dims[key]
        if not has_key(resolved_config, key):
            problems.append(str(missing_key_error(key, resolved_config, f"Search space key '{key}'")))
            continue
        if dim.divisors_of:
            expanded = _divisors(dim, resolved_config, problems)
            if expanded is None:
                continue
            dim = expanded
        current = get_by_key(resolved_config, key)
        if dim.type == CHOICE and not dim.fixed and not dim.contains(current) and current != AUTO:
            # The configured value is where a member that does not draw starts (initial_mutation=false,
            # checkpoint=) and what a resumed member falls back to; several values name none to take.
            problems.append(
                f"'{key}': the configured value {current!r} is not in its choice list "
                f"{list(dim.values)}, and a list of several values does not say which one to "
                f"take instead (a member that does not draw, pbt.initial_mutation=false or "
                f"checkpoint=..., starts from the configured value); set {key}=<one of them>, "
                f"add it to the list, or fix the key with one value ({{fixed: <value>}})."
            )
        dims[key] = dim
    if problems:
        raise ConfigError("Invalid PBT search space (pbt.search_space):\n  - " + "\n  - ".join(problems))
    return SearchSpace(dims)


def fixed_overrides(space: SearchSpace, params: Mapping[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """key -> (value in ``params``, fixed value) for each fixed key of the space whose value in
    ``params`` (a fresh member's, from the task's config) differs from the fixed one."""
    out: Dict[str, Tuple[Any, Any]] = {}
    for key in sorted(space.dims):
        dim = space.dims[key]
        if dim.fixed and key in params and not _same_value(params[key], dim.values[0]):
            out[key] = (params[key], dim.values[0])
    return out


def with_fixed_values(
    space: SearchSpace, configured: Mapping[str, Any], params: Mapping[str, Any], policy_idx: int
) -> Dict[str, Any]:
    """A fresh member's ``params`` with the space's fixed values (a sample already holds them;
    pbt.initial_mutation=false and checkpoint= do not sample), each that overrides the
    ``configured`` value logged."""
    out = dict(params)
    for key, (value, fixed) in fixed_overrides(space, configured).items():
        out[key] = fixed
        log.info(
            "PBT policy %d: the search space fixes %s=%r for a fresh member, overriding the task's "
            "configured value %r (a resumed member keeps its recorded value)",
            policy_idx,
            key,
            fixed,
            value,
        )
    return out


def _divisors(dim: Dimension, resolved_config: Mapping[str, Any], problems: List[str]) -> Optional[Dimension]:
    product = 1
    for factor_key in dim.divisors_of:
        value = get_by_key(resolved_config, factor_key) if has_key(resolved_config, factor_key) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                f"'{dim.key}': divisors_of needs '{factor_key}' to be a whole number >= 1 in the config, got {value!r}."
            )
            return None
        product *= value
    low = 1 if dim.low is None else dim.low
    high = product if dim.high is None else dim.high
    found: Set[int] = set()
    for d in range(1, math.isqrt(product) + 1):
        if product % d == 0:
            found.update((d, product // d))
    values = tuple(sorted(d for d in found if low <= d <= high))
    if not values:
        problems.append(
            f"'{dim.key}': no divisor of {product} ({' x '.join(dim.divisors_of)}) lies in "
            f"[{low:g}, {high:g}]; widen low/high."
        )
        return None
    return Dimension(dim.key, CHOICE, dim.low, dim.high, values=values, divisors_of=dim.divisors_of)
