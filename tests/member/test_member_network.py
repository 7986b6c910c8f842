"""PbtMember with network mutations (pbt/mutation=agilerl): the starting network is checked at
start-up, a resumed member takes its recorded network, records and lineage carry the network, and
the explore step draws one kind (a network kind leaves the hyperparameters alone) starting from the
donor's network when it takes a donor's weights."""
import copy
import logging
from typing import Any, Dict

import pytest
from conftest import decide_only

from pbt.errors import ConfigError
from pbt.iteration import Outcome
from pbt.member import PbtMember, plan_restart
from pbt.mutation.network import NetworkSpec
from pbt.selection import KEEP, MUTATE, REPLACE
from pbt.storage import Workspace

P = "train.params.config."
SCHEME = {P + "learning_rate": "mutate_float", P + "gamma": "mutate_discount"}
ONLY = {"none": 0.0, "architecture": 0.0, "parameters": 0.0, "activation": 0.0, "hyperparameters": 0.0}


def make_cfg(ws: Any, units: Any = (16,), kind: str = "none", **pbt: Any) -> Dict[str, Any]:
    block = {"enabled": True, "policy_idx": 1, "num_policies": 2, "workspace": str(ws), "interval_steps": 1000,
             "mutation": dict(SCHEME), "mutation_rate": 1.0, "network_mutation": {**ONLY, kind: 1.0, "max_units": 64},
             "dbg_mode": True, "significance": None, "start_after": 0, "initial_delay": 0, "ready_after": 0,
             "selection": "dexpbt", "initial_mutation": False}
    block.update(pbt)
    network = {"name": "actor_critic", "separate": False, "mlp": {"units": list(units), "activation": "elu"}}
    return {"seed": 3, "checkpoint": "", "experiment": "exp", "pbt": block,
            "train": {"params": {"config": {"learning_rate": 1e-3, "gamma": 0.99}, "network": network}}}


def publish(ws: Any, idx: int, iteration: int, objective: float, network: Any) -> Any:
    params = {P + "learning_rate": 5e-4, P + "gamma": 0.97}
    return Workspace(ws, idx, 2).publish(iteration, iteration * 1000, objective, params, b"ckpt-%d" % iteration,
                                         [objective] * 8, frames_since_replace=iteration * 1000, network=network)


def test_a_starting_network_outside_the_limits_fails_before_training(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match=r"layers of \[128\] units, outside min_units..max_units 8..64"):
        PbtMember(make_cfg(tmp_path / "ws", units=(128,)), tmp_path / "run", [])


def test_a_resumed_member_builds_its_recorded_network(tmp_path: Any, caplog: Any) -> None:
    ws = tmp_path / "ws"
    publish(ws, 1, 1, -1.0, {"units": [48, 16], "activation": "tanh", "parameters": 1000})
    cfg = PbtMember(make_cfg(ws), tmp_path / "run", []).startup()
    mlp = cfg["train"]["params"]["network"]["mlp"]
    assert mlp["units"] == [48, 16] and mlp["activation"] == "tanh"
    publish(ws, 1, 2, -1.0, {"units": [48, 0], "activation": "tanh"})  # planted: never built
    with caplog.at_level(logging.WARNING):
        cfg = PbtMember(make_cfg(ws), tmp_path / "run2", []).startup()
    assert cfg["train"]["params"]["network"]["mlp"]["units"] == [16]
    assert "holds an invalid network" in caplog.text


@pytest.mark.parametrize("kind", ["none", "architecture", "hyperparameters"])
def test_the_explore_step_starts_from_the_donors_network(tmp_path: Any, kind: str) -> None:
    pytest.importorskip("torch")  # publishing the own record serializes its state
    ws = tmp_path / "ws"
    publish(ws, 0, 1, 5.0, {"units": [32], "activation": "elu", "parameters": 300})
    member = PbtMember(make_cfg(ws, kind=kind), tmp_path / "run", ["task=Pendulum"])
    member.startup()
    member.network.parameters = 193
    member.started(1000)
    with member.iteration(1000, -5.0, {"model": {}}, [-5.0] * 8) as it:
        decision = it.decision
        assert decision.action == REPLACE and decision.donor.policy_idx == 0
        change = decision.network
        assert change is not None and change.before == NetworkSpec((32,), "elu")
        own = Workspace(ws, 1, 2).latest_record(1)
        assert own.network == {"units": [16], "activation": "elu", "parameters": 193}
        donor_params = decision.donor.params
        unmutated = (donor_params, decision.params_before)  # the strategy's base: the donor's or its own
        if kind == "hyperparameters":
            assert decision.params_after not in unmutated and not change.changes_network
        else:  # one kind per step: a network kind leaves the hyperparameters unmutated
            assert decision.params_after in unmutated
            assert change.changes_network == (kind == "architecture")
        plan = plan_restart(member, decision, 1000, 1)
        assert plan is None or f"train.params.network.mlp.units={list(change.after.units)}".replace(" ", "") in plan.argv
        outcome = Outcome(decision.action, decision.reason, decision.params_after, "inplace", network=change, parameters=99)
        member.record(it, outcome)  # the record step adopts what was carried out
    entry = member.workspace.read_lineage(1)[-1]
    assert entry.network == {**change.after.to_dict(), "parameters": 99} and member.network.spec == change.after
    assert entry.mode == "inplace" and entry.donor == 0 and change.describe() in entry.reason


def test_keep_plans_no_network_change(tmp_path: Any) -> None:
    pytest.importorskip("torch")
    ws = tmp_path / "ws"
    publish(ws, 0, 1, -50.0, {"units": [32], "activation": "elu"})
    member = PbtMember(make_cfg(ws, kind="architecture", dbg_mode=False), tmp_path / "run", [])
    member.startup()
    member.started(1000)
    decision = decide_only(member, 1000, -5.0, {"model": {}}, [-5.0] * 8)
    assert decision.action in (KEEP, MUTATE)
    assert (decision.network is None) == (decision.action == KEEP)
    cfg = copy.deepcopy(member.cfg)
    assert cfg["train"]["params"]["network"]["mlp"]["units"] == [16]
