"""Isaac Lab's own rl_games training entry point (with its own PBT observer), offline on a CPU
machine, for ``benchmarks/isaaclab_side_by_side.py``. Not part of the product.

Runs ``isaaclab_rl.entrypoints.backends.train_rl_games.run`` unchanged except for what an offline
CPU machine needs and what the benchmark measures:

- the env config gets the local cartpole asset (``PBT_ISAACLAB_CARTPOLE_USD``) and a cuboid ground
  (NVIDIA's asset servers are unreachable), CUDA graphs off;
- the agent config gets the PBT block in ``PBT_BENCH_AGENT_PBT`` (JSON; the cartpole agent YAML has
  none) and the run name in ``PBT_BENCH_RUN_NAME`` (two members starting in the same second would
  share Isaac Lab's timestamped run folder);
- ``torch_compile`` off, as our worker sets it on CPU (rl_games 1.6.5 compiles by default: minutes of
  start-up on CPU);
- the PBT observer's objective is rl_games' mean episode return (Isaac-Cartpole-Direct logs no
  episode key for ``agent.pbt.objective`` to name; our arm uses the same quantity);
- timing events go to ``PBT_BENCH_EVENTS`` (JSON lines): ``decided`` when the observer raises its
  restart flag, ``first_step`` at the first env step of each process, with whether it restored a
  checkpoint;
- ``--device`` from ``PBT_BENCH_DEVICE`` when the command line lacks it (Isaac Lab's restart drops
  every flag but --task, --seed and --num_envs);
- torch threads from ``PBT_BENCH_TORCH_THREADS`` (our arm runs with ``torch_threads=1`` too).

Isaac Lab's observer restarts a member by re-executing ``sys.argv[0]`` (this file) with new
arguments, so every restart goes through the same patches.
"""
import json
import os
import sys
import time
from typing import Any, Dict


# Read now: Isaac Lab's train script later cuts sys.argv down to the Hydra arguments.
RESTORED = any(a.startswith("--checkpoint") for a in sys.argv[1:])


def _event(kind: str, **fields: Any) -> None:
    path = os.environ.get("PBT_BENCH_EVENTS")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"kind": kind, "t": time.time(), "pid": os.getpid(), **fields}) + "\n")


def _patch() -> None:
    from isaaclab_rl.entrypoints.backends import train_rl_games as entry
    from isaaclab_rl.rl_games import RlGamesVecEnvWrapper
    from isaaclab_rl.rl_games.pbt import pbt as il_pbt

    from pbt.tasks.isaaclab_assets import use_ground_cuboid

    resolve = entry.resolve_task_config

    def offline_task_config(task: str, agent: str) -> Any:
        env_cfg, agent_cfg = resolve(task, agent)
        env_cfg.scene.cartpole.spawn.usd_path = os.environ["PBT_ISAACLAB_CARTPOLE_USD"]
        use_ground_cuboid(env_cfg)
        env_cfg.sim.physics.use_cuda_graph = False
        block: Dict[str, Any] = json.loads(os.environ.get("PBT_BENCH_AGENT_PBT") or "{}")
        if block:
            agent_cfg["pbt"] = block
        # rl_games compiles the model unless told not to; on CPU our worker turns that off, so does this
        agent_cfg["params"]["config"]["torch_compile"] = False
        if os.environ.get("PBT_BENCH_RUN_NAME"):
            agent_cfg["params"]["config"]["full_experiment_name"] = os.environ["PBT_BENCH_RUN_NAME"]
        return env_cfg, agent_cfg

    entry.resolve_task_config = offline_task_config

    def mean_episode_return(self: Any, infos: Any, done_indices: Any) -> None:
        rewards = getattr(getattr(self, "algo", None), "game_rewards", None)
        if rewards is not None and rewards.current_size > 0:
            self.score = float(rewards.get_mean()[0])

    il_pbt.PbtAlgoObserver.process_infos = mean_episode_return

    after_steps = il_pbt.PbtAlgoObserver.after_steps

    def timed_after_steps(self: Any) -> None:
        before = int(self.restart_flag.cpu().item())
        after_steps(self)
        if before == 0 and int(self.restart_flag.cpu().item()) == 1:
            _event("decided", policy=self.cfg.policy_idx, frame=int(self.algo.frame),
                   checkpoint=getattr(self, "restart_from_checkpoint", None))

    il_pbt.PbtAlgoObserver.after_steps = timed_after_steps

    step = RlGamesVecEnvWrapper.step
    state = {"first": True}

    def timed_step(self: Any, actions: Any) -> Any:
        if state["first"]:
            state["first"] = False
            _event("first_step", restored=RESTORED)
        return step(self, actions)

    RlGamesVecEnvWrapper.step = timed_step


def main() -> None:
    _event("start")
    if os.environ.get("PBT_BENCH_TORCH_THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["PBT_BENCH_TORCH_THREADS"]))
    _patch()
    from isaaclab_rl.entrypoints.backends import train_rl_games as entry

    argv = sys.argv[1:]
    # Isaac Lab's restart forwards only --task, --seed and --num_envs of its flags (and the Hydra
    # overrides): a restarted member would build its simulation on cuda:0. Keep it on this device.
    device = os.environ.get("PBT_BENCH_DEVICE")
    if device and not any(a == "--device" or a.startswith("--device=") for a in argv):
        argv += ["--device", device]
    entry.run(argv)


if __name__ == "__main__":
    main()
