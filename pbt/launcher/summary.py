"""What a processes launcher prints when its members have ended: per PBT population, each member's
final objective, rank, exploits given and taken and hyperparameters; the winner and its checkpoint;
the commands to look further.

Read only through :func:`pbt.tools.snapshot.read_snapshot` and :class:`pbt.storage.WorkspaceReader`
(nothing is written); a partial workspace (a member that never wrote a record, no workspace at all)
gives a shorter summary, never an error.
"""

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from pbt.errors import PbtError
from pbt.keys import short_keys
from pbt.launcher.populations import Population, populations
from pbt.launcher.run_description import Member
from pbt.storage import WorkspaceReader
from pbt.storage.format import best_dir_name
from pbt.tools.display import display_value, format_frames
from pbt.tools.snapshot import Snapshot, collect_warnings, read_snapshot

log = logging.getLogger("launcher")

PLAY_EPISODES = 100


@dataclass
class Winner:
    policy_idx: int
    objective: float
    checkpoint: Optional[Path]
    """Its newest record's checkpoint, else the best copy of the population best, else None."""
    source: str
    """Where the checkpoint comes from, in words."""


def donations(snapshot: Snapshot) -> Dict[int, int]:
    """policy_idx -> how many times another member took its weights (a "replace" naming it)."""
    given: Dict[int, int] = {}
    for view in snapshot.members:
        for entry in view.lineage:
            if entry.action == "replace" and entry.donor is not None:
                given[entry.donor] = given.get(entry.donor, 0) + 1
    return given


def find_winner(snapshot: Snapshot) -> Optional[Winner]:
    """The best-ranked member and the path of a checkpoint of its weights."""
    best = snapshot.best
    if best is None or best.record is None or best.objective is None:
        return None
    reader = WorkspaceReader(snapshot.root)
    with collect_warnings():
        try:
            path = reader.checkpoint_path(best.record)
            if isinstance(path, Path) and path.is_file():  # an object store's URL is not checked here
                return Winner(
                    best.policy_idx, best.objective, path, f"its newest record, iteration {best.record.iteration}"
                )
        except PbtError:
            pass
        copies = []
        for view in snapshot.members:
            try:
                record = reader.best_record(view.policy_idx)
            except PbtError:
                record = None
            if record is not None and record.objective is not None and record.has_objective:
                copies.append((float(record.objective), view.policy_idx, record))
    if copies:
        objective, holder, record = max(copies, key=lambda c: (c[0], -c[1]))
        path = Path(reader.store.path(f"{best_dir_name(holder)}/{record.checkpoint}"))
        return Winner(
            best.policy_idx,
            best.objective,
            path,
            f"the best copy in {best_dir_name(holder)}/ (member {record.policy_idx}, objective {display_value(objective)})",
        )
    return Winner(best.policy_idx, best.objective, None, "")


def _table(snapshot: Snapshot) -> List[str]:
    given = donations(snapshot)
    keys = sorted({k for m in snapshot.members for k in m.params})
    names = short_keys(keys)
    with_params = [m.params for m in snapshot.members if m.params]
    # Values every member shares go on one line below the table; the table shows what differs.
    shared = [
        k for k in keys if len(with_params) > 1 and all(p.get(k, None) == with_params[0].get(k) for p in with_params)
    ]
    varying = [k for k in keys if k not in shared]
    rows = [("rank", "member", "objective", "frames", "given", "taken", "hyperparameters")]
    ordered = sorted(snapshot.members, key=lambda m: (m.rank is None, m.rank or 0, m.policy_idx))
    for view in ordered:
        params = view.params
        rows.append(
            (
                display_value(view.rank),
                str(view.policy_idx),
                display_value(view.objective) if view.record is not None else "no record",
                format_frames(view.frame),
                str(given.get(view.policy_idx, 0)),
                str(view.replacements),
                " ".join(f"{names[k]}={display_value(params[k])}" for k in varying if k in params) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows]
    if shared:
        lines.append("  same for all: " + " ".join(f"{names[k]}={display_value(with_params[0][k])}" for k in shared))
    return lines


def summary_lines(population: Population) -> List[str]:
    """The summary of one population, as lines of text."""
    workspace = population.workspace
    title = f"PBT summary of {population.experiment} ({len(population.members)} members, workspace {workspace})"
    try:
        snapshot = read_snapshot(workspace)
    except PbtError as exc:
        return [title, f"  nothing to summarize: {exc}"]
    lines = [title] + _table(snapshot)
    lines.append("  given: times other members took its weights; taken: times it took a leader's weights (replace)")
    missing = sorted(set(population.members) - {m.policy_idx for m in snapshot.members if m.record is not None})
    if missing:
        lines.append(
            f"  member(s) {', '.join(map(str, missing))} wrote no record (see their logs in "
            f"{os.path.join(population.experiment_dir, 'logs')})"
        )
    unknown = [m.policy_idx for m in snapshot.members if m.record is not None and m.objective is None]
    if unknown:
        lines.append(
            f"  member(s) {', '.join(map(str, unknown))}: objective not known yet (no episode ended "
            "since it started or took new weights)"
        )
    if snapshot.skipped:
        lines.append(f"  skipped {len(snapshot.skipped)} unreadable file(s): {snapshot.skipped[0][:200]}")
    total = sum(donations(snapshot).values())
    lines.append(f"  exploits: {total} replace(s) in all")
    winner = find_winner(snapshot)
    if winner is None:
        lines.append("winner: none (no member has a known objective yet)")
    else:
        where = f"{winner.checkpoint} ({winner.source})" if winner.checkpoint else "no checkpoint found"
        lines.append(f"winner: member {winner.policy_idx}, objective {display_value(winner.objective)}")
        lines.append(f"checkpoint: {where}")
    ws = shlex.quote(workspace)
    lines.append("next:")
    lines.append(f"  pbt-status {ws}")
    lines.append(f"  pbt-analyze {ws} --out {shlex.quote(os.path.join(population.experiment_dir, 'analysis'))}")
    if winner is not None and winner.checkpoint is not None:
        view = snapshot.member(winner.policy_idx)
        keys = list(view.params) if view else []
        lines.append("  " + population.play_command(str(winner.checkpoint), winner.policy_idx, PLAY_EPISODES, keys))
    return lines


def log_summaries(members: Sequence[Member]) -> None:
    """Log the summary of every PBT population among ``members``; never raises."""
    for population in populations(members):
        try:
            lines = summary_lines(population)
        except Exception as exc:  # noqa: BLE001 - a summary must never turn a finished run into a failure
            log.warning(
                "could not summarize %s: %r; look with pbt-status %s", population.experiment, exc, population.workspace
            )
            continue
        log.info("%s", "\n".join(lines))
