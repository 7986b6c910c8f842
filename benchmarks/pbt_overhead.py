"""Cost of one PBT iteration (save, scan, decide, copy) with 8, 64 and 512 simulated members.

A workspace is filled with N members' records and real torch checkpoints of about the size a
Pendulum/Cartpole agent writes (~130 kB with optimizer state); then member 0 runs the iteration
the observer runs: publish its checkpoint + record, scan the newest record of every peer, decide,
copy the donor's checkpoint to a private path, update its best copy, clean up. Each phase is
timed separately over several repeats (median). The restart cost (execv to first step) is
measured by benchmarks/exploit_latency.py.

    python benchmarks/pbt_overhead.py --members 8 64 512 --out benchmarks/results/pbt_overhead.json
"""
import argparse
import json
import logging
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from pbt.config import PbtConfig  # noqa: E402
from pbt.selection import MemberState, decide  # noqa: E402
from pbt.storage import Workspace  # noqa: E402

PARAMS = {"train.params.config.learning_rate": 1e-3, "train.params.config.gamma": 0.99,
          "train.params.config.e_clip": 0.2, "train.params.config.mini_epochs": 5}


def agent_state(seed: int, kbytes: int) -> Dict:
    """A dict shaped like rl_games' full state, about ``kbytes`` kB on disk."""
    gen = torch.Generator().manual_seed(seed)
    n = kbytes * 1024 // 4 // 3  # weights + two Adam moments
    weights = torch.randn(n, generator=gen)
    return {"model": {"w": weights}, "optimizer": {"state": {0: {"exp_avg": weights * 0.1, "exp_avg_sq": weights**2}},
                                                   "param_groups": [{"lr": 1e-3, "params": [0]}]},
            "epoch": 10, "frame": 1000, "last_mean_rewards": -150.0, "env_state": None}


def fill(root: Path, members: int, iterations: int, state_bytes: bytes) -> None:
    rng = random.Random(0)
    for idx in range(members):
        ws = Workspace(root, idx, members)
        for it in range(1, iterations + 1):
            ws.publish(it, it * 10_000_000, rng.gauss(0, 100), PARAMS, state_bytes,
                       [rng.gauss(0, 100) for _ in range(64)], frames_since_replace=it * 10_000_000)


def time_iteration(root: Path, members: int, iteration: int, state: Dict, repeats: int) -> Dict[str, float]:
    cfg = PbtConfig.from_mapping(dict(
        enabled=True, policy_idx=0, num_policies=members, workspace=str(root), dbg_mode=True, start_after=0,
        initial_delay=0, ready_after=0, significance=None, replace_threshold_frac_std=0.0,
        replace_threshold_frac_absolute=0.0))
    ws = Workspace(root, 0, members)
    phases: Dict[str, List[float]] = {k: [] for k in ("save", "scan", "decide", "copy", "best", "cleanup", "total")}
    rng = random.Random(1)
    for r in range(repeats):
        it = iteration + r
        t0 = time.perf_counter()
        own = ws.save(it, it * 10_000_000, -500.0, PARAMS, state, [float(x) for x in range(64)],
                      frames_since_replace=it * 10_000_000)
        t1 = time.perf_counter()
        peers = ws.latest_records(max_iteration=it)
        peers[0] = own
        t2 = time.perf_counter()
        decision = decide(MemberState(own, None, it * 10_000_000), list(peers.values()), cfg, rng)
        t3 = time.perf_counter()
        if decision.donor is not None:
            ws.export_checkpoint(decision.donor, None, root.parent / "private" / "restart.pth", frame=1, epoch=1)
        t4 = time.perf_counter()
        best = max((p for p in peers.values() if p.has_objective), key=lambda p: p.objective)
        ws.update_best(best)
        t5 = time.perf_counter()
        ws.cleanup(peers)
        t6 = time.perf_counter()
        for key, value in zip(("save", "scan", "decide", "copy", "best", "cleanup", "total"),
                              (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0)):
            phases[key].append(value * 1000.0)
    return {k: statistics.median(v) for k, v in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", nargs="+", type=int, default=[8, 64, 512])
    parser.add_argument("--kbytes", type=int, default=130)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--interval_frames", type=float, default=1e7, help="pbt.interval_steps to compare with")
    parser.add_argument("--fps", type=float, default=100_000, help="training frames/s to compare with")
    parser.add_argument("--out", default="benchmarks/results/pbt_overhead.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from pbt.storage.checkpoints import serialize_state

    state = agent_state(0, args.kbytes)
    state_bytes = serialize_state(state)
    interval_s = args.interval_frames / args.fps
    results = {}
    print(f"checkpoint {len(state_bytes) / 1024:.0f} kB; interval {args.interval_frames:.0e} frames at "
          f"{args.fps:.0f} fps = {interval_s:.0f} s")
    print(f"{'members':>8} {'save':>7} {'scan':>7} {'decide':>7} {'copy':>7} {'best':>7} {'cleanup':>8} "
          f"{'total ms':>9} {'scan+decide':>12} {'% of interval':>14}")
    for n in args.members:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "ws"
            fill(root, n, 3, state_bytes)
            r = time_iteration(root, n, 4, state, args.repeats)
        r["scan_decide"] = r["scan"] + r["decide"]
        r["percent_of_interval"] = 100.0 * r["total"] / 1000.0 / interval_s
        results[n] = r
        print(f"{n:>8} {r['save']:>7.1f} {r['scan']:>7.1f} {r['decide']:>7.1f} {r['copy']:>7.1f} {r['best']:>7.1f} "
              f"{r['cleanup']:>8.1f} {r['total']:>9.1f} {r['scan_decide']:>12.1f} {r['percent_of_interval']:>13.3f}%")
    meta = {"machine": platform.platform(), "python": platform.python_version(), "checkpoint_bytes": len(state_bytes),
            "interval_s": interval_s, "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
