"""PB2's cost per explore step: read the interval data from 64 members' records (100 intervals of
history each, hyperparameter change points every few intervals), keep the newest ``pb2_max_data``,
fit the GP and maximise UCB, as one member does when it explores. Prints the median and the worst
of a few repeats and writes JSON.

    python benchmarks/pb2_fit.py --members 64 --intervals 100 --repeats 5 --out benchmarks/results/pb2_fit.json

Compare the time with an interval's wall time (``pbt.interval_steps`` frames): the issue's goal is
under 1%.
"""
import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pbt.mutation.space import parse_space  # noqa: E402
from pbt.selection.pb2 import PB2Config, continuous_dims  # noqa: E402
from pbt.selection.pb2_data import data_points, denormalise, newest, point_x  # noqa: E402
from pbt.selection.pb2_model import acquire  # noqa: E402
from pbt.storage.record import Record  # noqa: E402

SPACE = parse_space("search_space", {
    "train.params.config.learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2},
    "train.params.config.entropy_coef": {"type": "uniform", "low": 0.0, "high": 0.02},
    "train.params.config.gamma": {"type": "uniform", "low": 0.95, "high": 0.999},
})


def records(members: int, intervals: int, rng: random.Random) -> List[Record]:
    dims = continuous_dims(SPACE)
    out = []
    for idx in range(members):
        history: Dict[int, Optional[float]] = {}
        changes: Dict[int, Dict[str, Any]] = {}
        objective = 0.0
        params: Dict[str, Any] = {}
        for k in range(1, intervals + 1):
            if k == 1 or rng.random() < 0.3:  # an explore step every few intervals
                params = {d.key: denormalise(d, rng.random()) for d in dims}
                changes[k] = params
            x = point_x(params, dims)
            assert x is not None
            objective += -sum((v - 0.5) ** 2 for v in x) + rng.gauss(0.0, 0.05)
            history[k] = objective
        out.append(Record(policy_idx=idx, iteration=intervals, frame=intervals, objective=objective,
                          params=dict(params), checkpoint="x.pth", checksum="0" * 64, history=history,
                          param_history=dict(sorted(changes.items())[-64:]),
                          gains={k: history[k] - history[k - 1] for k in range(2, intervals + 1)}))  # type: ignore[operator]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--intervals", type=int, default=100)
    parser.add_argument("--max-data", type=int, default=PB2Config().pb2_max_data)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(0)
    recs = records(args.members, args.intervals, rng)
    dims = continuous_dims(SPACE)
    acquire([(0.5, 0.5, 0.5, 1.0), (0.1, 0.2, 0.3, 1.0), (0.9, 0.8, 0.7, 1.0)], [0.0, 1.0, 2.0], [], 2.0, 1.0,
            random.Random(0))  # imports and first-call set-up are not the steady cost
    timings: List[Dict[str, float]] = []
    for repeat in range(args.repeats):
        started = time.perf_counter()
        all_points = data_points(recs, dims)
        points = newest(all_points, args.max_data)
        pending = [x for x in (point_x(r.params, dims) for r in recs[1:]) if x is not None]
        read = time.perf_counter()
        acquire([p.x + (float(p.time),) for p in points], [p.change for p in points], pending,
                float(args.intervals + 1), 1.0, random.Random(repeat))
        done = time.perf_counter()
        timings.append({"data_s": read - started, "fit_and_acquire_s": done - read, "total_s": done - started})
    totals = [t["total_s"] for t in timings]
    result = {"members": args.members, "intervals": args.intervals, "data_points": len(all_points),
              "fitted_points": len(points), "median_total_s": statistics.median(totals), "max_total_s": max(totals),
              "median_data_s": statistics.median(t["data_s"] for t in timings), "repeats": timings,
              "python": platform.python_version(), "machine": platform.platform()}
    print(f"{args.members} members x {args.intervals} intervals: {len(all_points)} data points, newest "
          f"{len(points)} fitted; PB2 explore step median {result['median_total_s']:.3f} s, max "
          f"{result['max_total_s']:.3f} s (reading the data {result['median_data_s'] * 1000:.1f} ms)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
