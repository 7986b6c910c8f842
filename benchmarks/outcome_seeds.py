"""How much of an outcome ratio is the seeds' luck? One ablation's samples on several draws of seeds.

The outcome goal compares PBT's best member with the best of the independent runs of the same
samples and seeds. Where single runs take off on some seeds and not on others, that best is one
draw. Given results of ``benchmarks/ablation.py`` from the same samples trained from other seeds
(``--reseed``), this script reports per seed set and draw the no-PBT best, each PBT run's best and
their ratio over the random policy, and where the no-PBT arm ran with ``--curve`` the best independent
run's rank at the first quarter of the budget (1: it led there, so PBT's first decisions favour its
family); per seed set the expected best of the independent runs when each member's seed is any of
those tried (every combination equally likely), beside PBT's mean best; and how often the goal was
met where the best independent run led at the first quarter and where it did not.

    python benchmarks/outcome_seeds.py --results benchmarks/results/ablation_outcome_600k_envs256_effect.json \
        benchmarks/results/ablation_reseed1_600k_envs256.json benchmarks/results/ablation_reseed2_600k_envs256.json
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablation_curve import NO_PBT, ratio  # noqa: E402  (beside this script: the ablation's arm name, its ratio)

GAIN = 1.10
SAME = ("task", "frames", "num_envs", "search_space", "train_args", "play_episodes", "members")
"""What every result must share to be the same comparison on other seeds."""


def expected_best(scores_per_member: Sequence[Sequence[float]]) -> float:
    """E[max over members], each member's score drawn uniformly from its own list (its seeds)."""
    values = sorted({v for scores in scores_per_member for v in scores})
    expected, below = 0.0, 0.0
    for v in values:
        at_most = 1.0
        for scores in scores_per_member:
            at_most *= sum(1 for x in scores if x <= v) / len(scores)
        expected += v * (at_most - below)
        below = at_most
    return expected


def over(value: float, reference: float, offset: float) -> float:
    """A ratio over the random policy's score (``offset``) taken off both."""
    return ratio(value - offset, reference - offset)


def gather(results: Sequence[Tuple[str, Dict[str, Any]]], arm: str) -> Dict[int, Dict[str, Any]]:
    """seed set -> its samples, each member's no-PBT scores by seed, and the PBT arm's bests by draw."""
    first_name, first = results[0]
    # The PBT arm's settings: the first result that ran it (a no-PBT-only result has none to compare).
    with_arm = [result for _, result in results if arm in result["args"].get("strategies", [])]
    pbt_args = with_arm[0]["args"].get("pbt_args") if with_arm else None
    sets: Dict[int, Dict[str, Any]] = {}
    for name, result in results:
        differ = [k for k in SAME if result["args"].get(k) != first["args"].get(k)]
        if arm in result["args"].get("strategies", []) and result["args"].get("pbt_args") != pbt_args:
            differ.append("pbt_args")
        if differ:
            raise SystemExit(f"{name} differs from {first_name} in {differ}: give results of one comparison")
        for entry in result["sets"]:
            s = sets.setdefault(
                entry["seed_set"], {"samples": entry["samples"], "no_pbt": {}, "pbt": {}, "first_quarter": {}}
            )
            if entry["samples"] != s["samples"]:
                raise SystemExit(f"{name} seed set {entry['seed_set']} has other samples than {first_name}")
            draw = tuple(entry["seeds"])
            if NO_PBT in entry["arms"]:
                scores = entry["arms"][NO_PBT]["scores"]
                if not all(math.isfinite(x) for x in scores):
                    raise SystemExit(f"{name} seed set {entry['seed_set']}: a no-PBT member has no score {scores}")
                s["no_pbt"][draw] = scores
                curve = entry["arms"][NO_PBT].get("curve")
                if curve:
                    s["first_quarter"][draw] = curve["scores"][0]
            if arm in entry["arms"]:
                s["pbt"].setdefault(draw, []).append(entry["arms"][arm]["best"])
    return sets


def rank_at_first_quarter(final: Sequence[float], first_quarter: Sequence[float]) -> int:
    """The best final member's rank among the members' scores at the first quarter (1: it led)."""
    best = max(range(len(final)), key=lambda i: final[i])
    return 1 + sum(1 for score in first_quarter if score > first_quarter[best])


def tables(sets: Dict[int, Dict[str, Any]], offset: float, gain: float) -> List[str]:
    lines = [
        "| seed set | seeds | no-PBT best | its rank at 25% | PBT best (each run) | best ratio over random (each run) "
        "| goal met |",
        "| ---: | --- | ---: | ---: | --- | --- | --- |",
    ]
    met: Dict[bool, List[bool]] = {True: [], False: []}  # led at the first quarter -> goal met, per PBT run
    for index, s in sorted(sets.items()):
        for draw, scores in s["no_pbt"].items():
            bests = s["pbt"].get(draw, [])
            ratios = [over(b, max(scores), offset) for b in bests]
            quarter = s["first_quarter"].get(draw)
            rank = rank_at_first_quarter(scores, quarter) if quarter else None
            if rank is not None:
                met[rank == 1] += [r >= gain for r in ratios]
            lines.append(
                f"| {index} | {draw[0]}-{draw[-1]} | {max(scores):.3f} | {rank if rank else '-'} "
                f"| {' / '.join(f'{b:.3f}' for b in bests)} "
                f"| {' / '.join(f'x{r:.3f}' for r in ratios)} | {' / '.join('yes' if r >= gain else 'no' for r in ratios)} |"
            )
    summary = [
        f"Where the best independent run {'led' if led else 'did not lead'} at 25% of the budget: "
        f"goal met in {sum(runs)} of {len(runs)} PBT runs."
        for led, runs in met.items()
        if runs
    ]
    lines += [""] + summary if summary else []
    lines += [
        "",
        "| seed set | draws | expected best of the independent runs | PBT best, mean over draws (min-max) | ratio over random |",
        "| ---: | ---: | ---: | --- | ---: |",
    ]
    for index, s in sorted(sets.items()):
        by_member = [list(member) for member in zip(*s["no_pbt"].values())]
        expected = expected_best(by_member)
        bests = [b for runs in s["pbt"].values() for b in runs]
        if not bests:
            continue
        mean = statistics.fmean(statistics.fmean(runs) for runs in s["pbt"].values())  # each draw weighs the same
        lines.append(
            f"| {index} | {len(s['no_pbt'])} | {expected:.3f} | {mean:.3f} ({min(bests):.3f}-{max(bests):.3f}) "
            f"| x{over(mean, expected, offset):.2f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", nargs="+", required=True, help="ablation results of the same samples")
    parser.add_argument("--arm", default="threshold", help="the PBT arm to compare (a --strategies name)")
    parser.add_argument("--gain", type=float, default=GAIN, help="the goal's ratio over (best - random)")
    args = parser.parse_args()
    results = [(path, json.loads(Path(path).read_text())) for path in args.results]
    sets = gather(results, args.arm)
    if not any(s["pbt"] for s in sets.values()):
        raise SystemExit(f"no result has a {args.arm!r} arm: give --arm one of the results' --strategies")
    print("\n".join(tables(sets, float(results[0][1].get("random_score", 0.0)), args.gain)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
