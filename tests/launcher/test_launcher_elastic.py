"""``python -m launcher.run ... --add N`` on an elastic population (``pbt.num_policies=auto``).

- pure: which members ``--add`` makes (next free indices, seeds moved along, refusals);
- real: a running 2-member Pendulum population (one launcher) grows by one member from a second
  launcher on the same train_dir; the new member joins from the best member and both launchers end
  cleanly.
"""
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from conftest import REPO, worker_env
from pbt.launcher.run_description import Experiment, ParamGrid, RunDescription, added_members
from pbt.errors import ConfigError

BASE = "python -m pbt.train task=Pendulum pbt=pbt_default"


def population(cmd: str = BASE + " pbt.num_policies=auto") -> RunDescription:
    grid = ParamGrid([(("pbt.policy_idx", "seed"), [(0, 100), (1, 101)])])
    return RunDescription("grow", experiments=[Experiment("pop", cmd, grid)])


def test_added_members_take_the_next_free_indices_and_move_the_seed(tmp_path: Path) -> None:
    members = population().members(str(tmp_path))
    added = added_members(members, taken={0, 1, 4}, count=2)  # 4: a member that joined by hand earlier
    assert [m.index for m in added] == [5, 6]
    assert [m.name for m in added] == ["pop_05", "pop_06"]
    for member, seed in zip(added, (105, 106)):
        assert f"pbt.policy_idx={member.index}" in member.argv and f"seed={seed}" in member.argv
        assert f"experiment={member.name}" in member.argv and "pbt.num_policies=auto" in member.argv
        assert member.workspace == members[0].workspace and member.log_path.endswith(f"logs/{member.name}.log")


def test_add_refuses_a_fixed_size_population(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an elastic PBT population.*pbt.num_policies=auto"):
        added_members(population(BASE).members(str(tmp_path)), taken=set(), count=1)
    with pytest.raises(ConfigError, match="--add=0"):
        added_members(population().members(str(tmp_path)), taken=set(), count=0)


EXPERIMENT = '''
from pbt.launcher import Experiment, ParamGrid, RunDescription
CMD = ("python -m pbt.train task=Pendulum pbt=pbt_default pbt.num_policies=auto pbt.elastic_window=2 "
       "num_envs=128 max_frames=400000 pbt.interval_steps=16384 pbt.initial_delay=0 "
       "pbt.start_after=100000000 pbt.ready_after=0 pbt.heartbeat_interval=0.5 pbt.heartbeat_timeout=5 sim_device=cpu rl_device=cpu "
       "torch_threads=1")
RUN_DESCRIPTION = RunDescription("grow", experiments=[
    Experiment("pop", CMD, ParamGrid([(("pbt.policy_idx", "seed"), [(0, 100), (1, 101)])]))])
'''


def launcher(tmp_path: Path, *extra: str) -> List[str]:
    return [sys.executable, "-m", "pbt.launcher.run", f"--run={tmp_path / 'grow_exp.py'}", "--backend=processes",
            "--num_gpus=0", f"--train_dir={tmp_path / 'td'}", "--progress=off", "--summary=false", *extra]


def lineage(ws: Path, idx: int) -> List[Dict[str, Any]]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.training
def test_a_second_launcher_adds_a_member_to_the_running_population(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # real Pendulum members (the pure tests above run on Python 3.8 too)
    sys.path.insert(0, str(REPO / "tests"))
    from faults_util import wait_for

    from pbt.storage import Record, WorkspaceReader

    (tmp_path / "grow_exp.py").write_text(EXPERIMENT)
    ws = tmp_path / "td" / "grow" / "pop" / "workspace"
    first_log = open(tmp_path / "first.log", "wb")
    first = subprocess.Popen(launcher(tmp_path), cwd=str(REPO), env=worker_env(), stdout=first_log,
                             stderr=subprocess.STDOUT)
    try:
        def objectives() -> Optional[Dict[int, Record]]:
            latest = WorkspaceReader(ws).latest_records() if ws.is_dir() else {}
            return latest if any(r.has_objective for r in latest.values()) else None

        def first_alive() -> Optional[Dict[int, Record]]:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            return objectives()

        wait_for("the population to publish an objective", first_alive, timeout=300)
        second = subprocess.run(launcher(tmp_path, "--add=1"), cwd=str(REPO), env=worker_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        assert first.wait(timeout=900) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
        first_log.close()
    out = second.stdout.decode()
    assert second.returncode == 0, out[-3000:]
    assert "adding 1 member(s) to experiment pop: policy indices [2]" in out
    joined = lineage(ws, 2)[0]
    assert joined["action"] == "replace" and joined["mode"] == "startup" and joined["donor"] in (0, 1)
    member_log = (tmp_path / "td" / "grow" / "pop" / "logs" / "pop_02.log").read_text()
    assert "joined the running population from its best member" in member_log
    manifest = json.loads((tmp_path / "td" / "grow" / "members.json").read_text())
    assert [m["name"] for m in manifest["members"]] == ["pop_00", "pop_01", "pop_02"]
    # the founders ranked the newcomer
    founders = [e["reason"] for i in (0, 1) for e in lineage(ws, i)]
    assert any("members [0, 1, 2] ranked" in r for r in founders)
