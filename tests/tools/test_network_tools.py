"""The tools on a workspace whose members evolved their networks (pbt/mutation=agilerl): status
shows each member's network, analyze plots the parameter count and lists every change, TensorBoard
gets the network's size, play builds the recorded architecture and the exported schedule replays
the best member's final architecture from frame 0."""
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

pytest.importorskip("torch")
import torch  # noqa: E402

from pbt.mutation.network import NetworkSpec  # noqa: E402
from pbt.rl_games.tensorboard import PbtScalars  # noqa: E402
from pbt.storage import LineageEntry, Workspace  # noqa: E402
from pbt.tools.analyze import NETWORK_IMAGE, analyze  # noqa: E402
from pbt.tools.play import recorded_network  # noqa: E402
from pbt.tools.replay import load_schedule, plan  # noqa: E402
from pbt.tools.snapshot import read_snapshot  # noqa: E402
from pbt.tools.status import render_text  # noqa: E402

LR = "train.params.config.learning_rate"
UNITS = "train.params.network.mlp.units"


def network(units: List[int], parameters: int, activation: str = "elu") -> Dict[str, Any]:
    return {"units": units, "activation": activation, "parameters": parameters}


def grown_workspace(root: Path) -> Path:
    """Two members; member 0 grows from [16] to [32, 16] and leads."""
    ws = root / "ws"
    history = {0: [(network([16], 193), -9.0), (network([32], 321), -5.0), (network([32, 16], 833), -1.0)],
               1: [(network([16], 193), -8.0), (network([16], 193), -7.0), (network([16], 193), -6.0)]}
    for idx, steps in history.items():
        workspace = Workspace(ws, idx, 2)
        for iteration, (net, objective) in enumerate(steps, start=1):
            state = {"model": {"w": torch.zeros(net["units"][0], 3)}, "frame": iteration * 1000, "epoch": iteration}
            workspace.save(iteration, iteration * 1000, objective, {LR: 1e-3}, state, [objective] * 4,
                           frames_since_replace=iteration * 1000, network=net)
            action = "mutate" if idx == 0 and iteration > 1 else "keep"
            workspace.append_lineage(LineageEntry(
                policy_idx=idx, iteration=iteration, frame=iteration * 1000, action=action,
                reason="network add_units" if action == "mutate" else "hold", objective=objective,
                mode="inplace" if action == "mutate" else None, params_before={LR: 1e-3}, params_after={LR: 1e-3},
                time=time.time(), network=net))
    return ws


def test_status_and_analyze_show_each_members_network(tmp_path: Path) -> None:
    ws = grown_workspace(tmp_path)
    text = render_text(read_snapshot(ws), width=220)
    assert "network" in text and "[32, 16] elu 833" in text and "[16] elu 193" in text
    result = analyze(ws, tmp_path / "out")
    assert (tmp_path / "out" / NETWORK_IMAGE).stat().st_size > 1000
    report = (tmp_path / "out" / "report.md").read_text()
    section = report.split("## Networks", 1)[1]
    assert "| 0 | 2000 | 2 | mutate | [32] elu | 321 |" in section and "| 0 | 3000 | 3 | mutate | [32, 16] elu | 833 |" in section
    assert [line for line in section.splitlines() if line.startswith("| 1 |")] == \
        ["| 1 | 1000 | 1 | keep | [16] elu | 193 |"]  # member 1 never changed: one row
    assert "<h2>Networks</h2>" in (tmp_path / "out" / "report.html").read_text()
    best = result.best
    assert best is not None and best.record.policy_idx == 0
    # play builds the network named by the record next to the checkpoint (export and workspace layouts)
    assert recorded_network(str(best.directory / "checkpoint.pth")) == NetworkSpec((32, 16), "elu")
    assert recorded_network(str(ws / "001" / "000002.pth")) == NetworkSpec((16,), "elu")
    assert recorded_network(str(tmp_path / "nowhere.pth")) is None
    # the schedule starts with the best member's final architecture; replay takes it as frame-0 config
    schedule = yaml.safe_load((best.directory / "schedule.yaml").read_text())
    assert schedule["steps"][0]["frame"] == 0 and schedule["steps"][0]["params"][UNITS] == [32, 16]
    initial, timed = plan(load_schedule(best.directory / "schedule.yaml"), {LR: 1e-3, UNITS: [16]}, [LR])
    assert initial[UNITS] == [32, 16] and all(UNITS not in change.changes for change in timed)


def test_without_network_mutation_nothing_about_networks_is_shown(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for idx in (0, 1):
        Workspace(ws, idx, 2).save(1, 1000, -1.0 - idx, {LR: 1e-3}, {"model": {"w": torch.zeros(2)}}, [-1.0])
    assert " network " not in render_text(read_snapshot(ws), width=220)
    analyze(ws, tmp_path / "out")
    assert not (tmp_path / "out" / NETWORK_IMAGE).exists()
    assert "## Networks" not in (tmp_path / "out" / "report.md").read_text()


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: Dict[str, float] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars[tag] = value


def test_tensorboard_gets_the_network_size(tmp_path: Path) -> None:
    ws = grown_workspace(tmp_path)
    workspace = Workspace(ws, 0, 2)
    own = workspace.latest_record(0)
    writer = FakeWriter()
    PbtScalars(writer).log_iteration(3000, own, {0: own}, workspace.read_lineage(0))
    assert writer.scalars["pbt/network_parameters"] == 833.0
    assert writer.scalars["pbt/network_layers"] == 2.0 and writer.scalars["pbt/network_units"] == 48.0
