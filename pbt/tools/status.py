"""``pbt-status <workspace> [--watch] [--interval S]``: the population at a glance.

A terminal table (made with rich) of every member: frames, iteration, objective and rank, how
often it restarted, its last PBT action and the last donor it copied, its current hyperparameters
(short keys), and whether it is alive (its heartbeat, judged by the members' own rule, or its newest
record written recently) or stale.

Read-only and safe on a workspace that is being written to (see :mod:`pbt.tools.snapshot`): files
that could not be read are counted in the table's caption instead of crashing or flooding the
screen with warnings. No torch import.
"""

import argparse
import io
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from pbt.errors import PbtError, WorkspaceError
from pbt.keys import short_keys
from pbt.mutation.network import network_of
from pbt.storage import LineageEntry
from pbt.storage.reader import workspace_location
from pbt.tools.display import display_value, format_age, format_frames, printable
from pbt.tools.snapshot import DEFAULT_STALE_AFTER, Snapshot, read_snapshot

INSTALL_HINT = 'pip install rich (it is a dependency of this project: pip install -e ".")'
WIDE = 150
"""Console width from which hyperparameters are shown in the population table itself; narrower
consoles get a second table (one row per hyperparameter, one column per member)."""
STATE_STYLES = {"alive": "green", "stale": "red", "exited": "red", "finished": "blue"}


def _require_rich() -> None:
    try:
        import rich  # noqa: F401
    except ImportError:
        raise PbtError(f"pbt.status needs the 'rich' package, which is not installed: {INSTALL_HINT}") from None


def _describe_action(entry: Optional[LineageEntry]) -> str:
    if entry is None:
        return "-"
    action = entry.action or "?"
    if entry.is_startup:
        action = "start"
    elif action == "replace" and entry.donor is not None:
        action = f"replace<-{entry.donor}"
    return f"{action}@it{entry.iteration}"


def _describe_donor(entry: Optional[LineageEntry]) -> str:
    if entry is None:
        return "-"
    return f"{entry.donor}@it{entry.iteration}"


def _network(view: Any) -> str:
    """``[32, 16] elu 1.2k`` for a member whose network evolves: the newest of its last lineage
    entry (after an exploit) and its record; "" otherwise."""
    entry, record = view.last_event, view.record
    network = entry.network if entry is not None and entry.network else (record.network if record else None)
    if not network:
        return ""
    count, spec = network.get("parameters"), network_of(network)
    shape = spec.describe() if spec is not None else f"{network.get('units')} {network.get('activation')}"
    return shape + (f" {format_frames(count)}" if count else "")


_SUBPOPULATION = re.compile(r"sub-population (\d+) \(frequency (\d+)")


def _subpopulation(view: Any) -> str:
    """MF-PBT's sub-population and frequency as its newest action's reason names them ("" for other
    strategies and before a member's first action: keeps are not in the lineage)."""
    for entry in (view.last_event, view.last_replace):
        match = _SUBPOPULATION.search(entry.reason) if entry is not None and entry.reason else None
        if match:
            return f"{match.group(1)} (every {match.group(2)})"
    return ""


def build_table(snapshot: Snapshot, stale_after: float = DEFAULT_STALE_AFTER, width: int = WIDE) -> Any:
    """The rich renderable of a snapshot: the population table (and, on consoles narrower than
    :data:`WIDE`, a hyperparameter table below it)."""
    _require_rich()
    from rich import box
    from rich.console import Group, JustifyMethod
    from rich.table import Table
    from rich.text import Text

    keys = sorted({k for m in snapshot.members for k in m.params})
    names = short_keys(keys)
    wide = width >= WIDE
    best = snapshot.best
    title = f"PBT population {snapshot.root} - {len(snapshot.members)} members"
    if best is not None:
        title += f", best: policy {best.policy_idx} ({display_value(best.objective)})"
    caption = f"read {time.strftime('%H:%M:%S', time.localtime(snapshot.time))}"
    if snapshot.skipped:
        caption += f"; skipped {len(snapshot.skipped)} unreadable file(s) (torn or being written): " + "; ".join(
            s[:160] for s in snapshot.skipped[:3]
        )
    # Every string from the workspace goes in as Text (never rich markup), its control characters escaped.
    table = Table(
        title=Text(printable(title)), caption=Text(printable(caption)), caption_justify="left", box=box.SIMPLE_HEAVY
    )
    columns: List[Tuple[str, JustifyMethod]] = [
        ("policy", "right"),
        ("state", "left"),
        ("frames", "right"),
        ("iter", "right"),
        ("objective", "right"),
        ("rank", "right"),
        ("restarts", "right"),
        ("last action", "left"),
        ("donor", "left"),
    ]
    if not wide:  # 80 columns: the last action names its donor; the iteration is in it too
        columns = [c for c in columns if c[0] not in ("iter", "donor")]
    if any(_subpopulation(view) for view in snapshot.members):  # pbt/selection=mfpbt
        columns.insert(columns.index(("last action", "left")), ("sub-pop", "left"))
    if any(view.stage is not None for view in snapshot.members):  # a curriculum (pbt.curriculum)
        columns.insert(columns.index(("objective", "right")), ("stage", "right"))
    if any(_network(view) for view in snapshot.members):  # evolved networks (pbt/mutation=agilerl)
        columns.insert(columns.index(("last action", "left")), ("network", "left"))
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=header not in ("last action", "donor"), overflow="fold")
    if wide:
        table.add_column("hyperparameters", justify="left", ratio=1, min_width=24, overflow="fold")
    for view in snapshot.members:
        state = view.liveness(snapshot.time, stale_after)
        seen = view.last_seen()
        state_text = Text(
            state + (f" {format_age(snapshot.time - seen)}" if seen is not None else ""),
            style=STATE_STYLES.get(state, "yellow"),
        )
        params = view.params
        values: Dict[str, Union[str, Text]] = {
            "policy": str(view.policy_idx),
            "state": state_text,
            "frames": format_frames(view.frame),
            "iter": display_value(view.iteration),
            "objective": display_value(view.objective) if view.record is not None else "no record",
            "rank": display_value(view.rank),
            "restarts": str(view.restarts),
            "last action": _describe_action(view.last_event),
            "donor": _describe_donor(view.last_replace),
            "network": _network(view),
            "stage": display_value(view.stage),
            "sub-pop": _subpopulation(view),
        }
        if not wide and view.last_replace is not None and view.last_replace is not view.last_event:
            values["last action"] += f" (took {_describe_donor(view.last_replace)})"
        cells = [values[name] for name, _ in columns]
        if wide:
            cells.append("  ".join(f"{names[k]}={display_value(params[k])}" for k in keys if k in params))
        cells = [cell if isinstance(cell, Text) else Text(printable(cell)) for cell in cells]
        table.add_row(*cells, style="bold" if best is not None and view is best else None)
    if wide or not keys:
        return table
    hp = Table(title="hyperparameters in force", title_justify="left", box=box.SIMPLE_HEAVY)
    hp.add_column("key", justify="left", no_wrap=True)
    for view in snapshot.members:
        hp.add_column(str(view.policy_idx), justify="right", no_wrap=True)
    for key in keys:
        hp.add_row(
            Text(printable(names[key])),
            *[Text(printable(display_value(view.params.get(key)))) for view in snapshot.members],
        )
    return Group(table, hp)


def render_text(snapshot: Snapshot, width: int = 200, stale_after: float = DEFAULT_STALE_AFTER) -> str:
    """The table as plain text (for logs and tests)."""
    _require_rich()
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(build_table(snapshot, stale_after, width))
    return console.export_text()


def _renderable(root: Union[Path, str], stale_after: float, width: int) -> Any:
    from rich.text import Text

    try:
        return build_table(read_snapshot(root), stale_after, width)
    except WorkspaceError as exc:  # e.g. no member has started yet: keep watching
        return Text(f"{printable(exc)}\n(retrying)", style="yellow")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pbt-status", description="Show a PBT population: who is winning, who copied whom."
    )
    parser.add_argument("workspace", help="the population's pbt.workspace directory")
    parser.add_argument("--watch", action="store_true", help="refresh the table until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (--watch)")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER,
        help="seconds without a heartbeat (or a new record) before a member is shown stale "
        "(default: pbt.heartbeat_timeout's default, %(default)g)",
    )
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
    root = workspace_location(args.workspace)
    if not args.watch:
        try:
            console.print(build_table(read_snapshot(root), args.stale_after, console.width))
        except PbtError as exc:
            print(f"Error: {printable(exc)}", file=sys.stderr)
            return 2
        return 0
    from rich.live import Live

    try:
        with Live(
            _renderable(root, args.stale_after, console.width),
            console=console,
            auto_refresh=False,
            redirect_stderr=False,
        ) as live:
            # On stderr, so piped output stays the table; also tells a caller the watch loop is running.
            print(f"Watching {printable(root)} every {args.interval:g} s; Ctrl-C stops.", file=sys.stderr, flush=True)
            while True:
                time.sleep(args.interval)
                live.update(_renderable(root, args.stale_after, console.width), refresh=True)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
