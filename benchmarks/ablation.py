"""DexPBT-style ablation: PBT on vs off from the same initial hyperparameter samples and seeds.

For each seed set, draws one hyperparameter sample per member (learning rate, entropy, gamma,
tau, mini-epochs, clip), then trains the population twice with equal frames per member: once as
independent runs (``pbt=no_pbt``) and once as a PBT population (``pbt=pbt_default``,
``pbt.initial_mutation=false`` so both arms start from exactly the same samples). Reports the best
and mean final objective per arm, their ratio, and the spread across seed sets; writes JSON and a
markdown table.

    python benchmarks/ablation.py --task Reacher --members 8 --seed_sets 3 --frames 4000000
"""
import argparse
import json
import logging
import math
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"SUMMARY frames=(\d+) .* mean_reward=(\S+) objective=(\S+)")
log = logging.getLogger("ablation")
C = "train.params.config."


def sample_hyperparameters(rng: random.Random) -> Dict[str, float]:
    """One member's starting point: a wide, partly bad spread, as a user's first guesses are."""
    return {
        C + "learning_rate": 10 ** rng.uniform(-4.0, -2.5),
        C + "entropy_coef": 10 ** rng.uniform(-4.0, -1.5),
        C + "gamma": rng.uniform(0.95, 0.995),
        C + "tau": rng.uniform(0.9, 0.98),
        C + "mini_epochs": rng.randint(2, 8),
        C + "e_clip": rng.uniform(0.1, 0.3),
    }


def final_score(text: str) -> float:
    match = SUMMARY.search(text)
    if not match:
        return math.nan
    reward, objective = float(match.group(2)), match.group(3)
    return float(objective) if objective != "n/a" else reward


def run_arm(arm: str, task: str, samples: List[Dict[str, float]], seeds: List[int], frames: int, num_envs: int,
            root: Path, extra: List[str]) -> List[float]:
    interval = max(frames // 12, 100_000)
    procs = []
    for idx, (hp, seed) in enumerate(zip(samples, seeds)):
        cmd = [sys.executable, "-m", "pbt.train", f"task={task}", f"max_frames={frames}", f"num_envs={num_envs}",
               f"seed={seed}", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
               f"experiment={arm}_{idx}", f"train_dir={root / arm}"] + [f"{k}={v!r}" for k, v in hp.items()]
        if arm == "pbt":
            cmd += ["pbt=pbt_default", f"pbt.policy_idx={idx}", f"pbt.num_policies={len(samples)}",
                    f"pbt.workspace={root / 'ws'}", f"pbt.interval_steps={interval}",
                    f"pbt.start_after={interval}", f"pbt.ready_after={interval}", f"pbt.initial_delay={2 * interval}",
                    "pbt.initial_mutation=false"] + extra
        logf = open(root / f"{arm}_{idx}.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=str(REPO), stdout=logf, stderr=subprocess.STDOUT), logf))
    for proc, logf in procs:
        proc.wait()
        logf.close()
    scores = []
    for i in range(len(samples)):
        text = (root / f"{arm}_{i}.log").read_text()
        scores.append(final_score(text))
        if not math.isfinite(scores[-1]):  # keep the evidence: the temp dir is deleted afterwards
            failed = root.parent / f"ablation_failed_{arm}_{i}_{int(time.time())}.log"
            failed.write_text(text[-20000:])
            log.warning("%s member %d printed no SUMMARY; its log tail is in %s", arm, i, failed)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Reacher")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seed_sets", type=int, default=3)
    parser.add_argument("--frames", type=int, default=4_000_000)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--pbt_args", nargs="*", default=[], help="extra pbt.* overrides for the PBT arm")
    parser.add_argument("--out", default="benchmarks/results/ablation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sets = []
    for s in range(args.seed_sets):
        rng = random.Random(1000 + s)
        samples = [sample_hyperparameters(rng) for _ in range(args.members)]
        seeds = [10_000 * (s + 1) + i for i in range(args.members)]
        arms = {}
        with tempfile.TemporaryDirectory() as tmp:
            for arm in ("no_pbt", "pbt"):
                start = time.time()
                scores = run_arm(arm, args.task, samples, seeds, args.frames, args.num_envs, Path(tmp), args.pbt_args)
                finite = [x for x in scores if math.isfinite(x)]
                arms[arm] = {"scores": scores, "best": max(finite) if finite else math.nan,
                             "mean": statistics.fmean(finite) if finite else math.nan, "seconds": time.time() - start}
                log.info("seed set %d %s: best %.3f mean %.3f (%.0f s) %s", s, arm, arms[arm]["best"],
                         arms[arm]["mean"], arms[arm]["seconds"], [round(x, 3) for x in scores])
        sets.append({"seed_set": s, "samples": samples, "seeds": seeds, **arms})
    print(f"\n{'seed set':>8} {'no-PBT best':>12} {'PBT best':>9} {'no-PBT mean':>12} {'PBT mean':>9} "
          f"{'best ratio':>10} {'mean ratio':>10}")
    for r in sets:
        a, b = r["no_pbt"], r["pbt"]
        r["best_ratio"] = b["best"] / a["best"] if a["best"] else math.nan
        r["mean_ratio"] = b["mean"] / a["mean"] if a["mean"] else math.nan
        print(f"{r['seed_set']:>8} {a['best']:>12.3f} {b['best']:>9.3f} {a['mean']:>12.3f} {b['mean']:>9.3f} "
              f"{r['best_ratio']:>10.2f} {r['mean_ratio']:>10.2f}")
    for key in ("best", "mean"):
        for arm in ("no_pbt", "pbt"):
            values = [r[arm][key] for r in sets]
            print(f"{arm:>7} {key}: {statistics.fmean(values):.3f} +- {statistics.pstdev(values):.3f} across seed sets")
    meta = {"machine": platform.platform(), "python": platform.python_version(), "args": vars(args), "sets": sets,
            "command": " ".join(["python", "benchmarks/ablation.py"] + sys.argv[1:])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
