"""Throughput of the built-in tasks: env alone, env + policy inference, and PPO training.

Three numbers per task and ``num_envs``:

* ``env_sps``: env steps per second with uniform random actions (the simulation alone);
* ``env_policy_sps``: env steps per second with actions from the train config's rl_games network
  (``configs/train/<Task>PPO.yaml``: the same MLP, input normalization and Gaussian sampling that
  rl_games runs while collecting a rollout), inference only;
* ``train_fps``: PPO training frames per second of a real rl_games run through the project's entry
  point (``python -m pbt.train task=<Task> num_envs=N max_frames=F ...``, one fresh process per
  measurement), read from its final ``SUMMARY`` line (wall time of ``Runner.run``: rollouts, PPO
  updates and rl_games' set-up, not the process start).

Usage::

    python benchmarks/throughput.py --device cpu --out benchmarks/results/throughput.json
    python benchmarks/throughput.py --tasks Pendulum --num-envs 512 --torch-threads 1

Env timings are the best of ``--repeats`` runs and training the best of ``--train-repeats`` runs
(best, not mean: on a shared machine the other processes only ever slow a run down).
``--torch-threads`` applies to all three measurements (docs/performance_notes.md: on small MLPs one thread
per worker is near the best, and more threads than cores make everything crawl). The load average
before and after is recorded: numbers taken on a shared machine are lower bounds.
"""
import argparse
import contextlib
import io
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbt.tasks.registry import import_task_class  # noqa: E402
from pbt.tasks import BUILTIN_TASKS  # noqa: E402

log = logging.getLogger("benchmarks.throughput")

#: The target of the project (docs/performance_notes.md): Pendulum at 512 envs, PPO training on a 2-core CPU.
TARGET = {"task": "Pendulum", "num_envs": 512, "train_fps": 100_000}

SUMMARY_RE = re.compile(r"SUMMARY frames=(\d+) wall_time=([\d.]+)s fps=(\d+)")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_task(name: str, num_envs: int, device: str) -> Any:
    cls = import_task_class(BUILTIN_TASKS[name])
    return cls({"env": {"numEnvs": num_envs}, "seed": 0}, sim_device=device, rl_device=device, headless=True)


def network_params(name: str) -> Dict[str, Any]:
    """The ``model`` and ``network`` blocks of the task's train config (no interpolations there)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "configs" / "train" / f"{name}PPO.yaml")
    params = OmegaConf.to_container(cfg.params, resolve=False)
    assert isinstance(params, dict)
    return {"model": params["model"], "network": params["network"]}


def build_policy(name: str, task: Any, device: str) -> torch.nn.Module:
    """The rl_games model that the train config builds, as rl_games' PPO agent builds it."""
    from rl_games.algos_torch.model_builder import ModelBuilder

    model = ModelBuilder().load(network_params(name))
    with contextlib.redirect_stdout(io.StringIO()):  # rl_games prints while building
        net = model.build(
            {
                "actions_num": task.num_actions,
                "input_shape": (task.num_obs,),
                "num_seqs": task.num_envs,
                "value_size": 1,
                "normalize_value": True,
                "normalize_input": True,
            }
        )
    net.to(device)
    net.eval()
    return net


def time_steps(task: Any, steps: int, policy: Optional[torch.nn.Module], device: torch.device) -> float:
    """Env steps per second over ``steps`` batched steps (after a short warm-up)."""
    shape = (task.num_envs, task.num_actions)

    def one_step(obs: torch.Tensor) -> torch.Tensor:
        if policy is None:
            actions = torch.rand(shape, device=device) * 2.0 - 1.0
        else:
            res = policy({"is_train": False, "prev_actions": None, "obs": obs, "rnn_states": None})
            actions = torch.clamp(res["actions"], -1.0, 1.0)
        return task.step(actions)[0]["obs"]

    with torch.no_grad():  # not inference_mode: the task's state must stay usable outside it
        obs = task.reset()["obs"]
        for _ in range(max(5, steps // 20)):
            obs = one_step(obs)
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            obs = one_step(obs)
        synchronize(device)
        elapsed = time.perf_counter() - start
    return steps * task.num_envs / elapsed


def train_fps(
    name: str, num_envs: int, frames: int, device: str, threads: int, train_dir: str, timeout: float
) -> Dict[str, Any]:
    """Frames/s of a short real PPO run through ``python -m pbt.train`` (a fresh process)."""
    cmd = [
        sys.executable, "-m", "pbt.train", f"task={name}", f"num_envs={num_envs}", f"max_frames={frames}",
        f"sim_device={device}", f"rl_device={device}", f"torch_threads={threads}", f"train_dir={train_dir}",
        f"experiment=bench_{name}_{num_envs}", "seed=0",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    match = SUMMARY_RE.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not match:
        tail = (proc.stdout + proc.stderr)[-2000:]
        log.error("training run failed (rc=%s): %s\n%s", proc.returncode, " ".join(cmd), tail)
        return {"train_fps": None, "train_frames": None, "train_wall_s": None}
    frames_done, wall, fps = int(match.group(1)), float(match.group(2)), float(match.group(3))
    log.info("  trained %d frames in %.1f s (process %.1f s): %.0f frames/s", frames_done, wall, time.time() - start, fps)
    return {"train_fps": fps, "train_frames": frames_done, "train_wall_s": wall}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    torch.set_num_threads(args.torch_threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pbt_bench_") as train_dir:
        for name in args.tasks:
            for n in args.num_envs:
                log.info("%s, %d envs on %s", name, n, device)
                task = build_task(name, n, args.device)
                row: Dict[str, Any] = {"task": name, "num_envs": n}
                row["env_sps"] = max(time_steps(task, args.env_steps, None, device) for _ in range(args.repeats))
                log.info("  env alone: %.3g steps/s", row["env_sps"])
                task = build_task(name, n, args.device)
                policy = build_policy(name, task, args.device)
                row["env_policy_sps"] = max(time_steps(task, args.env_steps, policy, device) for _ in range(args.repeats))
                log.info("  env + policy: %.3g steps/s", row["env_policy_sps"])
                if args.train_frames > 0:
                    runs = [
                        train_fps(name, n, args.train_frames, args.device, args.torch_threads, train_dir, args.timeout)
                        for _ in range(args.train_repeats)
                    ]
                    ok = [r for r in runs if r["train_fps"] is not None]
                    row.update(max(ok, key=lambda r: r["train_fps"]) if ok else runs[0])
                rows.append(row)
    target_row = next(
        (r for r in rows if r["task"] == TARGET["task"] and r["num_envs"] == TARGET["num_envs"]), None
    )
    met: Optional[bool] = None
    if target_row is not None and target_row.get("train_fps") is not None:
        met = target_row["train_fps"] >= TARGET["train_fps"]
    return {
        "device": str(device),
        "torch_threads": args.torch_threads,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "env_steps": args.env_steps,
        "repeats": args.repeats,
        "train_frames": args.train_frames,
        "train_repeats": args.train_repeats,
        "target": {**TARGET, "met": met},
        "results": rows,
    }


def table(report: Dict[str, Any]) -> str:
    def fmt(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:,.0f}"

    lines = [
        f"device={report['device']} torch_threads={report['torch_threads']} cpus={report['cpu_count']} "
        f"load before/after={report['loadavg_before'][0]:.2f}/{report['loadavg_after'][0]:.2f}",
        f"{'task':<10} {'num_envs':>8} {'env steps/s':>14} {'env+policy steps/s':>19} {'PPO frames/s':>13}",
    ]
    for r in report["results"]:
        lines.append(
            f"{r['task']:<10} {r['num_envs']:>8} {fmt(r['env_sps']):>14} {fmt(r['env_policy_sps']):>19} "
            f"{fmt(r.get('train_fps')):>13}"
        )
    t = report["target"]
    verdict = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
    lines.append(f"target: {t['task']} at {t['num_envs']} envs >= {t['train_fps']:,} PPO frames/s: {verdict}")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda:0, ...")
    p.add_argument("--tasks", nargs="+", default=sorted(BUILTIN_TASKS), choices=sorted(BUILTIN_TASKS))
    p.add_argument("--num-envs", nargs="+", type=int, default=[256, 512, 1024, 4096])
    p.add_argument("--env-steps", type=int, default=300, help="timed batched steps per env measurement")
    p.add_argument("--train-frames", type=int, default=1_000_000, help="frames per PPO run (0: skip training)")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="env timings: best of this many (noisy shared machines)")
    p.add_argument("--train-repeats", type=int, default=1, help="PPO runs per setting; the best is reported")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per training run")
    p.add_argument("--out", default=None, help="write the report as JSON here")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    report = run(args)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        log.info("wrote %s", out)
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
