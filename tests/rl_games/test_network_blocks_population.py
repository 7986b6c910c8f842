"""RNN and CNN network evolution (pbt/mutation=agilerl, agilerl_trpo) with real worker processes:

- the partially observed Pendulum (observation [cos, sin]) with an LSTM before the MLP, on TRPO:
  members change their RNN's units and layers, in place and by exec restart (one population per mode);
- PendulumImage (a 6x6x2 image) with a CNN, on PPO: members change their conv filters.

Every record's network is the one its checkpoint holds (read from the tensor shapes), pbt.play of
an evolved member builds its recorded architecture, and the best member's exported schedule replays
with its final architecture.
"""
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import pytest

from conftest import REPO, worker_env

pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "tests"))

from faults_util import Worker, finish, worker_cmd  # noqa: E402

from pbt.mutation.network import NetworkSpec  # noqa: E402
from pbt.rl_games.surgery import spec_problem  # noqa: E402
from pbt.storage import Workspace  # noqa: E402
from pbt.storage.checkpoints import load_state_file  # noqa: E402
from pbt.tools.analyze import analyze  # noqa: E402

ARCHITECTURE_ONLY = ("pbt/selection=dexpbt", "pbt.replace_fraction_best=1.0", "pbt.dbg_mode=true", "pbt.ready_after=0",
                     "pbt.significance=null", "++task.env.episodeLength=50", "pbt.network_mutation.none=0",
                     "pbt.network_mutation.architecture=1.0", "pbt.network_mutation.parameters=0",
                     "pbt.network_mutation.activation=0", "pbt.network_mutation.hyperparameters=0")
RECURRENT = ("train=PendulumTRPO", "task.env.observeVelocity=False",
             "+train.params.network.rnn={name:lstm,units:16,layers:1,before_mlp:True}",
             "train.params.config.seq_length=8")


def lineage(ws: Path, idx: int) -> List[Dict[str, Any]]:
    path = ws / f"{idx:03d}" / "lineage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def population(tmp_path: Path, task: str, scheme: str, *extra: str,
               exec_members: Sequence[int] = (1,)) -> Tuple[Path, List[str]]:
    """Two members; those in ``exec_members`` restart by exec (``pbt.restart_mode=exec``)."""
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    tmp_path.mkdir(parents=True, exist_ok=True)
    common = (f"pbt/mutation={scheme}", *ARCHITECTURE_ONLY, *extra)
    # 120 s: exec restarts must not make a member look dead to its peer (which then keeps)
    cmds = [worker_cmd(i, 2, ws, runs, *common, *(["pbt.restart_mode=exec"] if i in exec_members else []),
                       max_frames=50_000, interval=4096, task=task, heartbeat_timeout=120) for i in (0, 1)]
    logs = finish([Worker(cmd, tmp_path / f"w{i}.log", tmp_path) for i, cmd in enumerate(cmds)], 400)
    return ws, logs


def in_each_mode(tmp_path: Path, task: str, scheme: str, block: str, shape: Callable[[Dict[str, Any]], Any],
                 *extra: str) -> Tuple[Path, List[Tuple[int, str, Any]]]:
    """One population per restart mode, both members in it; each changes its ``block`` ("cnn",
    "rnn") in that mode. Returns the exec population's workspace and every change: (member, mode,
    ``shape`` of the network after). With one member of each mode in one population, the member
    that changes is whichever ranks worse, and once it changes every interval its objective stays
    mixed (32 steps per env per interval, 50-step episodes), so its peer may never change: the exec
    member once reached iteration 3 first, saw its peer unscored, kept, and never changed."""
    changes: List[Tuple[int, str, Any]] = []
    ws = tmp_path
    for mode, exec_members in (("inplace", ()), ("exec", (0, 1))):
        ws, _ = population(tmp_path / mode, task, scheme, *extra, exec_members=exec_members)
        made = [(i, e["mode"], shape(e["network"]))
                for i in (0, 1) for e in lineage(ws, i) if e["action"] != "keep" and f"network {block}" in e["reason"]]
        assert made and {m for _, m, _ in made} == {mode}, made
        check_records(ws)
        changes += made
    return ws, changes


def check_records(ws: Path) -> None:
    """Each member's newest record names the network its checkpoint holds (exec: built by the
    restarted process from the overrides)."""
    for idx in (0, 1):
        workspace = Workspace(ws, idx, 2)
        record = workspace.latest_record(idx)
        state = workspace.load_checkpoint(record, idx)
        assert spec_problem(state["model"], NetworkSpec.from_dict(record.network)) is None, record.network


def run_tool(args: Sequence[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", *args, "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
                           "num_envs=16"], cwd=str(cwd), env=worker_env(), capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output[-3000:]
    return output


@pytest.mark.training
def test_an_lstm_population_evolves_its_rnn_in_both_restart_modes_and_plays(tmp_path: Path) -> None:
    # the MLP's limits hold it ([64, 64]): every other architecture change is the RNN's
    ws, rnn_changes = in_each_mode(tmp_path, "Pendulum", "agilerl_trpo", "rnn",
                                   lambda network: (network["rnn_units"], network["rnn_layers"]), *RECURRENT,
                                   "pbt.network_mutation.new_layer=0.5", "pbt.network_mutation.min_layers=2",
                                   "pbt.network_mutation.max_layers=2", "pbt.network_mutation.min_units=64",
                                   "pbt.network_mutation.max_units=64", "pbt.network_mutation.unit_changes=[8]",
                                   "pbt.network_mutation.max_rnn_units=32")
    assert {shape for _, _, shape in rnn_changes} - {(16, 1)}, rnn_changes
    assert any("network: network rnn" in log.read_text() for log in tmp_path.glob("*/w*.log"))
    idx = rnn_changes[-1][0]
    record = Workspace(ws, idx, 2).latest_record(idx)
    checkpoint = ws / f"{idx:03d}" / f"{record.iteration:06d}.pth"
    output = run_tool(["pbt.play", f"checkpoint={checkpoint}", "task=Pendulum", *RECURRENT, "episodes=4"], tmp_path)
    spec = NetworkSpec.from_dict(record.network)
    assert f"names the network {spec.describe()}: playing with it" in output and "PLAY episodes=4" in output


@pytest.mark.training
def test_an_image_population_evolves_its_cnn_and_its_best_member_plays_and_replays(tmp_path: Path) -> None:
    _, cnn_changes = in_each_mode(tmp_path, "PendulumImage", "agilerl", "cnn",
                                  lambda network: tuple(network["cnn_filters"]),
                                  "pbt.network_mutation.filter_changes=[4]", "pbt.network_mutation.max_layers=1",
                                  "pbt.network_mutation.min_units=64",
                                  "pbt.network_mutation.max_units=64")  # the MLP held: every other change is the CNN's
    assert {filters for _, _, filters in cnn_changes} - {(8, 8)}, cnn_changes
    best = analyze(tmp_path / "exec" / "ws", tmp_path / "out").best
    assert best is not None
    spec = NetworkSpec.from_dict(best.record.network)
    output = run_tool(["pbt.play", f"checkpoint={best.directory / 'checkpoint.pth'}", "task=PendulumImage",
                       "episodes=4"], tmp_path)
    assert f"names the network {spec.describe()}: playing with it" in output
    output = run_tool(["pbt.replay", str(best.directory / "schedule.yaml"), "task=PendulumImage", "max_frames=4096",
                       f"train_dir={tmp_path / 'replay'}", "experiment=replay"], tmp_path)
    convs = [c.to_config() for c in spec.cnn]
    assert f"train.params.network.cnn.convs={convs}" in output, output[-3000:]
    (saved,) = (tmp_path / "replay" / "replay" / "nn").glob("*.pth")  # the replayed run trained that network
    assert spec_problem(load_state_file(saved)["model"], spec) is None
