"""Play many checkpoints of one task in one process: ``pbt.play``'s scoring (``pbt.tools.play.play``:
the same config, deterministic actions, the same episode count) without paying Python, torch and
Hydra start-up once per checkpoint. Used by ``benchmarks/ablation.py`` to score members' final and
intermediate policies.

    python benchmarks/play_checkpoints.py --task Reacher --episodes 64 --out scores.json a.pth b.pth
    python benchmarks/play_checkpoints.py --task Reacher --episodes 64 --out scores.json random

``random``: the untrained policy (the network as initialised, seeded by the config's seed), the
baseline for ratios of (score - random policy's score). Writes {path: objective} (NaN when a
checkpoint could not be played; the reason is logged).
"""

import argparse
import json
import logging
import math
import sys
import tempfile
from pathlib import Path
from typing import Dict, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RANDOM = "random"
log = logging.getLogger("play_checkpoints")


def compose(task: str, episodes: int, checkpoint: str, overrides: Sequence[str]) -> object:
    """The config ``python -m pbt.play checkpoint=... task=... episodes=...`` would build (as ablation.py calls it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pbt.tasks.registry import rewrite_task_overrides

    args = [
        f"checkpoint={checkpoint}",
        f"task={task}",
        f"num_envs={min(episodes, 256)}",
        "sim_device=cpu",
        "rl_device=cpu",
        "torch_threads=1",
        *overrides,
    ]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        return hydra_compose(config_name="config", overrides=rewrite_task_overrides(args))


def play_random(cfg: object, episodes: int) -> float:
    """The objective of the freshly initialised policy, played like a checkpoint."""
    from omegaconf import open_dict

    from pbt.rl_games.runner import build_runner, create_agent
    from pbt.tools.play import run_episodes

    with tempfile.TemporaryDirectory(prefix="pbt_play_") as tmp:
        with open_dict(cfg):
            cfg.train_dir = tmp  # type: ignore[attr-defined]
            cfg.experiment = "play"  # type: ignore[attr-defined]
            cfg.pbt.enabled = False  # type: ignore[attr-defined]
        agent = create_agent(build_runner(cfg), "play")
        key = str(cfg.pbt.get("objective", "true_objective"))  # type: ignore[attr-defined]
        return run_episodes(agent, episodes, key).objective


def play_all(task: str, episodes: int, paths: Sequence[str], overrides: Sequence[str] = ()) -> Dict[str, float]:
    from pbt.errors import PbtError
    from pbt.resolvers import register_resolvers
    from pbt.tools.play import play

    register_resolvers()
    scores: Dict[str, float] = {}
    for path in paths:
        try:
            cfg = compose(task, episodes, "" if path == RANDOM else path, overrides)
            scores[path] = play_random(cfg, episodes) if path == RANDOM else play(cfg, episodes).objective
        except (PbtError, OSError, RuntimeError) as exc:
            log.warning("playing %s failed: %s", path, exc)
            scores[path] = math.nan
    return scores


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--out", required=True)
    parser.add_argument("--override", action="append", default=[], help="a config override for every play")
    parser.add_argument("paths", nargs="+", help=f"checkpoints, or '{RANDOM}' for the untrained policy")
    args = parser.parse_args(list(argv) or None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    scores = play_all(args.task, args.episodes, args.paths, args.override)
    Path(args.out).write_text(json.dumps(scores, indent=1))
    for path, score in scores.items():
        log.info("PLAYED %s objective=%.4g", path, score)


if __name__ == "__main__":
    main(sys.argv[1:])
