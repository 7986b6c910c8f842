"""How high Reacher's objective can go: a scripted controller's score, the headroom a PBT outcome needs.

The controller knows the arm's geometry: inverse kinematics gives the joint angles that put the
fingertip on the goal (the elbow solution nearer the current angles), and a PD law drives the
joints there within the task's torque limit (``maxTorque``). A grid of gains is tried; the best
gain's mean objective (fraction of the 200-step episode inside the goal disc, the number PBT ranks
and ``pbt.play`` scores) is a lower bound on the task's ceiling. A learned policy cannot beat the
best independent run by 10% where that run is already within 10% of this ceiling.

    python benchmarks/reacher_ceiling.py --envs 1024 --out benchmarks/results/reacher_ceiling.json
"""

import argparse
import itertools
import json
import logging
import math
import platform
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pbt.tasks.reacher import Reacher  # noqa: E402

log = logging.getLogger("reacher_ceiling")

KP = (0.5, 1.0, 1.5, 2.0, 3.0)
KD = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7)


def joint_error(task: Reacher) -> torch.Tensor:
    """Wrapped angle error to the inverse-kinematics solution nearer the current joint angles."""
    x, y = task.goal[:, 0], task.goal[:, 1]
    l1, l2 = task.l1, task.l2
    cos2 = ((x**2 + y**2 - l1**2 - l2**2) / (2 * l1 * l2)).clamp(-1.0, 1.0)
    errors = []
    for elbow in (1.0, -1.0):
        q2 = elbow * torch.acos(cos2)
        q1 = torch.atan2(y, x) - torch.atan2(l2 * torch.sin(q2), l1 + l2 * torch.cos(q2))
        err = torch.stack([q1, q2], -1) - task.q
        errors.append(torch.remainder(err + math.pi, 2 * math.pi) - math.pi)
    nearer = (errors[0].abs().sum(-1) <= errors[1].abs().sum(-1)).unsqueeze(-1)
    return torch.where(nearer, errors[0], errors[1])


def score(kp: float, kd: float, envs: int, episodes: int, seed: int) -> Tuple[float, int]:
    """Mean objective of ``episodes`` full episodes per env under the PD gains (kp, kd)."""
    task = Reacher({"env": {"numEnvs": envs, "desyncEpisodes": False}, "seed": seed})
    task.reset()
    finished: List[float] = []
    for _ in range(task.max_episode_length * episodes):
        torque = kp * joint_error(task) - kd * task.q_dot
        _, _, _, extras = task.step((torque / task.max_torque).clamp(-1.0, 1.0))
        done = extras["true_objective"]
        finished.extend(done[~torch.isnan(done)].tolist())
    return sum(finished) / max(len(finished), 1), len(finished)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per env for each gain")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "reacher_ceiling.json")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    grid: List[Dict[str, float]] = []
    for kp, kd in itertools.product(KP, KD):
        objective, count = score(kp, kd, args.envs, args.episodes, args.seed)
        grid.append({"kp": kp, "kd": kd, "objective": objective, "episodes": count})
        log.info("kp %.1f kd %.1f: objective %.3f over %d episodes", kp, kd, objective, count)
    best = max(grid, key=lambda g: g["objective"])
    log.info("ceiling (best scripted controller): %.3f at kp %.1f kd %.1f", best["objective"], best["kp"], best["kd"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "python": platform.python_version(),
                "args": {k: str(v) for k, v in vars(args).items()},
                "best": best,
                "grid": grid,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
