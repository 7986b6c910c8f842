"""The one reader of ``/proc/<pid>/stat`` (Linux): process state, parent, group, session and start
time. Used by member liveness (is a lock's owner alive?) and by the launcher (process trees).

Standard library only; on a system without ``/proc`` every reader returns None and
:func:`is_alive` falls back to ``kill(pid, 0)``.
"""

import os
from dataclasses import dataclass
from typing import Dict, Optional

PROC = "/proc"
DEAD_STATES = ("Z", "X", "x")
"""Zombie and dead: on some machines PID 1 reaps orphans slowly, so existence alone would lie."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` this project uses."""

    state: str
    ppid: int
    pgid: int
    session: int
    start_time: str
    """Clock ticks since boot: tells a live process from an unrelated one that got its PID later."""


def read_stat(pid: int) -> Optional[ProcStat]:
    """``pid``'s stat, or None when there is no such process (or no /proc)."""
    try:
        with open(os.path.join(PROC, str(pid), "stat"), "rb") as fobj:
            data = fobj.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(")") + 2 :].split()
    if len(rest) < 20:
        return None
    try:
        return ProcStat(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), rest[19])
    except ValueError:
        return None


def all_stats() -> Dict[int, ProcStat]:
    """Every process's stat, by pid."""
    stats: Dict[int, ProcStat] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return stats
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                stats[int(name)] = stat
    return stats


def process_start_time(pid: int) -> Optional[str]:
    stat = read_stat(pid)
    return None if stat is None else stat.start_time


def is_alive(pid: int, start_time: Optional[str] = None) -> bool:
    """True when ``pid`` runs on this host, is neither a zombie nor dead, and (when ``start_time``
    is given and /proc knows it) is the process that had that start time."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    except OSError:
        return False
    stat = read_stat(pid)
    if stat is None:
        return True  # no /proc here: kill(pid, 0) is all we know
    if stat.state in DEAD_STATES:
        return False
    return start_time is None or stat.start_time == start_time
