"""How far a played score moves with the draw of its episodes: each checkpoint played for
``--episodes`` episodes from ``--seeds`` task seeds (the initial states and goals each seed draws),
from the config's own seed (the draw ``benchmarks/ablation.py`` scores every member on), and for
``--reference`` episodes from one more seed (the score that draw estimates).

    python benchmarks/play_noise.py --task Reacher --override task.env.goalRadius=0.02 a.pth b.pth

Where a policy succeeds in a few episodes of a hundred (Reacher's 2 cm disc), one draw of 64
episodes decides its score more than its weights do; the reference column says which draw to trust.
"""

import argparse
import logging
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from play_checkpoints import play_all  # noqa: E402

log = logging.getLogger("play_noise")

REFERENCE_SEED = 1000
"""The seed of the reference draw (apart from the 1..N of the short draws)."""


def rows(paths: Sequence[str], task: str, episodes: int, seeds: int, reference: int, overrides: Sequence[str]) -> List[str]:
    """The table: per checkpoint, its score on the config's draw, the spread over ``seeds`` draws, the reference."""
    draws: Dict[str, List[float]] = {p: [] for p in paths}
    for seed in range(1, seeds + 1):
        scores = play_all(task, episodes, paths, [*overrides, f"seed={seed}"])
        for p in paths:
            draws[p].append(scores[p])
    own = play_all(task, episodes, paths, list(overrides))
    ref = play_all(task, reference, paths, [*overrides, f"seed={REFERENCE_SEED}"])
    out = [
        f"| checkpoint | the config's draw ({episodes}) | {seeds} other draws ({episodes} each): mean / sd / min / max "
        f"| {reference} episodes |",
        "| --- | ---: | --- | ---: |",
    ]
    for p in paths:
        d = draws[p]  # main() asks for two draws at least, so stdev is defined
        out.append(
            f"| {Path(p).name} | {own[p]:.4f} | {statistics.fmean(d):.4f} / {statistics.stdev(d):.4f} / {min(d):.4f} / {max(d):.4f} "
            f"| {ref[p]:.4f} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="checkpoints (.pth) of one task")
    parser.add_argument("--task", default="Reacher")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per short draw (ablation's --play_episodes)")
    parser.add_argument("--seeds", type=int, default=8, help="short draws, from task seeds 1..N")
    parser.add_argument("--reference", type=int, default=2048, help="episodes of the reference draw")
    parser.add_argument("--override", action="append", default=[], help="a config override for every play")
    args = parser.parse_args()
    if args.seeds < 2 or args.episodes < 1 or args.reference < 1:
        parser.error("--seeds must be >= 2 (a spread needs two draws), --episodes and --reference >= 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for row in rows(args.paths, args.task, args.episodes, args.seeds, args.reference, args.override):
        log.info(row)


if __name__ == "__main__":
    main()
