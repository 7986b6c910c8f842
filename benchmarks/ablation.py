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
import signal
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

from ablation_curve import (  # noqa: E402  (beside this script; sys.path[0] when it runs)
    CURVE_STEPS,
    NO_PBT,
    QUARTERS,
    curve_table,
    epoch_checkpoints,
    final_checkpoint,
    frames_per_epoch,
    frames_to_target,
    member_run_dir,
    play_batch,
    play_curve,
    ratio,
)

C = "train.params.config."
STRATEGIES = ("dexpbt", "threshold", "truncation", "tournament")
"""The default PBT arms."""
MORE_STRATEGIES = ("pb2", "mfpbt")
"""Arms on request (--strategies): pb2 needs --search_space with a continuous key and scikit-learn."""
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


def check_reseed(reseed: int, members: int) -> None:
    """ValueError unless ``reseed`` names a draw of seeds that overlaps no other (the seeds'
    thousands digit, so at most 1000 members)."""
    if not 0 <= reseed <= 9:
        raise ValueError(f"--reseed {reseed}: give 0..9 (it is the seeds' thousands digit)")
    if reseed and members > 1000:
        raise ValueError(f"--reseed with {members} members: draws of seeds would overlap above 1000 members")


def seed_set(
    index: int, members: int, sampler: Any = sample_hyperparameters, reseed: int = 0
) -> Tuple[List[Dict[str, Any]], List[int]]:
    """Seed set ``index``: one hyperparameter sample and one seed per member, the same in every arm
    (and in every benchmark that draws from this script's samples). ``reseed`` keeps the samples and
    trains them from other seeds (0: the seed set's own), so one sample's luck can be told apart
    from its setting."""
    check_reseed(reseed, members)
    rng = random.Random(1000 + index)
    seeds = [10_000 * (index + 1) + 1_000 * reseed + i for i in range(members)]
    return [sampler(rng) for _ in range(members)], seeds


PBT_SEED_KEY = "pbt.seed="


def set_pbt_args(pbt_args: Sequence[str], pbt_seed: Optional[int], index: int) -> List[str]:
    """The PBT arms' overrides for seed set ``index``. ``pbt_seed`` (--pbt_seed) draws PBT's own
    randomness (its explore steps) anew and differently in every set: ``pbt.seed`` = 100 x
    ``pbt_seed`` + the set. A ``pbt.seed`` among ``pbt_args`` is the same in every set, so member i's
    explore steps come from one stream in all of them (kept for the results made so)."""
    if pbt_seed is None:
        return list(pbt_args)
    return [*pbt_args, f"{PBT_SEED_KEY}{100 * pbt_seed + index}"]


def space_sampler(name: str, task: str, num_envs: int) -> Any:
    """A sampler drawing from the search space ``name`` as resolved for this task's config."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.mutation.space import parse_space, resolve_space
    from pbt.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[f"task={task}", f"num_envs={num_envs}", "pbt=pbt_default", f"pbt/search_space={name}"],
        )
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


def replaced_members(workspace: Path, members: int) -> Dict[int, int]:
    """policy_idx -> how many times it took a donor's weights (lineage action "replace")."""
    from pbt.storage.reader import WorkspaceReader

    if not workspace.exists():
        return {}
    reader = WorkspaceReader(workspace, members)
    return {i: sum(1 for e in reader.read_lineage(i) if e.action == "replace" and e.is_exploit) for i in range(members)}


MEMBER_STOP_SECONDS = 30.0
"""How long a member may take to save and exit on SIGTERM before it is killed."""


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def stop_members(procs: Sequence[Tuple["subprocess.Popen[bytes]", Any]]) -> None:
    """SIGTERM every member still running (they save and exit), kill those that outlive
    MEMBER_STOP_SECONDS, and close the logs."""
    for proc, _ in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc, logf in procs:
        try:
            proc.wait(MEMBER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()


def run_members(cmds: Sequence[List[str]], logs: Sequence[Path]) -> float:
    """Start every member's command at once (its output to its log), wait for all; the seconds taken.
    A script stopped meanwhile (SIGTERM, Ctrl-C, an error) stops its members too: they are not left
    training in the background, loading the machine under the next run."""
    start = time.time()
    procs: List[Tuple[subprocess.Popen[bytes], Any]] = []
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        for cmd, path in zip(cmds, logs):
            logf = open(path, "w")
            try:
                proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=logf, stderr=subprocess.STDOUT)
            except BaseException:
                logf.close()
                raise
            procs.append((proc, logf))
        for proc, _ in procs:
            proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_members(procs)
    return time.time() - start


def member_command(
    task: str,
    frames: int,
    num_envs: int,
    seed: int,
    experiment: str,
    train_dir: Path,
    common: Sequence[str],
    sample: Dict[str, Any],
) -> List[str]:
    """One member's ``python -m pbt.train`` on the CPU, one torch thread: ``common`` overrides, then
    its sample (every float written in full, so the run is the sample's)."""
    return [
        sys.executable,
        "-m",
        "pbt.train",
        f"task={task}",
        f"max_frames={frames}",
        f"num_envs={num_envs}",
        f"seed={seed}",
        "sim_device=cpu",
        "rl_device=cpu",
        "torch_threads=1",
        f"experiment={experiment}",
        f"train_dir={train_dir}",
        *common,
    ] + [f"{k}={v!r}" for k, v in sample.items()]


def stored_member(source: str, seed_set: int, member: int) -> Tuple[Dict[str, Any], Dict[str, Any], int]:
    """(the ablation's arguments, the member's sample, its seed) from an ablation result: where a
    script that trains one stored member again (``setting_sweep.py``, ``oracle_selection.py``) starts."""
    if not Path(source).is_file():
        raise SystemExit(f"--from {source}: no such file; give an ablation result (benchmarks/results/ablation_*.json)")
    result = json.loads(Path(source).read_text())
    run = result["args"]
    entry = next((s for s in result["sets"] if s["seed_set"] == seed_set), None)
    if entry is None or not 0 <= member < len(entry["samples"]):
        raise SystemExit(
            f"--seed_set {seed_set} --member {member}: {source} has seed sets "
            f"{[s['seed_set'] for s in result['sets']]} of {run['members']} members"
        )
    return run, entry["samples"][member], entry["seeds"][member]


def write_result(out: str, script: str, fields: Dict[str, Any], table: List[str]) -> None:
    """Write a benchmark's JSON (the machine, the command that made it, ``fields``, the table) to
    ``out`` and print the table."""
    result = {
        "machine": platform.platform(),
        "command": " ".join(["python", f"benchmarks/{script}"] + sys.argv[1:]),
        **fields,
        "table": table,
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2))
    print("\n".join(table))


def run_arm(
    arm: str,
    task: str,
    samples: List[Dict[str, Any]],
    seeds: List[int],
    frames: int,
    num_envs: int,
    root: Path,
    extra: List[str],
    search_space: Optional[str],
    play_episodes: int = 0,
    per_epoch: int = 0,
    target: Optional[float] = None,
    common: Sequence[str] = (),
    fine_target: bool = False,
) -> Dict[str, Any]:
    """Train one arm and score it. ``per_epoch`` > 0 (--curve): members also save every 1/12 of the
    budget (every epoch with ``fine_target``) and their policies at 25/50/75% are played too (the
    curve); for a PBT arm with a ``target`` (no-PBT's final best), also the frames at which its best
    member first reached it (to the epoch with ``fine_target``). ``common``: overrides given to
    every member of every arm, before its sample."""
    interval = max(frames // 12, 100_000)
    workspace = root / f"ws_{arm}"
    cmds = []
    for idx, (hp, seed) in enumerate(zip(samples, seeds)):
        cmd = member_command(task, frames, num_envs, seed, f"{arm}_{idx}", root / arm, common, hp)
        if per_epoch:
            every = 1 if fine_target else max(1, frames // (CURVE_STEPS * per_epoch))
            cmd.append(f"train.params.config.save_frequency={every}")
        if arm != NO_PBT:
            cmd += [
                "pbt=pbt_default",
                f"pbt/selection={arm}",
                f"pbt.policy_idx={idx}",
                f"pbt.num_policies={len(samples)}",
                f"pbt.workspace={workspace}",
                f"pbt.interval_steps={interval}",
                f"pbt.start_after={interval}",
                f"pbt.ready_after={interval}",
                f"pbt.initial_delay={2 * interval}",
                "pbt.initial_mutation=false",
            ] + extra
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
            log.warning(
                "%s member %d has no final objective (%s); its log tail is in %s",
                arm,
                i,
                "objective=n/a" if printed_summary else "no SUMMARY line",
                failed,
            )
    extra_results: Dict[str, Any] = {}
    if play_episodes > 0:  # every member scored by playing its final policy (see play_batch)
        training = scores
        finals = [final_checkpoint(member_run_dir(root / arm, f"{arm}_{i}")) for i in range(len(samples))]
        existing = [c for c in finals if c is not None]
        extra_results = {
            "training_scores": training,
            "scored_by": f"pbt.play, {play_episodes} episodes, deterministic actions",
        }
        if per_epoch:  # the final policies and the curve's in one batch
            curve, played = play_curve(
                root / arm,
                arm,
                len(samples),
                frames,
                per_epoch,
                QUARTERS[:-1],
                task,
                play_episodes,
                root / f"{arm}.play.log",
                also=existing,
                overrides=common,
            )
        else:
            played = play_batch(existing, task, play_episodes, root / f"{arm}.play.log", common)
        scores = [played[str(c)] if c is not None else math.nan for c in finals]
        if per_epoch:
            finite = [x for x in scores if math.isfinite(x)]
            final_frames = epoch_checkpoints(member_run_dir(root / arm, f"{arm}_0"), per_epoch) or {0: None}
            curve["steps"].append(CURVE_STEPS)
            curve["frames"].append(max(final_frames))
            curve["scores"].append(scores)
            curve["best"].append(max(finite, default=math.nan))
            curve["mean"].append(statistics.fmean(finite) if finite else math.nan)
            extra_results["curve"] = curve
            if target is not None and arm != NO_PBT:
                extra_results["frames_to_target"] = frames_to_target(
                    root / arm,
                    arm,
                    len(samples),
                    frames,
                    per_epoch,
                    curve,
                    target,
                    task,
                    play_episodes,
                    root / f"{arm}.target.log",
                    common,
                    fine_target,
                )
    replaced = replaced_members(workspace, len(samples))
    return {**scored(scores, replaced), "seconds": seconds, **extra_results}


def scored(scores: List[float], replaced: Dict[int, int]) -> Dict[str, Any]:
    """best, mean, exploits, replaced and stuck members of an arm's final scores."""
    finite = [x for x in scores if math.isfinite(x)]
    best = max(finite) if finite else math.nan
    stuck = [i for i, x in enumerate(scores) if math.isfinite(x) and x < STUCK_FRACTION * best and not replaced.get(i)]
    return {
        "scores": scores,
        "best": best,
        "mean": statistics.fmean(finite) if finite else math.nan,
        "exploits": sum(replaced.values()),
        "replaced": replaced,
        "stuck": stuck,
    }


def reused_no_pbt(result: Dict[str, Any], members: int) -> Dict[str, Any]:
    """The no-PBT arm of the first ``members`` members, cut from a larger population's: no-PBT
    members are independent and bit-reproducible from their sample and seed on a machine with the
    same numerics (:func:`numerics_differ` and :func:`replay_differs` check), so training them again
    would give the same policies."""
    out = {**scored(result["scores"][:members], {}), "seconds": result["seconds"], "reused": True}
    for key in ("training_scores", "scored_by"):
        if key in result:
            out[key] = result[key][:members] if isinstance(result[key], list) else result[key]
    if "curve" in result:
        rows = [row[:members] for row in result["curve"]["scores"]]
        out["curve"] = {
            **result["curve"],
            "scores": rows,
            "best": [max([x for x in r if math.isfinite(x)], default=math.nan) for r in rows],
            "mean": [statistics.fmean([x for x in r if math.isfinite(x)] or [math.nan]) for r in rows],
        }
    return out


def numerics_differ(earlier: Dict[str, Any], random_score: Optional[float]) -> Optional[str]:
    """Why an earlier result's no-PBT arm cannot stand for this machine's; None when it can, or when
    either side played no untrained policy (nothing to compare).

    Same samples and seeds give the same runs only where floating point gives the same bits: on
    another CPU (another torch kernel) the untrained policy already plays a different last digit,
    and training, which is chaotic, ends elsewhere (HalfCheetah's best independent run of a seed set
    at 3,033 on one VM was not that run on another). The untrained policy's played score, exact to
    the bit, is the check."""
    there = earlier.get("random_score")
    if random_score is None or there is None:
        return None
    if float(there) == float(random_score):
        return None
    return (
        f"its untrained policy played {float(there)!r} on {earlier.get('machine', 'its machine')} and "
        f"{float(random_score)!r} here ({platform.platform()}): this machine computes other bits from "
        "the same seeds, so its runs are not those runs. Train the no-PBT arm here (drop --no_pbt_from, "
        "or give it a result made on this machine)"
    )


def replay_differs(stored: Dict[str, Any], member: int, replayed: float) -> Optional[str]:
    """Why a stored no-PBT arm's ``member``, trained again here from its sample and seed, is not
    that run (None: it played the stored score to the bit).

    The untrained policy's bits (:func:`numerics_differ`) are not enough: on Reacher's 2 cm disc the
    untrained policy played the same bits on an AMD and an Intel VM, while the best independent run
    of a seed set played 0.047 on one and 0.188 on the other. One member trained again is."""
    there = stored["scores"][member]
    if float(there) == float(replayed):
        return None
    return (
        f"its member {member}, trained again here from the same sample and seed, played {float(replayed)!r} "
        f"where it had played {float(there)!r}: this machine (or this code) trains other runs from the same "
        "seeds. Train the no-PBT arm here (drop --no_pbt_from, or give it a result made here)"
    )


def keep_evidence(root: Path, arm: str, members: int, dest: Path) -> None:
    """Copy an arm's lineage files and member logs out of its temporary run directory."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for i in range(members):
        lineage = root / f"ws_{arm}" / f"{i:03d}" / "lineage.jsonl"
        if lineage.exists():
            shutil.copy(lineage, dest / f"lineage_{i}.jsonl")
        for name in (f"{arm}_{i}.log",):
            if (root / name).exists():
                shutil.copy(root / name, dest / name)
    for name in (f"{arm}.play.log", f"{arm}.target.log"):
        if (root / name).exists():
            shutil.copy(root / name, dest / name)


def summarize(sets: Sequence[Dict[str, Any]], arms: Sequence[str]) -> List[str]:
    """The markdown table: one row per arm over the seed sets."""
    lines = [
        "| arm | best (mean +- std over seed sets) | mean | best / no-PBT | mean / no-PBT | exploits per run "
        "| stuck members (below 10% of best, never replaced) | wall time per run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
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

        lines.append(
            f"| {arm} | {spread(best)} | {spread(mean)} | {spread(best_ratio, 2)} | {spread(mean_ratio, 2)} "
            f"| {' / '.join(str(e) for e in exploits)} | {' / '.join(str(x) for x in stuck)} "
            f"| {statistics.fmean(seconds):.0f} s |"
        )
    return lines


def finished_sets(out: Path, args: argparse.Namespace) -> Dict[int, Dict[str, Any]]:
    """The seed sets an earlier run of the same benchmark wrote to ``out``, by index."""
    if not out.exists():
        return {}
    earlier = json.loads(out.read_text())
    keys = (
        "task",
        "members",
        "frames",
        "num_envs",
        "search_space",
        "train_args",
        "pbt_args",
        "play_episodes",
        "curve",
        "reseed",
        "pbt_seed",
        "fine_target",
    )
    # Runs from before the options existed.
    defaults = {"play_episodes": 0, "curve": False, "train_args": [], "reseed": 0, "pbt_seed": None, "fine_target": False}
    if any(earlier["args"].get(k, defaults.get(k)) != getattr(args, k) for k in keys):
        raise SystemExit(
            f"--resume: {out} was made with other settings ({', '.join(keys)} must match); "
            "choose another --out or rerun without --resume"
        )
    return {entry["seed_set"]: entry for entry in earlier["sets"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Reacher")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seed_sets", type=int, default=3)
    parser.add_argument("--frames", type=int, default=1_500_000)
    parser.add_argument("--num_envs", type=int, default=512)
    parser.add_argument(
        "--strategies",
        nargs="*",
        default=list(STRATEGIES),
        choices=STRATEGIES + MORE_STRATEGIES,
        help="the PBT arms (each pbt/selection=<name>); no-PBT always runs (alone when none is given)",
    )
    parser.add_argument(
        "--search_space",
        default=None,
        help="draw the initial samples from this search space and give it to the PBT arms",
    )
    parser.add_argument(
        "--train_args",
        nargs="*",
        default=[],
        help="task/train overrides for every member of every arm, no-PBT included (a variant of the "
        "task or of its training, e.g. train.params.config.lr_schedule=constant)",
    )
    parser.add_argument("--pbt_args", nargs="*", default=[], help="extra pbt.* overrides for every PBT arm")
    parser.add_argument(
        "--pbt_seed",
        type=int,
        default=None,
        help="another draw of PBT's own randomness (its explore steps), independent in every seed set: "
        "each set's PBT arms get pbt.seed=100 x PBT_SEED + the set (default: each member's explore "
        "steps follow from its training seed). A pbt.seed in --pbt_args is instead the same in every set",
    )
    parser.add_argument(
        "--reseed",
        type=int,
        default=0,
        help="train each seed set's samples from other seeds, 10000 x (set + 1) + 1000 x RESEED + "
        "member (0..9; 0, the default: the seed set's own seeds): the same comparison on another "
        "draw of each run's luck",
    )
    parser.add_argument("--out", default="benchmarks/results/ablation_selection.json")
    parser.add_argument(
        "--play_episodes",
        type=int,
        default=0,
        help="score every member by playing its final policy for this many episodes (deterministic "
        "actions) instead of its last training objective, which a member changed in its last "
        "intervals does not have; 0: the training objective",
    )
    parser.add_argument(
        "--curve",
        action="store_true",
        help="with --play_episodes: also play every member's policy at 25/50/75%% of the budget (the "
        "arm's best and mean there), and for each PBT arm find the frames at which its best "
        "member first played at least no-PBT's final best (frames-to-target). Members save a "
        "checkpoint every 1/12 of the budget (train.params.config.save_frequency)",
    )
    parser.add_argument(
        "--fine_target",
        action="store_true",
        help="with --curve: PBT members save every epoch, and frames-to-target plays every save "
        "between the 1/12 look before the first one that reached the target and it: the frames "
        "to the epoch, not to the look",
    )
    parser.add_argument(
        "--no_pbt_from",
        default=None,
        help="take the no-PBT arm of each seed set from this earlier result of a larger population "
        "(same task, frames, envs, search space, scoring; its first --members members must have "
        "the same samples and seeds) made on a machine with the same numerics (its untrained policy "
        "must play the same bits here, or the run stops before training): independent runs need not "
        "be trained twice",
    )
    parser.add_argument(
        "--keep_dir",
        default=None,
        help="copy each arm's workspace lineage and member logs here (<dir>/set<N>/<arm>/) before "
        "the temporary run directory goes: the evidence of what PBT did",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the arms already in --out (same task, members, frames) and run only the rest",
    )
    args = parser.parse_args()
    if args.curve and args.play_episodes <= 0:
        parser.error("--curve scores by playing: give --play_episodes too")
    if args.fine_target and not args.curve:
        parser.error("--fine_target refines the curve's frames-to-target: give --curve too")
    try:
        check_reseed(args.reseed, args.members)
    except ValueError as error:
        parser.error(str(error))
    fixed_seed = [arg for arg in args.pbt_args if arg.startswith(PBT_SEED_KEY)]
    if fixed_seed and args.pbt_seed is not None:
        parser.error(f"--pbt_seed sets pbt.seed per seed set: drop {fixed_seed[0]} from --pbt_args")
    if args.pbt_seed is not None and not (0 <= args.pbt_seed and args.seed_sets <= 100):
        parser.error(f"--pbt_seed {args.pbt_seed} with {args.seed_sets} seed sets: give PBT_SEED >= 0 and at most 100 sets")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if fixed_seed and args.seed_sets > 1:
        log.warning(
            "%s is the same in every seed set: member i's explore steps come from one stream in all of "
            "them, so the sets are not independent draws of PBT's randomness. --pbt_seed gives each its own",
            fixed_seed[0],
        )
    sampler = (
        space_sampler(args.search_space, args.task, args.num_envs) if args.search_space else sample_hyperparameters
    )
    arms = [NO_PBT] + list(args.strategies)
    meta: Dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "args": vars(args),
        "command": " ".join(["python", "benchmarks/ablation.py"] + sys.argv[1:]),
        "sets": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = finished_sets(out, args) if args.resume else {}
    earlier = json.loads(Path(args.no_pbt_from).read_text()) if args.no_pbt_from else None
    if earlier is not None:
        mismatch = [
            k
            for k in ("task", "frames", "num_envs", "search_space", "train_args", "play_episodes", "curve")
            if earlier["args"].get(k, [] if k == "train_args" else None) != getattr(args, k)
        ]
        if mismatch or earlier["args"]["members"] < args.members:
            raise SystemExit(f"--no_pbt_from: {args.no_pbt_from} differs in {mismatch or ['members']}")
        meta["no_pbt_from"] = args.no_pbt_from
    per_epoch = frames_per_epoch(args.task, args.num_envs) if args.curve else 0
    if args.play_episodes > 0:  # the untrained policy's score: the offset of ratios over a random policy
        with tempfile.TemporaryDirectory() as tmp:
            meta["random_score"] = play_batch(
                [Path("random")], args.task, args.play_episodes, Path(tmp) / "random.log", args.train_args
            )["random"]
    if earlier is not None and (why := numerics_differ(earlier, meta.get("random_score"))) is not None:
        raise SystemExit(f"--no_pbt_from: {args.no_pbt_from} was made with other numerics: {why}")
    if earlier is not None and args.play_episodes > 0:  # one independent run trained again, to the bit
        first = earlier["sets"][0]
        stored = first["arms"][NO_PBT]
        member = max(range(len(stored["scores"])), key=lambda i: stored["scores"][i])
        with tempfile.TemporaryDirectory() as tmp:
            replayed = run_arm(
                NO_PBT,
                args.task,
                [first["samples"][member]],
                [first["seeds"][member]],
                args.frames,
                args.num_envs,
                Path(tmp),
                [],
                args.search_space,
                args.play_episodes,
                common=args.train_args,
            )["scores"][0]
        if (why := replay_differs(stored, member, replayed)) is not None:
            raise SystemExit(f"--no_pbt_from: {args.no_pbt_from} cannot stand for this machine's runs: {why}")
        log.info("--no_pbt_from: member %d of seed set %d trained again plays %r, as stored", member, first["seed_set"], replayed)
    for s in range(args.seed_sets):
        samples, seeds = seed_set(s, args.members, sampler, args.reseed)
        entry: Dict[str, Any] = {"seed_set": s, "samples": samples, "seeds": seeds, "arms": {}}
        if s in done:
            if done[s]["samples"] != samples or done[s]["seeds"] != seeds:
                raise SystemExit(f"--resume: seed set {s} in {out} was drawn differently; rerun without --resume")
            entry["arms"] = dict(done[s]["arms"])
        if earlier is not None and NO_PBT not in entry["arms"]:
            other = next(e for e in earlier["sets"] if e["seed_set"] == s)
            if other["samples"][: args.members] != samples or other["seeds"][: args.members] != seeds:
                raise SystemExit(f"--no_pbt_from: seed set {s} of {args.no_pbt_from} has other samples or seeds")
            entry["arms"][NO_PBT] = reused_no_pbt(other["arms"][NO_PBT], args.members)
        meta["sets"].append(entry)
        with tempfile.TemporaryDirectory() as tmp:
            for arm in arms:
                if arm in entry["arms"]:
                    reused = entry["arms"][arm].get("reused")
                    log.info("seed set %d %s: kept from %s", s, arm, args.no_pbt_from if reused else out)
                    continue
                with open("/proc/loadavg") as f:
                    load = f.read().split()[0]
                target = entry["arms"][NO_PBT]["best"] if NO_PBT in entry["arms"] else None
                result = run_arm(
                    arm,
                    args.task,
                    samples,
                    seeds,
                    args.frames,
                    args.num_envs,
                    Path(tmp),
                    set_pbt_args(args.pbt_args, args.pbt_seed, s),
                    args.search_space,
                    args.play_episodes,
                    per_epoch,
                    target,
                    args.train_args,
                    args.fine_target,
                )
                result["load_before"] = float(load)
                if args.keep_dir:
                    keep_evidence(Path(tmp), arm, len(samples), Path(args.keep_dir) / f"set{s}" / arm)
                entry["arms"][arm] = result
                log.info(
                    "seed set %d %s: best %.3f mean %.3f exploits %d stuck %s (%.0f s, load %s) %s",
                    s,
                    arm,
                    result["best"],
                    result["mean"],
                    result["exploits"],
                    result["stuck"],
                    result["seconds"],
                    load,
                    [round(x, 3) for x in result["scores"]],
                )
                out.write_text(json.dumps(meta, indent=2))
    table = summarize(meta["sets"], arms)
    if args.curve:
        table += [""] + curve_table(meta["sets"], arms, meta.get("random_score", 0.0))
    meta["table"] = table
    out.write_text(json.dumps(meta, indent=2))
    print("\n".join(table))


if __name__ == "__main__":
    main()
