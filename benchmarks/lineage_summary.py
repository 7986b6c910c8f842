"""What PBT did in an ablation's kept lineage (``benchmarks/ablation.py --keep_dir``), per seed set:
how many copies and in-place mutations, how many leads failed the significance test, when the member
of the best independent run first lost its weights, since when one family held the population, and
the members' mean final ranked objective over their mean played score. That ratio mixes two things:
selection keeping the members whose last measurements were lucky, and the played draw reading the
policies high or low (on Reacher's 2 cm disc one draw of 64 episodes read policies up to 24x low;
``benchmarks/play_noise.py`` measures that), so compare it only between arms played on many episodes.

    python benchmarks/lineage_summary.py --result benchmarks/results/<out>.json --keep_dir /tmp/bench/<arm>

The best independent run is read from the result's no-PBT arm (its played final scores); families
follow ``pbt-analyze``'s rule (:mod:`pbt.tools.families`).
"""

import argparse
import json
import logging
import math
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from pbt.storage.lineage import LineageEntry, parse_lineage
from pbt.tools.families import families

log = logging.getLogger("lineage_summary")


def read_lineages(arm_dir: Path) -> Dict[int, List[LineageEntry]]:
    out = {}
    for path in sorted(arm_dir.glob("lineage_*.jsonl")):
        idx = int(path.stem.split("_")[1])
        out[idx] = parse_lineage(path.read_bytes(), str(path))
    return out


def first_replace(entries: List[LineageEntry]) -> Optional[int]:
    return next((e.frame for e in entries if e.action == "replace"), None)


def optimism(arm: Dict[str, Any]) -> str:
    """The members' mean final ranked objective over their mean played score ("n/a" without both)."""
    ranked = [x for x in arm.get("training_scores", []) if x is not None and math.isfinite(x)]
    played = [x for x in arm.get("scores", []) if x is not None and math.isfinite(x)]
    if not ranked or not played or statistics.fmean(played) <= 0:
        return "n/a"
    return f"{statistics.fmean(ranked) / statistics.fmean(played):.2f}"


def summary(result: Dict[str, Any], keep_dir: Path, arm: str) -> List[str]:
    rows = [
        "| seed set | copies | in-place mutations | leads not significant | best run's member: first replaced at | "
        "one family from | winning family | ranked / played |",
        "| ---: | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for entry in result["sets"]:
        s = entry["seed_set"]
        arm_dir = keep_dir / f"set{s}" / arm
        if not arm_dir.is_dir():
            log.warning("no kept lineage for seed set %s in %s", s, arm_dir)
            continue
        lineages = read_lineages(arm_dir)
        events = [e for entries in lineages.values() for e in entries]
        alone = entry["arms"]["no_pbt"]["scores"]
        best_member = max(range(len(alone)), key=lambda i: alone[i])
        found = families(lineages)
        scores = entry["arms"][arm]["scores"]
        winner = max(range(len(scores)), key=lambda i: scores[i])
        replaced = first_replace(list(lineages.get(best_member, [])))
        one = found.one_since
        rows.append(
            f"| {s} | {sum(e.action == 'replace' for e in events)} | {sum(e.action == 'mutate' and e.frame > 0 for e in events)} "
            f"| {sum('lead not significant' in e.reason for e in events)} "
            f"| member {best_member}: {'never' if replaced is None else f'{replaced:,}'} "
            f"| {'never' if one is None else f'{one.frame:,} ({one.policy_idx} took {one.donor})'} "
            f"| member {found.of.get(winner)}'s ({found.members().get(found.of.get(winner), [])}) "
            f"| {optimism(entry['arms'][arm])} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--result", required=True, type=Path, help="the ablation's --out JSON")
    parser.add_argument("--keep_dir", required=True, type=Path, help="the ablation's --keep_dir")
    parser.add_argument("--arm", default="threshold", help="the PBT arm (its --strategies name)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = json.loads(args.result.read_text())
    for row in summary(result, args.keep_dir, args.arm):
        log.info(row)


if __name__ == "__main__":
    main()
