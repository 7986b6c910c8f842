"""The README's main job (``python -m launcher.run --run=experiments.smoke_pbt``), run several times:
how long it takes and how many exploits (a member taking a leader's weights) each run has.

Run 0 uses the experiment as it is (seeds 1000..1003); run i > 0 the same population with seeds
1000 + 100*i + (0..3), through a throwaway module calling ``experiments.smoke_pbt.make_run_description``.

    python benchmarks/main_job.py --runs 5 --out benchmarks/results/main_job.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pbt.storage import WorkspaceReader  # noqa: E402


def one_run(index: int, root: Path) -> Dict[str, Any]:
    train_dir = root / f"run{index}"
    module = "experiments.smoke_pbt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(root)]))
    if index > 0:
        module = f"smoke_seed{index}"
        (root / f"{module}.py").write_text(
            "from experiments.smoke_pbt import make_run_description\n"
            f"RUN_DESCRIPTION = make_run_description(seed_base={1000 + 100 * index})\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "launcher.run", f"--run={module}", f"--train_dir={train_dir}"],
                          cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    wall = time.monotonic() - start
    (root / f"run{index}.log").write_text(proc.stdout)
    reader = WorkspaceReader(train_dir / "smoke_pbt" / "pendulum" / "workspace")
    lineages = [reader.read_lineage(i) for i in range(4)]
    replaces = [(e.policy_idx, e.iteration, e.donor) for entries in lineages for e in entries if e.action == "replace"]
    mutates = sum(1 for entries in lineages for e in entries if e.is_exploit and e.action == "mutate")
    records = [reader.latest_record(i) for i in range(4)]
    objectives = [r.objective for r in records if r is not None]
    return {"run": index, "module": module, "exit_status": proc.returncode, "wall_s": round(wall, 1),
            "replaces": len(replaces), "replace_events": replaces, "mutations": mutates,
            "final_objectives": objectives, "best": max((o for o in objectives if o is not None), default=None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args()
    results: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="main_job_") as tmp:
        for index in range(args.runs):
            load = os.getloadavg()[0]
            result = one_run(index, Path(tmp))
            result["load_before"] = round(load, 2)
            results.append(result)
            print(json.dumps(result), flush=True)
    walls = [r["wall_s"] for r in results]
    summary = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "command": "python -m launcher.run --run=experiments.smoke_pbt",
        "runs": results, "median_wall_s": statistics.median(walls),
        "runs_with_a_replace": sum(1 for r in results if r["replaces"] > 0),
        "all_exit_0": all(r["exit_status"] == 0 for r in results),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if summary["all_exit_0"] and summary["runs_with_a_replace"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
