"""PbtMember and refused donors, without torch: a peer with junk hyperparameters is never decided on
and is logged once; a refused checkpoint is banned while it is that peer's newest; resumed
hyperparameters that fail the scheme's check fall back to the configured ones; a mutation key that
must never mutate stops the member before it starts."""
import dataclasses
import logging
import math
from pathlib import Path

import pytest
from conftest import decide_only

from pbt.errors import ConfigError
from pbt.member import PbtMember
from pbt.selection import KEEP, REPLACE
from pbt.storage import Workspace

LR, GAMMA = "train.params.config.learning_rate", "train.params.config.gamma"


def make_cfg(ws: Path, **pbt):
    block = {"enabled": True, "policy_idx": 0, "num_policies": 2, "workspace": str(ws), "interval_steps": 1000,
             "mutation": {LR: "mutate_float", GAMMA: "mutate_discount"}, "mutation_rate": 1.0, "start_after": 0,
             "initial_delay": 0, "ready_after": 0, "significance": None, "dbg_mode": True,
             "heartbeat_interval": 0.2, "heartbeat_timeout": 30.0, "selection": "dexpbt"}
    block.update(pbt)
    return {"seed": 3, "checkpoint": "", "experiment": "exp",
            "train": {"params": {"config": {"learning_rate": 1e-3, "gamma": 0.99}}}, "pbt": block}


def member_with_fake_checkpoints(tmp_path: Path, ws: Path, **pbt) -> PbtMember:
    member = PbtMember(make_cfg(ws, **pbt), tmp_path / "run", [])
    member.startup()
    workspace = member.workspace

    def save(iteration, frame, objective, params, state, episode_returns=(), frames_since_replace=0, **record):
        return workspace.publish(iteration, frame, objective, params, b"own bytes %d" % iteration, episode_returns,
                                 frames_since_replace, **record)

    workspace.save = save  # type: ignore[assignment]
    member.started(0)
    return member


def test_a_leader_with_junk_hyperparameters_is_refused_and_logged_once(tmp_path: Path, caplog) -> None:
    ws = tmp_path / "ws"
    member = member_with_fake_checkpoints(tmp_path, ws)
    peer = Workspace(ws, 1, 2)
    try:
        with caplog.at_level(logging.WARNING, logger="pbt.peers"):
            for iteration in (1, 2, 3):
                peer.publish(iteration, iteration * 1000, 100.0, {LR: "abc", GAMMA: 0.9}, b"peer %d" % iteration)
                decision = decide_only(member, iteration * 1000, 1.0, {}, [1.0])
                assert decision is not None and decision.action == KEEP and decision.donor is None
        assert caplog.text.count("refusing member 1 as a donor: 'train.params.config.learning_rate': 'abc'") == 1
        peer.publish(4, 4000, 100.0, {LR: 2e-3, GAMMA: 0.9}, b"peer 4")  # fixed: taken again
        assert decide_only(member, 4000, 1.0, {}, [1.0]).action == REPLACE
    finally:
        member.close()


def test_a_refused_checkpoint_is_banned_while_it_is_the_peers_newest(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    member = member_with_fake_checkpoints(tmp_path, ws)
    peer = Workspace(ws, 1, 2)
    try:
        record = peer.publish(1, 1000, 100.0, {LR: 2e-3, GAMMA: 0.9}, b"peer 1")
        assert decide_only(member, 1000, 1.0, {}, [1.0]).action == REPLACE
        member.refuse_donor(1, "its checkpoint does not fit this agent (test)", record.checksum)
        assert decide_only(member, 1500, 1.0, {}, [1.0]).action == KEEP  # same record: banned
        peer.publish(2, 2000, 100.0, {LR: 2e-3, GAMMA: 0.9}, b"peer 2")
        assert decide_only(member, 2000, 1.0, {}, [1.0]).action == REPLACE  # a new checkpoint is checked anew
    finally:
        member.close()


def test_resumed_hyperparameters_that_fail_the_check_fall_back_to_the_config(tmp_path: Path, caplog) -> None:
    ws = tmp_path / "ws"
    Workspace(ws, 0, 2).publish(3, 3000, 1.0, {LR: math.nan, GAMMA: 0.97}, b"own checkpoint")
    with caplog.at_level(logging.WARNING, logger="pbt.member"):
        member = PbtMember(make_cfg(ws), tmp_path / "run", [])
        cfg = member.startup()
    try:
        assert member.resume_record is not None and member.resume_record.iteration == 3
        assert member.params == {LR: 1e-3, GAMMA: 0.97}
        assert cfg["train"]["params"]["config"]["learning_rate"] == 1e-3
        assert "not resuming a hyperparameter from its record of iteration 3: 'train.params.config.learning_rate'" \
            in caplog.text
    finally:
        member.close()


@pytest.mark.parametrize("key", ["pbt.policy_idx", "seed", "max_frames"])
def test_a_key_that_must_never_mutate_stops_the_member_before_it_starts(tmp_path: Path, key: str) -> None:
    cfg = make_cfg(tmp_path / "ws")
    cfg["pbt"]["mutation"][key] = "mutate_float"
    cfg["max_frames"] = 1000
    with pytest.raises(ConfigError, match="must never mutate"):
        PbtMember(cfg, tmp_path / "run", [])
    assert not (tmp_path / "ws").exists()


def test_a_starting_value_outside_the_functions_range_stops_the_member(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path / "ws")
    cfg["train"]["params"]["config"]["gamma"] = 5.0
    with pytest.raises(ConfigError, match=r"gamma': 5.0 is outside \[0, 1\]"):
        PbtMember(cfg, tmp_path / "run", [])


def test_the_record_step_writes_what_the_act_step_did(tmp_path: Path) -> None:
    """decide -> act -> record: an outcome that kept the member's weights because the donor's
    checkpoint does not fit refuses that donor and is logged as a keep; one carried out in place puts
    the new hyperparameters in force and is logged as what it was."""
    from pbt.iteration import Outcome, kept

    ws = tmp_path / "ws"
    member = member_with_fake_checkpoints(tmp_path, ws)
    peer = Workspace(ws, 1, 2)
    try:
        record = peer.publish(1, 1000, 100.0, {LR: 2e-3, GAMMA: 0.9}, b"peer 1")
        with member.iteration(1000, 1.0, {}, [1.0]) as it:
            decision = it.decision
            assert decision.action == REPLACE
            refusal = kept(decision, "does not fit", refused=(1, "its checkpoint does not fit this agent", record.checksum))
            member.record(dataclasses.replace(it, decided_at=5.0), refusal)
        entry = member.workspace.read_lineage()[-1]
        assert (entry.action, entry.donor, entry.mode, entry.decided_at) == (KEEP, None, None, 5.0)
        assert entry.params_after == entry.params_before == decision.params_before
        assert decide_only(member, 1500, 1.0, {}, [1.0]).action == KEEP  # refused while that record is its newest
        peer.publish(2, 2000, 100.0, {LR: 2e-3, GAMMA: 0.9}, b"peer 2")
        with member.iteration(2000, 1.0, {}, [1.0]) as it:
            decision = it.decision
            done = Outcome(REPLACE, decision.reason, dict(decision.params_after), "inplace")
            member.record(dataclasses.replace(it, decided_at=6.0), done)
        entry = member.workspace.read_lineage()[-1]
        assert (entry.action, entry.donor, entry.donor_iteration, entry.mode) == (REPLACE, 1, 2, "inplace")
        assert member.params == decision.params_after and member.replaced_at_frame == member.start_frame == 2000
    finally:
        member.close()
