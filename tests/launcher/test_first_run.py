"""The README's main job, run as printed there: a real 4-member PBT population that must show PBT at
work (a member takes a leader's weights), live progress lines, and the end-of-run summary whose
winner checkpoint and next commands are real."""
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import REPO, donor_led, worker_env
from pbt.storage import WorkspaceReader

SECTION = "## Install and the two commands"


def readme_main_job() -> List[str]:
    """The launcher command of the README's main job (the last part of its first bash block)."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no bash block in the README's install section"
    commands = [c.strip() for c in block.group(1).replace("\\\n", " ").split("&&")]
    (launcher,) = [c for c in commands if c.startswith("pbt-launch ")]
    return shlex.split(launcher)


def test_readme_names_the_main_job():
    argv = readme_main_job()
    assert argv[0] == "pbt-launch" and "--run=experiments.smoke_pbt" in argv
    # the console script is the launcher's main: the test below runs that module with the same arguments
    assert 'pbt-launch = "pbt.launcher.run:main"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.training
def test_main_job_as_printed_in_the_readme_shows_pbt_working(tmp_path: Path):
    argv = readme_main_job()
    train_dir = tmp_path / "train_dir"
    proc = subprocess.run([sys.executable, "-m", "pbt.launcher.run"] + argv[1:] + [f"--train_dir={train_dir}"],
                          cwd=str(REPO), env=worker_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:]

    workspace = train_dir / "smoke_pbt" / "pendulum" / "workspace"
    reader = WorkspaceReader(workspace)
    lineages = {idx: reader.read_lineage(idx) for idx in range(4)}
    replaces = [e for entries in lineages.values() for e in entries if e.action == "replace"]
    assert replaces, "no member took a leader's weights: " + repr(
        [(e.policy_idx, e.iteration, e.action, e.reason) for entries in lineages.values() for e in entries])
    for entry in replaces:  # the donor led when its weights were taken
        assert entry.donor is not None and entry.donor != entry.policy_idx
        assert donor_led(entry), entry

    # Learning happened: the population's best final objective beats every member's first known one.
    first = [next(e.objective for e in entries if e.objective is not None) for entries in lineages.values()]
    records = [reader.latest_record(idx) for idx in range(4)]
    assert all(r is not None and r.frame >= 400_000 for r in records), records
    best = max(r.objective for r in records if r is not None and r.objective is not None)
    assert best > max(first) + 100, (best, first)

    # Live progress: plain lines (pytest's stdout is no terminal), one per member under a header.
    assert re.search(r"progress pendulum: elapsed \d+:\d\d, (left ~|time left )", out), out[-3000:]
    assert re.search(r"pendulum #0: [\d.]+[kM]?/400\.0k frames, ", out), out[-3000:]

    # The summary: the table, the winner and its checkpoint, the next commands.
    assert f"PBT summary of pendulum (4 members, workspace {workspace})" in out
    assert re.search(r"rank +member +objective +frames +given +taken +hyperparameters", out)
    winner = re.search(r"winner: member (\d), objective (\S+)", out)
    assert winner, out[-3000:]
    assert float(winner.group(2)) == pytest.approx(best, abs=0.05 + 1e-3 * abs(best))
    checkpoint = re.search(r"checkpoint: (\S+\.pth) \(", out)
    assert checkpoint and Path(checkpoint.group(1)).is_file()
    assert f"pbt-status {workspace}" in out
    assert f"pbt-analyze {workspace} --out " in out
    play = re.search(r"^  (pbt-play checkpoint=.*)$", out, re.M)
    assert play and f"checkpoint={checkpoint.group(1)} " in play.group(1)
    assert f"exploits: {len(replaces)} replace(s) in all" in out

    # The printed play command runs the winner (episodes cut down to keep the test short).
    play_argv = shlex.split(play.group(1).replace("episodes=100", "episodes=20"))
    played = subprocess.run([sys.executable, "-m", "pbt.play"] + play_argv[1:], cwd=str(tmp_path), env=worker_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    assert played.returncode == 0, played.stdout[-3000:]
    assert re.search(r"PLAY episodes=20 ", played.stdout)
