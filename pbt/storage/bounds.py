"""The one rule for every number read from the workspace: parsed without raising anything but
ValueError, finite, and inside the stated bounds below.

Records, heartbeats, locks, lineages and the tools all read numbers through these functions, so a
400-digit JSON integer, ``Infinity`` or ``1e308`` in a file a peer wrote is a refusal of that file
(ValueError, turned into the reader's own error and logged once), never an OverflowError deep in a
statistic. Plain Python, no torch (Python 3.8).
"""

import math
from typing import Any

MAX_FRAMES = 2**53
"""Frames, iterations and other counts lie in 0 .. MAX_FRAMES (exact as floats; ~285 years at 10^6 fps)."""
MAX_ABS_VALUE = 1e12
"""A finite objective, episode return or history value has a magnitude of at most this: larger
ones are not returns any environment reports, and statistics over them would overflow."""
MAX_TIME = 2.0**33
"""Unix times (seconds) lie in 0 .. MAX_TIME (the year 2242)."""
FUTURE_SKEW_SECONDS = 600.0
"""A record, heartbeat or lock dated more than this ahead of the reader's clock is not believed:
it ages out like a stale one. Hosts sharing a workspace must keep their clocks closer than this."""


def is_number(value: Any) -> bool:
    """An int or float (bool is not a number here)."""
    return type(value) in (int, float)


def bounded_float(value: Any, what: str, limit: float = MAX_ABS_VALUE, allow_nonfinite: bool = False) -> float:
    """``value`` as a float with ``|value| <= limit``; NaN/inf only when ``allow_nonfinite``.
    Raises ValueError naming ``what`` otherwise (an int too large for a float included)."""
    if not is_number(value):
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.80}")
    if type(value) is int:
        if abs(value) > limit:  # compared as ints: float() of a 400-digit int would overflow
            raise ValueError(f"{what} must lie in -{limit:g}..{limit:g}, got an int of {len(str(abs(value)))} digits")
        return float(value)
    if math.isfinite(value):
        if abs(value) > limit:
            raise ValueError(f"{what} must lie in -{limit:g}..{limit:g}, got {value!r}")
        return float(value)
    if not allow_nonfinite:
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def bounded_int(value: Any, what: str, limit: int = MAX_FRAMES) -> int:
    """``value`` as an int in 0..limit (an int, not a float or bool); ValueError otherwise."""
    if type(value) is not int or not 0 <= value <= limit:
        raise ValueError(f"{what} must be an int in 0..{limit}, got {value!r:.80}")
    return value


def wall_time(value: Any, what: str) -> float:
    """A Unix time in 0..MAX_TIME as a float; ValueError otherwise (whether it lies in the future
    is the reader's judgement: :func:`is_future`)."""
    number = bounded_float(value, what, MAX_TIME)
    if number < 0:
        raise ValueError(f"{what} must be a Unix time >= 0, got {number!r}")
    return number


def is_future(stamp: float, now: float, skew: float = FUTURE_SKEW_SECONDS) -> bool:
    """True when ``stamp`` lies more than ``skew`` seconds after ``now`` (a clock far off, or a lie)."""
    return stamp > now + skew


def is_sample(value: Any) -> bool:
    """True for a number a statistic may use: finite with ``|value| <= MAX_ABS_VALUE``."""
    return is_number(value) and (
        abs(value) <= MAX_ABS_VALUE if type(value) is int else math.isfinite(value) and abs(value) <= MAX_ABS_VALUE
    )
