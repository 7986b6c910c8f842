"""``python -m pbt.status <workspace> [--watch] [--interval S]``: the population at a glance.

A terminal table (made with rich) of every member: frames, iteration, objective and rank, how
often it restarted, its last PBT action and the last donor it copied, its current hyperparameters
(short keys), and whether it is alive (a heartbeat file ``<workspace>/<idx:03d>/heartbeat`` or its
newest record written recently) or stale.

Read-only and safe on a workspace that is being written to: torn, half-written or vanished files
are skipped (the workspace reader falls back to a member's previous record) and counted in the
table's caption instead of crashing or flooding the screen with warnings.

:func:`read_snapshot` is also what ``pbt.analyze`` reads the population with. No torch import.
"""
import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from pbt.errors import PbtError, WorkspaceError
from pbt.record import Record
from pbt.workspace import Workspace

log = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

HEARTBEAT_FILE = "heartbeat"
"""A member's optional liveness file: JSON with at least ``"time"`` (unix seconds)."""
MAX_HEARTBEAT_BYTES = 64 * 1024
DEFAULT_STALE_AFTER = 120.0
"""Seconds without a sign of life after which a member is shown as stale."""
CONFIG_PREFIX = "train.params.config."
INSTALL_HINT = 'pip install rich (it is a dependency of this project: pip install -e ".")'


# --------------------------------------------------------------------------------------------
# Short hyperparameter names
# --------------------------------------------------------------------------------------------


def short_keys(keys: Sequence[str]) -> Dict[str, str]:
    """Full config key -> short display name: the last dotted component, or more components
    where two keys would otherwise share a name (``train.params.config.gamma`` -> ``gamma``;
    ``...reward_shaper.scale_value`` -> ``scale_value``)."""
    result: Dict[str, str] = {}
    depth = {key: 1 for key in keys}
    while True:
        names = {key: ".".join(key.split(".")[-depth[key]:]) for key in keys}
        clashes = [k for k in keys if sum(1 for n in names.values() if n == names[k]) > 1
                   and depth[k] < len(k.split("."))]
        if not clashes:
            result.update(names)
            return result
        for key in clashes:
            depth[key] += 1


def short_key(key: str) -> str:
    """The short name of one key (without clash resolution)."""
    return key.split(".")[-1]


def format_value(value: Any) -> str:
    """Compact display of a hyperparameter or objective value."""
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


# --------------------------------------------------------------------------------------------
# The snapshot
# --------------------------------------------------------------------------------------------


@dataclass
class MemberView:
    """What is known about one member at the moment of a snapshot."""

    policy_idx: int
    record: Optional[Record]
    """Its newest intact record (None: none yet, or all of them unreadable)."""
    lineage: List[Dict[str, Any]]
    """Its lineage entries, oldest first (torn lines skipped)."""
    heartbeat: Optional[Dict[str, Any]] = None
    """Its heartbeat file's content, when present and readable."""
    rank: Optional[int] = None
    """1 = the best objective among members with a known objective."""

    @property
    def objective(self) -> Optional[float]:
        return self.record.objective if self.record is not None and self.record.has_objective else None

    @property
    def frame(self) -> Optional[int]:
        """Frames trained: the newest of its record, its lineage and its heartbeat."""
        candidates = [self.record.frame] if self.record is not None else []
        candidates += [int(e["frame"]) for e in self.lineage[-1:] if _is_number(e.get("frame"))]
        if self.heartbeat is not None and _is_number(self.heartbeat.get("frame")):
            candidates.append(int(self.heartbeat["frame"]))
        return max(candidates) if candidates else None

    @property
    def iteration(self) -> Optional[int]:
        return self.record.iteration if self.record is not None else None

    @property
    def params(self) -> Dict[str, Any]:
        """Hyperparameters in force now: after its last decision, else those of its record."""
        if self.lineage and isinstance(self.lineage[-1].get("params_after"), Mapping):
            if self.record is None or _int(self.lineage[-1].get("iteration"), -1) >= self.record.iteration:
                return dict(self.lineage[-1]["params_after"])
        return dict(self.record.params) if self.record is not None else {}

    @property
    def restarts(self) -> int:
        """PBT restarts (every replace or mutate after the fresh member's initial mutation)."""
        return sum(1 for e in self.lineage if is_exploit(e))

    @property
    def last_event(self) -> Optional[Dict[str, Any]]:
        return self.lineage[-1] if self.lineage else None

    @property
    def last_replace(self) -> Optional[Dict[str, Any]]:
        for entry in reversed(self.lineage):
            if entry.get("action") == "replace":
                return entry
        return None

    def last_seen(self) -> Optional[float]:
        """Unix time of its latest sign of life (heartbeat, else record or lineage time)."""
        if self.heartbeat is not None and _is_number(self.heartbeat.get("time")):
            return float(self.heartbeat["time"])
        times = [self.record.time] if self.record is not None and self.record.time > 0 else []
        times += [float(e["time"]) for e in self.lineage[-1:] if _is_number(e.get("time"))]
        return max(times) if times else None

    def record_period(self) -> Optional[float]:
        """Typical seconds between two of its PBT iterations (median over its recent lineage)."""
        times = [float(e["time"]) for e in self.lineage[-12:] if _is_number(e.get("time"))]
        gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
        return statistics.median(gaps) if gaps else None

    def liveness(self, now: float, stale_after: float = DEFAULT_STALE_AFTER) -> str:
        """One of "alive", "stale", "unknown", or the final state its heartbeat announced ("finished",
        "stopped", "exited"). Without a heartbeat a member is stale only once it is late by more
        than ``stale_after`` and three of its usual intervals between records."""
        state = self.heartbeat.get("state") if self.heartbeat is not None else None
        if isinstance(state, str) and state and state != "running":
            return state  # the member said goodbye: finished, stopped (SIGTERM) or exited (an error)
        seen = self.last_seen()
        if seen is None:
            return "unknown"
        limit = stale_after
        if self.heartbeat is None:
            period = self.record_period()
            if period is not None:
                limit = max(limit, 3 * period)
        return "alive" if now - seen <= limit else "stale"


@dataclass
class Snapshot:
    """The whole population as read at ``time``."""

    root: Path
    members: List[MemberView]
    time: float
    skipped: List[str] = field(default_factory=list)
    """Problems met while reading (torn or foreign files), one message each."""

    @property
    def best(self) -> Optional[MemberView]:
        ranked = [m for m in self.members if m.rank is not None]
        return min(ranked, key=lambda m: m.rank) if ranked else None  # type: ignore[arg-type,return-value]

    def member(self, policy_idx: int) -> Optional[MemberView]:
        for view in self.members:
            if view.policy_idx == policy_idx:
                return view
        return None

    @property
    def lineages(self) -> Dict[int, List[Dict[str, Any]]]:
        return {m.policy_idx: m.lineage for m in self.members}


def is_exploit(entry: Mapping[str, Any]) -> bool:
    """True for a lineage entry that changed weights or hyperparameters of a running member
    (a replace or mutate, not the initial mutation of a fresh member)."""
    return entry.get("action") in ("replace", "mutate") and entry.get("mode") != "startup"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any, default: int) -> int:
    return int(value) if _is_number(value) else default


def member_indices(root: Path) -> List[int]:
    """Indices of the member directories (``000``, ``001``, ...) under ``root``."""
    try:
        names = os.listdir(str(root))
    except FileNotFoundError:
        raise WorkspaceError(f"workspace {root} does not exist. Pass the pbt.workspace directory of a run.") from None
    except NotADirectoryError:
        raise WorkspaceError(f"{root} is a file, not a workspace directory. Pass the pbt.workspace directory.") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot list workspace {root}: {exc}") from exc
    return sorted(int(n) for n in names if len(n) >= 3 and n.isdigit() and n.isascii() and (root / n).is_dir())


def open_workspace(root: PathLike) -> Workspace:
    """A reader on an existing workspace (never creates one: a wrong path is an error)."""
    path = Path(root)
    indices = member_indices(path)
    if not indices:
        raise WorkspaceError(
            f"{path} holds no member directories (000, 001, ...): it is not a PBT workspace, or no "
            "member has started yet. Pass the pbt.workspace directory of a run."
        )
    # Workspace() creates its own member's dirs when missing; pick a member that has both.
    reader_idx = next((i for i in indices if (path / f"best{i}").is_dir()), indices[0])
    return Workspace(path, reader_idx, max(indices) + 1)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a logging handler must never raise
            self.messages.append(str(record.msg))


@contextmanager
def collect_warnings(logger_name: str = "pbt.workspace") -> Iterator[List[str]]:
    """Capture the workspace reader's warnings (torn files...) instead of printing them."""
    handler = _Collect()
    target = logging.getLogger(logger_name)
    propagate = target.propagate
    target.addHandler(handler)
    target.propagate = False
    try:
        yield handler.messages
    finally:
        target.removeHandler(handler)
        target.propagate = propagate


def read_heartbeat(path: Path) -> Optional[Dict[str, Any]]:
    """A heartbeat file's JSON object, or None when it is missing, torn or has no numeric time."""
    try:
        with open(str(path), "rb") as fobj:
            data = fobj.read(MAX_HEARTBEAT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_HEARTBEAT_BYTES:
        return None
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict) or not _is_number(parsed.get("time")):
        return None
    return parsed


def read_snapshot(root: PathLike) -> Snapshot:
    """Read every member's newest intact record, lineage and heartbeat.

    Never fails on a torn, missing or foreign member file (those are skipped and listed in
    ``Snapshot.skipped``); raises WorkspaceError only when ``root`` is not a workspace.
    """
    path = Path(root)
    with collect_warnings() as skipped:
        workspace = open_workspace(path)
        members: List[MemberView] = []
        for idx in member_indices(path):
            try:
                record = workspace.latest_record(idx)
            except PbtError as exc:
                skipped.append(f"member {idx}: {exc}")
                record = None
            try:
                lineage = workspace.read_lineage(idx)
            except PbtError as exc:
                skipped.append(f"member {idx} lineage: {exc}")
                lineage = []
            heartbeat_path = workspace.member_dir(idx) / HEARTBEAT_FILE
            heartbeat = read_heartbeat(heartbeat_path)
            if heartbeat is None and heartbeat_path.exists():
                skipped.append(f"{heartbeat_path}: unreadable heartbeat (being written?)")
            members.append(MemberView(idx, record, lineage, heartbeat))
    known = sorted((m for m in members if m.objective is not None), key=lambda m: (-m.objective, m.policy_idx))  # type: ignore[operator]
    for rank, view in enumerate(known, start=1):
        view.rank = rank
    return Snapshot(path, members, time.time(), list(skipped))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _require_rich() -> None:
    try:
        import rich  # noqa: F401
    except ImportError:
        raise PbtError(f"pbt.status needs the 'rich' package, which is not installed: {INSTALL_HINT}") from None


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _describe_action(entry: Optional[Mapping[str, Any]]) -> str:
    if entry is None:
        return "-"
    action = str(entry.get("action", "?"))
    if entry.get("mode") == "startup":
        action = "start"
    elif action == "replace" and entry.get("donor") is not None:
        action = f"replace<-{entry['donor']}"
    return f"{action}@it{_int(entry.get('iteration'), 0)}"


def _describe_donor(entry: Optional[Mapping[str, Any]]) -> str:
    if entry is None:
        return "-"
    return f"{entry.get('donor')}@it{entry.get('iteration')}"


WIDE = 150
"""Console width from which hyperparameters are shown in the population table itself; narrower
consoles get a second table (one row per hyperparameter, one column per member)."""


def build_table(snapshot: Snapshot, stale_after: float = DEFAULT_STALE_AFTER, width: int = WIDE) -> Any:
    """The rich renderable of a snapshot: the population table (and, on consoles narrower than
    :data:`WIDE`, a hyperparameter table below it)."""
    _require_rich()
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    keys = sorted({k for m in snapshot.members for k in m.params})
    names = short_keys(keys)
    wide = width >= WIDE
    best = snapshot.best
    title = f"PBT population {snapshot.root} - {len(snapshot.members)} members"
    if best is not None:
        title += f", best: policy {best.policy_idx} ({format_value(best.objective)})"
    caption = f"read {time.strftime('%H:%M:%S', time.localtime(snapshot.time))}"
    if snapshot.skipped:
        caption += (f"; skipped {len(snapshot.skipped)} unreadable file(s) (torn or being written): "
                    + "; ".join(s[:160] for s in snapshot.skipped[:3]))
    table = Table(title=title, caption=caption, caption_justify="left", box=box.SIMPLE_HEAVY)
    columns = [("policy", "right"), ("state", "left"), ("frames", "right"), ("iter", "right"),
               ("objective", "right"), ("rank", "right"), ("restarts", "right"), ("last action", "left"),
               ("donor", "left")]
    if not wide:  # 80 columns: the last action names its donor; the iteration is in it too
        columns = [c for c in columns if c[0] not in ("iter", "donor")]
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=header not in ("last action", "donor"), overflow="fold")
    if wide:
        table.add_column("hyperparameters", justify="left", ratio=1, min_width=24, overflow="fold")
    for view in snapshot.members:
        state = view.liveness(snapshot.time, stale_after)
        seen = view.last_seen()
        style = {"alive": "green", "stale": "red", "exited": "red", "finished": "blue"}.get(state, "yellow")
        state_text = Text(state + (f" {_age(snapshot.time - seen)}" if seen is not None else ""), style=style)
        params = view.params
        values = {
            "policy": str(view.policy_idx),
            "state": state_text,
            "frames": format_frames(view.frame),
            "iter": format_value(view.iteration),
            "objective": format_value(view.objective) if view.record is not None else "no record",
            "rank": format_value(view.rank),
            "restarts": str(view.restarts),
            "last action": _describe_action(view.last_event),
            "donor": _describe_donor(view.last_replace),
        }
        if not wide and view.last_replace is not None and view.last_replace is not view.last_event:
            values["last action"] += f" (took {_describe_donor(view.last_replace)})"
        cells = [values[name] for name, _ in columns]
        if wide:
            cells.append("  ".join(f"{names[k]}={format_value(params[k])}" for k in keys if k in params))
        table.add_row(*cells, style="bold" if best is not None and view is best else None)
    if wide or not keys:
        return table
    hp = Table(title="hyperparameters in force", title_justify="left", box=box.SIMPLE_HEAVY)
    hp.add_column("key", justify="left", no_wrap=True)
    for view in snapshot.members:
        hp.add_column(str(view.policy_idx), justify="right", no_wrap=True)
    for key in keys:
        hp.add_row(names[key], *[format_value(view.params.get(key)) for view in snapshot.members])
    return Group(table, hp)


def render_text(snapshot: Snapshot, width: int = 200, stale_after: float = DEFAULT_STALE_AFTER) -> str:
    """The table as plain text (for logs and tests)."""
    _require_rich()
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(build_table(snapshot, stale_after, width))
    return console.export_text()


def _renderable(root: Path, stale_after: float, width: int) -> Any:
    from rich.text import Text

    try:
        return build_table(read_snapshot(root), stale_after, width)
    except WorkspaceError as exc:  # e.g. no member has started yet: keep watching
        return Text(f"{exc}\n(retrying)", style="yellow")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pbt.status", description="Show a PBT population: who is winning, who copied whom.")
    parser.add_argument("workspace", help="the population's pbt.workspace directory")
    parser.add_argument("--watch", action="store_true", help="refresh the table until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (--watch)")
    parser.add_argument("--stale-after", type=float, default=DEFAULT_STALE_AFTER,
                        help="seconds without a heartbeat (or a new record) before a member is shown stale")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be > 0")
    try:
        _require_rich()
    except PbtError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    from rich.console import Console

    console = Console()
    root = Path(args.workspace)
    if not args.watch:
        try:
            console.print(build_table(read_snapshot(root), args.stale_after, console.width))
        except PbtError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        return 0
    from rich.live import Live

    try:
        with Live(_renderable(root, args.stale_after, console.width), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(_renderable(root, args.stale_after, console.width), refresh=True)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
