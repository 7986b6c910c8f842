"""``pbt-analyze <workspace> --out <dir>``: plots, a report and the winner's schedule.

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
  reconstructed across all its ancestors (:mod:`pbt.tools.schedule`), which ``pbt-replay``
  can follow.

Everything comes from the lineage files (one entry per PBT iteration per member, so histories are
complete even after retention deleted old records) and the members' newest records, read through
the read-only :mod:`pbt.tools.snapshot`. Safe on a workspace that is being written to (torn files
are skipped). The parts: :mod:`pbt.tools.export` (best/), :mod:`pbt.tools.plots`,
:mod:`pbt.tools.report`.
"""

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Union

from pbt.errors import PbtError, WorkspaceError
from pbt.storage.reader import workspace_location
from pbt.tools.display import display_value, printable
from pbt.tools.export import BestExport, export_best
from pbt.tools.plots import has_networks, plot_hyperparameters, plot_lineage, plot_networks, plot_objectives
from pbt.tools.report import write_report
from pbt.tools.snapshot import Snapshot, read_snapshot

log = logging.getLogger(__name__)

IMAGES = ("objective.png", "hyperparameters.png", "lineage.png")
NETWORK_IMAGE = "network.png"
"""Written when members evolve their networks (pbt/mutation=agilerl)."""


@dataclass
class Analysis:
    snapshot: Snapshot
    images: List[Path]
    report: Path
    html: Path
    best: Optional[BestExport]


def analyze(workspace: Union[Path, str], out: Path) -> Analysis:
    """Read the workspace, write plots, report and the best member's export into ``out``."""
    snapshot = read_snapshot(workspace)
    for problem in snapshot.skipped:
        log.warning("skipped: %s", problem)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot create the output directory {out}: {exc}. Pass a writable --out.") from exc
    best = export_best(snapshot, out)
    images = [
        plot_objectives(snapshot, out / IMAGES[0]),
        plot_hyperparameters(snapshot, out / IMAGES[1]),
        plot_lineage(snapshot, out / IMAGES[2], best),
    ]
    if has_networks(snapshot):
        images.append(plot_networks(snapshot, out / NETWORK_IMAGE))
    md, page = write_report(snapshot, out, best, [p.name for p in images])
    return Analysis(snapshot, images, md, page, best)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pbt-analyze",
        description="Plots, a report and the best member's checkpoint + hyperparameter schedule of a PBT run.",
    )
    parser.add_argument("workspace", help="the population's pbt.workspace directory")
    parser.add_argument("--out", required=True, help="directory to write the plots, report and best/ into")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        result = analyze(workspace_location(args.workspace), Path(args.out))
    except PbtError as exc:
        print(f"Error: {printable(exc)}", file=sys.stderr)
        return 2
    print(f"report: {result.report}")
    print(f"html:   {result.html}")
    for image in result.images:
        print(f"plot:   {image}")
    if result.best is not None:
        record = result.best.record
        print(
            f"best:   policy {record.policy_idx} (objective {display_value(record.objective)}) -> "
            f"{result.best.directory}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
