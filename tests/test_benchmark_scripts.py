"""The benchmark scripts that import the ablation script's helpers start: a helper renamed or moved
in ``benchmarks/ablation.py`` or ``benchmarks/ablation_curve.py`` breaks its importers only when they
run, which is rarely (each takes minutes to hours), so ``--help`` checks their imports here. On
synthetic results: how ``benchmarks/outcome_frontier.py`` counts policies, how
``benchmarks/outcome_seeds.py`` compares draws of seeds, and which seeds ``--reseed`` draws. With real
processes and signals: a stopped ablation stops the members it started."""
import json
import os
import signal
import subprocess
import sys
import time
from typing import List

import pytest
from conftest import REPO

SCRIPTS = ["ablation.py", "curriculum.py", "exploit_latency.py", "lineage_summary.py", "network_mutation.py", "play_noise.py",
           "oracle_selection.py", "outcome_frontier.py", "outcome_seeds.py", "selection_pressure.py",
           "setting_sweep.py"]


def run_code(code: str) -> str:
    """The output of ``code`` run from the repository (the tests import the scripts' helpers the way
    the scripts do, with ``benchmarks/`` on ``sys.path``); its error output when it fails."""
    done = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_starts(script: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], cwd=str(REPO),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


def test_outcome_frontier_counts_each_policy_once_against_each_sets_goal(tmp_path) -> None:
    # Target: set 0's best 0.5, set 1's best 0.9 over a random policy at 0.1 (goals 0.54 and 0.98).
    args = {"task": "Reacher", "frames": 1000, "play_episodes": 8}
    lr = [{"lr": 1e-3}, {"lr": 1e-4}, {"lr": 1e-5}]

    def result(scores_by_set, **fields):
        return {"args": args, **fields, "sets": [
            {"seed_set": s, "samples": lr, "seeds": [10 * s, 10 * s + 1, 10 * s + 2], "arms": arms}
            for s, arms in enumerate(scores_by_set)]}

    target = result([{"no_pbt": {"scores": [0.2, 0.5]}, "threshold": {"scores": [0.6, 0.3]}},
                     {"no_pbt": {"scores": [0.9, 0.4]}, "threshold": {"scores": [0.7, 0.95]}}], random_score=0.1)
    # A second arm run against the same no-PBT arm (copied, not trained again): only its PBT scores count.
    rerun = result([{"no_pbt": {"scores": [0.2, 0.5]}, "threshold": {"scores": [0.99, 0.1]}}],
                   no_pbt_from="target.json")
    other_budget = dict(result([{"no_pbt": {"scores": [1.0]}}]), args=dict(args, frames=5000))
    # More members from the same samples and seeds: their first no-PBT members are the same runs again.
    wider = result([{"no_pbt": {"scores": [0.2, 0.5, 0.45]}}])
    # The same sample and seed with another env count is another run.
    more_envs = dict(result([{"no_pbt": {"scores": [0.2]}}]), args=dict(args, num_envs=512))
    # A setting sweep counts through the ablation it took its member from; its unchanged variant is
    # that ablation's no-PBT member again, and a variant swept twice is one run.
    sweep = {"command": f"python benchmarks/setting_sweep.py --from {tmp_path / 'target.json'} --seed_set 0",
             "sample": lr[1], "seed": 1,
             "variants": [{"name": "as sampled", "overrides": [], "score": 0.5},
                          {"name": "kl", "overrides": ["kl=2"], "score": 0.55}]}
    sweep_again = dict(sweep, variants=[{"name": "kl again", "overrides": ["kl=2"], "score": 0.55}])
    # A sweep trained to fewer frames (--frames) is at another budget.
    sweep_shorter = dict(sweep, frames=700, variants=[{"name": "kl", "overrides": ["kl=3"], "score": 0.99}])
    sweep_of_other = {"command": f"python benchmarks/setting_sweep.py --from {tmp_path / 'other.json'} --seed_set 0",
                      "sample": lr[0], "seed": 0, "variants": [{"name": "kl", "overrides": ["kl=2"], "score": 0.99}]}
    # Another task variant (a task override for every member) at the same budget does not count.
    variant = dict(result([{"no_pbt": {"scores": [0.99]}}]), args=dict(args, train_args=["task.env.observeTip=true"]))
    paths = []
    for name, doc in [("target", target), ("rerun", rerun), ("other", other_budget), ("wider", wider), ("more_envs", more_envs),
                      ("sweep", sweep), ("sweep_again", sweep_again), ("sweep_of_other", sweep_of_other),
                      ("sweep_shorter", sweep_shorter),
                      ("variant", variant)]:
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_frontier.py"), "--target", str(paths[0]),
                           "--results", *map(str, paths)], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped")]
    assert [line.split()[1].rstrip(":").rsplit("/", 1)[-1] for line in skipped] == ["other.json", "sweep_of_other.json",
                                                                        "sweep_shorter.json", "variant.json"], done.stderr
    # 8 of the target + 2 of the rerun's PBT arm + 2 new no-PBT runs + 1 sweep variant = 13 policies.
    assert done.stdout.startswith("13 played policies at 1000 frames"), done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 0 |") or line.startswith("| 1 |")]
    # >= 0.54: 0.6, 0.9, 0.7, 0.95, 0.99, 0.55; >= 0.98: 0.99.
    assert rows == ["| 0 | 0.500 | 0.540 | 6 of 13 |  |",
                    "| 1 | 0.900 | 0.980 | 1 of 13 | rerun.json set 0 threshold member 0: 0.990 |"], done.stdout


def test_outcome_frontier_without_a_policy_at_the_budget_says_what_to_give(tmp_path) -> None:
    target = {"args": {"task": "Reacher", "frames": 1000, "play_episodes": 8}, "sets": []}
    (tmp_path / "target.json").write_text(json.dumps(target))
    sweep = {"command": "python benchmarks/setting_sweep.py --seed_set 0", "sample": {}, "seed": 0, "variants": []}
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_frontier.py"), "--target",
                           str(tmp_path / "target.json"), "--results", str(tmp_path / "sweep.json")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "its source ablation (--from) is not at hand" in done.stderr
    assert "no played policy at the target's budget: give ablation results or setting sweeps" in done.stderr


def test_lineage_summary_reads_copies_the_best_runs_loss_and_the_one_family(tmp_path) -> None:
    """Three members; member 1 ran best alone. Member 0 takes 1's weights at 300 frames, member 1
    takes 2's at 400 (significance test skipped: its family lives on in 0), then member 2 takes 0's
    at 500: every member carries member 1's weights from then on. The objectives they were ranked by
    at the end average 0.6 where their policies played 0.45: x1.33."""
    from pbt.storage.lineage import LineageEntry

    events = {
        0: [LineageEntry(0, 3, 300, "replace", "replace: ...", donor=1, donor_iteration=3, time=3.0)],
        1: [LineageEntry(1, 2, 200, "mutate", "mutate only, lead not significant: ...", time=2.0),
            LineageEntry(1, 4, 400, "replace", "replace: ...", donor=0, donor_iteration=4, time=4.0)],
        2: [LineageEntry(2, 5, 500, "replace", "replace: ...", donor=0, donor_iteration=5, time=5.0)],
    }
    arm = tmp_path / "keep" / "set0" / "threshold"
    arm.mkdir(parents=True)
    for idx, entries in events.items():
        (arm / f"lineage_{idx}.jsonl").write_bytes(b"".join(e.to_json_line() for e in entries))
    result = {"sets": [{"seed_set": 0, "arms": {"no_pbt": {"scores": [0.1, 0.3, 0.2]},
                                                "threshold": {"scores": [0.5, 0.4, 0.45],
                                                              "training_scores": [0.7, 0.5, 0.6]}}}]}
    (tmp_path / "result.json").write_text(json.dumps(result))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "lineage_summary.py"), "--result",
                           str(tmp_path / "result.json"), "--keep_dir", str(tmp_path / "keep")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    row = done.stderr.strip().splitlines()[-1]
    assert row == "| 0 | 3 | 1 | 1 | member 1: 400 | 500 (2 took 0) | member 1's ([0, 1, 2]) | 1.33 |", row


def test_selection_pressure_pools_the_copies_rank_at_their_next_decision(tmp_path) -> None:
    """Three members in lockstep. At iteration 1 member 0 copies member 2 with a lower clip and beats
    both peers at iteration 2; member 1 copies member 2 with a higher clip and beats neither. Member
    2's copy at iteration 2 has no later decision and is left out. The learning rate moved once per
    direction too, in the other order."""
    from pbt.storage.lineage import LineageEntry

    def entry(idx, it, objective, clip, lr, action="keep", donor=None):
        params = {"train.params.config.e_clip": clip, "train.params.config.learning_rate": lr, "name": "x"}
        return LineageEntry(idx, it, 100 * it, action, "", objective=objective, donor=donor,
                            donor_iteration=None if donor is None else it, params_after=params)

    events = {
        0: [entry(0, 1, 0.1, 0.15, 1e-3, "replace", 2), entry(0, 2, 0.9, 0.15, 1e-3)],
        1: [entry(1, 1, 0.2, 0.25, 1e-4, "replace", 2), entry(1, 2, 0.1, 0.25, 1e-4)],
        2: [entry(2, 1, 0.5, 0.2, 3e-4), entry(2, 2, 0.5, 0.3, 3e-4, "replace", 0)],
    }
    for s in (0, 1):  # two seed sets pool
        arm = tmp_path / "keep" / f"set{s}" / "threshold"
        arm.mkdir(parents=True)
        for idx, entries in events.items():
            (arm / f"lineage_{idx}.jsonl").write_bytes(b"".join(e.to_json_line() for e in entries))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "selection_pressure.py"), "--keep_dir",
                           str(tmp_path / "keep")], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert "4 copies from 2 seed-set runs" in lines and lines[0].startswith("copies left out: 1 "), lines
    assert "| e_clip | 2, 1.00 | 2, 0.00 | +1.00 (0.00) |" in lines, lines
    assert "| learning_rate | 2, 0.00 | 2, 1.00 | -1.00 (0.00) |" in lines, lines


def test_ablation_reseed_keeps_the_samples_and_draws_other_seeds() -> None:
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from ablation import seed_set; "
        "print(json.dumps([seed_set(1, 8), seed_set(1, 8, reseed=2), seed_set(2, 8, reseed=2)]))"
    )
    out = run_code(code)
    (own_samples, own_seeds), (samples, seeds), (_, other_set_seeds) = json.loads(out)
    assert own_seeds == [20_000 + i for i in range(8)]  # the seed sets every earlier result used
    assert samples == own_samples
    assert seeds == [22_000 + i for i in range(8)]
    assert not set(seeds) & set(own_seeds) and not set(seeds) & set(other_set_seeds)


def test_ablation_pbt_seed_gives_every_seed_set_its_own_explore_steps() -> None:
    """pbt.seed in --pbt_args seeds member i's explore steps alike in every set; --pbt_seed does not."""
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from ablation import set_pbt_args\n"
        "from pbt.config import PbtConfig; from pbt.member import pbt_seed\n"
        "def stream(args):\n"
        "    seed = [int(a.split('=')[1]) for a in args if a.startswith('pbt.seed=')][-1]\n"
        "    return pbt_seed(PbtConfig(seed=seed, policy_idx=3), 10_000, 65_536)\n"
        "fixed = [set_pbt_args(['pbt.seed=5'], None, s) for s in range(3)]\n"
        "drawn = [set_pbt_args(['pbt=evaluated_lockstep'], 5, s) for s in range(3)]\n"
        "print(json.dumps([drawn, [stream(a) for a in fixed], [stream(a) for a in drawn]]))\n"
    )
    drawn, fixed_streams, drawn_streams = json.loads(run_code(code))
    assert drawn == [["pbt=evaluated_lockstep", f"pbt.seed={500 + s}"] for s in range(3)]
    assert len(set(fixed_streams)) == 1 and len(set(drawn_streams)) == 3


def test_ablation_refuses_a_pbt_seed_twice() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ablation.py"), "--pbt_seed", "2",
                           "--pbt_args", "pbt.seed=4"], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--pbt_seed sets pbt.seed per seed set: drop pbt.seed=4 from --pbt_args" in done.stderr


@pytest.mark.parametrize("script", ["setting_sweep.py", "oracle_selection.py"])
def test_a_script_that_trains_a_stored_member_again_says_which_members_there_are(script: str, tmp_path) -> None:
    source = tmp_path / "ablation.json"
    source.write_text(json.dumps({"args": {"members": 2}, "sets": [{"seed_set": 0, "samples": [{}, {}], "seeds": [1, 2]}]}))
    for given, said in [(["--from", str(tmp_path / "none.json"), "--member", "0"], "none.json: no such file; give an ablation result"),
                        (["--from", str(source), "--member", "2"], f"--seed_set 0 --member 2: {source} has seed sets [0] of 2 members")]:
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--seed_set", "0", "--start", "1",
                               "--until", "2", *given] if script == "oracle_selection.py" else
                              [sys.executable, str(REPO / "benchmarks" / script), "--seed_set", "0", *given],
                              cwd=str(REPO), capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and said in done.stderr, done.stderr[-3000:]


def test_oracle_selection_chooses_every_step_and_last_at_until() -> None:
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from oracle_selection import rounds_until\n"
        "print(json.dumps([rounds_until(100, 400, 100), rounds_until(100, 350, 100), rounds_until(100, 150, 100)]))\n"
        "for bad in [(100, 100, 10), (0, 50, 10), (10, 50, 0)]:\n"
        "    try:\n"
        "        rounds_until(*bad)\n"
        "    except SystemExit as e:\n"
        "        print(e)\n"
    )
    out = run_code(code)
    first, *refused = out.splitlines()
    # A round ends every step after the start; a last, shorter one ends at --until.
    assert json.loads(first) == [[200, 300, 400], [200, 300, 350], [150]]
    assert refused == ["--start 100 --until 100: give 0 < start < until, and --epochs >= 1",
                       "--start 0 --until 50: give 0 < start < until, and --epochs >= 1",
                       "--start 10 --until 50: give 0 < start < until, and --epochs >= 1"]


def test_ablation_refuses_a_reseed_outside_the_seeds_thousands_digit() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ablation.py"), "--reseed", "10"],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--reseed 10: give 0..9" in done.stderr

    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ablation.py"), "--reseed", "1", "--members", "1001"],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--reseed with 1001 members: draws of seeds would overlap above 1000 members" in done.stderr


def test_outcome_seeds_reports_each_draw_and_the_expected_best_over_the_seeds_tried(tmp_path) -> None:
    # Two members on two draws of seeds: member 0 plays 0.1 or 0.9, member 1 0.5 on both, so the best
    # independent run is 0.9 or 0.5 by luck and 0.7 expected; PBT's bests 0.8 and 0.6 average 0.7.
    args = {"task": "Reacher", "frames": 1000, "num_envs": 4, "search_space": None, "train_args": [],
            "play_episodes": 8, "members": 2, "strategies": ["threshold"], "pbt_args": []}
    samples = [{"lr": 1e-3}, {"lr": 1e-4}]

    def result(seeds, no_pbt, pbt_best, first_quarter=None, **changed):
        arms = {"no_pbt": {"scores": no_pbt}, "threshold": {"best": pbt_best}}
        if first_quarter is not None:  # --curve: the no-PBT scores at 25 / 50 / 75 / 100%
            arms["no_pbt"]["curve"] = {"scores": [first_quarter, no_pbt, no_pbt, no_pbt]}
        return {"args": {**args, **changed}, "random_score": 0.1,
                "sets": [{"seed_set": 0, "samples": samples, "seeds": seeds, "arms": arms}]}

    paths = []
    # On the own seeds the best run (member 0) trails member 1 at the first quarter: rank 2.
    for name, data in [("own", result([1, 2], [0.9, 0.5], 0.8, [0.1, 0.2])), ("other", result([3, 4], [0.1, 0.5], 0.6))]:
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_seeds.py"), "--results", *map(str, paths)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 0 | 1-2 | 0.900 | 2 | 0.800 | x0.875 | no |" in done.stdout
    assert "| 0 | 3-4 | 0.500 | - | 0.600 | x1.250 | yes |" in done.stdout  # no curve: no rank
    assert "| 0 | 2 | 0.700 | 0.700 (0.600-0.800) | x1.00 |" in done.stdout
    assert "did not lead at 25% of the budget: goal met in 0 of 1 PBT runs." in done.stdout
    assert "best independent run led at" not in done.stdout  # no draw where it led

    # The own draw's PBT arm run again (0.6): each draw weighs the same in the mean, (0.7 + 0.6) / 2.
    (tmp_path / "again.json").write_text(json.dumps(result([1, 2], [0.9, 0.5], 0.6, [0.3, 0.2])))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_seeds.py"), "--results",
                           *map(str, paths), str(tmp_path / "again.json")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 0 | 1-2 | 0.900 | 1 | 0.800 / 0.600 | x0.875 / x0.625 | no / no |" in done.stdout  # the newest curve
    assert "led at 25% of the budget: goal met in 0 of 2 PBT runs." in done.stdout
    assert "| 0 | 2 | 0.700 | 0.650 (0.600-0.800) | x0.92 |" in done.stdout

    (tmp_path / "budget.json").write_text(json.dumps(result([5, 6], [0.2, 0.3], 0.4, frames=2000)))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_seeds.py"), "--results",
                           str(paths[0]), str(tmp_path / "budget.json")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "differs from" in done.stderr and "['frames']" in done.stderr

    # Another PBT method on the same samples is another comparison.
    (tmp_path / "method.json").write_text(json.dumps(result([5, 6], [0.2, 0.3], 0.4, pbt_args=["pbt.x=1"])))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "outcome_seeds.py"), "--results",
                           str(paths[0]), str(tmp_path / "method.json")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "['pbt_args']" in done.stderr


# A member that starts, writes its pid, then trains "forever"; "stubborn" ignores SIGTERM.
MEMBER = ("import os, signal, sys, time\n"
          "if sys.argv[2] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
          "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
          "time.sleep(3600)\n")


def test_a_stopped_ablation_stops_its_members(tmp_path) -> None:
    # Killing the script with SIGTERM used to leave its members training in the background, where
    # they loaded the machine under the next run; now it stops them (SIGTERM, then SIGKILL).
    (tmp_path / "member.py").write_text(MEMBER)
    pids = {kind: tmp_path / f"{kind}.pid" for kind in ("polite", "stubborn")}
    cmds = [[sys.executable, str(tmp_path / "member.py"), str(path), kind] for kind, path in pids.items()]
    logs = [str(tmp_path / f"{kind}.log") for kind in pids]
    driver = ("import json, sys; sys.path.insert(0, 'benchmarks'); import ablation\n"
              "ablation.MEMBER_STOP_SECONDS = 1.0\n"
              f"ablation.run_members(json.loads({json.dumps(cmds)!r}), json.loads({json.dumps(logs)!r}))\n")
    script = subprocess.Popen([sys.executable, "-c", driver], cwd=str(REPO))
    members: List[int] = []
    try:
        deadline = time.monotonic() + 120
        while not all(path.exists() for path in pids.values()):  # both members up, however loaded the machine
            assert script.poll() is None and time.monotonic() < deadline, "the members did not start"
            time.sleep(0.05)
        members = [int(path.read_text()) for path in pids.values()]
        script.send_signal(signal.SIGTERM)
        code = script.wait(60)
        left = [pid for pid in members if running(pid)]
    finally:
        if script.poll() is None:
            script.kill()
        for pid in members:  # never leave a member sleeping on the machine, even when the test fails
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    assert code == 128 + signal.SIGTERM
    assert not left, "members outlived the stopped script"


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_numerics_differ_refuses_another_machines_no_pbt_arm_by_its_untrained_policys_bits() -> None:
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from ablation import numerics_differ; "
        "there = {'random_score': -0.1172271769028157, 'machine': 'vm-a'}; "
        "print(json.dumps([numerics_differ(there, -0.1172271769028157), numerics_differ(there, -0.11722714605275542), "
        "numerics_differ({}, -0.1), numerics_differ(there, None)]))"
    )
    out = run_code(code)
    same, other, unplayed, not_played_here = json.loads(out)
    assert same is None and unplayed is None and not_played_here is None
    assert "played -0.1172271769028157 on vm-a and -0.11722714605275542 here" in other
    assert "Train the no-PBT arm here" in other


def test_replay_differs_refuses_a_stored_no_pbt_arm_whose_run_trains_elsewhere_here() -> None:
    # Reacher's 2 cm disc: the untrained policy's bits matched across two VMs, its best run did not.
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from ablation import replay_differs; "
        "stored = {'scores': [0.0, 0.006, 0.047]}; "
        "print(json.dumps([replay_differs(stored, 2, 0.047), replay_differs(stored, 2, 0.188)]))"
    )
    out = run_code(code)
    same, other = json.loads(out)
    assert same is None
    assert "member 2, trained again here from the same sample and seed, played 0.188 where it had played 0.047" in other
    assert "Train the no-PBT arm here" in other


@pytest.mark.training
def test_ablation_refuses_a_no_pbt_arm_played_with_other_numerics_before_training(tmp_path) -> None:
    args = {"task": "Pendulum", "frames": 4096, "num_envs": 16, "search_space": None, "train_args": [],
            "play_episodes": 1, "curve": False, "members": 1}
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"args": args, "machine": "another VM", "random_score": 12345.0, "sets": []}))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ablation.py"), "--task", "Pendulum", "--members",
                           "1", "--seed_sets", "1", "--frames", "4096", "--num_envs", "16", "--play_episodes", "1",
                           "--strategies", "threshold", "--no_pbt_from", str(earlier), "--out", str(tmp_path / "out.json")],
                          cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "was made with other numerics: its untrained policy played 12345.0 on another VM" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out.json").exists()  # refused before any arm trained
