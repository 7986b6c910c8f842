"""Process liveness and process-tree helpers read from ``/proc`` (Linux); no third-party packages.

A process counts as alive when ``/proc/PID/stat`` exists and its state is not ``Z`` (zombie) or
``X`` (dead): on some machines PID 1 reaps orphans slowly, so existence alone would lie.
"""
import os
import signal
from typing import Dict, Iterable, List, Optional, Set, Tuple

_PROC = "/proc"


def _read_stat(pid: int) -> Optional[Tuple[str, int, int, int]]:
    """(state, ppid, pgid, session) of ``pid``, or None if it does not exist."""
    try:
        with open(os.path.join(_PROC, str(pid), "stat"), "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(")") + 2 :].split()
    if len(rest) < 4:
        return None
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def process_state(pid: int) -> Optional[str]:
    """The one-letter state of ``pid`` (R, S, D, Z, ...) or None if there is no such process."""
    stat = _read_stat(pid)
    return stat[0] if stat else None


def is_alive(pid: int) -> bool:
    """True if ``pid`` exists and is neither a zombie nor dead."""
    if not os.path.isdir(_PROC):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = process_state(pid)
    return state is not None and state not in ("Z", "X", "x")


def _all_stats() -> Dict[int, Tuple[str, int, int, int]]:
    stats: Dict[int, Tuple[str, int, int, int]] = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return stats
    for name in names:
        if name.isdigit():
            stat = _read_stat(int(name))
            if stat is not None:
                stats[int(name)] = stat
    return stats


def related_processes(root_pid: int) -> List[int]:
    """Live processes that belong to the worker started as ``root_pid`` in its own session.

    That is every live descendant of ``root_pid`` (by parent links) plus every live process whose
    session or process group is ``root_pid`` (descendants whose parent already died stay in the
    worker's session unless they called setsid). ``root_pid`` itself is not included.
    """
    stats = _all_stats()
    children: Dict[int, List[int]] = {}
    for pid, (_, ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found: Set[int] = set()
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    for pid, (_, _, pgid, sid) in stats.items():
        if pid != root_pid and (pgid == root_pid or sid == root_pid):
            found.add(pid)
    found.discard(os.getpid())
    return sorted(p for p in found if stats[p][0] not in ("Z", "X", "x"))


def signal_processes(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each pid, ignoring the ones that are already gone."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pgid``, ignoring a group that no longer exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
