"""What selection among copies can give at best: one member of an ablation seed set trained alone to
``--start`` frames, then ``--copies`` continuations of its checkpoint (each on its own seed) every
round of ``--epochs`` epochs, the best of them chosen by playing them (on another draw of episodes
than the scoring one) and continued by every copy in the next round, up to ``--until`` frames.

PBT's exploit without its explore, with a ranking that knows each copy's played score: an upper
bound on what copying a family's best member gains over training that member alone. At the end every
copy of the last round is played on the ablation's own scoring (its draw, its episode count), as
``benchmarks/ablation.py`` scores a PBT arm's best member; the member's own run to ``--until`` is
played beside it. Writes JSON and prints a markdown table.

    python benchmarks/oracle_selection.py --from benchmarks/results/ablation_outcome_600k_envs256_radius2cm_play1024.json \\
        --seed_set 0 --member 3 --start 245760 --until 417792 --epochs 3
"""

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ablation import member_command, run_members, stored_member, write_result  # noqa: E402  (beside this script; sys.path[0] when it runs)
from ablation_curve import final_checkpoint, frames_per_epoch, play_batch  # noqa: E402

log = logging.getLogger("oracle_selection")
SELECT_SEED = 7
"""The task seed of the draw of episodes copies are chosen on (the scoring draw is the config's)."""
COPY_SEEDS = 90_000
"""Copy c of round r trains on seed --copy_seeds + 100 * r + c (by default this: seeds that no member of
an ablation's first eight seed sets uses). ``--copies 1`` with other ``--copy_seeds`` is the control:
as many restarts, no choice."""


def rounds_until(start: int, until: int, step: int) -> List[int]:
    """The frame each round ends at: every ``step`` frames after ``start``, the last at ``until``."""
    if not 0 < start < until or step <= 0:
        raise SystemExit(f"--start {start} --until {until}: give 0 < start < until, and --epochs >= 1")
    ends = list(range(start + step, until, step))
    return ends + [until]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", required=True, help="an ablation result JSON (benchmarks/ablation.py)")
    parser.add_argument("--seed_set", type=int, required=True)
    parser.add_argument("--member", type=int, required=True)
    parser.add_argument("--start", type=int, required=True, help="frames the member trains alone before copies")
    parser.add_argument("--until", type=int, required=True, help="frames at which the copies are scored")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per round (a choice after each round)")
    parser.add_argument("--copies", type=int, default=8, help="continuations per round (the population)")
    parser.add_argument("--select_episodes", type=int, default=256, help="episodes each copy plays to be chosen")
    parser.add_argument("--copy_seeds", type=int, default=COPY_SEEDS, help="the seed of round 0's copy 0")
    parser.add_argument("--out", default="benchmarks/results/oracle_selection.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run, sample, seed = stored_member(args.source, args.seed_set, args.member)
    if args.copies < 1 or args.select_episodes < 1:
        raise SystemExit("--copies and --select_episodes: give at least 1")
    common = list(run.get("train_args") or [])
    task, num_envs = run["task"], run["num_envs"]
    ends = rounds_until(args.start, args.until, args.epochs * frames_per_epoch(task, num_envs))
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def train(name: str, frames: int, run_seed: int, checkpoint: Optional[Path]) -> List[str]:
            cmd = member_command(task, frames, num_envs, run_seed, name, root, common, sample)
            return cmd + ([f"checkpoint={checkpoint}"] if checkpoint is not None else [])

        alone = [train("start", args.start, seed, None), train("alone", args.until, seed, None)]
        run_members(alone, [root / "start.log", root / "alone.log"])
        chosen = final_checkpoint(root / "start")
        if chosen is None:
            raise SystemExit(f"the member trained alone wrote no checkpoint: see its log {root / 'start.log'}")
        history: List[Dict[str, Any]] = []
        finals: List[Optional[Path]] = []
        for r, end in enumerate(ends):
            names = [f"r{r}_c{c}" for c in range(args.copies)]
            cmds = [train(n, end, args.copy_seeds + 100 * r + c, chosen) for c, n in enumerate(names)]
            run_members(cmds, [root / f"{n}.log" for n in names])
            finals = [final_checkpoint(root / n) for n in names]
            found = [p for p in finals if p is not None]
            played = play_batch(
                found, task, args.select_episodes, root / f"select_{r}.log", [*common, f"seed={SELECT_SEED}"]
            )
            scores = {str(p): played.get(str(p), float("nan")) for p in found}
            best = max(scores, key=lambda p: scores[p] if scores[p] == scores[p] else float("-inf"))
            chosen = Path(best)
            history.append({"frames": end, "chosen": finals.index(chosen), "selection_scores": list(scores.values())})
            log.info("round %d to %d frames: chose copy %d (%.4f)", r, end, finals.index(chosen), scores[best])
        last = [p for p in finals if p is not None]
        alone_final = final_checkpoint(root / "alone")
        scored = play_batch(
            last + ([alone_final] if alone_final else []), task, run["play_episodes"], root / "score.log", common
        )
        copies = [scored.get(str(p), float("nan")) for p in last]
        alone_score = scored.get(str(alone_final), float("nan")) if alone_final else float("nan")
    lines = [
        "| member alone at --until | copies of the last round (scoring draw): best / median | rounds | copies |",
        "| ---: | --- | ---: | ---: |",
        f"| {alone_score:.3f} | {max(copies):.3f} / {sorted(copies)[len(copies) // 2]:.3f} | {len(ends)} | {args.copies} |",
    ]
    fields = {"sample": sample, "seed": seed, "seconds": time.time() - started, "alone": alone_score}
    write_result(args.out, "oracle_selection.py", {**fields, "copies": copies, "rounds": history}, lines)


if __name__ == "__main__":
    main()
