"""How the tools show values: compact numbers, frame counts and ages (display only, never parsed back).

The Hydra override formatter, whose output is read back by Hydra, is :func:`pbt.restart.format_value`.
"""

import math
import re
from typing import Any, Optional

_UNSAFE_RE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
"""Characters a terminal acts on (escape sequences, bells, bidi overrides) rather than shows."""


def printable(value: Any) -> str:
    """``str(value)`` with every control character shown as an escape (``\\x1b``): text read from
    a workspace never reaches a terminal as clear-screen, window-title or clipboard sequences."""
    return _UNSAFE_RE.sub(lambda m: ascii(m.group())[1:-1], str(value))


def display_value(value: Any) -> str:
    """Compact display of a hyperparameter or objective value (``-`` for None)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4g}"
    return str(value)


def format_frames(frames: Optional[int]) -> str:
    """245760 -> '245.8k', 12345678 -> '12.35M'."""
    if frames is None:
        return "-"
    if frames < 10_000:
        return str(frames)
    if frames < 1_000_000:
        return f"{frames / 1e3:.1f}k"
    if frames < 1_000_000_000:
        return f"{frames / 1e6:.2f}M"
    return f"{frames / 1e9:.2f}G"


def format_age(seconds: float) -> str:
    """Seconds since something happened: '45s', '12m', '3.5h'."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
