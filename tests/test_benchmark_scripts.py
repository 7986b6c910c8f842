"""The benchmark scripts that import the ablation script's helpers start: a helper renamed or moved
in ``benchmarks/ablation.py`` or ``benchmarks/ablation_curve.py`` breaks its importers only when they
run, which is rarely (each takes minutes to hours), so ``--help`` checks their imports here."""
import json
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = ["ablation.py", "curriculum.py", "network_mutation.py", "outcome_frontier.py", "setting_sweep.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_starts(script: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], cwd=str(REPO),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


def test_outcome_frontier_counts_each_policy_once_against_each_sets_goal(tmp_path) -> None:
    # Target: set 0's best 0.5, set 1's best 0.9 over a random policy at 0.1 (goals 0.54 and 0.98).
    args = {"task": "Reacher", "frames": 1000, "play_episodes": 8}
    target = {"args": args, "random_score": 0.1, "sets": [
        {"seed_set": 0, "arms": {"no_pbt": {"scores": [0.2, 0.5]}, "threshold": {"scores": [0.6, 0.3]}}},
        {"seed_set": 1, "arms": {"no_pbt": {"scores": [0.9, 0.4]}, "threshold": {"scores": [0.7, 0.95]}}}]}
    # A second arm run against the same no-PBT arm (copied, not trained again): only its PBT scores count.
    rerun = {"args": args, "no_pbt_from": "target.json", "sets": [
        {"seed_set": 0, "arms": {"no_pbt": {"scores": [0.2, 0.5]}, "threshold": {"scores": [0.99, 0.1]}}}]}
    other_budget = {"args": dict(args, frames=5000), "sets": [
        {"seed_set": 0, "arms": {"no_pbt": {"scores": [1.0]}}}]}
    # More members from the same samples and seeds: their first no-PBT members are the same policies again.
    wider = {"args": args, "sets": [{"seed_set": 0, "arms": {"no_pbt": {"scores": [0.2, 0.5, 0.45]}}}]}
    # A setting sweep counts through the ablation it took its member from; its unchanged variant is
    # that ablation's no-PBT member again.
    sweep = {"command": f"python benchmarks/setting_sweep.py --from {tmp_path / 'target.json'} --seed_set 0",
             "variants": [{"name": "as sampled", "score": 0.5}, {"name": "kl", "score": 0.55}]}
    sweep_of_other = {"command": f"python benchmarks/setting_sweep.py --from {tmp_path / 'other.json'} --seed_set 0",
                      "variants": [{"name": "kl", "score": 0.99}]}
    # Another task variant (a task override for every member) at the same budget does not count.
    variant = {"args": dict(args, train_args=["task.env.observeTip=true"]), "sets": [
        {"seed_set": 0, "arms": {"no_pbt": {"scores": [0.99]}}}]}
    paths = []
    for name, doc in [("target", target), ("rerun", rerun), ("other", other_budget), ("wider", wider),
                      ("sweep", sweep), ("sweep_of_other", sweep_of_other), ("variant", variant)]:
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_frontier.py"), "--target", str(paths[0]),
                           "--results", *map(str, paths)], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped")]
    assert [line.split()[1].rstrip(":").rsplit("/", 1)[-1] for line in skipped] == ["other.json", "sweep_of_other.json",
                                                                        "variant.json"], done.stderr
    # 8 of the target + 2 of the rerun's PBT arm + 1 new no-PBT member + 1 sweep variant = 12 policies.
    assert done.stdout.startswith("12 played policies at 1000 frames"), done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 0 |") or line.startswith("| 1 |")]
    # >= 0.54: 0.6, 0.9, 0.7, 0.95, 0.99, 0.55; >= 0.98: 0.99.
    assert rows == ["| 0 | 0.500 | 0.540 | 6 of 12 |  |",
                    "| 1 | 0.900 | 0.980 | 1 of 12 | rerun.json set 0 threshold member 0: 0.990 |"], done.stdout
