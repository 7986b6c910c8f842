"""Per-step cost of objective tracking (pbt/objective.py) at 4096 and 16384 envs on a no-op task.

Each step does what rl_games and the worker do around the tracker: a policy-sized forward pass queued
on the device (so a host sync has GPU work to wait for), the done flags, rl_games' own ``nonzero``
for the done indices (rl_games' sync, in every variant), then one of:

- ``none``: no tracking (the floor);
- ``per_step``: the old observer: ``done_indices.tolist()`` and, per tracker, the finished envs' entries
  gathered and copied to the host (``.cpu().tolist()``): 3 host syncs per step;
- ``deferred``: the tracker keeps the step on the device; everything is copied over when the value is
  read, once per epoch (``--horizon`` steps).

    python benchmarks/objective_sync.py --envs 4096 16384 --steps 200 [--device cuda]

On a CPU a "sync" costs nothing but the Python around it, so the CPU numbers are an upper bound of
the bookkeeping only; the stall a sync causes needs a GPU (``--device cuda``).
"""
import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from pbt.objective import MemberObjective  # noqa: E402

EPISODE_LENGTH = 100  # a done rate of 1 % per env and step
MODES = ("none", "per_step", "deferred")


def run(mode: str, envs: int, steps: int, horizon: int, device: str, hidden: int) -> float:
    """Mean seconds per step of ``mode``."""
    gen = torch.Generator(device=device).manual_seed(0)
    obs = torch.randn(envs, 64, device=device, generator=gen)
    weights = [torch.randn(64, hidden, device=device, generator=gen) / 8,
               torch.randn(hidden, hidden, device=device, generator=gen) / 16]
    returns = torch.zeros(envs, device=device)
    score = MemberObjective("true_objective", "episode_return", envs)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times: List[float] = []
    for step in range(steps + horizon):  # the first epoch warms up
        sync()
        start = time.perf_counter()
        act = torch.tanh(torch.tanh(obs @ weights[0]) @ weights[1])  # the policy, queued on the device
        returns += act[:, 0]
        dones = torch.rand(envs, device=device, generator=gen) < 1.0 / EPISODE_LENGTH
        done_indices = dones.nonzero(as_tuple=False)  # rl_games' own (a sync on a GPU)
        infos = {"episode_return": returns.clone(), "true_objective": act[:, 1]}
        if mode == "per_step":
            score.update(infos, done_indices.reshape(-1).tolist())
        elif mode == "deferred":
            score.update(infos, done_indices)
        returns.masked_fill_(dones, 0.0)
        if (step + 1) % horizon == 0:
            score.value  # noqa: B018 - the epoch's read (the deferred steps are copied here)
        sync()
        if step >= horizon:
            times.append(time.perf_counter() - start)
    return statistics.mean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=16, help="steps per epoch (one read of the objective each)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results: Dict[str, Dict[str, float]] = {}
    for envs in args.envs:
        per_mode = {mode: run(mode, envs, args.steps, args.horizon, args.device, args.hidden) for mode in MODES}
        results[str(envs)] = {f"{mode}_us_per_step": round(t * 1e6, 1) for mode, t in per_mode.items()}
        floor = per_mode["none"]
        print(f"{envs} envs on {args.device}: " + ", ".join(
            f"{mode} {t * 1e6:.1f} us/step (+{(t - floor) / floor * 100:.1f} %)" for mode, t in per_mode.items()))
    meta = {"device": args.device, "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
            "torch": torch.__version__, "python": platform.python_version(), "steps": args.steps,
            "horizon": args.horizon, "threads": args.threads}
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
