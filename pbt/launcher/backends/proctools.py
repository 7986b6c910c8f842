"""Process-tree and signal helpers for the processes backend, built on :mod:`pbt.procfs` (the one
``/proc`` reader); no third-party packages."""

import os
import signal
from typing import Dict, Iterable, List, Set

from pbt.procfs import DEAD_STATES, all_stats


def related_processes(root_pid: int) -> List[int]:
    """Live processes that belong to the worker started as ``root_pid`` in its own session.

    That is every live descendant of ``root_pid`` (by parent links) plus every live process whose
    session or process group is ``root_pid`` (descendants whose parent already died stay in the
    worker's session unless they called setsid). ``root_pid`` itself is not included.
    """
    stats = all_stats()
    children: Dict[int, List[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    found: Set[int] = set()
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    for pid, stat in stats.items():
        if pid != root_pid and (stat.pgid == root_pid or stat.session == root_pid):
            found.add(pid)
    found.discard(os.getpid())
    return sorted(p for p in found if stats[p].state not in DEAD_STATES)


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
