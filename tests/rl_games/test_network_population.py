"""Network mutations (``pbt/mutation=agilerl``) with real worker processes sharing one workspace.

- a donor of another architecture is adopted, in place and by exec restart: the receiver rebuilds
  its network as the donor's and trains on (without pbt/mutation=agilerl the same donor is refused,
  tests/rl_games/test_donor_shapes.py);
- a population starting from units=[16] evolves its architecture; a member SIGKILLed after an
  architecture change resumes with the recorded architecture; more than one architecture is
  recorded and the population learned.
"""
import json
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest

from conftest import REPO

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "tests"))

from faults_util import Worker, finish, wait_for, worker_cmd  # noqa: E402
from test_donor_shapes import TASK  # noqa: E402  (ConstantPendulum: a fixed ranking)

from pbt.storage import Workspace  # noqa: E402

AGILERL = "pbt/mutation=agilerl"


def lineage(ws: Path, idx: int) -> List[Dict[str, Any]]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shapes(ws: Path, idx: int, n: int) -> Set[Tuple[int, ...]]:
    workspace = Workspace(ws, idx, n)
    state = workspace.load_checkpoint(workspace.latest_record(idx), idx)
    return {tuple(t.shape) for t in state["model"].values()}


@pytest.mark.training
@pytest.mark.parametrize("mode", ["inplace", "exec"])
def test_a_donor_of_another_architecture_is_adopted(tmp_path: Path, mode: str) -> None:
    (tmp_path / "shape_task.py").write_text(TASK)
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    # dbg_mode: the worse member acts at every iteration, and its only candidate is the leader;
    # network kind "none" always: the adoption alone changes the network.
    common = (AGILERL, "pbt.ready_after=0", "pbt.significance=null", f"pbt.restart_mode={mode}",
              "++task.env.episodeLength=50", "pbt.network_mutation.none=1.0", "pbt.network_mutation.architecture=0",
              "pbt.network_mutation.parameters=0", "pbt.network_mutation.activation=0",
              "pbt.network_mutation.hyperparameters=0")
    task = "shape_task:ConstantPendulum"
    workers = [
        Worker(worker_cmd(0, 2, ws, runs, *common, "train.params.network.mlp.units=[16]", max_frames=60_000, task=task),
               tmp_path / "w0.log", tmp_path, extra_pythonpath=str(tmp_path)),
        Worker(worker_cmd(1, 2, ws, runs, *common, "train.params.network.mlp.units=[32,32]",
                          "+task.env.objectiveValue=2.0", max_frames=60_000, task=task),
               tmp_path / "w1.log", tmp_path, extra_pythonpath=str(tmp_path)),
    ]
    logs = finish(workers)
    adopted = [e for e in lineage(ws, 0) if e["action"] == "replace"]
    assert adopted, logs[0][-3000:]
    assert all(e["mode"] == mode and e["donor"] == 1 for e in adopted)
    assert adopted[0]["network"]["units"] == [32, 32]
    assert adopted[0]["network"]["parameters"] > 500  # [16] has 193 parameters, [32, 32] 1249
    assert "network: adopted [32, 32] elu" in logs[0]
    assert (32, 32) in shapes(ws, 0, 2) and (16, 3) not in shapes(ws, 0, 2)
    record = Workspace(ws, 0, 2).latest_record(0)  # written after the adoption (exec: by the restarted process)
    assert record.network["units"] == [32, 32] and record.frame > adopted[0]["frame"]


@pytest.mark.training
@pytest.mark.faults
def test_a_population_evolves_its_network_through_a_kill_and_resume(tmp_path: Path) -> None:
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    # Member 1 takes donors by exec restart, member 0 in place; both act at every iteration
    # (dbg_mode, which only DexPBT's rule honours, and a best group of both members: the leader's
    # candidate is the other member, so it mutates too) and mostly change their architecture.
    common = (AGILERL, "pbt/selection=dexpbt", "pbt.replace_fraction_best=1.0",
              "train.params.network.mlp.units=[16]", "pbt.dbg_mode=true",
              "pbt.ready_after=0",
              "pbt.significance=null", "++task.env.episodeLength=50", "pbt.network_mutation.none=0",
              "pbt.network_mutation.architecture=0.8", "pbt.network_mutation.parameters=0.1",
              "pbt.network_mutation.activation=0", "pbt.network_mutation.hyperparameters=0.1",
              "pbt.network_mutation.unit_changes=[8,16]", "pbt.network_mutation.max_units=64")
    # 120 s: member 1's exec restarts are no fault (with 5 s member 0 took it for dead and kept, with
    # no peer to compare with, until its budget ran out); only the SIGKILL below is.
    cmds = [worker_cmd(0, 2, ws, runs, *common, max_frames=240_000, interval=8192, heartbeat_timeout=120),
            worker_cmd(1, 2, ws, runs, *common, "pbt.restart_mode=exec", max_frames=240_000, interval=8192,
                       heartbeat_timeout=120)]
    workers = [Worker(cmds[i], tmp_path / f"w{i}.log", tmp_path) for i in (0, 1)]
    try:
        def changed_and_recorded() -> Any:
            entries = [e for e in lineage(ws, 0) if e["network"] and e["network"]["units"] != [16]]
            record = Workspace(ws, 0, 2).latest_record(0)
            if entries and record is not None and record.network and record.network["units"] != [16]:
                return record
            return None

        before_kill = wait_for("member 0 to record another architecture", changed_and_recorded, timeout=240,
                               workers=workers)
        workers[0].kill(signal.SIGKILL)
        workers[0].wait(30)
        killed_at = Workspace(ws, 0, 2).latest_record(0)
        assert killed_at is not None and killed_at.frame < 240_000  # killed in the middle
        workers[0] = Worker(cmds[0], tmp_path / "w0_resumed.log", tmp_path)
    except BaseException:
        for w in workers:
            w.stop()
        raise
    resumed_log = finish(workers, 400)[0]
    assert f"resumes from its iteration {killed_at.iteration}" in resumed_log
    # built with the recorded architecture: its checkpoint loaded without a shape error
    assert f"restored workspace iteration {killed_at.iteration}" in resumed_log
    assert before_kill.network["units"] != [16]
    first_after = [e for e in lineage(ws, 0) if e["iteration"] > killed_at.iteration][0]
    if first_after["action"] == "keep":  # no change since: the resumed member runs the recorded network
        assert first_after["network"]["units"] == killed_at.network["units"]
    # the population explored architectures, in both restart modes
    modes = {e["mode"] for i in (0, 1) for e in lineage(ws, i) if e["action"] != "keep" and e["mode"] != "startup"}
    assert modes == {"inplace", "exec"}
    architectures = {tuple(e["network"]["units"]) for i in (0, 1) for e in lineage(ws, i) if e["network"]}
    assert len(architectures) > 1, architectures
    # It learned after the kill: the best objective either member recorded after member 0's kill beats
    # the best of the first iteration with objectives. Not the objective at the last iteration: both
    # members change at almost every iteration (dbg_mode, architecture 0.8), and a late narrowing
    # ([24] to [8]) or a layer folded into the heads can set the final policy back to random's level
    # (CI once ended at -308 against -313 at the start, after -285 at iteration 4).
    objectives: Dict[int, List[float]] = {}
    for i in (0, 1):
        for e in lineage(ws, i):
            if e["objective"] is not None:
                objectives.setdefault(e["iteration"], []).append(e["objective"])
    first = min(objectives)
    after_kill = [v for it, values in objectives.items() if it > killed_at.iteration for v in values]
    assert after_kill and max(after_kill) > max(objectives[first]) + 25, objectives
