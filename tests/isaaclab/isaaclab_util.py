"""Helpers of the Isaac Lab tests: the local cartpole asset and the common worker arguments.

The tests run on Python 3.12 with isaaclab==3.0.0 (scripts/test_isaaclab.sh); elsewhere they are skipped.
"""
import os
import tempfile
from pathlib import Path
from typing import List

TASK = "isaaclab/Isaac-Cartpole-Direct"
NUM_ENVS = 64


def cartpole_asset() -> Path:
    """The corrected newton cartpole (written by scripts/test_isaaclab.sh, else into a temp folder)."""
    given = os.environ.get("PBT_ISAACLAB_CARTPOLE_USD")
    if given and Path(given).is_file():
        return Path(given)
    from pbt.tasks.isaaclab_assets import write_newton_cartpole

    return write_newton_cartpole(Path(tempfile.mkdtemp(prefix="pbt-isaaclab-asset-")))


def task_args(asset: Path, num_envs: int = NUM_ENVS) -> List[str]:
    """Isaac-Cartpole-Direct kit-less on CPU (Newton), offline: local cartpole, cuboid ground."""
    return [f"task={TASK}", "task.presets=newton_mjwarp", "task.groundCuboid=true",
            f"task.env.scene.cartpole.spawn.usd_path={asset}", f"num_envs={num_envs}", "sim_device=cpu",
            "rl_device=cpu", "torch_threads=1"]


def scalars(summaries: Path, tag: str) -> List[float]:
    """The values of one TensorBoard scalar rl_games wrote, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags().get("scalars", []):
        return []
    return [e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step)]
