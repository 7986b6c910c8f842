"""The three PNG plots of ``pbt.analyze``: objective, hyperparameters and lineage over frames.

matplotlib is imported when a plot is drawn (Agg backend: no display needed), so importing this
module costs nothing.
"""

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from pbt.errors import PbtError
from pbt.keys import short_keys
from pbt.storage import LineageEntry
from pbt.storage.bounds import is_sample
from pbt.tools.display import display_value
from pbt.tools.schedule import frame_at_iteration
from pbt.tools.snapshot import MemberView, Snapshot

if TYPE_CHECKING:
    from pbt.tools.export import BestExport


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PbtError(
            "pbt.analyze needs matplotlib, which is not installed: pip install matplotlib "
            '(a dependency of this project: pip install -e ".")'
        ) from None
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


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


def _or_nan(value: Optional[float]) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def objective_points(view: MemberView) -> List[Tuple[int, float]]:
    """(frame, objective) of a member's lineage and newest record, NaN where the objective was
    unknown or not finite: matplotlib leaves a gap there instead of a straight line across."""
    points = [(e.frame, _or_nan(e.objective)) for e in view.lineage]
    record = view.record
    if record is not None and (not points or record.frame > points[-1][0]):
        points.append((record.frame, _or_nan(record.objective) if record.has_objective else math.nan))
    while points and math.isnan(points[-1][1]):  # a trailing gap draws nothing
        points.pop()
    return points


def _last_frame(view: MemberView) -> int:
    return max([e.frame for e in view.lineage] + [view.record.frame if view.record else 0])


def _finish(fig: Any, plt: Any, path: Path, **layout: Any) -> Path:
    fig.tight_layout(**layout)
    fig.savefig(str(path))
    plt.close(fig)
    return path


def plot_objectives(snapshot: Snapshot, path: Path) -> Path:
    plt = _pyplot()
    count = len(snapshot.members)
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=100)
    for view in snapshot.members:
        color = _color(view.policy_idx, count)
        points = objective_points(view)
        if any(not math.isnan(p[1]) for p in points):
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                "-o",
                color=color,
                markersize=3,
                lw=1.6,
                label=f"policy {view.policy_idx}",
            )
        by_frame = dict(points)
        for entry in view.lineage:
            if not entry.is_exploit:
                continue
            y = entry.objective if entry.objective is not None else by_frame.get(entry.frame)
            if not _finite(y):
                continue
            if entry.action == "replace":
                ax.plot(entry.frame, y, marker="v", markersize=11, color=color, markeredgecolor="black", zorder=5)
                ax.annotate(
                    f"<-{entry.donor}",
                    (entry.frame, y),
                    textcoords="offset points",
                    xytext=(7, 4),
                    fontsize=8,
                    color="black",
                )
            else:
                ax.plot(entry.frame, y, marker="x", markersize=8, color="black", mew=1.5, zorder=5)
    ax.plot([], [], "v", color="grey", markeredgecolor="black", markersize=9, label="replace (took donor's weights)")
    ax.plot([], [], "x", color="black", label="mutate (new hyperparameters)")
    _member_axes(ax, "objective", "Objective per member", count)
    return _finish(fig, plt, path)


def _member_axes(ax: Any, ylabel: str, title: str, count: int) -> None:
    """Frames on x, one legend entry per member."""
    _frames_axis(ax)
    ax.set_xlabel("frames (each member's own count)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", ncol=2 if count > 6 else 1)


def has_networks(snapshot: Snapshot) -> bool:
    """True when members evolve their networks (their lineage entries carry a parameter count)."""
    return any(e.network and e.network.get("parameters") for m in snapshot.members for e in m.lineage)


def plot_networks(snapshot: Snapshot, path: Path) -> Path:
    """Each member's parameter count over its frames, labelled with its final architecture."""
    plt = _pyplot()
    count = len(snapshot.members)
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=100)
    for view in snapshot.members:
        points = [(e.frame, e.network) for e in view.lineage if e.network and e.network.get("parameters")]
        if not points:
            continue
        final = points[-1][1]
        ax.step(
            [p[0] for p in points],
            [p[1]["parameters"] for p in points],
            where="post",
            lw=1.6,
            color=_color(view.policy_idx, count),
            label=f"policy {view.policy_idx}: {final.get('units')} {final.get('activation')}",
        )
    _member_axes(ax, "network parameters", "Network size per member (final architecture in the legend)", count)
    return _finish(fig, plt, path)


def _numeric(value: Any) -> bool:
    """A value a plot can draw: finite, within MAX_ABS_VALUE (a planted 1e308 breaks the axes)."""
    return is_sample(value)


def _param_steps(view: MemberView, key: str) -> List[Tuple[int, float]]:
    """(frame, value) at the start and at every change of a member's hyperparameter."""
    points: List[Tuple[int, float]] = []
    for entry in view.lineage:
        if entry.is_startup or not points:
            value: Any = (entry.params_after if entry.is_startup else entry.params_before).get(key)
            if _numeric(value):
                points.append((0 if entry.is_startup else entry.frame, float(value)))
            if entry.is_startup:
                continue
        if entry.is_exploit:
            value = entry.params_after.get(key)
            if _numeric(value):
                points.append((entry.frame, float(value)))
    if points:
        points.append((max(_last_frame(view), points[-1][0]), points[-1][1]))
    return points


def plot_hyperparameters(snapshot: Snapshot, path: Path) -> Path:
    """One panel per hyperparameter that differed between members or changed over time (the
    others are listed at the bottom); members drawn with decreasing line widths so that equal
    values stay visible."""
    plt = _pyplot()
    all_keys = sorted({k for m in snapshot.members for e in m.lineage for k in e.params_after})
    names = short_keys(all_keys)
    series = {key: {m.policy_idx: _param_steps(m, key) for m in snapshot.members} for key in all_keys}
    keys: List[str] = []
    constant: List[str] = []
    for key in all_keys:
        values = {p[1] for points in series[key].values() for p in points}
        (keys if len(values) > 1 else constant).append(key)
    count = len(snapshot.members)
    cols = 3 if len(keys) > 4 else max(1, len(keys))
    rows = max(1, math.ceil(len(keys) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.4 * rows + 1.0), dpi=90, squeeze=False)
    for i, key in enumerate(keys):
        ax = axes[i // cols][i % cols]
        drawn: List[float] = []
        for order, view in enumerate(snapshot.members):
            points = series[key][view.policy_idx]
            if not points:
                continue
            drawn += [p[1] for p in points]
            width = 1.2 + 3.0 * (count - 1 - order) / max(1, count - 1)
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                drawstyle="steps-post",
                color=_color(view.policy_idx, count),
                lw=width,
                alpha=0.9,
                label=f"policy {view.policy_idx}",
            )
        if drawn and min(drawn) > 0 and max(drawn) / min(drawn) >= 3:
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
        axes[0][0].text(
            0.5,
            0.5,
            "no hyperparameter differs between members or over time",
            ha="center",
            va="center",
            transform=axes[0][0].transAxes,
        )
    fig.suptitle("Hyperparameters over frames", x=0.01, ha="left")
    footer = "frames (each member's own count)"
    if constant:
        same = ", ".join(
            f"{names[k]}={display_value(next((p[1] for pts in series[k].values() for p in pts), None))}"
            for k in constant
        )
        footer += f"\nthe same for all members throughout: {same}"
    fig.supxlabel(footer, fontsize=9)
    return _finish(fig, plt, path, rect=(0, 0, 1, 0.97))


def _replace_arrow(
    ax: Any, lineages: Dict[int, List[LineageEntry]], view: MemberView, entry: LineageEntry, count: int
) -> None:
    """An arrow from the donor's lane (at the frame of the checkpoint it gave) to the receiver's."""
    donor = -1 if entry.donor is None else entry.donor
    donor_iteration = -1 if entry.donor_iteration is None else entry.donor_iteration
    donor_frame = frame_at_iteration(lineages.get(donor, []), donor_iteration)
    ax.annotate(
        "",
        xy=(entry.frame, view.policy_idx),
        xytext=(entry.frame if donor_frame is None else donor_frame, donor),
        arrowprops=dict(arrowstyle="-|>", color=_color(donor, count), lw=1.8, shrinkA=3, shrinkB=3),
        zorder=4,
    )


def plot_lineage(snapshot: Snapshot, path: Path, best: "Optional[BestExport]" = None) -> Path:
    plt = _pyplot()
    count = len(snapshot.members)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.55 * max(count, 3)), dpi=100)
    if best is not None:
        for segment in best.schedule.segments:
            ax.plot(
                [segment.member_from_frame, segment.member_to_frame],
                [segment.member, segment.member],
                color="gold",
                lw=9,
                alpha=0.6,
                solid_capstyle="butt",
                zorder=1,
            )
        ax.plot([], [], color="gold", lw=8, alpha=0.6, label=f"ancestry of the best (policy {best.record.policy_idx})")
    for view in snapshot.members:
        color = _color(view.policy_idx, count)
        ax.plot([0, _last_frame(view)], [view.policy_idx, view.policy_idx], color=color, lw=2.2, zorder=2)
        mutations = [e.frame for e in view.lineage if e.is_exploit and e.action == "mutate"]
        if mutations:
            ax.plot(mutations, [view.policy_idx] * len(mutations), "|", color="black", markersize=12, mew=1.5, zorder=3)
        if view.record is not None and view.rank is not None:
            ax.annotate(
                f" {display_value(view.objective)} (#{view.rank})",
                (_last_frame(view), view.policy_idx),
                fontsize=8,
                va="center",
            )
    lineages = snapshot.lineages
    for view in snapshot.members:
        for entry in view.lineage:
            if entry.action == "replace" and not entry.is_startup:
                _replace_arrow(ax, lineages, view, entry, count)
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
    return _finish(fig, plt, path)
