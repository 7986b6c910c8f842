"""PbtMember start-up without torch: initial mutation, resume from the workspace, refusal to
overwrite, restart argv that keeps the run name."""
import copy

import pytest
from conftest import decide_only

from pbt.errors import ConfigError
from pbt.member import PbtMember, interval_start
from pbt.restart import RESTARTED_ENV
from pbt.storage import Workspace

SCHEME = {"train.params.config.learning_rate": "mutate_float", "train.params.config.gamma": "mutate_discount"}


def make_cfg(ws, **pbt):
    block = {"enabled": True, "policy_idx": 1, "num_policies": 4, "workspace": str(ws), "interval_steps": 1000,
             "mutation": dict(SCHEME), "mutation_rate": 1.0}
    block.update(pbt)
    return {"seed": 3, "checkpoint": "", "experiment": "exp",
            "train": {"params": {"config": {"learning_rate": 1e-3, "gamma": 0.99}}}, "pbt": block}


def test_fresh_member_mutates_once_and_logs_it(tmp_path):
    member = PbtMember(make_cfg(tmp_path / "ws", selection="dexpbt"), tmp_path / "run", ["task=Pendulum"])
    cfg = member.startup()
    params = cfg["train"]["params"]["config"]
    assert params["learning_rate"] != 1e-3 and params["gamma"] != 0.99  # mutation_rate 1.0
    lineage = member.workspace.read_lineage(1)
    assert len(lineage) == 1 and lineage[0].action == "mutate"
    assert lineage[0].params_after["train.params.config.learning_rate"] == params["learning_rate"]


def test_restarted_member_keeps_its_params(tmp_path, monkeypatch):
    monkeypatch.setenv(RESTARTED_ENV, "1")  # as exec_restart leaves it for the re-executed worker
    member = PbtMember(make_cfg(tmp_path / "ws", selection="dexpbt"), tmp_path / "run", [])
    cfg = member.startup()
    assert cfg["train"]["params"]["config"]["learning_rate"] == 1e-3
    assert member.workspace.read_lineage(1) == []


def publish(ws_root, idx, iteration, params):
    ws = Workspace(ws_root, idx, 4)
    return ws.publish(iteration, iteration * 1000, -1.0, params, b"checkpoint-bytes-%d" % iteration)


def test_member_with_records_resumes_from_newest_with_its_params(tmp_path):
    ws = tmp_path / "ws"
    publish(ws, 1, 1, {"train.params.config.learning_rate": 5e-4, "train.params.config.gamma": 0.97})
    newest = publish(ws, 1, 2, {"train.params.config.learning_rate": 2e-4, "train.params.config.gamma": 0.98})
    member = PbtMember(make_cfg(ws), tmp_path / "run", [])
    cfg = member.startup()
    assert member.resume_record == newest
    assert cfg["train"]["params"]["config"] == {"learning_rate": 2e-4, "gamma": 0.98}


def test_resume_skips_a_record_whose_checkpoint_is_damaged(tmp_path):
    ws = tmp_path / "ws"
    good = publish(ws, 1, 1, {"train.params.config.learning_rate": 5e-4, "train.params.config.gamma": 0.97})
    bad = publish(ws, 1, 2, {"train.params.config.learning_rate": 2e-4, "train.params.config.gamma": 0.98})
    (ws / "001" / bad.checkpoint).write_bytes(b"torn")
    member = PbtMember(make_cfg(ws), tmp_path / "run", [])
    member.startup()
    assert member.resume_record == good


def test_resume_false_refuses_to_overwrite_records(tmp_path):
    ws = tmp_path / "ws"
    publish(ws, 1, 1, {"train.params.config.learning_rate": 5e-4, "train.params.config.gamma": 0.97})
    member = PbtMember(make_cfg(ws, resume=False), tmp_path / "run", [])
    with pytest.raises(ConfigError, match="already has records"):
        member.startup()


def test_bad_population_settings_fail_before_touching_the_workspace(tmp_path):
    with pytest.raises(ConfigError, match="policy_idx"):
        PbtMember(make_cfg(tmp_path / "ws", policy_idx=4), tmp_path / "run", [])
    with pytest.raises(ConfigError, match="does not exist"):
        PbtMember(make_cfg(tmp_path / "ws", mutation={"train.params.config.gama": "mutate_float"}),
                  tmp_path / "run", [])
    assert not (tmp_path / "ws").exists()


def test_due_follows_interval_boundaries(tmp_path):
    member = PbtMember(make_cfg(tmp_path / "ws"), tmp_path / "run", [])
    member.started(2500)
    assert not member.due(2999)
    assert member.due(3000)


def test_hysteresis_keeps_the_best_objective_of_the_interval(tmp_path):
    member = PbtMember(copy.deepcopy(make_cfg(tmp_path / "ws")), tmp_path / "run", [])
    for value in (None, -5.0, -2.0, -9.0):
        member.observe(value)
    assert member.best_interval_objective == -2.0


def test_records_carry_hyperparameter_change_points_and_gains_across_a_replacement(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("threadpoolctl")
    member = PbtMember(make_cfg(tmp_path / "ws", start_after=10**9, initial_delay=10**9), tmp_path / "run", [])
    member.startup()
    member.started(0)
    first = dict(member.params)
    decide_only(member, 1000, 1.0, {"w": 1}, [])
    decide_only(member, 2000, 2.0, {"w": 1}, [])
    changed = {**first, "train.params.config.learning_rate": 5e-4}
    member.exploited(2000, changed, replaced=False)  # a mutation: the objective history goes on
    record = decide_only(member, 3000, 4.0, {"w": 1}, []) and member.workspace.latest_record(1)
    assert record.param_history == {1: first, 3: changed} and record.gains == {2: 1.0, 3: 2.0}
    member.exploited(3000, first, replaced=True)  # a donor's weights: no gain across it, the log stays
    record = decide_only(member, 4000, 9.0, {"w": 1}, []) and member.workspace.latest_record(1)
    assert record.param_history == {1: first, 3: changed, 4: first} and record.gains == {2: 1.0, 3: 2.0}
    decide_only(member, 5000, 10.0, {"w": 1}, [])
    record = member.workspace.latest_record(1)
    assert record.gains == {2: 1.0, 3: 2.0, 5: 1.0} and sorted(record.history) == [4, 5]
    member.close()


def test_interval_start_is_the_multiple_of_interval_steps_at_or_below_a_frame():
    assert [interval_start(f, 10_000) for f in (0, 9_999, 10_000, 53_248, 61_440)] == [0, 0, 10_000, 50_000, 60_000]


def test_a_change_counts_its_gates_from_its_intervals_start(tmp_path):
    """Iterations run at the first epoch past each multiple of interval_steps (here 4,096 frames per
    epoch, interval 10,000: iterations at 40,960, 53,248, 61,440): a member changed at 53,248 is judged
    again 8,192 frames later. The gates count from the start of the interval of the change (50,000),
    so start_after = ready_after = interval_steps lets it act at the very next iteration instead of
    skipping one after every change."""
    pytest.importorskip("torch")  # iterate publishes a checkpoint
    cfg = make_cfg(tmp_path / "ws", selection="dexpbt", interval_steps=10_000, start_after=10_000,
                   ready_after=10_000, initial_delay=0)
    member = PbtMember(cfg, tmp_path / "run", [])
    member.startup()
    member.started(0)
    decide_only(member, 40_960, 1.0, {"w": 1}, [1.0])
    decide_only(member, 53_248, 1.0, {"w": 1}, [1.0])
    member.exploited(53_248, dict(member.params), replaced=True)
    decision = decide_only(member, 61_440, 1.0, {"w": 1}, [1.0])  # the next iteration, 8,192 frames on
    assert "start_after" not in decision.reason and "not ready" not in decision.reason, decision.reason
    assert member.workspace.latest_record(1).frames_since_replace == 11_440
    member.close()


def test_records_carry_the_family_of_the_weights_across_a_replace_and_a_restart(tmp_path):
    """A member's records say whose weights it carries (``Record.family``): its own index, then its
    donor's family from the iteration after it took the donor's checkpoint, also after the process
    restarted (read back from the lineage); weights from a record that does not say are unknown."""
    pytest.importorskip("torch")  # iterate publishes a checkpoint
    donor = Workspace(tmp_path / "ws", 3, 4).publish(1, 1000, 5.0, {}, b"donor-bytes", family=2)
    member = PbtMember(make_cfg(tmp_path / "ws", start_after=10**9, initial_delay=10**9), tmp_path / "run", [])
    member.startup()
    member.started(0)
    decide_only(member, 1000, 1.0, {"w": 1}, [])
    assert member.workspace.latest_record(1).family == 1
    member.append_lineage(member.entry("replace", "test", 1, 1000, member.params, member.params), donor)
    member.exploited(1000, member.params, replaced=True)
    decide_only(member, 2000, 1.0, {"w": 1}, [])
    assert member.workspace.latest_record(1).family == 2 and member.workspace.read_lineage(1)[-1].family == 2
    member.close()
    restarted = PbtMember(make_cfg(tmp_path / "ws", start_after=10**9, initial_delay=10**9), tmp_path / "run2", [])
    restarted.startup()
    restarted.started(2000)
    decide_only(restarted, 3000, 1.0, {"w": 1}, [])
    assert restarted.workspace.latest_record(1).family == 2
    old = Workspace(tmp_path / "ws", 0, 4).publish(3, 3000, 5.0, {}, b"older-bytes")  # no family field
    restarted.append_lineage(restarted.entry("replace", "test", 3, 3000, restarted.params, restarted.params), old)
    decide_only(restarted, 4000, 1.0, {"w": 1}, [])
    assert restarted.workspace.latest_record(1).family is None
    restarted.close()
