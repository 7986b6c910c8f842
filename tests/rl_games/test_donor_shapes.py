"""A donor of another network shape never kills the receiver: its checkpoint is checked against the
receiving agent (model keys and shapes, normalizers, optimizer) before one tensor is copied.

On real rl_games agents built through pbt.rl_games.runner (Pendulum with mlp units [64, 64] and
[32, 32]), and with two real worker processes in both restart modes: the member whose leader has
another network refuses it (logged once), keeps its own weights and both workers finish.
"""
import copy
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, List

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games import make_adapter  # noqa: E402
from pbt.rl_games.agent import AgentAdapter, optimizer_mismatch, state_dict_mismatch  # noqa: E402

COMMON = ["task=Pendulum", "num_envs=16", "sim_device=cpu", "rl_device=cpu", "torch_threads=1",
          "train.params.config.horizon_length=16", "train.params.config.minibatch_size=256"]
SMALL = "train.params.network.mlp.units=[32,32]"


def build(overrides: List[str], train_dir: Any) -> AgentAdapter:
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.rl_games.runner import build_runner, create_agent
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=rewrite_task_overrides(
            [*COMMON, *overrides, f"train_dir={train_dir}", "experiment=shapes"]))
    runner = build_runner(cfg)
    return make_adapter(create_agent(runner, "shapes"), runner.algo_name)


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("shapes")
    return SimpleNamespace(big=build([], root / "runs"), small=build([SMALL], root / "runs"),
                           twin=build([], root / "runs"))


def test_a_checkpoint_of_the_same_network_fits(agents: SimpleNamespace) -> None:
    assert agents.big.state_problem(copy.deepcopy(agents.twin.full_state())) is None
    assert agents.big.state_problem(agents.big.full_state(), counts=True) is None


def test_another_mlp_is_refused_naming_the_tensor_and_both_shapes(agents: SimpleNamespace) -> None:
    problem = agents.big.state_problem(copy.deepcopy(agents.small.full_state()))
    assert problem is not None
    assert re.search(r"model\['[^']+'\] has shape \(32, \d+\), this agent's \(64, \d+\)", problem), problem
    assert agents.small.state_problem(copy.deepcopy(agents.big.full_state())) is not None


def test_each_part_load_state_dict_would_touch_is_checked(agents: SimpleNamespace) -> None:
    good = copy.deepcopy(agents.twin.full_state())
    missing = copy.deepcopy(good)
    missing["model"].pop(sorted(missing["model"])[0])
    assert "model keys differ: missing" in agents.big.state_problem(missing)
    extra = copy.deepcopy(good)
    extra["model"]["planted.weight"] = torch.zeros(3)
    assert "unexpected planted.weight" in agents.big.state_problem(extra)
    not_tensor = copy.deepcopy(good)
    not_tensor["model"][sorted(good["model"])[0]] = [1.0, 2.0]
    assert "is a list, not a tensor" in agents.big.state_problem(not_tensor)
    # The model fits, the optimizer is the small network's: load_state_dict would take it silently
    # and the next Adam step would fail on the moment shapes.
    mixed = copy.deepcopy(good)
    small = copy.deepcopy(agents.small.full_state())
    mixed["optimizer"] = small["optimizer"]
    agents.small.algo.optimizer.zero_grad()
    if not mixed["optimizer"]["state"]:  # a fresh optimizer has no moments yet: give it some
        params = mixed["optimizer"]["param_groups"][0]["params"]
        shapes = [tuple(p.shape) for p in agents.small.algo.optimizer.param_groups[0]["params"]]
        mixed["optimizer"]["state"] = {pid: {"exp_avg": torch.zeros(shape)} for pid, shape in zip(params, shapes)}
    problem = agents.big.state_problem(mixed)
    assert problem is not None and problem.startswith("optimizer"), problem
    for junk in (None, "abc", [1, 2], {"model": "x"}):
        assert agents.big.state_problem(junk) is not None
    counts = copy.deepcopy(good)
    counts["frame"] = "12"
    assert agents.big.state_problem(counts) is None and "frame is '12'" in agents.big.state_problem(counts, True)


def test_pure_checks_on_plain_state_dicts() -> None:
    own = {"w": torch.zeros(2, 3), "step": 5}
    assert state_dict_mismatch(own, {"w": torch.ones(2, 3), "step": 7}, "m") is None
    assert "has shape (3, 2)" in state_dict_mismatch(own, {"w": torch.ones(3, 2), "step": 7}, "m")
    assert "m is a str" in state_dict_mismatch(own, "junk", "m")
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert optimizer_mismatch(optimizer, optimizer.state_dict(), "opt") is None
    other = torch.optim.Adam(torch.nn.Linear(4, 2).parameters())
    assert "has shape" in optimizer_mismatch(optimizer, {**other.state_dict(), "state": {
        0: {"exp_avg": torch.zeros(2, 4)}}}, "opt")
    assert "parameter groups" in optimizer_mismatch(optimizer, {"param_groups": [], "state": {}}, "opt")
    assert "not an optimizer" in optimizer_mismatch(optimizer, {"state": 3}, "opt")
    assert "unknown parameter" in optimizer_mismatch(optimizer, {**optimizer.state_dict(), "state": {99: {}}}, "opt")


def test_restore_refuses_before_loading_anything(agents: SimpleNamespace) -> None:
    before = agents.big.fingerprint()
    state = copy.deepcopy(agents.small.full_state())
    with pytest.raises(ConfigError, match="does not fit this agent: model"):
        agents.big.restore(state, {"learning_rate": 1e-3})
    assert agents.big.fingerprint() == before


# -- real workers -------------------------------------------------------------------------------------------

TASK = '''
import torch
from pbt.tasks.pendulum import Pendulum


class ConstantPendulum(Pendulum):
    """Pendulum reporting a constant true_objective (env.objectiveValue): the ranking is fixed."""

    def _episode_end_extras(self, done):
        self.extras["true_objective"] = torch.full((self.num_envs,), float(self.env_cfg.get("objectiveValue", 1.0)),
                                                   device=self.device)
'''


@pytest.mark.training
@pytest.mark.parametrize("mode", ["inplace", "exec"])
def test_a_leader_of_another_shape_is_refused_and_the_receiver_trains_on(tmp_path: Path, mode: str) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from faults_util import Worker, worker_cmd

    from pbt.storage import Workspace

    (tmp_path / "shape_task.py").write_text(TASK)
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    # dbg_mode: the worse member acts at every iteration, and its only candidate is the leader.
    common = ("pbt.ready_after=0", "pbt.significance=null", f"pbt.restart_mode={mode}",
              "+task.env.episodeLength=50")
    task = "shape_task:ConstantPendulum"
    workers = [
        Worker(worker_cmd(0, 2, ws, runs, *common, max_frames=60_000, task=task), tmp_path / "w0.log", tmp_path,
               extra_pythonpath=str(tmp_path)),
        Worker(worker_cmd(1, 2, ws, runs, *common, SMALL, "+task.env.objectiveValue=2.0", max_frames=60_000,
                          task=task), tmp_path / "w1.log", tmp_path, extra_pythonpath=str(tmp_path)),
    ]
    try:
        codes = [w.wait(300) for w in workers]
    finally:
        for w in workers:
            w.stop()
    logs = [w.log() for w in workers]
    assert codes == [0, 0], "\n\n".join(log[-3000:] for log in logs)
    assert "Traceback" not in logs[0] + logs[1]
    refusal = r"refusing member 1 as a donor: its checkpoint does not fit this agent \(model"
    # logged once per process however often it is picked (an exec restart starts a new process)
    per_process = [len(re.findall(refusal, part)) for part in re.split(r"restarting \(pid \d+\)", logs[0])]
    assert sum(per_process) >= 1 and max(per_process) == 1, (per_process, logs[0][-3000:])
    workspace = Workspace(ws, 0, 2)
    lineage = workspace.read_lineage(0)
    refused = [e for e in lineage if "donor 1 refused" in e.reason]
    assert len(refused) >= 2 and all(e.action == "keep" and e.params_after == e.params_before for e in refused)
    assert not [e for e in lineage if e.action == "replace"]
    assert "exported member 1's" not in logs[0]  # exec mode: never restarted into the donor
    shapes = [{tuple(t.shape) for t in workspace.load_checkpoint(workspace.latest_record(i), i)["model"].values()}
              for i in (0, 1)]
    assert (128, 256) in shapes[0] and (32, 32) in shapes[1]  # member 0 kept its own network


def test_a_joiner_whose_donor_does_not_fit_trains_fresh_instead_of_dying(agents: SimpleNamespace,
                                                                        tmp_path: Path) -> None:
    from pbt.rl_games.observer import WorkerObserver
    from pbt.storage.checkpoints import serialize_state

    path = tmp_path / "join_checkpoint.pth"
    path.write_bytes(serialize_state(copy.deepcopy(agents.small.full_state())))
    refused: List[Any] = []
    observer = WorkerObserver({"train": {"params": {"config": {"learning_rate": 1e-3}}}, "pbt": {}})
    observer.member = SimpleNamespace(joined_from=SimpleNamespace(policy_idx=4, checksum="c" * 64),
                                      refuse_donor=lambda *args: refused.append(args))
    before = agents.big.fingerprint()
    observer.restore_checkpoint(agents.big, str(path))  # died at every start: ConfigError at restore
    assert agents.big.fingerprint() == before and refused and refused[0][0] == 4
    observer.member = None  # a checkpoint the user named must fit
    with pytest.raises(ConfigError, match="does not fit"):
        observer.restore_checkpoint(agents.big, str(path))
