"""PBT across a curriculum: no PBT vs PBT keeping hyperparameters across stages (continue) vs PBT
redrawing them on entering a stage (reset), on the 3-stage Reacher curriculum
(``pbt/curriculum=reacher_goal``: goal radius 8 cm -> 5 cm -> 3 cm).

Per seed set, every arm starts from the same hyperparameter samples and seeds (benchmarks/ablation.py's
seed sets, ``pbt.initial_mutation=false``) and trains each member for the same frames through the
same curriculum. No PBT is the same population with selection switched off (``pbt.start_after``
beyond the run: members publish and move through the stages, nobody exploits), so only PBT differs.
Every arm gets ``pbt/search_space=reacher_ppo`` (the ranges the samples come from): reset
redraws from it; mutations stay inside it. Every member is scored on the final stage (the task's own 3 cm goal) by playing its final policy
(``pbt.play``, deterministic actions). Writes JSON after every arm and prints a markdown table.

    python benchmarks/curriculum.py --members 4 --seed_sets 3 --frames 1200000
"""

import argparse
import json
import logging
import math
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from ablation import member_command, replaced_members, run_members, seed_set  # noqa: E402
from ablation_curve import final_checkpoint, member_run_dir, played_score  # noqa: E402

log = logging.getLogger("curriculum")
ARMS = ("no_pbt", "continue", "reset")
CURRICULUM = "reacher_goal"


def stages_reached(workspace: Path, members: int) -> List[int]:
    """Each member's final curriculum stage (from its lineage; -1 when unknown)."""
    from pbt.storage.reader import WorkspaceReader

    reader = WorkspaceReader(workspace, members)
    out = []
    for idx in range(members):
        stages = [e.stage for e in reader.read_lineage(idx) if e.stage is not None]
        out.append(stages[-1] if stages else -1)
    return out


def run_arm(arm: str, samples: List[Dict[str, Any]], seeds: List[int], args: argparse.Namespace, root: Path) -> Dict[str, Any]:
    interval = args.interval
    workspace = root / f"ws_{arm}"
    start_after = 10 * args.frames if arm == "no_pbt" else interval
    cmds = []
    for idx, (hp, seed) in enumerate(zip(samples, seeds)):
        pbt = ["pbt=pbt_default", f"pbt/curriculum={CURRICULUM}",
               f"pbt.curriculum_mode={'reset' if arm == 'reset' else 'continue'}", f"pbt.policy_idx={idx}",
               f"pbt.num_policies={len(samples)}", f"pbt.workspace={workspace}", f"pbt.interval_steps={interval}",
               f"pbt.start_after={start_after}", f"pbt.ready_after={interval}", f"pbt.initial_delay={2 * interval}",
               "pbt.initial_mutation=false", f"pbt/search_space={args.search_space}"]
        cmds.append(member_command("Reacher", args.frames, args.num_envs, seed, f"{arm}_{idx}", root / arm, pbt, hp)
                    + list(args.pbt_args))
    seconds = run_members(cmds, [root / f"{arm}_{i}.log" for i in range(len(samples))])
    scores = [played_score(final_checkpoint(member_run_dir(root / arm, f"{arm}_{i}")), "Reacher",
                           args.play_episodes, root / f"{arm}_{i}.play.log") for i in range(len(samples))]
    replaced = replaced_members(workspace, len(samples))
    finite = [x for x in scores if math.isfinite(x)]
    return {"scores": scores, "best": max(finite) if finite else math.nan,
            "mean": statistics.fmean(finite) if finite else math.nan, "seconds": seconds,
            "exploits": sum(replaced.values()), "stages": stages_reached(workspace, len(samples))}


def summarize(sets: Sequence[Dict[str, Any]]) -> List[str]:
    lines = ["| arm | best (mean +- sd over seed sets) | mean | mean / no-PBT | exploits per run | final stage reached "
             "| wall time per run |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm in ARMS:
        done = [s for s in sets if arm in s["arms"]]
        if not done:
            continue
        best = [s["arms"][arm]["best"] for s in done]
        mean = [s["arms"][arm]["mean"] for s in done]
        ratio = [s["arms"][arm]["mean"] / s["arms"]["no_pbt"]["mean"] for s in done
                 if "no_pbt" in s["arms"] and s["arms"]["no_pbt"]["mean"]]

        def spread(values: List[float]) -> str:
            finite = [v for v in values if math.isfinite(v)]
            return f"{statistics.fmean(finite):.3f} +- {statistics.pstdev(finite):.3f}" if finite else "n/a"

        reached = [sum(1 for x in s["arms"][arm]["stages"] if x == 2) for s in done]
        lines.append(f"| {arm} | {spread(best)} | {spread(mean)} | {spread(ratio)} "
                     f"| {' / '.join(str(s['arms'][arm]['exploits']) for s in done)} "
                     f"| {' / '.join(str(r) + '/' + str(len(s['arms'][arm]['stages'])) for r, s in zip(reached, done))} "
                     f"| {statistics.fmean(s['arms'][arm]['seconds'] for s in done):.0f} s |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--seed_sets", type=int, default=3)
    parser.add_argument("--frames", type=int, default=1_200_000)
    parser.add_argument("--interval", type=int, default=100_000)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--play_episodes", type=int, default=64)
    parser.add_argument("--search_space", default="reacher_ppo",
                        help="every arm's pbt/search_space (the ranges of the seed sets' samples): what reset redraws from")
    parser.add_argument("--pbt_args", nargs="*", default=[], help="extra overrides for every arm")
    parser.add_argument("--out", default="benchmarks/results/curriculum.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    meta: Dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version(), "args": vars(args),
                            "command": " ".join(["python", "benchmarks/curriculum.py"] + sys.argv[1:]), "sets": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for s in range(args.seed_sets):
        samples, seeds = seed_set(s, args.members)
        entry: Dict[str, Any] = {"seed_set": s, "samples": samples, "seeds": seeds, "arms": {}}
        meta["sets"].append(entry)
        with tempfile.TemporaryDirectory() as tmp:
            for arm in ARMS:
                with open("/proc/loadavg") as f:
                    load = float(f.read().split()[0])
                result = run_arm(arm, samples, seeds, args, Path(tmp))
                result["load_before"] = load
                entry["arms"][arm] = result
                log.info("seed set %d %s: best %.3f mean %.3f exploits %d stages %s (%.0f s, load %.1f) %s", s, arm,
                         result["best"], result["mean"], result["exploits"], result["stages"], result["seconds"],
                         load, [round(x, 3) for x in result["scores"]])
                out.write_text(json.dumps(meta, indent=2))
    meta["table"] = summarize(meta["sets"])
    out.write_text(json.dumps(meta, indent=2))
    print("\n".join(meta["table"]))


if __name__ == "__main__":
    main()
