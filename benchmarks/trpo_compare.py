"""This project's TRPO side by side with skrl's (2.x) and sb3-contrib's on the built-in Pendulum.

All three train on the same task (pbt/tasks/pendulum.py, 256 envs stepped as one torch batch; the
peers see it through a gymnasium ``VectorEnv`` wrapper, sb3 through its ``VecEnv`` interface on top of
that), for the same frames, with the same networks (separate policy and value MLPs [64, 64], ELU),
the same trust region (max KL 0.02, damping 0.1, 10 conjugate-gradient steps, 10 backtracking
steps), gamma 0.95, GAE lambda 0.95, 32 steps per env per update, value Adam at 1e-3 in 4
minibatches over 5 epochs. Each final policy is then evaluated with deterministic actions on full
episodes from uniformly random starts (ours through ``python -m pbt.play``, the peers by the loop
below: 100 envs, one 200-step episode each).

Needs the peers: ``pip install -e .[trpo-compare]``. Run it under ``flock /tmp/heavy.lock`` on a quiet
machine: it measures speed. The table goes into docs/benchmarks/trpo.md.

    python benchmarks/trpo_compare.py --frames 500000 --seeds 3 --out trpo_compare.json
"""
import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import gymnasium
import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pbt.tasks.pendulum import Pendulum  # noqa: E402

log = logging.getLogger("trpo_compare")

NUM_ENVS = 256
HORIZON = 32
MAX_KL = 0.02
GAMMA = 0.95
LAMBDA = 0.95
UNITS = [64, 64]
VALUE_LR = 1e-3
EPOCHS = 5
MINIBATCHES = 4
REWARD_SCALE = 0.1  # ours scales rewards by 0.1 (PendulumTRPO); skrl gets the same shaper
EVAL_ENVS = 100


class PendulumVectorEnv(gymnasium.vector.VectorEnv):
    """The built-in Pendulum as a gymnasium vector env (numpy in and out, same-step autoreset)."""

    metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, seed: int, desync: bool = True) -> None:
        self.task = Pendulum({"seed": seed, "env": {"numEnvs": num_envs, "desyncEpisodes": desync}})
        self.num_envs = num_envs
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.task.num_obs,), np.float32)
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> Any:
        return self.task.reset()["obs"].numpy().copy(), {}

    def step(self, actions: Any) -> Any:
        act = torch.as_tensor(np.asarray(actions), dtype=torch.float32).reshape(self.num_envs, 1)
        obs, reward, done, extras = self.task.step(act)
        truncated = extras["time_outs"]
        terminated = done & ~truncated
        return (obs["obs"].numpy().copy(), reward.numpy().copy(), terminated.numpy().copy(),
                truncated.numpy().copy(), {})


def evaluate(act: Callable[[torch.Tensor], torch.Tensor], seed: int) -> float:
    """Mean return of deterministic ``act`` over EVAL_ENVS full episodes from uniformly random starts."""
    env = PendulumVectorEnv(EVAL_ENVS, seed=10_000 + seed, desync=False)
    obs, _ = env.reset()
    total = np.zeros(EVAL_ENVS)
    with torch.no_grad():
        for _ in range(env.task.max_episode_length):
            action = act(torch.as_tensor(obs)).clamp(-1.0, 1.0).numpy()
            obs, reward, *_ = env.step(action)
            total += reward
    return float(total.mean())


# -- this project ---------------------------------------------------------------------------------------
def run_ours(frames: int, seed: int, root: Path) -> Dict[str, Any]:
    common = ["task=Pendulum", "train=PendulumTRPO", f"num_envs={NUM_ENVS}", "sim_device=cpu", "rl_device=cpu",
              "torch_threads=1", f"seed={seed}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    start = time.time()
    train = subprocess.run([sys.executable, "-m", "pbt.train", *common, f"max_frames={frames}",
                            f"train_dir={root / 'runs'}", f"experiment=ours{seed}"], cwd=str(root), env=env,
                           capture_output=True, text=True, check=True)
    wall = time.time() - start
    summary = next(ln for ln in (train.stdout + train.stderr).splitlines() if "SUMMARY frames=" in ln)
    fields = dict(part.split("=", 1) for part in summary.split("SUMMARY ")[1].split())
    checkpoint = sorted((root / "runs" / f"ours{seed}" / "nn").glob("last_*.pth"))[-1]
    play = subprocess.run([sys.executable, "-m", "pbt.play", f"checkpoint={checkpoint}", *common,
                           f"num_envs={EVAL_ENVS}", f"episodes={EVAL_ENVS}"], cwd=str(root), env=env,
                          capture_output=True, text=True, check=True)
    line = next(ln for ln in (play.stdout + play.stderr).splitlines() if "PLAY episodes=" in ln)
    return {"frames": int(fields["frames"]), "train_seconds": float(fields["wall_time"].rstrip("s")),
            "wall_seconds": wall, "eval_return": float(line.split("mean_return=")[1].split()[0])}


# -- skrl 2.x -------------------------------------------------------------------------------------------
def run_skrl(frames: int, seed: int, root: Path) -> Dict[str, Any]:
    from skrl.agents.torch.trpo import TRPO, TRPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    def mlp(inputs: int, outputs: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(inputs, UNITS[0]), torch.nn.ELU(), torch.nn.Linear(*UNITS),
                                   torch.nn.ELU(), torch.nn.Linear(UNITS[1], outputs))

    class Policy(GaussianMixin, Model):
        def __init__(self, observation_space: Any, action_space: Any, device: Any) -> None:
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            GaussianMixin.__init__(self, clip_actions=True)
            self.net = mlp(self.num_observations, self.num_actions)
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs: Dict[str, Any], role: str = "") -> Any:
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space: Any, action_space: Any, device: Any) -> None:
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            DeterministicMixin.__init__(self)
            self.net = mlp(self.num_observations, 1)

        def compute(self, inputs: Dict[str, Any], role: str = "") -> Any:
            return self.net(inputs["observations"]), {}

    set_seed(seed)
    env = wrap_env(PendulumVectorEnv(NUM_ENVS, seed), wrapper="gymnasium")
    device = torch.device("cpu")
    models = {"policy": Policy(env.observation_space, env.action_space, device),
              "value": Value(env.observation_space, env.action_space, device)}
    cfg = TRPO_CFG(rollouts=HORIZON, learning_epochs=EPOCHS, mini_batches=MINIBATCHES, discount_factor=GAMMA,
                   gae_lambda=LAMBDA, learning_rate=VALUE_LR, max_kl_divergence=MAX_KL, damping=0.1,
                   conjugate_gradient_steps=10, max_backtrack_steps=10, accept_ratio=0.5, step_fraction=1.0,
                   grad_norm_clip=1.0, value_loss_scale=1.0,
                   observation_preprocessor=RunningStandardScaler,
                   observation_preprocessor_kwargs={"size": env.observation_space, "device": device},
                   value_preprocessor=RunningStandardScaler, value_preprocessor_kwargs={"size": 1, "device": device},
                   rewards_shaper=lambda rewards, *args, **kwargs: rewards * REWARD_SCALE)
    cfg.experiment.directory = str(root / "skrl")
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    memory = RandomMemory(memory_size=HORIZON, num_envs=NUM_ENVS, device=device)
    agent = TRPO(models=models, memory=memory, observation_space=env.observation_space,
                 action_space=env.action_space, device=device, cfg=cfg)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": frames // NUM_ENVS, "headless": True,
                                                             "disable_progressbar": True})
    start = time.time()
    trainer.train()
    seconds = time.time() - start
    agent.enable_training_mode(False, apply_to_models=True)

    def act(obs: torch.Tensor) -> torch.Tensor:
        inputs = {"observations": agent._observation_preprocessor(obs.float())}
        return agent.policy.act(inputs, role="policy")[1]["mean_actions"]

    return {"frames": (frames // NUM_ENVS) * NUM_ENVS, "train_seconds": seconds, "wall_seconds": seconds,
            "eval_return": evaluate(act, seed)}


# -- sb3-contrib ----------------------------------------------------------------------------------------
def run_sb3(frames: int, seed: int, root: Path) -> Dict[str, Any]:
    from sb3_contrib import TRPO
    from stable_baselines3.common.vec_env import VecEnv

    class Sb3Pendulum(VecEnv):
        """sb3's VecEnv interface over the gymnasium vector env."""

        def __init__(self, env: PendulumVectorEnv) -> None:
            self.env = env
            super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

        def reset(self) -> np.ndarray:
            return self.env.reset()[0]

        def step_async(self, actions: np.ndarray) -> None:
            self.actions = actions

        def step_wait(self) -> Any:
            obs, reward, terminated, truncated, _ = self.env.step(self.actions)
            infos: List[Dict[str, Any]] = [{} for _ in range(self.num_envs)]
            return obs, reward, terminated | truncated, infos

        def close(self) -> None:
            pass

        def get_attr(self, attr_name: str, indices: Any = None) -> List[Any]:
            return [None] * self.num_envs

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            pass

        def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> List[Any]:
            return [None] * self.num_envs

        def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> List[bool]:
            return [False] * self.num_envs

    env = Sb3Pendulum(PendulumVectorEnv(NUM_ENVS, seed))
    model = TRPO("MlpPolicy", env, n_steps=HORIZON, batch_size=NUM_ENVS * HORIZON // MINIBATCHES, gamma=GAMMA,
                 gae_lambda=LAMBDA, learning_rate=VALUE_LR, n_critic_updates=EPOCHS, target_kl=MAX_KL,
                 cg_max_steps=10, cg_damping=0.1, line_search_shrinking_factor=0.5, line_search_max_iter=10,
                 normalize_advantage=True, seed=seed, device="cpu", verbose=0,
                 policy_kwargs={"net_arch": {"pi": UNITS, "vf": UNITS}, "activation_fn": torch.nn.ELU})
    start = time.time()
    model.learn(total_timesteps=frames)
    seconds = time.time() - start

    def act(obs: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(model.predict(obs.numpy(), deterministic=True)[0])

    return {"frames": int(model.num_timesteps), "train_seconds": seconds, "wall_seconds": seconds,
            "eval_return": evaluate(act, seed)}


RUNNERS = {"pbt-rl TRPO": run_ours, "skrl TRPO": run_skrl, "sb3-contrib TRPO": run_sb3}


def table(results: Dict[str, List[Dict[str, Any]]]) -> str:
    lines = ["| implementation | seeds | frames | final return (mean ± sd) | frames/s (mean) | train wall time per seed (s) |",
             "|---|---|---|---|---|---|"]
    for name, runs in results.items():
        if not runs:
            continue
        returns = [r["eval_return"] for r in runs]
        fps = [r["frames"] / r["train_seconds"] for r in runs]
        mean = sum(returns) / len(returns)
        sd = math.sqrt(sum((x - mean) ** 2 for x in returns) / max(1, len(returns) - 1))
        lines.append(f"| {name} | {len(runs)} | {runs[0]['frames']} | {mean:.0f} ± {sd:.0f} "
                     f"({', '.join(f'{x:.0f}' for x in returns)}) | {sum(fps) / len(fps):.0f} | "
                     f"{sum(r['train_seconds'] for r in runs) / len(runs):.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=sorted(RUNNERS), help="run only these implementations")
    parser.add_argument("--out", type=Path, default=Path("trpo_compare.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in RUNNERS if not args.only or name in args.only}
    with tempfile.TemporaryDirectory(prefix="trpo_compare_") as tmp:
        for seed in range(args.seeds):
            for name in results:
                run = RUNNERS[name](args.frames, seed, Path(tmp))
                run["seed"] = seed
                results[name].append(run)
                log.info("%s seed %d: %s", name, seed, run)
                args.out.write_text(json.dumps(results, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
