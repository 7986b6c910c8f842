"""What a mutation is: one kind of change PBT's explore step makes to a member.

A mutation declares what it targets (a hyperparameter), whether the learner must be rebuilt to take
the change, how it validates a value before training starts, and how it applies a change. The
generic code in :mod:`pbt.mutation.scheme` reads only these declarations, never a mutation's name.
Hyperparameter mutations are the one kind registered; the network's explore step (weights,
architecture, activation) is :mod:`pbt.mutation.network`, drawn per explore step, not per key.
"""

import abc
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Optional, Tuple, Type

from pbt.errors import ConfigError

HYPERPARAMETER = "hyperparameter"
TARGETS: Tuple[str, ...] = (HYPERPARAMETER,)
"""What a registered mutation may change (the network's changes are :mod:`pbt.mutation.network`'s)."""

GENERAL_RANGE = "general"
"""The change range ``pbt.change_min`` .. ``pbt.change_max``."""
DISCOUNT_RANGE = "discount"
"""The change range ``pbt.discount_change_min`` .. ``pbt.discount_change_max``."""
CHANGE_RANGES: Tuple[str, ...] = (GENERAL_RANGE, DISCOUNT_RANGE)

MutationFunc = Callable[[Any, random.Random, float, float], Any]
"""``func(value, rng, change_min, change_max) -> new value``."""

UNBOUNDED: Tuple[float, float] = (-math.inf, math.inf)


class InvalidValueError(ConfigError):
    """A hyperparameter value that no member may train with (not a number, not finite, outside the
    mutation's own range or ``pbt.bounds``)."""


class Mutation(abc.ABC):
    """One registered mutation, used by name in ``pbt.mutation`` schemes."""

    name: str
    target: ClassVar[str]
    """One of TARGETS."""
    needs_rebuild: ClassVar[bool]
    """True when the learner must be rebuilt (an exec restart) to take the change."""
    change_range: str = GENERAL_RANGE
    """Which change range (one of CHANGE_RANGES) the explore step passes to :meth:`apply`."""

    def validate(self, value: Any) -> Any:
        """``value`` as this mutation reads it; ConfigError (what is wrong, how to fix) otherwise."""
        return value

    def check(self, value: Any, bound: Optional[Mapping[str, Any]] = None) -> Any:
        """``value`` as a member may train with it (a donor's, a resumed one); InvalidValueError
        otherwise. Stricter than :meth:`validate`, which also reads config spellings."""
        return self.validate(value)

    @abc.abstractmethod
    def apply(
        self, value: Any, rng: random.Random, change: Tuple[float, float], bound: Optional[Mapping[str, Any]] = None
    ) -> Any:
        """A new value drawn from ``rng``, ``change`` being (low, high) of this mutation's change
        range and ``bound`` the key's ``{min, max, scale}`` (the caller clamps into it)."""


def as_float(value: Any) -> float:
    """A number as float; numeric strings too (PyYAML reads ``1e-4`` as a string)."""
    if isinstance(value, bool):
        raise ConfigError(
            f"Cannot mutate the boolean {value!r}: mutation functions need a number. "
            "Remove the key from the pbt.mutation scheme."
        )
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ConfigError(
        f"Cannot mutate {value!r} ({type(value).__name__}): mutation functions need a "
        "number. Set the parameter to a number or remove it from the pbt.mutation scheme."
    )


def as_int(value: Any, name: str) -> int:
    """A whole number (floats and strings with an integral value too), for the mutation ``name``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = as_float(value)
    if not math.isfinite(number) or not number.is_integer():
        raise ConfigError(
            f"Cannot mutate {value!r} with {name}: it needs a whole number. "
            "Set the parameter to an integer or use mutate_float for it."
        )
    return int(number)


@dataclass(frozen=True)
class HyperparameterMutation(Mutation):
    """A scalar hyperparameter changed by a function ``func(value, rng, low, high)``."""

    target: ClassVar[str] = HYPERPARAMETER
    needs_rebuild: ClassVar[bool] = False  # whether a key needs a rebuild is the learner adapter's call

    name: str
    """The name used in schemes."""
    func: MutationFunc
    """The function that draws the new value."""
    value_type: Type[Any] = float
    """int or float: the type the value must have (int: a whole number) and keeps."""
    change_range: str = GENERAL_RANGE
    """GENERAL_RANGE or DISCOUNT_RANGE."""
    linear_bounds: bool = False
    """Supports ``scale: linear`` bounds: an additive step of (k - 1) * (max - min) replaces ``func``."""
    value_range: Tuple[float, float] = UNBOUNDED
    """The function's own range [low, high]: every value it returns lies in it (mutate_eps_clip:
    [0.01, 0.3]). ``pbt.bounds`` can only narrow it (:meth:`allowed_range`)."""

    def validate(self, value: Any) -> Any:
        return as_int(value, self.name) if self.value_type is int else as_float(value)

    def allowed_range(self, bound: Optional[Mapping[str, Any]] = None) -> Tuple[float, float]:
        """The function's own range intersected with the key's ``pbt.bounds`` (the rule: the
        function's range wins, bounds narrow it). Empty (low > high) only for contradictory bounds,
        which :class:`pbt.mutation.explore.ExploreConfig` refuses."""
        low, high = self.value_range
        if bound is not None:
            if bound.get("min") is not None:
                low = max(low, float(bound["min"]))
            if bound.get("max") is not None:
                high = min(high, float(bound["max"]))
        return low, high

    def check(self, value: Any, bound: Optional[Mapping[str, Any]] = None) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidValueError(f"{value!r} ({type(value).__name__}) is not a number")
        if not math.isfinite(value):
            raise InvalidValueError(f"{value!r} is not finite")
        if self.value_type is int:
            if not float(value).is_integer():
                raise InvalidValueError(f"{value!r} is not a whole number ({self.name} keeps an int)")
            value = int(value)
        low, high = self.allowed_range(bound)
        if not low <= value <= high:
            raise InvalidValueError(f"{value!r} is outside [{low:g}, {high:g}] ({self.name}'s range and pbt.bounds)")
        return value

    def apply(
        self, value: Any, rng: random.Random, change: Tuple[float, float], bound: Optional[Mapping[str, Any]] = None
    ) -> Any:
        low, high = change
        if bound is not None and bound.get("scale") == "linear" and self.linear_bounds:
            step = (rng.uniform(low, high) - 1.0) * (float(bound["max"]) - float(bound["min"]))
            return as_float(value) + (step if rng.random() < 0.5 else -step)
        return self.func(value, rng, low, high)
