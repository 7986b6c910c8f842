"""``report.md`` and ``report.html`` of ``pbt.analyze``: the best member, the plots, the members table
and every lineage event that changed weights or hyperparameters."""

import datetime
import html
import re
from pathlib import Path
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Tuple

from pbt.keys import short_keys
from pbt.mutation.network import network_of
from pbt.storage import LineageEntry
from pbt.storage.local import atomic_write_bytes
from pbt.storage.reader import resolved
from pbt.tools.display import display_value
from pbt.tools.families import families, family_lines
from pbt.tools.snapshot import MemberView, Snapshot

if TYPE_CHECKING:
    from pbt.tools.export import BestExport

EVENT_COLUMNS = (
    "time",
    "policy",
    "iteration",
    "frame",
    "action",
    "donor",
    "donor iteration",
    "objective",
    "donor objective",
    "mode",
    "changes",
    "reason",
)
MEMBER_COLUMNS = ("policy", "frames", "iteration", "objective", "rank", "restarts", "replaced", "hyperparameters")
HTML_STYLE = (
    "body{font-family:sans-serif;margin:2em}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
    "th{background:#eee}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}"
    "code{background:#f4f4f4;padding:1px 4px;border-radius:3px}"
)


def lineage_events(snapshot: Snapshot) -> List[LineageEntry]:
    """Every lineage entry that changed something (startup, mutate, replace), in time order."""
    events = [e for m in snapshot.members for e in m.lineage if e.action in ("mutate", "replace")]
    return sorted(events, key=lambda e: (e.time, e.policy_idx))


def _changes(entry: LineageEntry, names: Mapping[str, str]) -> str:
    before, after = entry.params_before, entry.params_after
    diffs = [
        f"{names.get(k, k)} {display_value(before.get(k))}->{display_value(after[k])}"
        for k in sorted(after)
        if before.get(k) != after[k]
    ]
    return ", ".join(diffs) or "-"


def event_row(entry: LineageEntry, names: Mapping[str, str]) -> List[str]:
    when = datetime.datetime.fromtimestamp(entry.time).strftime("%H:%M:%S") if entry.time > 0 else "-"
    action = "startup" if entry.is_startup else entry.action
    return [
        when,
        str(entry.policy_idx),
        str(entry.iteration),
        str(entry.frame),
        action,
        display_value(entry.donor),
        display_value(entry.donor_iteration),
        display_value(entry.objective),
        display_value(entry.donor_objective),
        display_value(entry.mode),
        _changes(entry, names),
        entry.reason,
    ]


def member_row(view: MemberView, names: Mapping[str, str]) -> List[str]:
    params = view.params
    return [
        str(view.policy_idx),
        display_value(view.frame),
        display_value(view.iteration),
        display_value(view.objective),
        display_value(view.rank),
        str(view.restarts),
        str(view.replacements),
        ", ".join(f"{names.get(k, k)}={display_value(params[k])}" for k in sorted(params)),
    ]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A markdown table's lines ('|' in cells escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


INLINE = re.compile(r"`([^`]*)`|\[([^\]]*)\]\(([^)\s]*)\)")
"""The Markdown the report's own lines use: code spans and links."""


def inline_html(text: str) -> str:
    """One line of the report's Markdown as HTML: code spans and links rendered, the rest escaped."""
    out: List[str] = []
    pos = 0
    for match in INLINE.finditer(text):
        out.append(html.escape(text[pos : match.start()]))
        code, label, href = match.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        else:
            out.append(f"<a href='{html.escape(href)}'>{html.escape(label)}</a>")
        pos = match.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def lines_html(lines: Sequence[str]) -> str:
    """The report's Markdown lines as HTML: paragraphs, and "- " items as one list."""
    out: List[str] = []
    items: List[str] = []
    for line in list(lines) + [""]:
        if line.startswith("- "):
            items.append(f"<li>{inline_html(line[2:])}</li>")
            continue
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
            items = []
        if line:
            out.append(f"<p>{inline_html(line)}</p>")
    return "".join(out)


def _best_lines(best: "Optional[BestExport]") -> List[str]:
    if best is None:
        return ["No member has a known objective yet: nothing exported."]
    record, schedule = best.record, best.schedule
    ancestry = " -> ".join(f"policy {s.member}" for s in schedule.segments)
    return [
        f"Policy {record.policy_idx}, iteration {record.iteration}, frame {record.frame}, objective "
        f"{display_value(record.objective)}.",
        "",
        f"- checkpoint: [best/checkpoint.pth](best/checkpoint.pth) (sha256 `{best.checksum}`, verified)",
        f"- schedule: [best/schedule.yaml](best/schedule.yaml), {len(schedule.steps)} steps; its weights were "
        f"trained by {ancestry}" + ("" if schedule.complete else " (incomplete: " + "; ".join(schedule.notes) + ")"),
        f"- replay it: `pbt-replay {best.directory / 'schedule.yaml'} task=<task> ...`",
    ]


LINEAGE_NOTE = "Every decision that changed weights or hyperparameters (`keep` decisions are left out)."
NETWORK_COLUMNS = ["policy", "frame", "iteration", "action", "network", "parameters"]


def network_rows(snapshot: Snapshot) -> List[List[str]]:
    """Each member's network whenever it changed (``pbt/mutation=agilerl``); empty otherwise."""
    rows: List[List[str]] = []
    for view in snapshot.members:
        last = None
        for entry in view.lineage:
            network = entry.network
            if not network:
                continue
            spec = network_of(network)  # with the RNN and CNN blocks, when the record's network is valid
            shape = (
                spec.describe()
                if spec is not None
                else f"{list(network.get('units') or ())} {network.get('activation')}"
            )
            if shape != last:
                rows.append(
                    [
                        str(view.policy_idx),
                        str(entry.frame),
                        str(entry.iteration),
                        "startup" if entry.is_startup else entry.action,
                        shape,
                        display_value(network.get("parameters")),
                    ]
                )
                last = shape
    return rows


STAGE_COLUMNS = ["policy", "frame", "iteration", "stage", "mode", "reason"]


def stage_rows(snapshot: Snapshot) -> List[List[str]]:
    """Each member's curriculum stage whenever it changed (``pbt.curriculum``); empty otherwise."""
    rows: List[List[str]] = []
    for view in snapshot.members:
        last = None
        for entry in view.lineage:
            if entry.stage is None or entry.stage == last:
                continue
            mode = "startup" if entry.is_startup else display_value(entry.mode)
            rows.append(
                [str(view.policy_idx), str(entry.frame), str(entry.iteration), str(entry.stage), mode, entry.reason]
            )
            last = entry.stage
    return rows


def write_report(
    snapshot: Snapshot, out: Path, best: "Optional[BestExport]", images: Sequence[str]
) -> Tuple[Path, Path]:
    """Write ``report.md`` and ``report.html``; returns their paths."""
    keys = sorted(
        {k for m in snapshot.members for k in m.params}
        | {k for m in snapshot.members for e in m.lineage for k in e.params_after}
    )
    names = short_keys(keys)
    events = lineage_events(snapshot)
    members = [member_row(m, names) for m in snapshot.members]
    member_columns = list(MEMBER_COLUMNS)
    if any(m.stage is not None for m in snapshot.members):  # a curriculum: each member's stage now
        member_columns.insert(member_columns.index("objective"), "stage")
        members = [row[:3] + [display_value(m.stage)] + row[3:] for row, m in zip(members, snapshot.members)]
    event_rows = [event_row(e, names) for e in events]
    generated = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    title = f"PBT report: {resolved(snapshot.root)}"
    summary = (
        f"Generated {generated}: {len(snapshot.members)} members, "
        f"{sum(1 for e in events if e.action == 'replace')} replacements, "
        f"{sum(1 for e in events if e.action == 'mutate' and not e.is_startup)} mutations."
    )
    md = [f"# {title}", "", summary, "", "## Best member", "", *_best_lines(best), "", "## Plots", ""]
    for image in images:
        md += [f"![{image}]({image})", ""]
    md += [
        "## Members",
        "",
        *md_table(member_columns, members),
        "",
        "## Lineage events",
        "",
        LINEAGE_NOTE,
        "",
        *md_table(EVENT_COLUMNS, event_rows),
        "",
    ]
    family = family_lines(families(snapshot.lineages))
    if family:
        md += ["## Families", "", *family, ""]
    networks = network_rows(snapshot)
    if networks:
        md += [
            "## Networks",
            "",
            "Each member's network (hidden units, activation, parameter count) whenever it changed.",
            "",
            *md_table(NETWORK_COLUMNS, networks),
            "",
        ]
    stages = stage_rows(snapshot)
    if stages:
        md += [
            "## Curriculum stages",
            "",
            "Each member's curriculum stage whenever it changed; members are ranked only within their stage.",
            "",
            *md_table(STAGE_COLUMNS, stages),
            "",
        ]
    md_path = out / "report.md"
    atomic_write_bytes(md_path, "\n".join(md).encode("utf-8"))

    best_html = lines_html(_best_lines(best))
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(summary)}</p>",
        f"<h2>Best member</h2>{best_html}",
        "<h2>Plots</h2>" + "".join(f"<p><img src='{html.escape(i)}' alt='{html.escape(i)}'></p>" for i in images),
        f"<h2>Members</h2>{html_table(member_columns, members)}",
        f"<h2>Lineage events</h2>{lines_html([LINEAGE_NOTE])}{html_table(EVENT_COLUMNS, event_rows)}",
        f"<h2>Families</h2>{lines_html(family)}" if family else "",
        f"<h2>Networks</h2>{html_table(NETWORK_COLUMNS, networks)}" if networks else "",
        f"<h2>Curriculum stages</h2>{html_table(STAGE_COLUMNS, stages)}" if stages else "",
        "</body></html>",
    ]
    html_path = out / "report.html"
    atomic_write_bytes(html_path, "\n".join(page).encode("utf-8"))
    return md_path, html_path
