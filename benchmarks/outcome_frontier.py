"""Is a 10% gain over the best independent run there to be had? Every played policy at one budget.

The outcome goal asks PBT's best member for ``random + 1.10 x (best - random)``, where ``best`` is
the no-PBT arm's best member of a seed set and ``random`` the untrained policy's score. This script
gathers every final policy played at the same task and budget in the given ablation results (every
arm, every seed set, every member) and setting sweeps, and reports per seed set of ``--target`` how
many reached that score, and which (up to ``--list``): where only a few policies ever did, the goal
asks for those runs' sample, setting and seed, not for a better selection among the others.

    python benchmarks/outcome_frontier.py --target benchmarks/results/ablation_outcome_600k_envs256.json \
        --results benchmarks/results/ablation_outcome_600k*.json benchmarks/results/setting_sweep_600k*.json
"""

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablation_curve import NO_PBT  # noqa: E402  (beside this script; the ablation's arm name)

log = logging.getLogger("outcome_frontier")
GAIN = 1.10

Policy = Tuple[float, str, str]
"""(played score, where it came from, what was trained: the same run in two results has one identity)."""


def policies(result: Dict[str, Any], name: str, num_envs: Any) -> List[Policy]:
    """Every played final policy of one result: an ablation's members of every arm and seed set (its
    no-PBT arm only when it trained it, not when it was copied ``--no_pbt_from`` another), or a
    setting sweep's variants (``num_envs``: its source ablation's). A no-PBT member is its sample,
    seed and env count (trained again by a larger population from the same samples, it is the same
    run), a sweep's variant also its overrides; a PBT member is only itself."""
    if "sets" in result:
        copied = NO_PBT if result.get("no_pbt_from") else None
        found: List[Policy] = []
        for s in result["sets"]:
            for arm, scored in s["arms"].items():
                for i, score in enumerate(scored.get("scores", []) if arm != copied else []):
                    where = f"{name} set {s['seed_set']} {arm} member {i}"
                    run = [s["samples"][i], s["seeds"][i], num_envs, sorted(result["args"].get("train_args") or [])]
                    found.append((float(score), where, json.dumps(run) if arm == NO_PBT else where))
        return found
    # A sweep's unchanged variant is its source's no-PBT run of that member again (the same identity).
    return [
        (
            float(v["score"]),
            f"{name} {v['name']}",
            json.dumps([result["sample"], result["seed"], num_envs, sorted(v["overrides"])]),
        )
        for v in result.get("variants", [])
    ]


def task_args(result: Dict[str, Any]) -> List[str]:
    """The task overrides every member of an ablation trained with (a task variant, not a setting)."""
    return sorted(a for a in result["args"].get("train_args") or [] if a.startswith("task."))


def source_of(sweep: Dict[str, Any]) -> Optional[Path]:
    """The ablation a setting sweep took its member from (its ``--from``), when it is at hand."""
    words = str(sweep.get("command", "")).split()
    source = Path(words[words.index("--from") + 1]) if "--from" in words[:-1] else None
    return source if source is not None and source.is_file() else None


def same_budget(ablation: Dict[str, Any], target: Dict[str, Any]) -> bool:
    """The same task (variant) trained for the same frames and played for as many episodes."""
    keys = ("task", "frames", "play_episodes")
    return all(ablation["args"].get(k) == target["args"].get(k) for k in keys) and task_args(ablation) == task_args(
        target
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="the ablation result whose goal is asked about")
    parser.add_argument("--results", nargs="+", required=True, help="ablation results and setting sweeps")
    parser.add_argument("--gain", type=float, default=GAIN, help="the goal's ratio over (best - random)")
    parser.add_argument("--list", type=int, default=5, help="name the policies that reached a goal when so few did")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    target = json.loads(Path(args.target).read_text())
    random_score = float(target.get("random_score", 0.0))
    pool: List[Policy] = []
    for path in sorted(set(args.results)):
        result = json.loads(Path(path).read_text())
        ablation = result
        if "sets" not in result:  # a setting sweep: trained as the ablation it came from
            source = source_of(result)
            if source is None:
                log.info("skipped %s: its source ablation (--from) is not at hand", path)
                continue
            ablation = json.loads(source.read_text())
            # A sweep with --frames trained to fewer frames than its source: another budget.
            ablation["args"]["frames"] = result.get("frames", ablation["args"]["frames"])
        if same_budget(ablation, target):
            pool += policies(result, Path(path).name, ablation["args"].get("num_envs"))
        else:
            log.info("skipped %s: another task, budget or scoring", path)
    pool = list({identity: (score, where, identity) for score, where, identity in reversed(pool)}.values())
    if not pool:
        raise SystemExit("no played policy at the target's budget: give ablation results or setting sweeps")
    pool.sort(reverse=True)
    lines = [f"{len(pool)} played policies at {target['args']['frames']} frames; the best five:"]
    lines += [f"  {score:.3f}  {where}" for score, where, _ in pool[:5]]
    lines += [
        "",
        f"| seed set | no-PBT best | goal (x{args.gain:.2f} over random {random_score:.3f}) | policies at or above it | which |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    for s in target["sets"]:
        best = max(s["arms"][NO_PBT]["scores"])
        goal = random_score + args.gain * (best - random_score)
        reached = [(score, where) for score, where, _ in pool if score >= goal]
        named = "; ".join(f"{where}: {score:.3f}" for score, where in reached) if len(reached) <= args.list else ""
        lines.append(f"| {s['seed_set']} | {best:.3f} | {goal:.3f} | {len(reached)} of {len(pool)} | {named} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
