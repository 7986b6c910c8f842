"""Isaac Lab's own PBT vs ours on the same Isaac Lab task, kit-less on CPU (Newton physics).

Run with the Python 3.12 venv that ``scripts/test_isaaclab.sh`` builds (isaaclab 3.0.0 and this
project installed in it):

    /tmp/pbt-isaaclab-venv/bin/python benchmarks/isaaclab_side_by_side.py \
        --out benchmarks/results/isaaclab_side_by_side.json

Two parts, both on Isaac-Cartpole-Direct with the local cartpole asset (NVIDIA's asset servers are
unreachable here) and the task's own rl_games agent config:

1. Throughput: one worker without PBT through our ``pbt.train`` vs through Isaac Lab's rl_games
   entry point (``benchmarks/isaaclab_anchor_entry.py`` runs it), alternating, ``--reps`` times;
   rl_games' own per-epoch ``performance/step_inference_rl_update_fps`` (median after warm-up).
2. PBT: 2 members, member 1 crippled (learning rate 1e-7, constant), Isaac Lab's selection rule and
   settings in both arms (threshold_std / threshold_abs cuts, learning_rate mutated). Isaac Lab's arm:
   its ``PbtAlgoObserver`` through its entry point (every exploit re-executes the process). Ours:
   ``pbt.train`` with the same ``agent.pbt.*`` settings (exploits in place). Exploit latency =
   decision to the first env step with the new weights; final objective = rl_games' mean episode
   return at the last frame (TensorBoard ``rewards/step``).
"""
import argparse
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

log = logging.getLogger("isaaclab_side_by_side")
TASK = "Isaac-Cartpole-Direct"
HORIZON = 32  # the task's agent config: frames per epoch = num_envs * 32
FIRST_STEP = re.compile(r"first env step with current weights at t=([\d.]+)")
PBT = {"threshold_std": 0.1, "threshold_abs": 0.05, "mutation_rate": 0.25, "change_range": [1.1, 2.0],
       "mutation": {"agent.params.config.learning_rate": "mutate_float"}}
CRIPPLE = ["params.config.lr_schedule=constant", "params.config.learning_rate=1e-7"]


def scalars(root: Path, tag: str) -> List[Any]:
    """Every value of one rl_games TensorBoard scalar under ``root`` (all runs and restarts)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = []
    for folder in sorted({p.parent for p in root.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        if tag in acc.Tags().get("scalars", []):
            events += acc.Scalars(tag)
    return sorted(events, key=lambda e: (e.step, e.wall_time))


def steady_fps(root: Path, warmup: int = 2) -> Optional[float]:
    values = [e.value for e in scalars(root, "performance/step_inference_rl_update_fps")][warmup:]
    return statistics.median(values) if values else None


def final_return(root: Path) -> Optional[float]:
    events = scalars(root, "rewards/step")
    return events[-1].value if events else None


def ours_cmd(asset: Path, num_envs: int, epochs: int, seed: int, experiment: str, runs: Path,
             extra: Sequence[str] = ()) -> List[str]:
    return [sys.executable, "-m", "pbt.train", f"task=isaaclab/{TASK}", "task.presets=newton_mjwarp",
            "task.groundCuboid=true", f"task.env.scene.cartpole.spawn.usd_path={asset}", f"num_envs={num_envs}",
            "sim_device=cpu", "rl_device=cpu", "torch_threads=1", f"max_frames={epochs * num_envs * HORIZON}",
            f"seed={seed}", f"experiment={experiment}", f"train_dir={runs}", *extra]


def anchor_cmd(num_envs: int, epochs: int, seed: int, extra: Sequence[str] = ()) -> List[str]:
    # minibatch: the task's 16384 assumes 4096 envs; 8 minibatches, as our worker derives at any num_envs
    return [sys.executable, str(REPO / "benchmarks" / "isaaclab_anchor_entry.py"), "--task", TASK, "--num_envs",
            str(num_envs), "--seed", str(seed), "--device", "cpu", "presets=newton_mjwarp",
            # max_epochs as a Hydra override: Isaac Lab's restart drops --max_iterations
            f"agent.params.config.max_epochs={epochs}", "agent.params.config.device=cpu",
            "agent.params.config.device_name=cpu",
            f"agent.params.config.minibatch_size={num_envs * HORIZON // 8}", *extra]


def anchor_env(base: Dict[str, str], events: Path, run_name: str, pbt: Optional[Dict[str, Any]]) -> Dict[str, str]:
    env = dict(base, PBT_BENCH_EVENTS=str(events), PBT_BENCH_RUN_NAME=run_name, PBT_BENCH_TORCH_THREADS="1",
               PBT_BENCH_DEVICE="cpu")
    if pbt:
        env["PBT_BENCH_AGENT_PBT"] = json.dumps(pbt)
    return env


def run_all(cmds: Sequence[List[str]], envs: Sequence[Dict[str, str]], cwds: Sequence[Path], logs: Sequence[Path],
            timeout: float) -> List[int]:
    procs = []
    for cmd, env, cwd, logf in zip(cmds, envs, cwds, logs):
        cwd.mkdir(parents=True, exist_ok=True)
        procs.append(subprocess.Popen(cmd, cwd=str(cwd), env=env, stdout=open(logf, "w"), stderr=subprocess.STDOUT))
    deadline = time.time() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(1.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return codes


def throughput(args: argparse.Namespace, root: Path, asset: Path, env: Dict[str, str]) -> Dict[str, Any]:
    out: Dict[str, List[Dict[str, Any]]] = {"ours": [], "isaaclab": []}
    for rep in range(args.reps):
        for arm in ("ours", "isaaclab"):
            where = root / f"tp_{arm}_{rep}"
            if arm == "ours":
                cmd = ours_cmd(asset, args.num_envs, args.tp_epochs, 1, "tp", where / "runs")
                run_env = env
            else:
                cmd = anchor_cmd(args.num_envs, args.tp_epochs, 1)
                run_env = anchor_env(env, where / "events.jsonl", "tp", None)
            start = time.time()
            code = run_all([cmd], [run_env], [where], [root / f"tp_{arm}_{rep}.log"], args.timeout)[0]
            wall = time.time() - start
            fps = steady_fps(where)
            log.info("throughput %s rep %d: exit %d, %.0f frames/s, %.0f s", arm, rep, code, fps or 0, wall)
            out[arm].append({"exit": code, "fps": fps, "wall_s": wall})
    summary: Dict[str, Any] = {"runs": out}
    medians = {arm: statistics.median([r["fps"] for r in runs if r["fps"]]) for arm, runs in out.items()
               if any(r["fps"] for r in runs)}
    summary["median_fps"] = medians
    if len(medians) == 2:
        summary["ratio_ours_to_isaaclab"] = medians["ours"] / medians["isaaclab"]
    return summary


def latencies_ours(ws: Path, logs: Sequence[Path]) -> Dict[str, Any]:
    from pbt.storage import Workspace

    workspace = Workspace(ws, 0, len(logs))
    lat, replaces = [], 0
    for idx, logf in enumerate(logs):
        steps = [float(t) for t in FIRST_STEP.findall(logf.read_text(errors="replace"))]
        for event in workspace.read_lineage(idx):
            if event.action != "replace":
                continue
            replaces += 1
            later = [t for t in steps if t >= event.decided_at]
            if later:
                lat.append((later[0] - event.decided_at) * 1000.0)
    return {"replaces": replaces, "latency_ms": lat}


def latencies_anchor(events_files: Sequence[Path]) -> Dict[str, Any]:
    lat, replaces = [], 0
    for path in events_files:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        for i, event in enumerate(events):
            if event["kind"] != "decided":
                continue
            replaces += 1
            later = [e for e in events[i + 1:] if e["kind"] == "first_step" and e["restored"]]
            if later:
                lat.append((later[0]["t"] - event["t"]) * 1000.0)
    return {"replaces": replaces, "latency_ms": lat}


def population(args: argparse.Namespace, root: Path, asset: Path, env: Dict[str, str], arm: str) -> Dict[str, Any]:
    where = root / f"pbt_{arm}"
    interval = args.interval_epochs * args.num_envs * HORIZON
    cmds, envs, cwds, logs = [], [], [], []
    for idx in range(2):
        crippled = CRIPPLE if idx == 1 else []
        logs.append(root / f"pbt_{arm}_{idx}.log")
        cwds.append(where / f"m{idx}")
        if arm == "ours":
            settings = {"enabled": "true", "policy_idx": idx, "num_policies": 2, "directory": str(where),
                        "workspace": "ws", "objective": "episode_return", "interval_steps": interval, **PBT}
            given = [f"agent.pbt.{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in settings.items()]
            cmds.append(ours_cmd(asset, args.num_envs, args.pbt_epochs, 1000 + idx, f"m{idx}", where / "runs",
                                 [*given, *(f"train.{c}" for c in crippled)]))
            envs.append(env)
        else:
            block = {"enabled": True, "policy_idx": idx, "num_policies": 2, "directory": str(where),
                     "workspace": "ws", "objective": "rl_games mean episode return", "interval_steps": interval, **PBT}
            cmds.append(anchor_cmd(args.num_envs, args.pbt_epochs, 1000 + idx, [f"agent.{c}" for c in crippled]))
            envs.append(anchor_env(env, where / f"events{idx}.jsonl", f"m{idx}", block))
    start = time.time()
    codes = run_all(cmds, envs, cwds, logs, args.timeout)
    wall = time.time() - start
    if arm == "ours":
        exploits = latencies_ours(where / "ws", logs)
        # our run folder is <experiment>_pbt<idx>
        finals = [final_return(where / "runs" / f"m{idx}_pbt{idx:03d}") for idx in range(2)]
    else:
        exploits = latencies_anchor([where / f"events{idx}.jsonl" for idx in range(2)])
        finals = [final_return(where / "logs" / "rl_games" / "cartpole_direct" / f"m{idx}") for idx in range(2)]
    result = {"exit": codes, "wall_s": wall, "final_return": finals, **exploits}
    log.info("pbt %s: %s", arm, result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--tp_epochs", type=int, default=12, help="epochs per throughput run")
    parser.add_argument("--reps", type=int, default=2, help="throughput runs per arm (alternating)")
    parser.add_argument("--pbt_epochs", type=int, default=28, help="epochs per PBT member")
    parser.add_argument("--interval_epochs", type=int, default=4, help="epochs per PBT interval")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--skip", choices=["throughput", "pbt"], action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    root = Path(tempfile.mkdtemp(prefix="pbt-il-sbs-"))
    from pbt.tasks.isaaclab_assets import write_newton_cartpole

    asset = write_newton_cartpole(root)
    env = dict(os.environ, PBT_ISAACLAB_CARTPOLE_USD=str(asset), OMP_NUM_THREADS="1")
    report: Dict[str, Any] = {"machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
                              "python": platform.python_version(), "load_before": os.getloadavg(),
                              "args": {k: str(v) for k, v in vars(args).items()}, "scratch": str(root)}
    if "throughput" not in args.skip:
        report["throughput"] = throughput(args, root, asset, env)
    if "pbt" not in args.skip:
        report["pbt"] = {arm: population(args, root, asset, env, arm) for arm in ("isaaclab", "ours")}
    report["load_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    log.info("written %s", args.out)


if __name__ == "__main__":
    main()
