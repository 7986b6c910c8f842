"""Selection ablation: no PBT vs each selection strategy, from the same initial samples and seeds.

For each seed set, draws one hyperparameter sample per member (learning rate, entropy, gamma, tau,
mini-epochs 2-8, clip: members differ in speed through mini-epochs), or, with ``--search_space``,
draws them from that search space; then trains the population once per arm with equal frames per
member: independent runs (``pbt=no_pbt``) and one PBT population per strategy
(``pbt/selection=<name>``, ``pbt.initial_mutation=false`` so every arm starts from exactly the same
samples and seeds). Reports per arm the best and mean final objective, their ratio to no-PBT, the
spread across seed sets, weight replacements ("exploits") per run, members that ended below 10% of
the arm's best without ever being replaced, and wall time. Writes JSON after every arm (a cut-off
run keeps what it finished) and prints a markdown table.

    python benchmarks/ablation.py --task Reacher --members 8 --seed_sets 3 --frames 1500000
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
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SUMMARY = re.compile(r"SUMMARY frames=(\d+) .* mean_reward=(\S+) objective=(\S+)")
PLAY = re.compile(r"PLAY episodes=(\d+) mean_return=(\S+) objective=(\S+)")
log = logging.getLogger("ablation")
C = "train.params.config."
STRATEGIES = ("dexpbt", "threshold", "truncation", "tournament")
"""The default PBT arms."""
MORE_STRATEGIES = ("pb2", "mfpbt")
"""Arms on request (--strategies): pb2 needs --search_space with a continuous key and scikit-learn."""
NO_PBT = "no_pbt"
STUCK_FRACTION = 0.1


def sample_hyperparameters(rng: random.Random) -> Dict[str, Any]:
    """One member's starting point: a wide, partly bad spread, as a user's first guesses are."""
    return {
        C + "learning_rate": 10 ** rng.uniform(-4.0, -2.5),
        C + "entropy_coef": 10 ** rng.uniform(-4.0, -1.5),
        C + "gamma": rng.uniform(0.95, 0.995),
        C + "tau": rng.uniform(0.9, 0.98),
        C + "mini_epochs": rng.randint(2, 8),
        C + "e_clip": rng.uniform(0.1, 0.3),
    }


def seed_set(index: int, members: int,
             sampler: Any = sample_hyperparameters) -> Tuple[List[Dict[str, Any]], List[int]]:
    """Seed set ``index``: one hyperparameter sample and one seed per member, the same in every arm
    (and in every benchmark that draws from this script's samples)."""
    rng = random.Random(1000 + index)
    return [sampler(rng) for _ in range(members)], [10_000 * (index + 1) + i for i in range(members)]


def space_sampler(name: str, task: str, num_envs: int) -> Any:
    """A sampler drawing from the search space ``name`` as resolved for this task's config."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.mutation.space import parse_space, resolve_space
    from pbt.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"task={task}", f"num_envs={num_envs}", "pbt=pbt_default",
                                                       f"pbt/search_space={name}"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    space = resolve_space(parse_space("search_space", resolved["pbt"]["search_space"]), resolved)
    return lambda rng: space.sample({}, rng)


def final_score(text: str) -> float:
    """The member's final objective; NaN when it printed none, or "n/a" (it took a donor's weights
    so late that no episode finished since: the mean reward is on another scale, so it is no stand-in)."""
    match = SUMMARY.search(text)
    if not match or match.group(3) == "n/a":
        return math.nan
    return float(match.group(3))


def newest_checkpoint(run_dir: Path) -> Optional[Path]:
    """The member's final rl_games checkpoint (``<run dir>/nn/last_*.pth``), None when it has none."""
    checkpoints = sorted((run_dir / "nn").glob("last_*.pth"), key=lambda p: p.stat().st_mtime)
    return checkpoints[-1] if checkpoints else None


def played_score(checkpoint: Optional[Path], task: str, episodes: int, log_path: Path,
                 overrides: Sequence[str] = ()) -> float:
    """A member's final policy played with deterministic actions (``python -m pbt.play``) for
    ``episodes`` full episodes: its objective there; NaN when it has no final checkpoint. Every
    member is scored the same way, however late its last change came (a member changed in its
    last intervals prints no training objective). ``overrides``: the config the checkpoint was
    trained with (e.g. its network), beyond the task."""
    if checkpoint is None:
        return math.nan
    cmd = [sys.executable, "-m", "pbt.play", f"checkpoint={checkpoint}", f"task={task}",
           f"episodes={episodes}", f"num_envs={min(episodes, 256)}", "sim_device=cpu", "rl_device=cpu",
           "torch_threads=1", *overrides]
    proc = subprocess.run(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_path.write_text(proc.stdout)
    match = PLAY.search(proc.stdout)
    if proc.returncode == 0 and match:
        return float(match.group(3))
    kept = REPO / "benchmarks" / "results" / f"ablation_failed_play_{log_path.stem}_{int(time.time())}.log"
    kept.write_text(proc.stdout[-20000:])
    log.warning("playing %s failed (exit %d); its output is in %s", checkpoint, proc.returncode, kept)
    return math.nan


def member_run_dir(train_dir: Path, experiment: str) -> Path:
    """A member's rl_games run directory: ``experiment``, or ``experiment_pbtNNN`` for a PBT member."""
    found = sorted(train_dir.glob(f"{experiment}_pbt[0-9]*")) or [train_dir / experiment]
    return found[0]


def replaced_members(workspace: Path, members: int) -> Dict[int, int]:
    """policy_idx -> how many times it took a donor's weights (lineage action "replace")."""
    from pbt.storage.reader import WorkspaceReader

    if not workspace.exists():
        return {}
    reader = WorkspaceReader(workspace, members)
    return {i: sum(1 for e in reader.read_lineage(i) if e.action == "replace" and e.is_exploit)
            for i in range(members)}


def run_members(cmds: Sequence[List[str]], logs: Sequence[Path]) -> float:
    """Start every member's command at once (its output to its log), wait for all; the seconds taken."""
    start = time.time()
    procs = []
    for cmd, path in zip(cmds, logs):
        logf = open(path, "w")
        procs.append((subprocess.Popen(cmd, cwd=str(REPO), stdout=logf, stderr=subprocess.STDOUT), logf))
    for proc, logf in procs:
        proc.wait()
        logf.close()
    return time.time() - start


def run_arm(arm: str, task: str, samples: List[Dict[str, Any]], seeds: List[int], frames: int, num_envs: int,
            root: Path, extra: List[str], search_space: Optional[str], play_episodes: int = 0) -> Dict[str, Any]:
    interval = max(frames // 12, 100_000)
    workspace = root / f"ws_{arm}"
    cmds = []
    for idx, (hp, seed) in enumerate(zip(samples, seeds)):
        cmd = [sys.executable, "-m", "pbt.train", f"task={task}", f"max_frames={frames}", f"num_envs={num_envs}",
               f"seed={seed}", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
               f"experiment={arm}_{idx}", f"train_dir={root / arm}"] + [f"{k}={v!r}" for k, v in hp.items()]
        if arm != NO_PBT:
            cmd += ["pbt=pbt_default", f"pbt/selection={arm}", f"pbt.policy_idx={idx}",
                    f"pbt.num_policies={len(samples)}", f"pbt.workspace={workspace}", f"pbt.interval_steps={interval}",
                    f"pbt.start_after={interval}", f"pbt.ready_after={interval}", f"pbt.initial_delay={2 * interval}",
                    "pbt.initial_mutation=false"] + extra
            if search_space:
                cmd.append(f"pbt/search_space={search_space}")
        cmds.append(cmd)
    seconds = run_members(cmds, [root / f"{arm}_{i}.log" for i in range(len(samples))])
    scores = []
    for i in range(len(samples)):
        text = (root / f"{arm}_{i}.log").read_text()
        scores.append(final_score(text))
        printed_summary = SUMMARY.search(text) is not None
        # keep the evidence of a member that died (the temp dir is deleted afterwards); "objective=n/a"
        # only means a late change, which the play scoring below is there for
        if not printed_summary or (not math.isfinite(scores[-1]) and play_episodes <= 0):
            failed = REPO / "benchmarks" / "results" / f"ablation_failed_{arm}_{i}_{int(time.time())}.log"
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(text[-20000:])
            log.warning("%s member %d has no final objective (%s); its log tail is in %s", arm, i,
                        "objective=n/a" if printed_summary else "no SUMMARY line", failed)
    if play_episodes > 0:  # every member scored by playing its final policy (see played_score)
        training = scores
        scores = [played_score(newest_checkpoint(member_run_dir(root / arm, f"{arm}_{i}")), task, play_episodes,
                               root / f"{arm}_{i}.play.log") for i in range(len(samples))]
    replaced = replaced_members(workspace, len(samples))
    finite = [x for x in scores if math.isfinite(x)]
    best = max(finite) if finite else math.nan
    stuck = [i for i, x in enumerate(scores)
             if math.isfinite(x) and x < STUCK_FRACTION * best and not replaced.get(i)]
    result = {"scores": scores, "best": best, "mean": statistics.fmean(finite) if finite else math.nan,
              "seconds": seconds, "exploits": sum(replaced.values()), "replaced": replaced, "stuck": stuck}
    if play_episodes > 0:
        result["training_scores"] = training
        result["scored_by"] = f"pbt.play, {play_episodes} episodes, deterministic actions"
    return result


def ratio(value: float, reference: float) -> float:
    """value / reference; NaN when the reference is 0 (nothing learned: no ratio to speak of)."""
    return value / reference if reference else math.nan


def summarize(sets: Sequence[Dict[str, Any]], arms: Sequence[str]) -> List[str]:
    """The markdown table: one row per arm over the seed sets."""
    lines = ["| arm | best (mean +- std over seed sets) | mean | best / no-PBT | mean / no-PBT | exploits per run "
             "| stuck members (below 10% of best, never replaced) | wall time per run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm in arms:
        done = [s for s in sets if arm in s["arms"]]
        if not done:
            continue
        best = [s["arms"][arm]["best"] for s in done]
        mean = [s["arms"][arm]["mean"] for s in done]
        best_ratio = [ratio(s["arms"][arm]["best"], s["arms"][NO_PBT]["best"]) for s in done]
        mean_ratio = [ratio(s["arms"][arm]["mean"], s["arms"][NO_PBT]["mean"]) for s in done]
        exploits = [s["arms"][arm]["exploits"] for s in done]
        stuck = [len(s["arms"][arm]["stuck"]) for s in done]
        seconds = [s["arms"][arm]["seconds"] for s in done]

        def spread(values: List[float], digits: int = 3) -> str:
            finite = [v for v in values if math.isfinite(v)]
            if not finite:
                return "n/a"
            missing = f" ({len(values) - len(finite)} sets n/a)" if len(finite) < len(values) else ""
            return f"{statistics.fmean(finite):.{digits}f} +- {statistics.pstdev(finite):.{digits}f}{missing}"

        lines.append(f"| {arm} | {spread(best)} | {spread(mean)} | {spread(best_ratio, 2)} | {spread(mean_ratio, 2)} "
                     f"| {' / '.join(str(e) for e in exploits)} | {' / '.join(str(x) for x in stuck)} "
                     f"| {statistics.fmean(seconds):.0f} s |")
    return lines


def finished_sets(out: Path, args: argparse.Namespace) -> Dict[int, Dict[str, Any]]:
    """The seed sets an earlier run of the same benchmark wrote to ``out``, by index."""
    if not out.exists():
        return {}
    earlier = json.loads(out.read_text())
    keys = ("task", "members", "frames", "num_envs", "search_space", "pbt_args", "play_episodes")
    defaults = {"play_episodes": 0}  # runs from before the option existed
    if any(earlier["args"].get(k, defaults.get(k)) != getattr(args, k) for k in keys):
        raise SystemExit(f"--resume: {out} was made with other settings ({', '.join(keys)} must match); "
                         "choose another --out or rerun without --resume")
    return {entry["seed_set"]: entry for entry in earlier["sets"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Reacher")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seed_sets", type=int, default=3)
    parser.add_argument("--frames", type=int, default=1_500_000)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES + MORE_STRATEGIES,
                        help="the PBT arms (each pbt/selection=<name>); no-PBT always runs")
    parser.add_argument("--search_space", default=None,
                        help="draw the initial samples from this search space and give it to the PBT arms")
    parser.add_argument("--pbt_args", nargs="*", default=[], help="extra pbt.* overrides for every PBT arm")
    parser.add_argument("--out", default="benchmarks/results/ablation_selection.json")
    parser.add_argument("--play_episodes", type=int, default=0,
                        help="score every member by playing its final policy for this many episodes (deterministic "
                             "actions) instead of its last training objective, which a member changed in its last "
                             "intervals does not have; 0: the training objective")
    parser.add_argument("--resume", action="store_true",
                        help="keep the arms already in --out (same task, members, frames) and run only the rest")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sampler = space_sampler(args.search_space, args.task, args.num_envs) if args.search_space else sample_hyperparameters
    arms = [NO_PBT] + list(args.strategies)
    meta: Dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version(), "args": vars(args),
                            "command": " ".join(["python", "benchmarks/ablation.py"] + sys.argv[1:]), "sets": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = finished_sets(out, args) if args.resume else {}
    for s in range(args.seed_sets):
        samples, seeds = seed_set(s, args.members, sampler)
        entry: Dict[str, Any] = {"seed_set": s, "samples": samples, "seeds": seeds, "arms": {}}
        if s in done:
            if done[s]["samples"] != samples or done[s]["seeds"] != seeds:
                raise SystemExit(f"--resume: seed set {s} in {out} was drawn differently; rerun without --resume")
            entry["arms"] = dict(done[s]["arms"])
        meta["sets"].append(entry)
        with tempfile.TemporaryDirectory() as tmp:
            for arm in arms:
                if arm in entry["arms"]:
                    log.info("seed set %d %s: kept from %s", s, arm, out)
                    continue
                with open("/proc/loadavg") as f:
                    load = f.read().split()[0]
                result = run_arm(arm, args.task, samples, seeds, args.frames, args.num_envs, Path(tmp),
                                 args.pbt_args, args.search_space, args.play_episodes)
                result["load_before"] = float(load)
                entry["arms"][arm] = result
                log.info("seed set %d %s: best %.3f mean %.3f exploits %d stuck %s (%.0f s, load %s) %s", s, arm,
                         result["best"], result["mean"], result["exploits"], result["stuck"], result["seconds"],
                         load, [round(x, 3) for x in result["scores"]])
                out.write_text(json.dumps(meta, indent=2))
    table = summarize(meta["sets"], arms)
    meta["table"] = table
    out.write_text(json.dumps(meta, indent=2))
    print("\n".join(table))


if __name__ == "__main__":
    main()
