"""Network mutations vs hyperparameter mutations only, from a deliberately small network.

Reacher from ``train.params.network.mlp.units=[16]``; for each seed set, one hyperparameter sample
per member (the samples of benchmarks/ablation.py) and one seed per member, the same in both arms;
equal frames per member. Arms: ``hyperparameters`` (``pbt/mutation=default``) and ``agilerl``
(``pbt/mutation=agilerl``: architecture, parameter and activation mutations too). Both use
``pbt.initial_mutation=false`` so they start from exactly the same samples, and the default
selection strategy. Reports per arm the best and mean final objective, the final architectures
(from each member's newest record), the exploits (weight replacements) and the wall time; writes
JSON after every arm and prints a markdown table.

With ``--play_episodes K`` every member is scored the same way: its newest workspace checkpoint
(the final weights, with the record naming its architecture next to it) played by ``pbt.play`` for
K episodes with deterministic actions. Without it the score is the member's final training
objective, which a member changed in its last intervals does not have.

    python benchmarks/network_mutation.py --members 8 --seed_sets 2 --frames 600000 --play_episodes 64
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
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from ablation import final_score, member_command, replaced_members, run_members, seed_set  # noqa: E402
from ablation_curve import played_score  # noqa: E402
from pbt.storage.reader import WorkspaceReader  # noqa: E402

log = logging.getLogger("network_mutation")
ARMS = {"hyperparameters": "default", "agilerl": "agilerl"}
SMALL = "train.params.network.mlp.units=[16]"


def network_name(record: Optional[Any]) -> str:
    """A record's network as "[units] activation" ("start network (not evolved)" when it names none)."""
    network = None if record is None else record.network
    return "start network (not evolved)" if not network else f"{network.get('units')} {network.get('activation')}"


def played_scores(reader: WorkspaceReader, records: List[Optional[Any]], episodes: int, root: Path, arm: str) -> List[float]:
    """Every member's newest checkpoint played for ``episodes`` episodes (pbt.play builds the
    architecture the record next to it names; the small start network otherwise)."""
    return [played_score(None if record is None else Path(str(reader.checkpoint_path(record))), "Reacher",
                         episodes, root / f"{arm}_{i}.play.log", [SMALL]) for i, record in enumerate(records)]


def run_arm(arm: str, samples: List[Dict[str, Any]], seeds: List[int], frames: int, num_envs: int, interval: int,
            root: Path, play_episodes: int = 0) -> Dict[str, Any]:
    workspace = root / f"ws_{arm}"
    cmds = []
    for idx, (hp, seed) in enumerate(zip(samples, seeds)):
        common = [SMALL, "pbt=pbt_default", f"pbt/mutation={ARMS[arm]}", f"pbt.policy_idx={idx}",
                  f"pbt.num_policies={len(samples)}", f"pbt.workspace={workspace}", f"pbt.interval_steps={interval}",
                  f"pbt.start_after={interval}", f"pbt.ready_after={interval}", f"pbt.initial_delay={2 * interval}",
                  "pbt.initial_mutation=false"]
        cmds.append(member_command("Reacher", frames, num_envs, seed, f"{arm}_{idx}", root / arm, common, hp))
    seconds = run_members(cmds, [root / f"{arm}_{i}.log" for i in range(len(samples))])
    scores = [final_score((root / f"{arm}_{i}.log").read_text()) for i in range(len(samples))]
    reader = WorkspaceReader(workspace, len(samples))
    records = [reader.latest_record(idx) for idx in range(len(samples))]  # each member's newest (or None)
    result: Dict[str, Any] = {}
    if play_episodes > 0:
        result = {"training_scores": scores,
                  "scored_by": f"pbt.play, {play_episodes} episodes, deterministic actions"}
        scores = played_scores(reader, records, play_episodes, root, arm)
    finite = [x for x in scores if math.isfinite(x)]
    replaced = replaced_members(workspace, len(samples))
    result.update({"scores": scores, "best": max(finite) if finite else math.nan,
                   "mean": statistics.fmean(finite) if finite else math.nan, "scored": len(finite),
                   "seconds": seconds, "exploits": sum(replaced.values()),
                   "networks": [network_name(r) for r in records]})
    return result


def summarize(sets: Sequence[Dict[str, Any]]) -> List[str]:
    lines = ["| arm | seed set | best final objective | mean final objective | members scored "
             "| final architectures (count) | exploits | wall time |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for arm in ARMS:
        for entry in sets:
            result = entry["arms"].get(arm)
            if result is None:
                continue
            counts: Dict[str, int] = {}
            for network in result["networks"]:
                counts[network] = counts.get(network, 0) + 1
            networks = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
            scored = result.get("scored", sum(1 for x in result["scores"] if math.isfinite(x)))
            lines.append(f"| {arm} | {entry['seed_set']} | {result['best']:.3f} | {result['mean']:.3f} "
                         f"| {scored} / {len(result['scores'])} | {networks} "
                         f"| {result['exploits']} | {result['seconds']:.0f} s |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seed_sets", type=int, default=2)
    parser.add_argument("--frames", type=int, default=600_000)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--interval", type=int, default=50_000)
    parser.add_argument("--play_episodes", type=int, default=0,
                        help="score every member by playing its final policy for this many episodes (deterministic "
                             "actions) instead of its final training objective")
    parser.add_argument("--out", default="benchmarks/results/network_mutation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    meta: Dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version(), "args": vars(args),
                            "command": " ".join(["python", "benchmarks/network_mutation.py"] + sys.argv[1:]),
                            "sets": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for s in range(args.seed_sets):
        samples, seeds = seed_set(s, args.members)
        entry: Dict[str, Any] = {"seed_set": s, "samples": samples, "seeds": seeds, "arms": {}}
        meta["sets"].append(entry)
        with tempfile.TemporaryDirectory() as tmp:
            for arm in ARMS:
                result = run_arm(arm, samples, seeds, args.frames, args.num_envs, args.interval, Path(tmp),
                                 args.play_episodes)
                entry["arms"][arm] = result
                log.info("seed set %d %s: best %.3f mean %.3f exploits %d (%.0f s) %s %s", s, arm, result["best"],
                         result["mean"], result["exploits"], result["seconds"], [round(x, 3) for x in result["scores"]],
                         result["networks"])
                out.write_text(json.dumps(meta, indent=2))
    meta["table"] = summarize(meta["sets"])
    out.write_text(json.dumps(meta, indent=2))
    print("\n".join(meta["table"]))


if __name__ == "__main__":
    main()
