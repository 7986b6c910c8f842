"""The curve half of the selection ablation (benchmarks/ablation.py): which saved policy stands for
which point of the budget, playing many policies in one process per core, frames-to-target, and
the curve table. Kept apart so that each module stays one concept."""

import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
EPOCH_CHECKPOINT = re.compile(r"^last_.*_ep_(\d+)_rew_")
FRAME_CHECKPOINT = re.compile(r"^last_.*_frame_(\d+)_rew_")
CURVE_STEPS = 12
"""--curve: members' policies are looked at every 1/CURVE_STEPS of the budget (the PBT interval)."""
QUARTERS = (3, 6, 9, 12)
"""... and played at these steps for the curve (25/50/75/100% of the budget)."""
NO_PBT = "no_pbt"
log = logging.getLogger("ablation")


def final_checkpoint(run_dir: Path) -> Optional[Path]:
    """The member's final rl_games checkpoint (``<run dir>/nn/last_*_frame_*.pth``, written at its
    frame budget), else its newest ``last_*.pth``; None when it has none."""
    checkpoints = sorted((run_dir / "nn").glob("last_*.pth"), key=lambda p: p.stat().st_mtime)
    finals = [p for p in checkpoints if FRAME_CHECKPOINT.match(p.name)]
    return (finals or checkpoints or [None])[-1]


def epoch_checkpoints(run_dir: Path, frames_per_epoch: int) -> Dict[int, Path]:
    """frame -> checkpoint of the saves rl_games wrote every ``save_frequency`` epochs (--curve),
    the final one included (by its frame)."""
    found: Dict[int, Path] = {}
    for path in (run_dir / "nn").glob("last_*.pth"):
        epoch, final = EPOCH_CHECKPOINT.match(path.name), FRAME_CHECKPOINT.match(path.name)
        if epoch:
            found.setdefault(int(epoch.group(1)) * frames_per_epoch, path)
        elif final:
            found[int(final.group(1))] = path
    return found


def curve_checkpoint(found: Dict[int, Path], step: int, frames: int) -> Optional[Tuple[int, Path]]:
    """(frame, checkpoint) for curve step ``step`` of CURVE_STEPS: the newest save at or before
    step/CURVE_STEPS of the budget; the final save for the last step."""
    if not found:
        return None
    if step >= CURVE_STEPS:
        frame = max(found)
        return frame, found[frame]
    before = [f for f in found if f <= frames * step // CURVE_STEPS]
    return (max(before), found[max(before)]) if before else None


def play_batch(
    paths: Sequence[Path], task: str, episodes: int, log_path: Path, overrides: Sequence[str] = ()
) -> Dict[str, float]:
    """Each checkpoint's policy played with deterministic actions for ``episodes`` full episodes
    (``pbt.tools.play.play``, as ``python -m pbt.play`` does: see benchmarks/play_checkpoints.py),
    split over one process per core (each play builds its own env from the config's seed, so the
    split changes no score): path -> its objective, NaN for one that could not be played.
    Every member is scored the same way, however late its last change came (a member changed in its
    last intervals prints no training objective). ``overrides``: the config the checkpoints were
    trained with (e.g. their network), beyond the task. "random" plays the untrained policy."""
    if not paths:
        return {}
    workers = max(1, min(len(paths), os.cpu_count() or 1))
    chunks = [list(paths[i::workers]) for i in range(workers)]
    outs = [log_path.with_name(f"{log_path.stem}.{i}.json") for i in range(workers)]
    # Each process writes to its own file: a pipe left unread while another process is awaited
    # would fill and stall its writer.
    logs = [log_path.with_name(f"{log_path.stem}.{i}.out") for i in range(workers)]
    procs = []
    for chunk, out, part in zip(chunks, outs, logs):
        with part.open("w") as sink:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(REPO / "benchmarks" / "play_checkpoints.py"),
                        f"--task={task}",
                        f"--episodes={episodes}",
                        f"--out={out}",
                        *[f"--override={o}" for o in overrides],
                        *map(str, chunk),
                    ],
                    cwd=str(REPO),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
    for proc in procs:
        proc.wait()
    outputs = [part.read_text() for part in logs]
    log_path.write_text("".join(outputs))
    scores: Dict[str, float] = {}
    for proc, out in zip(procs, outs):
        if proc.returncode == 0 and out.exists():
            scores.update(json.loads(out.read_text()))
    failed = [proc.returncode for proc in procs if proc.returncode != 0]
    if failed or any(not math.isfinite(scores.get(str(p), math.nan)) for p in paths):
        kept = REPO / "benchmarks" / "results" / f"ablation_failed_play_{log_path.stem}_{int(time.time())}.log"
        kept.write_text("".join(output[-20000:] for output in outputs))
        log.warning("playing some of %d checkpoints failed (exits %s); the output is in %s", len(paths), failed, kept)
    return {str(p): scores.get(str(p), math.nan) for p in paths}


def played_score(
    checkpoint: Optional[Path], task: str, episodes: int, log_path: Path, overrides: Sequence[str] = ()
) -> float:
    """One member's final policy played (:func:`play_batch`); NaN when it has no final checkpoint."""
    if checkpoint is None:
        return math.nan
    return play_batch([checkpoint], task, episodes, log_path, overrides)[str(checkpoint)]


def frames_per_epoch(task: str, num_envs: int) -> int:
    """Frames one rl_games epoch collects for this task: horizon_length x num_actors."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"task={task}", f"num_envs={num_envs}"])
    config = OmegaConf.to_container(cfg, resolve=True)["train"]["params"]["config"]
    return int(config["horizon_length"]) * int(config["num_actors"])


def member_curves(
    arm_dir: Path, arm: str, members: int, frames: int, per_epoch: int, steps: Sequence[int]
) -> List[Dict[int, Tuple[int, Path]]]:
    """Per member: curve step -> (frame, checkpoint) for ``steps`` (those it has a save for)."""
    out = []
    for i in range(members):
        found = epoch_checkpoints(member_run_dir(arm_dir, f"{arm}_{i}"), per_epoch)
        picked = {step: curve_checkpoint(found, step, frames) for step in steps}
        out.append({step: hit for step, hit in picked.items() if hit is not None})
    return out


def play_curve(
    arm_dir: Path,
    arm: str,
    members: int,
    frames: int,
    per_epoch: int,
    steps: Sequence[int],
    task: str,
    episodes: int,
    log_path: Path,
    also: Sequence[Path] = (),
    overrides: Sequence[str] = (),
) -> Tuple[Dict[str, Any], Dict[str, float]]:
    """Every member's policy at curve ``steps`` played: ({"steps", "frames" (per step, the first
    member's), "scores" (per step, per member), "best", "mean" (per step)}, the scores of the
    checkpoints ``also``, played in the same batch). ``overrides``: as for :func:`play_batch`."""
    picked = member_curves(arm_dir, arm, members, frames, per_epoch, steps)
    checkpoints = [*also, *[hit[1] for member in picked for hit in member.values()]]
    played = play_batch(checkpoints, task, episodes, log_path, overrides)
    scores = [[played[str(member[step][1])] if step in member else math.nan for member in picked] for step in steps]
    firsts = [next((member[step][0] for member in picked if step in member), None) for step in steps]

    def finite(values: List[float]) -> List[float]:
        return [v for v in values if math.isfinite(v)]

    return {
        "steps": list(steps),
        "frames": firsts,
        "scores": scores,
        "best": [max(finite(row), default=math.nan) for row in scores],
        "mean": [statistics.fmean(finite(row)) if finite(row) else math.nan for row in scores],
    }, {str(p): played[str(p)] for p in also}


def frames_to_target(
    arm_dir: Path,
    arm: str,
    members: int,
    frames: int,
    per_epoch: int,
    curve: Dict[str, Any],
    target: float,
    task: str,
    episodes: int,
    log_path: Path,
    overrides: Sequence[str] = (),
    fine: bool = False,
) -> Dict[str, Any]:
    """The first curve step at which any member (the population's best then) plays at least
    ``target`` (no-PBT's final best): the quarter steps already played, then the steps before the
    first quarter that reached it, played to refine. {"target", "step", "frames", "fraction", "refined"}.
    ``fine`` (members saved every epoch): then every save between the look before that step and it is
    played too, and "frames" is the first save that reached the target ("fine": the best per save
    frame). ``overrides``: as for :func:`play_batch`."""
    reached = [step for step, best in zip(curve["steps"], curve["best"]) if best >= target]
    result: Dict[str, Any] = {"target": target, "step": None, "frames": None, "fraction": None, "refined": {}}
    if not reached:
        return result
    first = reached[0]
    earlier = [s for s in curve["steps"] if s < first]
    refine = list(range((max(earlier) if earlier else 0) + 1, first))
    step = first
    if refine:
        finer, _ = play_curve(
            arm_dir, arm, members, frames, per_epoch, refine, task, episodes, log_path, overrides=overrides
        )
        result["refined"] = finer
        step = next((s for s, best in zip(refine, finer["best"]) if best >= target), first)
    hits = [m[step] for m in member_curves(arm_dir, arm, members, frames, per_epoch, [step]) if step in m]
    result.update(step=step, frames=hits[0][0] if hits else None, fraction=(hits[0][0] / frames) if hits else None)
    if fine and hits:
        looked = [
            m[step - 1][0] for m in member_curves(arm_dir, arm, members, frames, per_epoch, [step - 1]) if step - 1 in m
        ]
        saves = saves_between(arm_dir, arm, members, per_epoch, looked[0] if looked else 0, hits[0][0])
        played = play_batch(
            [p for _, p in saves], task, episodes, log_path.with_name(log_path.stem + "_fine.log"), overrides
        )
        by_frame: Dict[int, float] = {}
        for frame, path in saves:
            if math.isfinite(played[str(path)]):
                by_frame[frame] = max(by_frame.get(frame, -math.inf), played[str(path)])
        result["fine"] = {"frames": sorted(by_frame), "best": [by_frame[f] for f in sorted(by_frame)]}
        first = next((f for f in sorted(by_frame) if by_frame[f] >= target), None)
        if first is not None:
            result.update(frames=first, fraction=first / frames)
    return result


def saves_between(
    arm_dir: Path, arm: str, members: int, per_epoch: int, after: int, before: int
) -> List[Tuple[int, Path]]:
    """(frame, checkpoint) of every member's saves after frame ``after`` and before ``before`` (the
    looks on either side of the first one that reached the target): what --fine_target plays."""
    out = []
    for i in range(members):
        found = epoch_checkpoints(member_run_dir(arm_dir, f"{arm}_{i}"), per_epoch)
        out += [(frame, path) for frame, path in sorted(found.items()) if after < frame < before]
    return out


def member_run_dir(train_dir: Path, experiment: str) -> Path:
    """A member's rl_games run directory: ``experiment``, or ``experiment_pbtNNN`` for a PBT member."""
    found = sorted(train_dir.glob(f"{experiment}_pbt[0-9]*")) or [train_dir / experiment]
    return found[0]


def ratio(value: float, reference: float) -> float:
    """value / reference; NaN when the reference is 0 (nothing learned: no ratio to speak of)."""
    return value / reference if reference else math.nan


def _row(values: List[float]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


def _over(result: Dict[str, Any], reference: Dict[str, Any], key: str, offset: float) -> str:
    """result[key] / reference[key], raw and with ``offset`` (the random policy's score) taken off both."""
    value, ref = result[key], reference[key]
    return f"{ratio(value, ref):.2f} ({ratio(value - offset, ref - offset):.2f})"


def curve_table(sets: Sequence[Dict[str, Any]], arms: Sequence[str], random_score: float) -> List[str]:
    """Per seed set and arm: best and mean at 25/50/75/100% of the budget, best at the budget over
    best at half of it, the ratios to no-PBT (raw and over the random policy's score), and the
    frames at which a PBT arm's best member first played no-PBT's final best."""
    lines = [
        f"random policy's score: {random_score:.4f}",
        "",
        "| seed set | arm | best at 25 / 50 / 75 / 100% | mean at 25 / 50 / 75 / 100% | best 100% / 50% "
        "| best / no-PBT (over random) | mean / no-PBT (over random) | frames-to-target |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for entry in sets:
        reference = entry["arms"].get(NO_PBT)
        for arm in arms:
            result = entry["arms"].get(arm)
            if result is None or "curve" not in result or reference is None:
                continue
            curve = result["curve"]

            target = result.get("frames_to_target")
            reach = (
                ""
                if target is None
                else (
                    "never" if target["frames"] is None else f"{target['frames']:,} ({100 * target['fraction']:.0f}%)"
                )
            )
            half = curve["best"][curve["steps"].index(6)] if 6 in curve["steps"] else math.nan
            lines.append(
                f"| {entry['seed_set']} | {arm} | {_row(curve['best'])} | {_row(curve['mean'])} "
                f"| {ratio(curve['best'][-1], half):.2f} | {_over(result, reference, 'best', random_score)} | {_over(result, reference, 'mean', random_score)} | {reach} |"
            )
    return lines
