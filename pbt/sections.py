"""Config sections: small dataclasses that each own a group of the flat ``pbt.*`` keys.

A section reads its keys from the flat ``pbt`` mapping (checking types, with messages naming
``pbt.<key>``) and checks its own ranges in ``__post_init__``; :class:`pbt.config.PbtConfig` routes
every flat key to the one section that declares it. Selection, mutation and the root config all
build on this module, so it imports nothing of theirs. Standard library only (Python 3.8).
"""

import math
from dataclasses import Field, asdict, fields
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from pbt.errors import ConfigError, did_you_mean

S = TypeVar("S", bound="Section")

PARSER = "parser"
"""Field metadata key: a ``parser(name, value) -> value`` replacing the type-driven coercion."""

Parser = Callable[[str, Any], Any]


class Section:
    """Base of the config sections; subclasses are dataclasses whose field names are flat keys."""

    if TYPE_CHECKING:  # what makes a dataclass one for fields() and asdict(); nothing at run time
        __dataclass_fields__: ClassVar[Dict[str, Any]]

    @classmethod
    def keys(cls) -> List[str]:
        """The flat keys this section declares, in declaration order."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_flat(cls: Type[S], values: Mapping[str, Any]) -> S:
        """The section from those of ``values`` it declares (the rest is ignored), each value
        converted to its field's type; ConfigError naming ``pbt.<key>`` otherwise."""
        kwargs = {f.name: parse_field(f, values[f.name]) for f in fields(cls) if f.name in values}
        return cls(**kwargs)

    def to_flat(self) -> Dict[str, Any]:
        """Plain-data copy, keyed by flat key (YAML-safe)."""
        return asdict(self)


def parse_field(spec: "Field[Any]", value: Any) -> Any:
    """Convert a parsed config value to the type of the dataclass field ``spec``."""
    parser: Optional[Parser] = spec.metadata.get(PARSER)
    if parser is not None:
        return parser(spec.name, value)
    return coerce(spec.name, value, spec.type)


def coerce(name: str, value: Any, annotation: Any) -> Any:
    """``value`` as ``annotation`` (bool, int, float, str or Optional of them), or ConfigError."""
    optional, kind = _unwrap_optional(annotation)
    if value is None and optional:
        return None
    if kind is int:
        return to_int(name, value)
    if kind is float:
        return to_float(name, value)
    if kind in _STRICT:  # no conversion: "yes" is not a bool, 3 is not a directory name
        if isinstance(value, kind):
            return value
        raise type_error(name, value, _STRICT[kind])
    raise ConfigError(f"pbt.{name}: no conversion for a field of type {annotation!r}; give it a parser.")


_STRICT: Dict[type, str] = {bool: "true or false", str: "a string"}


def _unwrap_optional(annotation: Any) -> Tuple[bool, Any]:
    """(is Optional, the inner type) of an annotation."""
    if getattr(annotation, "__origin__", None) is Union:
        inner = [a for a in annotation.__args__ if a is not type(None)]
        if len(inner) == 1:
            return True, inner[0]
    return False, annotation


def to_int(name: str, value: Any) -> int:
    """A whole number; floats and numeric strings with an integral value too (``1e7``)."""
    if isinstance(value, bool):
        raise type_error(name, value, "a whole number")
    if isinstance(value, int):
        return value
    number = parse_number(value)
    if number is None or not math.isfinite(number) or not number.is_integer():
        raise type_error(name, value, "a whole number (e.g. 10000000 or 1e7)")
    return int(number)


def to_float(name: str, value: Any) -> float:
    """A number as float (not a bool); numeric strings too."""
    number = None if isinstance(value, bool) else parse_number(value)
    if number is None:
        raise type_error(name, value, "a number")
    return number


def parse_number(value: Any) -> Optional[float]:
    """int/float as float; numeric strings too (PyYAML reads ``1e-4`` as a string)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def type_error(name: str, value: Any, expected: str) -> ConfigError:
    """ConfigError for a value of the wrong type, saying how to fix it."""
    return ConfigError(
        f"pbt.{name} must be {expected}, got {value!r} ({type(value).__name__}). "
        f"Fix the value in the pbt config or on the command line (pbt.{name}=...)."
    )


def require(ok: bool, name: str, value: Any, expected: str) -> None:
    """Raise ConfigError saying ``pbt.<name>`` must be ``expected`` unless ``ok``."""
    if not ok:
        raise ConfigError(
            f"pbt.{name}={value!r} is out of range: it must be {expected}. Set pbt.{name} to a value {expected}."
        )


def require_finite(name: str, value: float, low: float, expected: str = "") -> None:
    """``value`` must be finite and >= ``low``."""
    require(math.isfinite(value) and value >= low, name, value, expected or f"a finite number >= {low:g}")


def require_choice(name: str, value: str, choices: Sequence[str], noun: str = "values", what: str = "") -> None:
    """Raise ConfigError with a did-you-mean and the valid ``choices`` unless ``value`` is one."""
    if value not in choices:
        raise choice_error(name, value, choices, noun, what)


def choice_error(name: str, value: str, choices: Sequence[str], noun: str = "values", what: str = "") -> ConfigError:
    """ConfigError for ``pbt.<name>=value`` not among ``choices`` (``what``: e.g. "selection rule ")."""
    return ConfigError(
        f"Unknown {what}pbt.{name}='{value}'.{did_you_mean(str(value), choices, n=1)} "
        f"Valid {noun}: {', '.join(choices)}."
    )


def section_keys(sections: Mapping[str, Type[Section]]) -> Dict[str, str]:
    """Flat key -> the name of the section declaring it; ConfigError when two declare the same key
    (the flat ``pbt.*`` namespace is shared by every section)."""
    owner: Dict[str, str] = {}
    for section, cls in sections.items():
        for key in cls.keys():
            if key in owner:
                raise ConfigError(
                    f"Config key pbt.{key} is declared by both {owner[key]} and {section}: "
                    "rename one of them (flat pbt.* keys must be unique)."
                )
            owner[key] = section
    return owner
