"""Live progress of the populations a processes launcher runs: frames, frames/s, objective, last PBT
action per member; the population best; elapsed and estimated time left.

Read only through :func:`pbt.tools.snapshot.read_snapshot` (never writes to a workspace; torn files
are skipped), from a daemon thread, so a slow filesystem never holds up the launcher's loop. On a
terminal it is a rich live table; otherwise (CI, Slurm logs, ``nohup``) a few plain log lines per
refresh. Frames/s is the slope of the (time, frame) points the members write (heartbeats, records,
lineage) over the last minute, so it does not depend on how often the launcher looks.
"""

import io
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pbt.launcher.populations import Population, populations
from pbt.launcher.run_description import Member
from pbt.storage import LineageEntry
from pbt.tools.display import display_value, format_frames
from pbt.tools.snapshot import FINAL_STATES, MemberView, Snapshot, read_snapshot

log = logging.getLogger("launcher")

MODES = ("auto", "live", "plain", "off")
LIVE_INTERVAL = 2.0
"""Default seconds between two refreshes of the live table."""
PLAIN_INTERVAL = 30.0
"""Default seconds between two refreshes as log lines (a log that runs for days stays readable)."""
RATE_WINDOW = 60.0
"""Seconds of (time, frame) points a member's frames/s is measured over."""


class RateMeter:
    """Frames/s of one member: the slope over its (writer time, frame) points of the last window.

    Each frame count is kept with the earliest time it was seen: heartbeats repeat a count until
    the next epoch ends, and a plateau must not read as 0 frames/s."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self.points: Dict[int, float] = {}

    def add(self, when: float, frame: Optional[int]) -> None:
        if frame is None or when <= 0:
            return
        self.points[frame] = min(when, self.points.get(frame, when))
        newest = max(self.points.values())
        # Keep the newest run of points whose frames grow with time: a smaller count later on means
        # the member started over (e.g. a fresh workspace) and the older points are another run.
        keep: Dict[int, float] = {}
        for f, t in sorted(self.points.items(), key=lambda p: (p[1], p[0]), reverse=True):
            if t < newest - self.window or (keep and f > min(keep)):
                break
            keep[f] = t
        self.points = keep

    def rate(self) -> Optional[float]:
        if len(self.points) < 2:
            return None
        first, last = min(self.points), max(self.points)
        seconds = self.points[last] - self.points[first]
        if seconds < 1e-3:
            return None
        return (last - first) / seconds


@dataclass
class MemberRow:
    """One member's line of the progress display."""

    experiment: str
    policy_idx: int
    frames: Optional[int] = None
    max_frames: Optional[int] = None
    fps: Optional[float] = None
    objective: Optional[float] = None
    rank: Optional[int] = None
    action: str = "-"
    donor: str = "-"
    """Whose weights it last took, ``2@it5`` (member 2, at its iteration 5), or ``-``."""
    state: str = "waiting"

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES or (
            self.frames is not None and self.max_frames is not None and self.frames >= self.max_frames
        )

    def seconds_left(self) -> Optional[float]:
        if self.done:
            return 0.0
        if self.max_frames is None or self.fps is None or self.fps <= 0:
            return None
        return (self.max_frames - (self.frames or 0)) / self.fps


@dataclass
class PopulationRows:
    experiment: str
    workspace: str
    rows: List[MemberRow]
    best: Optional[Tuple[int, float]] = None
    skipped: int = 0


@dataclass
class ProgressView:
    """Everything one refresh shows."""

    populations: List[PopulationRows]
    elapsed: float
    left: Optional[float] = None
    left_note: str = ""


def describe_action(entry: Optional[LineageEntry]) -> str:
    """``replace<-2@it5``, ``mutate@it3``, ``keep@it4``, ``start`` or ``-``."""
    if entry is None:
        return "-"
    if entry.is_startup:
        return "start"
    action = entry.action or "?"
    if action == "replace" and entry.donor is not None:
        action = f"replace<-{entry.donor}"
    return f"{action}@it{entry.iteration}"


def _row(population: Population, idx: int, view: Optional[MemberView], now: float, meter: RateMeter) -> MemberRow:
    row = MemberRow(population.experiment, idx, max_frames=population.max_frames(idx))
    if view is None:
        return row
    if view.heartbeat is not None:
        meter.add(view.heartbeat.time, view.heartbeat.frame)
    if view.record is not None:
        meter.add(view.record.time, view.record.frame)
    for entry in view.lineage[-3:]:  # a few, so the first look already gives a rate
        meter.add(entry.time, entry.frame)
    row.frames = view.frame
    row.objective = view.objective
    row.rank = view.rank
    row.action = describe_action(view.last_event)
    taken = view.last_replace
    if taken is not None and taken.donor is not None:
        row.donor = f"{taken.donor}@it{taken.iteration}"
    row.state = view.liveness(now)
    row.fps = None if row.state in FINAL_STATES else meter.rate()
    return row


def time_left(rows: Sequence[MemberRow]) -> Tuple[Optional[float], str]:
    """Seconds until the last member reaches its max_frames, or (None, why it is not known)."""
    if any(r.max_frames is None for r in rows if not r.done):
        return None, "unknown (a member's command sets no max_frames=)"
    lefts = [r.seconds_left() for r in rows]
    if any(v is None for v in lefts):
        return None, "estimating"
    return max([v for v in lefts if v is not None] or [0.0]), ""


class ProgressTracker:
    """Turns snapshots of each population's workspace into :class:`ProgressView` s."""

    def __init__(
        self,
        members: Sequence[Member],
        clock: Callable[[], float] = time.monotonic,
        reader: Callable[[str], Snapshot] = read_snapshot,
    ) -> None:
        self.populations = populations(members)
        self.clock = clock
        self.reader = reader
        self.started = clock()
        self.meters: Dict[Tuple[str, int], RateMeter] = {}

    def view(self) -> ProgressView:
        result = ProgressView([], self.clock() - self.started)
        all_rows: List[MemberRow] = []
        for population in self.populations:
            try:
                snapshot: Optional[Snapshot] = self.reader(population.workspace)
            except Exception as exc:  # noqa: BLE001 - no workspace yet, or unreadable: show members waiting
                log.debug("progress: cannot read %s: %s", population.workspace, exc)
                snapshot = None
            views = {m.policy_idx: m for m in snapshot.members} if snapshot is not None else {}
            now = snapshot.time if snapshot is not None else time.time()
            rows = [
                _row(
                    population,
                    idx,
                    views.get(idx),
                    now,
                    self.meters.setdefault((population.workspace, idx), RateMeter()),
                )
                for idx in sorted(set(population.members) | set(views))
            ]
            best = snapshot.best if snapshot is not None else None
            result.populations.append(
                PopulationRows(
                    population.experiment,
                    population.workspace,
                    rows,
                    (best.policy_idx, best.objective) if best is not None and best.objective is not None else None,
                    len(snapshot.skipped) if snapshot is not None else 0,
                )
            )
            all_rows += rows
        result.left, result.left_note = time_left(all_rows)
        return result


def format_duration(seconds: Optional[float]) -> str:
    """``1:02:03`` / ``2:03``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def format_rate(fps: Optional[float]) -> str:
    if fps is None:
        return "-"
    return f"{fps / 1e3:.1f}k/s" if fps >= 1e4 else f"{fps:.0f}/s"


def _frames_cell(row: MemberRow) -> str:
    total = f"/{format_frames(row.max_frames)}" if row.max_frames is not None else ""
    return f"{format_frames(row.frames)}{total}"


def _header(view: ProgressView) -> str:
    left = format_duration(view.left) if view.left is not None else view.left_note
    return (
        f"elapsed {format_duration(view.elapsed)}, left ~{left}"
        if view.left is not None
        else f"elapsed {format_duration(view.elapsed)}, time left {left}"
    )


def _best(population: PopulationRows) -> str:
    if population.best is None:
        return "best: none yet"
    return f"best: member {population.best[0]} ({display_value(population.best[1])})"


def plain_lines(view: ProgressView) -> List[str]:
    """The view as log lines: one per population, then one per member."""
    lines: List[str] = []
    for population in view.populations:
        skipped = f", skipped {population.skipped} unreadable file(s)" if population.skipped else ""
        lines.append(f"progress {population.experiment}: {_header(view)}, {_best(population)}{skipped}")
        for row in population.rows:
            lines.append(
                f"  {population.experiment} #{row.policy_idx}: {_frames_cell(row)} frames, {format_rate(row.fps)}, "
                f"objective {display_value(row.objective)} (rank {display_value(row.rank)}), "
                f"last {row.action}, weights from {row.donor}, {row.state}"
            )
    return lines


def rich_table(view: ProgressView) -> Any:
    """The view as one rich table per population."""
    from rich import box
    from rich.console import Group, JustifyMethod
    from rich.table import Table

    columns: List[Tuple[str, JustifyMethod]] = [
        ("member", "right"),
        ("frames", "right"),
        ("frames/s", "right"),
        ("objective", "right"),
        ("rank", "right"),
        ("last action", "left"),
        ("donor", "left"),
        ("state", "left"),
    ]
    tables = []
    for population in view.populations:
        table = Table(
            title=f"{population.experiment}: {_header(view)}, {_best(population)}",
            title_justify="left",
            box=box.SIMPLE_HEAVY,
            pad_edge=False,
            collapse_padding=True,
        )
        for header, justify in columns:
            table.add_column(header, justify=justify, no_wrap=True)
        for row in population.rows:
            bold = population.best is not None and row.policy_idx == population.best[0]
            table.add_row(
                str(row.policy_idx),
                _frames_cell(row),
                format_rate(row.fps),
                display_value(row.objective),
                display_value(row.rank),
                row.action,
                row.donor,
                row.state,
                style="bold" if bold else None,
            )
        tables.append(table)
    return Group(*tables)


def render_rich_text(view: ProgressView, width: int = 120) -> str:
    """The live table as plain text (for tests and the README)."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(rich_table(view))
    return console.export_text()


class ProgressReporter:
    """Shows a tracker's view every ``interval`` seconds from a daemon thread, until :meth:`stop`.

    ``mode``: "live" (a rich live table; needs a terminal), "plain" (log lines), "off", or "auto"
    (live when stdout is a terminal, else plain). Nothing here may stop the launcher: any error of a
    refresh is logged once at debug level and the next refresh tries again.
    """

    def __init__(
        self,
        members: Sequence[Member],
        mode: str = "auto",
        interval: Optional[float] = None,
        tracker: Optional[ProgressTracker] = None,
    ) -> None:
        if mode == "auto":
            mode = "live" if _stdout_is_terminal() else "plain"
        self.tracker = tracker or ProgressTracker(members)
        self.mode = mode if self.tracker.populations else "off"
        self.interval = interval if interval is not None else (LIVE_INTERVAL if mode == "live" else PLAIN_INTERVAL)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._live: Any = None
        self._swapped: List[Tuple[logging.StreamHandler[Any], Any]] = []

    def start(self) -> None:
        if self.mode == "off":
            return
        if self.mode == "live":
            self._start_live()
        self._thread = threading.Thread(target=self._loop, name="launcher-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing and show the final state once (skipped if a refresh is stuck on a slow disk)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        stuck = self._thread.is_alive()
        self._thread = None
        if not stuck:
            self.refresh()
        if self._live is not None:
            try:
                self._live.stop()
            except Exception as exc:  # noqa: BLE001 - progress must never stop the launcher
                log.debug("could not close the live progress table: %r", exc)
            finally:
                for handler, stream in self._swapped:
                    handler.setStream(stream)
                self._live = None

    def refresh(self) -> None:
        try:
            view = self.tracker.view()
            if self._live is not None:
                self._live.update(rich_table(view), refresh=True)
            else:
                log.info("%s", "\n".join(plain_lines(view)))
        except Exception as exc:  # noqa: BLE001 - progress must never stop the launcher
            log.debug("progress refresh failed: %r", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        original = sys.stdout
        self._live = Live(
            console=Console(file=original), auto_refresh=False, redirect_stdout=True, redirect_stderr=False
        )
        self._live.start()
        # The launcher's log lines go to stdout: route them through rich so they print above the table.
        for handler in log.handlers if sys.stdout is not original else []:
            if isinstance(handler, logging.StreamHandler) and handler.stream is original:
                self._swapped.append((handler, handler.setStream(sys.stdout)))


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
