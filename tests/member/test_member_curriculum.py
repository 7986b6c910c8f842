"""PbtMember with a curriculum: the stage's task settings go into the config before the task is
built (fresh, resumed and restarted members), a due transition replaces the selection's decision,
and peers of other stages are not ranked."""
import pytest
from conftest import decide_only

from pbt.errors import ConfigError
from pbt.member import PbtMember
from pbt.restart import RESTARTED_ENV
from pbt.selection import KEEP, MUTATE
from pbt.storage import LineageEntry, Workspace

LR = "train.params.config.learning_rate"
STAGES = [{"name": "wide", "task": {"task.env.goalRadius": 0.08}, "frames": 2000},
          {"name": "final", "task": {"task.env.goalRadius": 0.03}}]


def make_cfg(ws, **pbt):
    block = {"enabled": True, "policy_idx": 0, "num_policies": 3, "workspace": str(ws), "interval_steps": 1000,
             "mutation": {LR: "mutate_float"}, "mutation_rate": 1.0, "curriculum": STAGES, "start_after": 0,
             "initial_delay": 0, "ready_after": 0, "significance": None, "threshold_std": 0.0, "threshold_abs": 0.0}
    block.update(pbt)
    return {"seed": 3, "checkpoint": "", "experiment": "exp", "task": {"env": {"goalRadius": 0.03}},
            "train": {"params": {"config": {"learning_rate": 1e-3}}}, "pbt": block}


def test_a_fresh_member_starts_in_the_first_stage(tmp_path):
    member = PbtMember(make_cfg(tmp_path / "ws"), tmp_path / "run", [])
    cfg = member.startup()
    assert cfg["task"]["env"]["goalRadius"] == 0.08 and member.curriculum.stage == 0
    assert member.workspace.read_lineage(0)[0].stage == 0


def test_a_restarted_member_takes_the_stage_its_lineage_names(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    Workspace(ws, 0, 3).append_lineage(LineageEntry(policy_idx=0, iteration=2, frame=2048, action="mutate",
                                                    reason="curriculum: ...", stage=1))
    monkeypatch.setenv(RESTARTED_ENV, "1")
    member = PbtMember(make_cfg(ws), tmp_path / "run", [])
    cfg = member.startup()
    assert cfg["task"]["env"]["goalRadius"] == 0.03 and (member.curriculum.stage, member.curriculum.since) == (1, 2048)


def test_an_elastic_population_with_a_curriculum_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="elastic population"):
        PbtMember(make_cfg(tmp_path / "ws", num_policies="auto"), tmp_path / "run", [])
    with pytest.raises(ConfigError, match="task.env.goalRadus"):
        cfg = make_cfg(tmp_path / "ws", curriculum=[dict(STAGES[0], task={"task.env.goalRadus": 0.1}), STAGES[1]])
        PbtMember(cfg, tmp_path / "run", [])


def test_peers_of_another_stage_are_not_ranked_and_a_due_transition_is_the_decision(tmp_path):
    pytest.importorskip("torch")
    ws = tmp_path / "ws"
    for idx, objective in ((1, 5.0), (2, 6.0)):  # far better, but in the final stage
        Workspace(ws, idx, 3).publish(1, 1000, objective, {LR: 1e-3}, b"weights", stage=(1, 0))
    member = PbtMember(make_cfg(ws), tmp_path / "run", [])
    member.startup()
    member.started(0)
    decision = decide_only(member, 1000, 0.1, {"w": 1}, [])
    assert decision.action == KEEP and "1 objectives known" in decision.reason  # alone in stage 0
    assert member.workspace.latest_record(0).stage == 0
    decision = decide_only(member, 2000, 0.1, {"w": 1}, [])  # 2000 frames in 'wide': moves on
    assert decision.action == MUTATE and decision.donor is None and decision.reason.startswith("curriculum:")
    assert decision.params_after == decision.params_before  # continue: hyperparameters kept
    assert member.curriculum.pending is not None and member.curriculum.stage == 0  # not carried out yet
    member.enter_stage(member.curriculum.pending)
    member.exploited(2000, decision.params_after, replaced=False)
    decision = decide_only(member, 3000, 0.1, {"w": 1}, [])
    assert decision.action == "replace" and decision.donor.policy_idx in (1, 2)  # now ranked with them
    assert member.workspace.latest_record(0).stage == 1 and member.workspace.latest_record(0).stage_frame == 2000



def test_reset_draws_anew_even_right_after_a_fresh_member_sampled_the_space(tmp_path):
    pytest.importorskip("torch")
    space = {LR: {"type": "loguniform", "low": 1e-5, "high": 1e-2}}
    member = PbtMember(make_cfg(tmp_path / "ws", mutation={}, search_space=space, curriculum_mode="reset"),
                       tmp_path / "run", [])
    member.startup()  # samples the space with the generator that started() re-seeds the same way
    member.started(0)
    decision = decide_only(member, 2000, 0.1, {"w": 1}, [])
    assert decision.reason.startswith("curriculum:") and "drawn from pbt.search_space" in decision.reason
    assert decision.params_after[LR] != decision.params_before[LR]
