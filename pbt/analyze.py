"""``python -m pbt.analyze <workspace> --out <dir>``: plots, a report and the winner's schedule.

Writes into ``<dir>``:

* ``objective.png``: objective over frames per member, with replace events (the member took a
  donor's weights) and mutations marked;
* ``hyperparameters.png``: each hyperparameter of the scheme over frames, per member;
* ``lineage.png``: who copied whom, when: members as horizontal lanes over frames, an arrow from
  the donor's lane to the receiver's at every replace event; the best member's ancestry is
  highlighted;
* ``report.md`` and ``report.html``: the members table and every lineage event, linking the plots;
* ``best/``: the best member's checkpoint (``checkpoint.pth``, copied with sha256 verification),
  its record (``record.yaml``) and its whole hyperparameter schedule (``schedule.yaml``),
  reconstructed across all its ancestors, which ``python -m pbt.replay`` can follow.

Everything comes from the lineage files (one entry per PBT iteration per member, so histories are
complete even after retention deleted old records) and the members' newest records. Safe on a
workspace that is being written to (torn files are skipped). Plots use matplotlib's Agg backend
(no display needed).

Schedule frames. A member that takes a donor's weights keeps its own frame count (DexPBT), while
the weights it received had trained for the donor's frame count. A schedule step's ``frame`` is
counted along the weights' own history (frames of training they had received when the step began),
which is what a single replayed worker counts; ``member_frame`` is the frame count of the member
that trained them at the time (as in its lineage and TensorBoard). Both agree until the first
replacement, and differ by less than one PBT interval per replacement after it.
"""
import argparse
import datetime
import html
import logging
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from pbt.errors import CorruptRecordError, PbtError, WorkspaceError
from pbt.record import Record
from pbt.status import MemberView, Snapshot, format_value, is_exploit, open_workspace, read_snapshot, short_keys
from pbt.workspace import atomic_write_bytes, record_to_yaml, sha256_hex

log = logging.getLogger(__name__)

SCHEDULE_VERSION = 1
MAX_ANCESTRY_DEPTH = 10_000
IMAGES = ("objective.png", "hyperparameters.png", "lineage.png")


# --------------------------------------------------------------------------------------------
# Schedule reconstruction (pure: lineage entries in, steps out)
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """From ``frame`` on, the weights trained with ``params``."""

    frame: int
    """Frames of training the weights had received when this step began (see module docstring)."""
    params: Dict[str, Any]
    member: int
    """The member that trained the weights from here on."""
    member_frame: int
    """That member's own frame count when the step began."""
    iteration: int
    """That member's PBT iteration of the event."""
    event: str
    """startup (a fresh member's initial hyperparameters), start (no startup entry known),
    mutate (new hyperparameters, same weights) or replace (a donor's weights, new hyperparameters)."""
    donor: Optional[int] = None
    donor_iteration: Optional[int] = None


@dataclass
class Segment:
    """Part of the weights' history trained by one member."""

    member: int
    from_frame: int
    to_frame: int
    member_from_frame: int
    member_to_frame: int


@dataclass
class Schedule:
    steps: List[Step]
    segments: List[Segment]
    complete: bool = True
    """False when an ancestor's lineage is missing (the steps then start at its replacement)."""
    notes: List[str] = field(default_factory=list)


def _num(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return int(value)


def _is_startup(entry: Mapping[str, Any]) -> bool:
    return entry.get("mode") == "startup"


def _params(entry: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = entry.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _frame_at_iteration(lineage: Sequence[Mapping[str, Any]], iteration: int) -> Optional[int]:
    """The member's own frame count when it published ``iteration`` (its lineage entry's frame)."""
    frames = [_num(e.get("frame")) for e in lineage if not _is_startup(e) and _num(e.get("iteration"), -1) == iteration]
    return frames[-1] if frames else None


def reconstruct_schedule(
    lineages: Mapping[int, Sequence[Mapping[str, Any]]], member: int, iteration: int, frame: int
) -> Schedule:
    """The hyperparameter schedule that produced ``member``'s checkpoint of ``iteration``
    (published at its own ``frame``), across all its ancestors.

    The member's own events before ``iteration`` count (a decision at ``iteration`` came after the
    checkpoint was published). Before its last replacement the schedule is the donor's up to the
    donor's checkpoint (``donor_iteration``), recursively; after it, the member's own.
    """
    notes: List[str] = []
    steps, segments, _, complete = _trace(lineages, member, iteration, frame, 0, notes)
    return Schedule(steps, segments, complete, notes)


def _trace(
    lineages: Mapping[int, Sequence[Mapping[str, Any]]], member: int, upto: int, end_frame: int, depth: int,
    notes: List[str],
) -> Tuple[List[Step], List[Segment], int, bool]:
    """(steps, segments, offset, complete) of member's weights up to its checkpoint of ``upto``;
    offset = weights' frames - member's frames after its last replacement."""
    entries = [e for e in lineages.get(member, []) if _is_startup(e) or _num(e.get("iteration"), -1) < upto]
    changes = [e for e in entries if e.get("action") in ("mutate", "replace")]
    replaces = [i for i, e in enumerate(changes) if e.get("action") == "replace" and not _is_startup(e)]
    steps: List[Step] = []
    segments: List[Segment] = []
    complete = True
    if replaces:
        last = changes[replaces[-1]]
        donor = _num(last.get("donor"), -1)
        donor_iteration = _num(last.get("donor_iteration"), -1)
        replace_frame = _num(last.get("frame"))
        donor_lineage = lineages.get(donor, [])
        donor_frame = _frame_at_iteration(donor_lineage, donor_iteration) if donor_lineage else None
        if donor_frame is not None and depth < MAX_ANCESTRY_DEPTH and 0 <= donor_iteration:
            steps, segments, donor_offset, complete = _trace(lineages, donor, donor_iteration, donor_frame, depth + 1,
                                                             notes)
            start = donor_frame + donor_offset
        else:
            complete = False
            notes.append(f"lineage of member {donor} (donor of member {member} at its iteration "
                         f"{last.get('iteration')}) is missing: the schedule before that is unknown")
            start = replace_frame
        offset = start - replace_frame
        steps.append(Step(start, _params(last, "params_after"), member, replace_frame, _num(last.get("iteration")),
                          "replace", donor, donor_iteration))
        own_changes = changes[replaces[-1] + 1:]
        member_start = replace_frame
    else:
        offset = 0
        startup = next((e for e in entries if _is_startup(e)), None)
        if startup is not None:
            steps.append(Step(0, _params(startup, "params_after"), member, 0, 0, "startup"))
        elif entries:
            steps.append(Step(0, _params(entries[0], "params_before"), member, 0, 0, "start"))
            notes.append(f"member {member} has no startup entry (resumed or lineage truncated): "
                         "its first known hyperparameters are used from frame 0")
        else:
            complete = False
            notes.append(f"member {member} has no lineage before iteration {upto}")
        own_changes = [e for e in changes if not _is_startup(e)]
        member_start = 0
    for entry in own_changes:
        member_frame = _num(entry.get("frame"))
        steps.append(Step(member_frame + offset, _params(entry, "params_after"), member, member_frame,
                          _num(entry.get("iteration")), str(entry.get("action"))))
    segments.append(Segment(member, member_start + offset, end_frame + offset, member_start, end_frame))
    return steps, segments, offset, complete


def schedule_document(schedule: Schedule, provenance: Mapping[str, Any]) -> Dict[str, Any]:
    """The YAML document of ``schedule.yaml``."""
    return {
        "version": SCHEDULE_VERSION,
        "provenance": dict(provenance, complete=schedule.complete, notes=list(schedule.notes),
                           ancestry=[asdict(s) for s in schedule.segments]),
        "steps": [
            {"frame": s.frame, "params": dict(sorted(s.params.items())), "member": s.member,
             "member_frame": s.member_frame, "iteration": s.iteration, "event": s.event,
             **({"donor": s.donor, "donor_iteration": s.donor_iteration} if s.event == "replace" else {})}
            for s in schedule.steps
        ],
    }


# --------------------------------------------------------------------------------------------
# Best member export
# --------------------------------------------------------------------------------------------


@dataclass
class BestExport:
    record: Record
    schedule: Schedule
    directory: Path
    checksum: str


def _candidates(snapshot: Snapshot) -> List[Record]:
    records = [m.record for m in snapshot.members if m.record is not None and m.record.has_objective]
    return sorted(records, key=lambda r: (-float(r.objective), r.policy_idx))  # type: ignore[arg-type]


def export_best(snapshot: Snapshot, out: Path) -> Optional[BestExport]:
    """Copy the best member's checkpoint (sha256-verified), record and schedule to ``out/best``.

    The best is the member whose newest record has the highest objective; if its checkpoint
    vanished or fails its checksum (a live workspace), the next best is taken. Returns None when
    no member has a known objective yet.
    """
    workspace = open_workspace(snapshot.root)
    best_dir = out / "best"
    for record in _candidates(snapshot):
        try:
            data = workspace.read_checkpoint_bytes(record)
        except CorruptRecordError as exc:
            log.warning("best candidate policy %d iteration %d unusable (%s); trying the next", record.policy_idx,
                        record.iteration, exc)
            continue
        best_dir.mkdir(parents=True, exist_ok=True)
        target = best_dir / "checkpoint.pth"
        atomic_write_bytes(target, data)
        copied = sha256_hex(target.read_bytes())
        if copied != record.checksum:
            raise WorkspaceError(
                f"{target}: the copy's sha256 {copied[:12]}... differs from the record's {record.checksum[:12]}...; "
                f"the disk under {out} corrupts data. Write the analysis to another directory (--out)."
            )
        atomic_write_bytes(best_dir / "record.yaml", record_to_yaml(record))
        schedule = reconstruct_schedule(snapshot.lineages, record.policy_idx, record.iteration, record.frame)
        provenance = {
            "workspace": str(snapshot.root.resolve()),
            "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "member": record.policy_idx,
            "iteration": record.iteration,
            "member_frame": record.frame,
            "frames_trained": schedule.segments[-1].to_frame if schedule.segments else record.frame,
            "objective": record.objective,
            "checkpoint": "checkpoint.pth",
            "checkpoint_sha256": record.checksum,
            "frame_count": "step frames count the training the weights received along their ancestry; "
                           "member_frame is the frame count of the member training them then",
        }
        document = schedule_document(schedule, provenance)
        text = ("# Hyperparameter schedule of the best member, reconstructed from the PBT lineage.\n"
                "# Replay it: python -m pbt.replay schedule.yaml task=<task> [overrides...]\n"
                + yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
        atomic_write_bytes(best_dir / "schedule.yaml", text.encode("utf-8"))
        log.info("best member %d (iteration %d, objective %s) exported to %s with a %d-step schedule",
                 record.policy_idx, record.iteration, record.objective, best_dir, len(schedule.steps))
        return BestExport(record, schedule, best_dir, copied)
    return None


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PbtError('pbt.analyze needs matplotlib, which is not installed: pip install matplotlib '
                       '(a dependency of this project: pip install -e ".")') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _frames_axis(ax: Any) -> None:
    """Frames on the x axis as 250k / 1.5M instead of a 1e6 offset."""
    from matplotlib.ticker import FuncFormatter

    def label(x: float, _pos: Any) -> str:
        if abs(x) >= 1e6:
            return f"{x / 1e6:g}M"
        if abs(x) >= 1e3:
            return f"{x / 1e3:g}k"
        return f"{x:g}"

    ax.xaxis.set_major_formatter(FuncFormatter(label))


def _color(policy_idx: int, count: int) -> Any:
    plt = _pyplot()
    cmap = plt.get_cmap("tab10" if count <= 10 else "tab20")
    return cmap(policy_idx % cmap.N)


def _objective_points(view: MemberView) -> List[Tuple[int, float]]:
    points = []
    for entry in view.lineage:
        objective = entry.get("objective")
        if isinstance(objective, (int, float)) and not isinstance(objective, bool) and math.isfinite(objective):
            points.append((_num(entry.get("frame")), float(objective)))
    record = view.record
    if record is not None and record.has_objective and (not points or record.frame > points[-1][0]):
        points.append((record.frame, float(record.objective)))  # type: ignore[arg-type]
    return points


def _last_frame(view: MemberView) -> int:
    return max([_num(e.get("frame")) for e in view.lineage] + [view.record.frame if view.record else 0])


def plot_objectives(snapshot: Snapshot, path: Path) -> Path:
    plt = _pyplot()
    count = len(snapshot.members)
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=100)
    for view in snapshot.members:
        color = _color(view.policy_idx, count)
        points = _objective_points(view)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], "-o", color=color, markersize=3, lw=1.6,
                    label=f"policy {view.policy_idx}")
        by_frame = dict(points)
        for entry in view.lineage:
            if not is_exploit(entry):
                continue
            frame = _num(entry.get("frame"))
            y = entry.get("objective") if isinstance(entry.get("objective"), (int, float)) else by_frame.get(frame)
            if y is None or not math.isfinite(float(y)):
                continue
            if entry.get("action") == "replace":
                ax.plot(frame, y, marker="v", markersize=11, color=color, markeredgecolor="black", zorder=5)
                ax.annotate(f"<-{entry.get('donor')}", (frame, y), textcoords="offset points", xytext=(7, 4),
                            fontsize=8, color="black")
            else:
                ax.plot(frame, y, marker="x", markersize=8, color="black", mew=1.5, zorder=5)
    ax.plot([], [], "v", color="grey", markeredgecolor="black", markersize=9, label="replace (took donor's weights)")
    ax.plot([], [], "x", color="black", label="mutate (new hyperparameters)")
    _frames_axis(ax)
    ax.set_xlabel("frames (each member's own count)")
    ax.set_ylabel("objective")
    ax.set_title("Objective per member")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", ncol=2 if count > 6 else 1)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
    return path


def _param_steps(view: MemberView, key: str) -> List[Tuple[int, float]]:
    """(frame, value) at the start and at every change of a member's hyperparameter."""
    points: List[Tuple[int, float]] = []
    for entry in view.lineage:
        if _is_startup(entry) or not points:
            source = "params_after" if _is_startup(entry) else "params_before"
            value = _params(entry, source).get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                points.append((0 if _is_startup(entry) else _num(entry.get("frame")), float(value)))
            if _is_startup(entry):
                continue
        if is_exploit(entry):
            value = _params(entry, "params_after").get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                points.append((_num(entry.get("frame")), float(value)))
    if points:
        points.append((max(_last_frame(view), points[-1][0]), points[-1][1]))
    return points


def plot_hyperparameters(snapshot: Snapshot, path: Path) -> Path:
    """One panel per hyperparameter that differed between members or changed over time (the
    others are listed at the bottom); members drawn with decreasing line widths so that equal
    values stay visible."""
    plt = _pyplot()
    all_keys = sorted({k for m in snapshot.members for e in m.lineage for k in _params(e, "params_after")})
    names = short_keys(all_keys)
    series = {key: {m.policy_idx: _param_steps(m, key) for m in snapshot.members} for key in all_keys}
    keys, constant = [], []
    for key in all_keys:
        values = {p[1] for points in series[key].values() for p in points}
        (keys if len(values) > 1 else constant).append(key)
    count = len(snapshot.members)
    cols = 3 if len(keys) > 4 else max(1, len(keys))
    rows = max(1, math.ceil(len(keys) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.4 * rows + 1.0), dpi=90, squeeze=False)
    for i, key in enumerate(keys):
        ax = axes[i // cols][i % cols]
        values: List[float] = []
        for order, view in enumerate(snapshot.members):
            points = series[key][view.policy_idx]
            if not points:
                continue
            values += [p[1] for p in points]
            width = 1.2 + 3.0 * (count - 1 - order) / max(1, count - 1)
            ax.plot([p[0] for p in points], [p[1] for p in points], drawstyle="steps-post",
                    color=_color(view.policy_idx, count), lw=width, alpha=0.9, label=f"policy {view.policy_idx}")
        if values and min(values) > 0 and max(values) / min(values) >= 3:
            ax.set_yscale("log")
        ax.set_title(names[key], fontsize=10)
        _frames_axis(ax)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for j in range(len(keys), rows * cols):
        axes[j // cols][j % cols].axis("off")
    if keys:
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=min(count, 8))
    else:
        axes[0][0].text(0.5, 0.5, "no hyperparameter differs between members or over time",
                        ha="center", va="center", transform=axes[0][0].transAxes)
    fig.suptitle("Hyperparameters over frames", x=0.01, ha="left")
    footer = "frames (each member's own count)"
    if constant:
        same = ", ".join(f"{names[k]}={format_value(next((p[1] for pts in series[k].values() for p in pts), None))}"
                         for k in constant)
        footer += f"\nthe same for all members throughout: {same}"
    fig.supxlabel(footer, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(str(path))
    plt.close(fig)
    return path


def plot_lineage(snapshot: Snapshot, path: Path, best: Optional[BestExport] = None) -> Path:
    plt = _pyplot()
    count = len(snapshot.members)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.55 * max(count, 3)), dpi=100)
    if best is not None:
        for segment in best.schedule.segments:
            ax.plot([segment.member_from_frame, segment.member_to_frame], [segment.member, segment.member],
                    color="gold", lw=9, alpha=0.6, solid_capstyle="butt", zorder=1)
        ax.plot([], [], color="gold", lw=8, alpha=0.6, label=f"ancestry of the best (policy {best.record.policy_idx})")
    for view in snapshot.members:
        color = _color(view.policy_idx, count)
        ax.plot([0, _last_frame(view)], [view.policy_idx, view.policy_idx], color=color, lw=2.2, zorder=2)
        mutations = [_num(e.get("frame")) for e in view.lineage if is_exploit(e) and e.get("action") == "mutate"]
        if mutations:
            ax.plot(mutations, [view.policy_idx] * len(mutations), "|", color="black", markersize=12, mew=1.5,
                    zorder=3)
        if view.record is not None and view.rank is not None:
            ax.annotate(f" {format_value(view.objective)} (#{view.rank})", (_last_frame(view), view.policy_idx),
                        fontsize=8, va="center")
    lineages = snapshot.lineages
    for view in snapshot.members:
        for entry in view.lineage:
            if entry.get("action") != "replace" or _is_startup(entry):
                continue
            donor = _num(entry.get("donor"), -1)
            frame = _num(entry.get("frame"))
            donor_frame = _frame_at_iteration(lineages.get(donor, []), _num(entry.get("donor_iteration"), -1))
            ax.annotate("", xy=(frame, view.policy_idx), xytext=(frame if donor_frame is None else donor_frame, donor),
                        arrowprops=dict(arrowstyle="-|>", color=_color(donor, count), lw=1.8, shrinkA=3, shrinkB=3),
                        zorder=4)
    ax.plot([], [], color="grey", marker=">", lw=1.8, label="replace: donor -> receiver")
    ax.plot([], [], "|", color="black", markersize=10, mew=1.5, label="mutate")
    ax.set_yticks([m.policy_idx for m in snapshot.members])
    ax.set_yticklabels([f"policy {m.policy_idx}" for m in snapshot.members])
    _frames_axis(ax)
    ax.set_ylim(max(m.policy_idx for m in snapshot.members) + 0.8, min(m.policy_idx for m in snapshot.members) - 0.8)
    ax.set_xlabel("frames (each member's own count)")
    ax.set_title("Lineage: who copied whom, when")
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.12)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.18), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


EVENT_COLUMNS = ("time", "policy", "iteration", "frame", "action", "donor", "donor iteration", "objective",
                 "donor objective", "mode", "changes", "reason")
MEMBER_COLUMNS = ("policy", "frames", "iteration", "objective", "rank", "restarts", "replaced", "hyperparameters")


def lineage_events(snapshot: Snapshot) -> List[Dict[str, Any]]:
    """Every lineage entry that changed something (startup, mutate, replace), in time order."""
    events = [e for m in snapshot.members for e in m.lineage if e.get("action") in ("mutate", "replace")]
    return sorted(events, key=lambda e: (float(e.get("time") or 0.0), _num(e.get("policy_idx"))))


def _changes(entry: Mapping[str, Any], names: Mapping[str, str]) -> str:
    before, after = _params(entry, "params_before"), _params(entry, "params_after")
    diffs = [f"{names.get(k, k)} {format_value(before.get(k))}->{format_value(after[k])}"
             for k in sorted(after) if before.get(k) != after[k]]
    return ", ".join(diffs) or "-"


def event_row(entry: Mapping[str, Any], names: Mapping[str, str]) -> List[str]:
    stamp = entry.get("time")
    when = (datetime.datetime.fromtimestamp(float(stamp)).strftime("%H:%M:%S")
            if isinstance(stamp, (int, float)) and math.isfinite(stamp) else "-")
    action = "startup" if _is_startup(entry) else str(entry.get("action"))
    return [when, str(entry.get("policy_idx")), str(entry.get("iteration")), str(entry.get("frame")), action,
            format_value(entry.get("donor")), format_value(entry.get("donor_iteration")),
            format_value(entry.get("objective")), format_value(entry.get("donor_objective")),
            format_value(entry.get("mode")), _changes(entry, names), str(entry.get("reason") or "")]


def member_row(view: MemberView, names: Mapping[str, str]) -> List[str]:
    params = view.params
    return [str(view.policy_idx), format_value(view.frame), format_value(view.iteration),
            format_value(view.objective), format_value(view.rank), str(view.restarts),
            str(sum(1 for e in view.lineage if e.get("action") == "replace")),
            ", ".join(f"{names.get(k, k)}={format_value(params[k])}" for k in sorted(params))]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _best_lines(best: Optional[BestExport]) -> List[str]:
    if best is None:
        return ["No member has a known objective yet: nothing exported."]
    record, schedule = best.record, best.schedule
    ancestry = " -> ".join(f"policy {s.member}" for s in schedule.segments)
    lines = [
        f"Policy {record.policy_idx}, iteration {record.iteration}, frame {record.frame}, objective "
        f"{format_value(record.objective)}.",
        "",
        f"- checkpoint: [best/checkpoint.pth](best/checkpoint.pth) (sha256 `{best.checksum}`, verified)",
        f"- schedule: [best/schedule.yaml](best/schedule.yaml), {len(schedule.steps)} steps; its weights were "
        f"trained by {ancestry}"
        + ("" if schedule.complete else " (incomplete: " + "; ".join(schedule.notes) + ")"),
        f"- replay it: `python -m pbt.replay {best.directory / 'schedule.yaml'} task=<task> ...`",
    ]
    return lines


def write_report(snapshot: Snapshot, out: Path, best: Optional[BestExport], images: Sequence[str]) -> Tuple[Path, Path]:
    """Write ``report.md`` and ``report.html``; returns their paths."""
    keys = sorted({k for m in snapshot.members for k in m.params}
                  | {k for m in snapshot.members for e in m.lineage for k in _params(e, "params_after")})
    names = short_keys(keys)
    events = lineage_events(snapshot)
    members = [member_row(m, names) for m in snapshot.members]
    event_rows = [event_row(e, names) for e in events]
    generated = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    title = f"PBT report: {snapshot.root.resolve()}"
    summary = (f"Generated {generated}: {len(snapshot.members)} members, "
               f"{sum(1 for e in events if e.get('action') == 'replace')} replacements, "
               f"{sum(1 for e in events if e.get('action') == 'mutate' and not _is_startup(e))} mutations.")
    md = [f"# {title}", "", summary, "", "## Best member", "", *_best_lines(best), "", "## Plots", ""]
    for image in images:
        md += [f"![{image}]({image})", ""]
    md += ["## Members", "", *_md_table(MEMBER_COLUMNS, members), "", "## Lineage events", "",
           "Every decision that changed weights or hyperparameters (`keep` decisions are left out).", "",
           *_md_table(EVENT_COLUMNS, event_rows), ""]
    md_path = out / "report.md"
    atomic_write_bytes(md_path, "\n".join(md).encode("utf-8"))

    def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    best_html = "".join(f"<p>{html.escape(line.lstrip('- '))}</p>" for line in _best_lines(best) if line)
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
        "th{background:#eee}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(summary)}</p>",
        f"<h2>Best member</h2>{best_html}",
        "<h2>Plots</h2>" + "".join(f"<p><img src='{html.escape(i)}' alt='{html.escape(i)}'></p>" for i in images),
        f"<h2>Members</h2>{table(MEMBER_COLUMNS, members)}",
        f"<h2>Lineage events</h2>{table(EVENT_COLUMNS, event_rows)}",
        "</body></html>",
    ]
    html_path = out / "report.html"
    atomic_write_bytes(html_path, "\n".join(page).encode("utf-8"))
    return md_path, html_path


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


@dataclass
class Analysis:
    snapshot: Snapshot
    images: List[Path]
    report: Path
    html: Path
    best: Optional[BestExport]


def analyze(workspace: Path, out: Path) -> Analysis:
    """Read the workspace, write plots, report and the best member's export into ``out``."""
    snapshot = read_snapshot(workspace)
    for problem in snapshot.skipped:
        log.warning("skipped: %s", problem)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot create the output directory {out}: {exc}. Pass a writable --out.") from exc
    best = export_best(snapshot, out)
    images = [plot_objectives(snapshot, out / IMAGES[0]), plot_hyperparameters(snapshot, out / IMAGES[1]),
              plot_lineage(snapshot, out / IMAGES[2], best)]
    md, page = write_report(snapshot, out, best, [p.name for p in images])
    return Analysis(snapshot, images, md, page, best)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pbt.analyze",
        description="Plots, a report and the best member's checkpoint + hyperparameter schedule of a PBT run.")
    parser.add_argument("workspace", help="the population's pbt.workspace directory")
    parser.add_argument("--out", required=True, help="directory to write the plots, report and best/ into")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        result = analyze(Path(args.workspace), Path(args.out))
    except PbtError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {result.report}")
    print(f"html:   {result.html}")
    for image in result.images:
        print(f"plot:   {image}")
    if result.best is not None:
        print(f"best:   policy {result.best.record.policy_idx} (objective {format_value(result.best.record.objective)})"
              f" -> {result.best.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
