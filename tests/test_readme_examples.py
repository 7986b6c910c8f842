"""The documentation's PBT examples, run as printed: the commands are parsed out of the pages under
docs/ (the site; README.md points there) and only the placeholders a user fills in
(``pbt.policy_idx=i``, the workspace path) are substituted; run directories land in the test's
working directory. An example that no longer exploits fails here. tests/test_docs_commands.py
accounts for every other command of the pages.
"""
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import REPO, bash_commands, donor_led, parse_summary, worker_env

from pbt.storage import WorkspaceReader

pytestmark = pytest.mark.training


#: The page each former README section moved to (docs/ is the site's source).
PAGES = {
    "Run a population by hand": "guides/population-by-hand.md",
    "Launch a whole population": "guides/launcher-and-slurm.md",
    "Selection strategies and search spaces": "guides/selection.md",
    "Configuration reference": "reference/configuration-overview.md",
    "TRPO learner": "guides/trpo.md",
    "Evolving the network: `pbt/mutation=agilerl`": "guides/network.md",
    "PBT across a curriculum: `pbt/curriculum=<name>`": "guides/curriculum.md",
}


def readme_section(title: str) -> str:
    """The text of the documentation page that holds what the README's section ``title`` held."""
    path = REPO / "docs" / PAGES[title]
    assert path.is_file(), f"docs/{PAGES[title]} is missing"
    return path.read_text()


def as_argv(command: str, substitutions: dict) -> List[str]:
    """``command`` as argv with this interpreter; each ``key=`` argument in ``substitutions`` replaced."""
    argv = shlex.split(command)
    assert argv[0] == "python", command
    out = [sys.executable]
    for arg in argv[1:]:
        key = arg.split("=", 1)[0]
        out.append(f"{key}={substitutions[key]}" if key in substitutions else arg)
    return out


def test_hand_run_population_exploits_as_printed(tmp_path: Path) -> None:
    """README "Run a population by hand": N terminals, one command each, one shared workspace."""
    section = readme_section("Run a population by hand")
    (command,) = bash_commands(section)
    n = int(re.search(r"for i = 0 \.\. (\d+)", section).group(1)) + 1
    assert f"pbt.num_policies={n}" in command and "pbt.policy_idx=i" in command
    workspace = tmp_path / "pbt_pendulum"
    procs = []
    for idx in range(n):
        argv = as_argv(command, {"pbt.policy_idx": idx, "pbt.workspace": workspace})
        log = (tmp_path / f"member{idx}.log").open("w")
        procs.append((subprocess.Popen(argv, cwd=str(tmp_path), env=worker_env(), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(timeout=900)
        log.close()
    logs = [(tmp_path / f"member{idx}.log").read_text() for idx in range(n)]
    for idx, (proc, _) in enumerate(procs):
        assert proc.returncode == 0, f"member {idx} failed:\n{logs[idx][-3000:]}"
    max_frames = int(re.search(r"max_frames=(\d+)", command).group(1))
    for idx in range(n):
        assert parse_summary(logs[idx])["frames"] >= max_frames

    reader = WorkspaceReader(workspace, n)
    lineages = {idx: reader.read_lineage(idx) for idx in range(n)}
    replaces = [e for entries in lineages.values() for e in entries if e.action == "replace"]
    assert replaces, "no member took a leader's weights: " + "; ".join(
        f"{idx}: {[(e.frame, e.action, e.reason) for e in entries]}" for idx, entries in lineages.items())
    for entry in replaces:
        assert entry.donor is not None and entry.donor != entry.policy_idx
        # a newest objective may still be unknown (the ranking then compared older ones)
        if entry.donor_objective is not None and entry.objective is not None:
            assert donor_led(entry), entry
    # Learning happened: the population's best objective rose between the first and the last iteration.
    firsts, lasts = [], []
    for idx in range(n):
        known = [e.objective for e in lineages[idx] if e.objective is not None and math.isfinite(e.objective)]
        firsts.append(known[0])
        # A member that took a leader's weights near the end may not have measured its objective again
        # (None until half the envs finished an episode since): its newest record with a known objective counts.
        record = reader.latest_record(idx)
        while record is not None and not record.has_objective and record.iteration > 0:
            record = reader.latest_record(idx, max_iteration=record.iteration - 1)
        if record is not None and record.has_objective:
            lasts.append(record.objective)
    assert lasts and max(lasts) > max(firsts), (firsts, lasts)


def test_launcher_example_exploits_as_printed(tmp_path: Path) -> None:
    """README "Launch a whole population": the experiment module, saved and run as the README says."""
    section = readme_section("Launch a whole population")
    module = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    run = re.search(r"`(python -m launcher\.run --run=my_pbt\.py)`", section).group(1)
    (tmp_path / "my_pbt.py").write_text(module)
    argv = [sys.executable, *shlex.split(run)[1:], f"--train_dir={tmp_path / 'train_dir'}", "--num_gpus=0"]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=worker_env(), capture_output=True, text=True, timeout=1200)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    workspace = tmp_path / "train_dir" / "pendulum_pbt" / "pendulum" / "workspace"
    reader = WorkspaceReader(workspace)
    assert reader.member_indices() == [0, 1, 2, 3], output[-3000:]
    replaces = [e for idx in range(4) for e in reader.read_lineage(idx) if e.action == "replace"]
    assert replaces and all(donor_led(e) for e in replaces), ([e.reason for e in replaces], output[-3000:])
    assert "winner: member" in output


def readme_command(section_title: str, *needles: str) -> str:
    """The one command of a README section's bash blocks that holds every needle."""
    found = [c for c in bash_commands(readme_section(section_title)) if all(n in c for n in needles)]
    assert len(found) == 1, f"README '{section_title}': expected one command with {needles}, got {found}"
    return found[0]


def run_as_printed(command: str, tmp_path: Path, substitutions: dict, timeout: int = 600) -> str:
    argv = as_argv(command, substitutions)
    proc = subprocess.run(argv, cwd=str(tmp_path), env=worker_env(), capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def test_search_space_fixed_values_apply_as_printed(tmp_path: Path) -> None:
    """README "Fixed values": Pendulum's gamma 0.95 is overridden by the design document's fixed 0.99."""
    command = readme_command("Selection strategies and search spaces", "task=Pendulum", "ppo_design_doc",
                             "pbt.num_policies=2")
    workspace = tmp_path / "ws"
    output = run_as_printed(command, tmp_path, {"pbt.workspace": workspace})
    assert "fixes train.params.config.gamma=0.99 for a fresh member, overriding the task's configured value 0.95" \
        in output
    (entry,) = WorkspaceReader(workspace, 2).read_lineage(0)
    assert entry.params_after["train.params.config.gamma"] == 0.99


def test_reward_shaping_guard_as_printed(tmp_path: Path) -> None:
    """README "Reward-shaping keys ...": the Reacher scheme that mutates task.env.actionCost is refused
    under pbt.objective=episode_return before anything is written, and trains under the task's objective."""
    section = readme_section("Configuration reference")
    refused = readme_command("Configuration reference", "reacher_shaping", "pbt.objective=episode_return")
    proc = subprocess.run(as_argv(refused, {"pbt.workspace": tmp_path / "refused"}), cwd=str(tmp_path),
                          env=worker_env(), capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "reward-shaping key(s) task.env.actionCost of task Reacher" in output, output[-3000:]
    assert "pbt.allow_reward_shaping_mutation=true" in output and "pbt.allow_reward_shaping_mutation" in section
    assert not (tmp_path / "refused").exists()
    accepted = [c for c in bash_commands(section) if "reacher_shaping" in c and "pbt.objective" not in c]
    assert len(accepted) == 1, accepted
    output = run_as_printed(accepted[0], tmp_path, {"pbt.workspace": tmp_path / "ws"})
    assert "PBT mutates reward-shaping key(s) task.env.actionCost of task Reacher" in output
    assert parse_summary(output)["frames"] >= 20000


def test_trpo_skrl_keys_as_printed(tmp_path: Path) -> None:
    """README "TRPO learner": skrl's keys and an alias on the command line train, the alias noted."""
    command = readme_command("TRPO learner", "random_timesteps", "learning_starts", "kl_adaptive")
    output = run_as_printed(command, tmp_path, {})
    assert "trpo: train.params.config.discount_factor=0.99 is skrl's name of rl_games' gamma" in output
    assert parse_summary(output)["frames"] >= 20000


def test_recurrent_network_evolution_as_printed(tmp_path: Path) -> None:
    """README "Evolving the network": the partially observed Pendulum's LSTM on TRPO under
    pbt/mutation=agilerl_trpo, both members as printed; their lineage names the LSTM they started with."""
    command = readme_command("Evolving the network: `pbt/mutation=agilerl`", "agilerl_trpo")
    workspace = tmp_path / "ws"
    procs = [subprocess.Popen(as_argv(command, {"pbt.policy_idx": idx, "pbt.workspace": workspace}), cwd=str(tmp_path),
                              env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for idx in (0, 1)]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    reader = WorkspaceReader(workspace, 2)
    for idx in (0, 1):
        startup = reader.read_lineage(idx)[0]
        assert startup.mode == "startup", outputs[idx][-2000:]
        assert {k: startup.network[k] for k in ("rnn", "rnn_units", "rnn_layers")} == \
            {"rnn": "lstm", "rnn_units": 16, "rnn_layers": 1}, outputs[idx][-2000:]


def test_curriculum_example_as_printed(tmp_path: Path) -> None:
    """README "PBT across a curriculum": 2 members move through the 3 Reacher stages in place,
    with hyperparameters redrawn at each stage (reset); status shows the stage."""
    command = readme_command("PBT across a curriculum: `pbt/curriculum=<name>`", "pbt/curriculum=reacher_goal")
    workspace = tmp_path / "pbt_curriculum"
    procs = []
    for idx in range(2):
        argv = as_argv(command, {"pbt.policy_idx": idx, "pbt.workspace": workspace})
        log = (tmp_path / f"member{idx}.log").open("w")
        procs.append((subprocess.Popen(argv, cwd=str(tmp_path), env=worker_env(), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(timeout=900)
        log.close()
    for idx, (proc, _) in enumerate(procs):
        assert proc.returncode == 0, (tmp_path / f"member{idx}.log").read_text()[-3000:]
    reader = WorkspaceReader(workspace, 2)
    for idx in range(2):
        moves = [e for e in reader.read_lineage(idx) if e.reason.startswith("curriculum:")]
        assert [e.stage for e in moves] == [1, 2] and all(e.mode == "inplace" for e in moves), moves
        assert all("hyperparameters reset: drawn from pbt.search_space" in e.reason for e in moves)
        assert all(e.params_after != e.params_before for e in moves)
        assert reader.latest_record(idx).stage == 2
    status = subprocess.run([sys.executable, "-m", "pbt.status", str(workspace)], env=worker_env(),
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "stage" in status.stdout, status.stdout + status.stderr
