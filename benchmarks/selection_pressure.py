"""Which way PBT's selection pushes each hyperparameter, read from kept lineage
(``benchmarks/ablation.py --keep_dir``): for every copy whose explore step moved a key down or up from
its donor's value, the share of the population the copy beat at its next decision with a known
objective (by the objective every member ranked by there; peers without one at that iteration are
not counted). Under an unbiased ranking both directions beat about half. A direction
that beats clearly more is what short-horizon selection favours, whether or not it helps later: on
Reacher's 2 cm disc, copies that lowered PPO's clip beat more of their peers one epoch later, while
continuations of the winning founder with a lower clip did no better 30% of the budget later
(docs/benchmarks/outcome.md).

    python benchmarks/selection_pressure.py --keep_dir /tmp/bench/keep_a /tmp/bench/keep_b

Every seed set under every ``--keep_dir`` is pooled; a copy with no later decision with an objective,
or whose peers have none there, is left out and counted.
"""

import argparse
import logging
import math
import statistics
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

from lineage_summary import read_lineages

from pbt.storage.lineage import LineageEntry

log = logging.getLogger("selection_pressure")

DIRECTIONS = ("down", "up")


def copies_with_next_rank(lineages: Dict[int, List[LineageEntry]]) -> Iterator[Tuple[Dict[str, str], float]]:
    """(each moved key's direction against the donor's value, share of the peers with a known objective
    that the copy beat at its next decision with one) for every copy that has both; the count of copies
    left out is logged."""
    at = {idx: {e.iteration: e for e in entries} for idx, entries in lineages.items()}
    left_out = 0
    for idx, entries in lineages.items():
        for entry in entries:
            if entry.action != "replace" or entry.donor is None or entry.donor_iteration is None:
                continue
            donor = at.get(entry.donor, {}).get(entry.donor_iteration)
            nxt = next((e for e in entries if e.iteration > entry.iteration and e.objective is not None), None)
            if donor is None or nxt is None:
                left_out += 1
                continue
            peers = [at[p].get(nxt.iteration) for p in at if p != idx]
            objectives = [p.objective for p in peers if p is not None and p.objective is not None]
            if not objectives or not math.isfinite(nxt.objective):  # type: ignore[arg-type]
                left_out += 1
                continue
            beaten = sum(nxt.objective > o for o in objectives) / len(objectives)  # type: ignore[operator]
            moved = {}
            for key, value in entry.params_after.items():
                before = donor.params_after.get(key)
                if isinstance(value, (int, float)) and isinstance(before, (int, float)) and value != before:
                    moved[key] = "down" if value < before else "up"
            yield moved, beaten
    if left_out:
        log.info("copies left out: %d (no donor entry, no later scored decision, or no scored peer there)", left_out)


def pressure_table(arm_dirs: List[Path]) -> List[str]:
    shares: Dict[str, Dict[str, List[float]]] = {}
    copies = 0
    for arm_dir in arm_dirs:
        for moved, beaten in copies_with_next_rank(read_lineages(arm_dir)):
            copies += 1
            for key, direction in moved.items():
                shares.setdefault(key, {d: [] for d in DIRECTIONS})[direction].append(beaten)
    rows = [
        f"{copies} copies from {len(arm_dirs)} seed-set runs",
        "| key | moved down: copies, share of peers beaten next | moved up: copies, share beaten | down - up (SE) |",
        "| --- | --- | --- | --- |",
    ]
    for key in sorted(shares):
        down, up = shares[key]["down"], shares[key]["up"]
        if len(down) < 2 or len(up) < 2:
            continue
        se = math.sqrt(statistics.variance(down) / len(down) + statistics.variance(up) / len(up))
        diff = statistics.fmean(down) - statistics.fmean(up)
        rows.append(
            f"| {key.rsplit('.', 1)[-1]} | {len(down)}, {statistics.fmean(down):.2f} | {len(up)}, "
            f"{statistics.fmean(up):.2f} | {diff:+.2f} ({se:.2f}) |"
        )
    return rows


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep_dir", nargs="+", type=Path, required=True, help="ablation --keep_dir folders")
    parser.add_argument("--arm", default="threshold", help="the PBT arm (its --strategies name)")
    args = parser.parse_args()
    arm_dirs = sorted(d for keep in args.keep_dir for d in keep.glob(f"set*/{args.arm}") if d.is_dir())
    if not arm_dirs:
        parser.error(
            f"no set*/{args.arm} folder under {[str(k) for k in args.keep_dir]}: give ablation --keep_dir folders"
        )
    for row in pressure_table(arm_dirs):
        log.info("%s", row)


if __name__ == "__main__":
    main()
