"""Workspace format compatibility: today's code must read, resume from and analyze a workspace written by
the code before the package restructure (tests/fixtures/workspace_v1, see its README.md).

Only the stable command-line interfaces are used (python -m pbt.train / pbt.status / pbt.analyze), never
Python import paths, so the test holds across module moves."""
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
import yaml

from conftest import REPO, run_train, worker_env

FIXTURE = REPO / "tests" / "fixtures" / "workspace_v1"
MEMBERS = (0, 1)
RECORD_RE = re.compile(r"^\d{6}\.yaml$")
# The fixture's newest records (both members): iteration 4 at frame 81920; member 0 is the best.
NEWEST_ITERATION = 4
BEST_OBJECTIVE = "-192.8"


def _copy_fixture(tmp_path: Path) -> Path:
    """A writable copy of the fixture (without its README, which a real workspace does not have)."""
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE, ws, ignore=shutil.ignore_patterns("README.md"))
    return ws


def _records(member_dir: Path) -> Dict[int, Path]:
    return {int(p.stem): p for p in member_dir.iterdir() if RECORD_RE.match(p.name)}


def test_fixture_is_complete():
    for idx in MEMBERS:
        member = FIXTURE / f"{idx:03d}"
        records = _records(member)
        assert max(records) == NEWEST_ITERATION, sorted(records)
        for path in records.values():
            record = yaml.safe_load(path.read_text())
            assert (member / record["checkpoint"]).is_file(), path
        assert (member / "lineage.jsonl").is_file() and (member / "heartbeat").is_file()
        assert not list(member.glob("lock")) and not list(member.glob(".*.tmp"))
    assert list((FIXTURE / "best0").glob("*.pth")) and list((FIXTURE / "best1").glob("*.pth"))


def test_status_reads_v1_workspace(tmp_path):
    pytest.importorskip("rich")  # pbt.status draws with it (not on the torch-free Python 3.8 leg)
    ws = _copy_fixture(tmp_path)
    env = dict(worker_env(), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "pbt.status", str(ws)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "2 members" in out, out
    for idx in MEMBERS:  # one table row per member, starting with its policy index
        assert re.search(rf"^\s*{idx}\s+\S", out, re.MULTILINE), out
    assert BEST_OBJECTIVE in out, out


def _member_cmd(idx: int, ws: Path, runs: Path, max_frames: int):
    return ["task=Pendulum", "pbt=pbt_default", f"pbt.policy_idx={idx}", f"pbt.num_policies={len(MEMBERS)}",
            f"pbt.workspace={ws}", "pbt.interval_steps=20000", "pbt.start_after=0", "pbt.initial_delay=0",
            "pbt.ready_after=0", f"max_frames={max_frames}", "num_envs=64", "train.params.config.minibatch_size=1024",
            "sim_device=cpu", "rl_device=cpu", "torch_threads=1", "experiment=compat", f"train_dir={runs}",
            f"seed={1000 + idx}"]


@pytest.mark.training
def test_member_resumes_from_v1_workspace(tmp_path):
    ws = _copy_fixture(tmp_path)
    member = ws / "000"
    before = {it: yaml.safe_load(path.read_text()) for it, path in _records(member).items()}
    newest = max(before)
    assert newest == NEWEST_ITERATION

    proc = run_train(_member_cmd(0, ws, tmp_path / "runs", 80000 + 40000), tmp_path, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert re.search(rf"PBT policy 0 resumes from its iteration {newest}\b", output), output[-4000:]

    after = _records(member)
    assert max(after) > newest, sorted(after)
    newer = yaml.safe_load(after[max(after)].read_text())
    assert newer["policy_idx"] == 0 and newer["iteration"] == max(after) and newer["frame"] > before[newest]["frame"]
    assert (member / newer["checkpoint"]).is_file()
    kept = [it for it in before if it in after]
    assert kept, "every old record was deleted"
    for it in kept:  # old records still parse, with the same keys
        record = yaml.safe_load(after[it].read_text())
        assert isinstance(record, dict) and set(record) == set(before[it]), after[it]


def test_analyze_reads_v1_workspace(tmp_path):
    pytest.importorskip("matplotlib")  # pbt.analyze plots with it (not on the torch-free Python 3.8 leg)
    ws = _copy_fixture(tmp_path)
    out = tmp_path / "analysis"
    proc = subprocess.run([sys.executable, "-m", "pbt.analyze", str(ws), "--out", str(out)], cwd=str(tmp_path),
                          env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".md", ".html")]
    assert reports and all(p.stat().st_size > 0 for p in reports), list(out.rglob("*"))
