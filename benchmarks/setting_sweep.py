"""How much one better setting is worth: one member of an ablation seed set trained alone, as sampled
and with one or two keys changed, every variant from the same seed, all played the same way.

Takes the member's exact sample and seed from an ablation result (``--from``, ``--seed_set``,
``--member``), so the unchanged variant is the no-PBT arm's run of that member. Every variant trains
at once (one process each), then every final policy is played in one batch (``play_batch``: the
ablation's scoring). Writes JSON and prints a markdown table.

    python benchmarks/setting_sweep.py --from benchmarks/results/ablation_outcome_600k.json --seed_set 1 --member 7 \
        --variant gamma_0.97:train.params.config.gamma=0.97

``--frames`` trains every variant to fewer frames than the ablation's budget: with rl_games' adaptive
learning-rate schedule nothing depends on the budget, so this is the variant at that fraction of
the budget (what frames-to-target asks of one run).
"""

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ablation import member_command, run_members, stored_member, write_result  # noqa: E402  (beside this script; sys.path[0] when it runs)
from ablation_curve import final_checkpoint, play_batch  # noqa: E402

log = logging.getLogger("setting_sweep")
AS_SAMPLED = "as sampled"


def parse_variant(text: str) -> Dict[str, Any]:
    """``name:key=value,key=value`` -> {"name", "overrides"}."""
    name, sep, rest = text.partition(":")
    overrides = [o for o in rest.split(",") if o]
    if not sep or not name or not overrides or any("=" not in o for o in overrides):
        raise SystemExit(f"--variant {text!r}: write name:key=value[,key=value...]")
    return {"name": name, "overrides": overrides}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", required=True, help="an ablation result JSON (benchmarks/ablation.py)")
    parser.add_argument("--seed_set", type=int, required=True)
    parser.add_argument("--member", type=int, required=True)
    parser.add_argument("--variant", action="append", default=[], help="name:key=value[,key=value...], repeatable")
    parser.add_argument("--frames", type=int, help="train to this many frames (default: the ablation's budget)")
    parser.add_argument("--out", default="benchmarks/results/setting_sweep.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    variants = [{"name": AS_SAMPLED, "overrides": []}] + [parse_variant(v) for v in args.variant]
    run, sample, seed = stored_member(args.source, args.seed_set, args.member)
    frames = args.frames or run["frames"]
    if not 0 < frames <= run["frames"]:
        raise SystemExit(f"--frames {args.frames}: give a budget in (0, {run['frames']}], the ablation's")
    common = list(run.get("train_args") or [])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cmds = [
            member_command(run["task"], frames, run["num_envs"], seed, f"v{i}", root, common, sample)
            + variant["overrides"]
            for i, variant in enumerate(variants)
        ]
        seconds = run_members(cmds, [root / f"v{i}.log" for i in range(len(variants))])
        finals = [final_checkpoint(root / f"v{i}") for i in range(len(variants))]
        played = play_batch(
            [c for c in finals if c is not None], run["task"], run["play_episodes"], root / "play.log", common
        )
        for variant, checkpoint in zip(variants, finals):
            variant["score"] = played.get(str(checkpoint), float("nan")) if checkpoint else float("nan")
    base = variants[0]["score"]
    lines = ["| variant | overrides | played objective | / as sampled |", "| --- | --- | ---: | ---: |"]
    for v in variants:
        lines.append(f"| {v['name']} | {' '.join(v['overrides'])} | {v['score']:.3f} | {v['score'] / base:.2f} |")
    write_result(
        args.out,
        "setting_sweep.py",
        {"sample": sample, "seed": seed, "frames": frames, "seconds": seconds, "variants": variants},
        lines,
    )


if __name__ == "__main__":
    main()
