"""The curriculum without torch (Python 3.8): its config, stage advancement, stage-aware ranking,
resets, restoring a member's stage, and the stage in records and lineage lines."""
import json
import random

import pytest

from pbt.config import PbtConfig
from pbt.curriculum import (
    CurriculumConfig,
    StageState,
    Transition,
    check_curriculum,
    furthest_stage,
    next_stage,
    parse_stages,
    record_stage,
    redraw,
    same_stage,
)
from pbt.errors import ConfigError, CorruptRecordError
from pbt.mutation import ExploreConfig
from pbt.storage.lineage import LineageEntry, parse_lineage
from pbt.storage.record import Record, parse_record, record_to_yaml

R = "task.env.goalRadius"
LR = "train.params.config.learning_rate"
GAMMA = "train.params.config.gamma"
THREE = [
    {"name": "wide", "task": {R: 0.08}, "frames": 1000, "objective": 0.6},
    {"name": "medium", "task": {R: 0.05}, "frames": 2000},
    {"name": "final", "task": {R: 0.03}},
]


def stages(spec=THREE):
    return parse_stages("curriculum", [dict(s) for s in spec])


def rec(idx, objective=0.5, stage=None, stage_frame=None, frame=5000, params=None):
    return Record(policy_idx=idx, iteration=5, frame=frame, objective=objective, params=params or {LR: 1e-3},
                  checkpoint="000005.pth", checksum="0" * 64, stage=stage, stage_frame=stage_frame)


def entry(iteration, frame, stage, action="keep"):
    return LineageEntry(policy_idx=0, iteration=iteration, frame=frame, action=action, stage=stage)


# -- config ---------------------------------------------------------------------------------------


def test_a_three_stage_curriculum_parses_and_round_trips_through_the_flat_keys():
    cfg = PbtConfig.from_mapping({"curriculum": THREE, "curriculum_mode": "reset"})
    course = cfg.course
    assert [s.name for s in course.curriculum] == ["wide", "medium", "final"]
    assert course.curriculum[0].objective == 0.6 and course.curriculum[1].frames == 2000
    assert course.curriculum[2].final and course.curriculum_mode == "reset"
    assert PbtConfig.from_mapping(cfg.to_dict()).course == course
    assert PbtConfig.from_mapping({}).course.curriculum == ()  # none by default


@pytest.mark.parametrize(
    "spec, match",
    [
        ([THREE[2]], "has 1 stage"),
        ([THREE[0], {"task": {R: 0.03}, "frames": 10}], "last stage is where training ends"),
        ([{"task": {R: 0.08}}, THREE[2]], "needs frames and/or objective"),
        ([{"task": {"train.params.config.gamma": 0.9}, "frames": 5}, THREE[2]], "not a task key"),
        ([{"task": {R: 0.08}, "frame": 5}, THREE[2]], "Did you mean.*'frames'"),
        ([{"task": {R: 0.08}, "frames": -3}, THREE[2]], "whole number of env frames > 0"),
        ([{"task": {R: 0.08}, "objective": "high"}, THREE[2]], "finite number"),
        ([{"name": "a", "task": {R: 0.08}, "frames": 5}, {"name": "a", "task": {R: 0.03}}], "used twice"),
        ({"stages": THREE}, "must be a list of stages"),
    ],
)
def test_a_bad_curriculum_fails_saying_what_and_how_to_fix(spec, match):
    with pytest.raises(ConfigError, match=match) as info:
        PbtConfig.from_mapping({"curriculum": spec})
    assert "pbt.curriculum" in str(info.value)


def test_an_unknown_mode_names_the_modes():
    with pytest.raises(ConfigError, match="continue.*reset"):
        PbtConfig.from_mapping({"curriculum": THREE, "curriculum_mode": "restart"})


def test_the_curriculum_is_checked_against_the_composed_config():
    config = {"task": {"env": {"goalRadius": 0.03, "numEnvs": 4}}, "train": {"params": {"config": {"learning_rate": 1e-3}}}}
    explore = ExploreConfig(mutation={LR: "mutate_float"})
    course = CurriculumConfig(curriculum=stages())
    assert len(check_curriculum(course, config, {LR: 1e-3}, explore)) == 3
    typo = CurriculumConfig(curriculum=stages([{"task": {"task.env.goalRadus": 0.1}, "frames": 5}, THREE[2]]))
    with pytest.raises(ConfigError, match="goalRadius"):
        check_curriculum(typo, config, {LR: 1e-3}, explore)
    section = CurriculumConfig(curriculum=stages([{"task": {"task.env": 1}, "frames": 5}, THREE[2]]))
    with pytest.raises(ConfigError, match="config section"):
        check_curriculum(section, config, {LR: 1e-3}, explore)
    with pytest.raises(ConfigError, match="also a hyperparameter PBT mutates"):
        check_curriculum(course, config, {LR: 1e-3, R: 0.03}, explore)
    foreign = CurriculumConfig(curriculum=stages([dict(THREE[0], search_space={GAMMA: {"type": "uniform", "low": 0.9,
                                                                                        "high": 0.99}}), THREE[2]]))
    with pytest.raises(ConfigError, match="no hyperparameter of this member"):
        check_curriculum(foreign, config, {LR: 1e-3}, explore)


def test_a_stage_space_must_lie_inside_the_search_space():
    config = {"task": {"env": {"goalRadius": 0.03}}, "train": {"params": {"config": {"learning_rate": 1e-3}}}}
    explore = ExploreConfig(mutation={}, search_space={LR: {"type": "loguniform", "low": 1e-4, "high": 1e-2}})
    wide = {LR: {"type": "loguniform", "low": 1e-5, "high": 1e-3}}
    course = CurriculumConfig(curriculum=stages([dict(THREE[0], search_space=wide), THREE[2]]))
    with pytest.raises(ConfigError, match="outside pbt.search_space"):
        check_curriculum(course, config, {LR: 1e-3}, explore)


# -- advancing ------------------------------------------------------------------------------------


def test_a_member_moves_on_after_its_frames_in_the_stage():
    s = stages()
    assert next_stage(s, 0, since=0, frame=999, objective=0.1) is None
    move = next_stage(s, 0, since=0, frame=1000, objective=0.1)
    assert move == Transition(0, 1, 1000, move.reason) and "1000 frames trained in 'wide'" in move.reason
    assert next_stage(s, 1, since=1000, frame=2999, objective=None) is None  # counted from its entry
    assert next_stage(s, 1, since=1000, frame=3000, objective=None).after == 2


def test_a_member_moves_on_when_its_objective_reaches_the_threshold():
    s = stages()
    assert next_stage(s, 0, since=0, frame=10, objective=0.59) is None
    move = next_stage(s, 0, since=0, frame=10, objective=0.6)
    assert move.after == 1 and "objective 0.6 reached 0.6" in move.reason
    assert next_stage(s, 0, since=0, frame=10, objective=None) is None  # unknown or mixed: no move
    assert next_stage(s, 1, since=0, frame=10, objective=1.0) is None  # this stage has no threshold


def test_the_last_stage_is_never_left():
    assert next_stage(stages(), 2, since=0, frame=10**9, objective=10.0) is None


def test_stage_state_moves_only_when_the_transition_is_carried_out():
    state = StageState(CurriculumConfig(curriculum=stages()), stages(), 0)
    move = state.check(1000, None)
    assert state.pending == move and state.stage == 0
    state.enter(move)
    assert (state.stage, state.since, state.pending) == (1, 1000, None)
    assert state.overrides() == {R: 0.05}


# -- ranking --------------------------------------------------------------------------------------


def test_members_are_ranked_only_against_peers_in_their_stage():
    peers = {0: rec(0, 0.9, stage=1), 1: rec(1, 0.2, stage=0), 2: rec(2, 0.1), 3: rec(3, 0.8, stage=2)}
    assert sorted(same_stage(peers, 0)) == [1, 2]  # a record without a stage is stage 0 (older workspaces)
    assert sorted(same_stage(peers, 1)) == [0]
    assert record_stage(peers[2]) == 0


def test_the_best_copy_comes_from_the_furthest_stage():
    peers = {0: rec(0, 0.9, stage=0), 1: rec(1, 0.2, stage=2), 2: rec(2, 0.3, stage=2), 3: rec(3, 0.5, stage=9)}
    assert sorted(furthest_stage(peers, last=2)) == [1, 2]  # stage 9 is beyond this curriculum
    assert furthest_stage({}, last=2) == {}


def test_a_later_stage_member_is_never_a_donor_for_an_earlier_one():
    from conftest import pbt_config
    from pbt.selection import REPLACE, MemberState, decide

    config = pbt_config(dict(num_policies=4, start_after=0, initial_delay=0, ready_after=0, significance=None,
                             mutation={LR: "mutate_float"}, selection="threshold", threshold_std=0.0, threshold_abs=0.0))
    own = rec(0, 0.1, stage=0)
    everyone = {0: own, 1: rec(1, 0.15, stage=0), 2: rec(2, 0.9, stage=1), 3: rec(3, 0.95, stage=1)}
    donors_all, donors_stage = set(), set()
    for seed in range(50):
        for peers, seen in ((everyone, donors_all), (same_stage(everyone, 0), donors_stage)):
            decision = decide(MemberState(own, own.objective, 10**9), list(peers.values()), config, random.Random(seed))
            if decision.action == REPLACE:
                seen.add(decision.donor_idx)
    assert donors_all & {2, 3}  # ranked against everyone, the later stage's members would donate
    assert not donors_stage & {2, 3}


# -- resets ---------------------------------------------------------------------------------------


def test_reset_redraws_from_the_stage_space_else_the_search_space_else_a_mutation():
    explore = ExploreConfig(mutation={LR: "mutate_float"}, mutation_rate=1.0,
                            search_space={LR: {"type": "loguniform", "low": 1e-5, "high": 1e-2}})
    narrow = {LR: {"type": "loguniform", "low": 1e-3, "high": 2e-3}}
    s = stages([dict(THREE[0], search_space=narrow), THREE[2]])
    params, source = redraw(s[0], explore, {LR: 5e-4}, {LR: 5e-3}, random.Random(1))
    assert 1e-3 <= params[LR] <= 2e-3 and source == "drawn from the stage's search space"
    params, source = redraw(s[1], explore, {LR: 5e-4}, {LR: 5e-3}, random.Random(1))
    assert 1e-5 <= params[LR] <= 1e-2 and params[LR] != 5e-3 and source == "drawn from pbt.search_space"
    plain = ExploreConfig(mutation={LR: "mutate_float"}, mutation_rate=1.0)
    params, source = redraw(s[1], plain, {LR: 5e-4}, {LR: 5e-3}, random.Random(1))
    assert params[LR] not in (5e-4, 5e-3) and 5e-4 / 2 < params[LR] < 5e-4 * 2  # from the configured value
    assert source == "the configured values mutated once"


# -- restoring a member's stage -------------------------------------------------------------------


def test_a_restarted_member_takes_its_stage_from_the_lineage_written_before_the_restart():
    state = StageState(CurriculumConfig(curriculum=stages()), stages(), 0)
    lineage = [entry(0, 0, 0, "mutate"), entry(1, 1000, 0), entry(1, 1000, 1, "mutate")]
    state.restore(rec(0, stage=0, stage_frame=0, frame=1000), lineage)
    assert (state.stage, state.since) == (1, 1000)


def test_a_resumed_member_takes_its_stage_and_entry_frame_from_its_record():
    state = StageState(CurriculumConfig(curriculum=stages()), stages(), 0)
    state.restore(rec(0, stage=2, stage_frame=3000, frame=5000), [entry(0, 0, 0)])
    assert (state.stage, state.since) == (2, 3000)
    state.restore(None, [])
    assert (state.stage, state.since) == (0, 0)
    state.restore(rec(0, stage=None, frame=5000), [])  # an older workspace: stage 0
    assert state.stage == 0


def test_a_stage_beyond_the_curriculum_fails_start_up():
    state = StageState(CurriculumConfig(curriculum=stages()), stages(), 3)
    with pytest.raises(ConfigError, match="stage 5.*has 3 stages.*pbt.resume=false"):
        state.restore(rec(3, stage=5, stage_frame=0), [])


# -- records and lineage --------------------------------------------------------------------------


def test_records_carry_the_stage_and_older_records_stay_readable():
    with_stage = rec(1, stage=2, stage_frame=4000)
    assert parse_record(record_to_yaml(with_stage), "r") == with_stage
    without = rec(1)
    text = record_to_yaml(without)
    assert b"stage" not in text  # no curriculum: the format is as before it
    assert parse_record(text, "r").stage is None


@pytest.mark.parametrize("bad", [-1, 64, "1", True, 1.5])
def test_a_record_with_a_junk_stage_is_refused(bad):
    data = json.loads(record_to_yaml(rec(1, stage=1, stage_frame=0)))
    data["stage"] = bad
    with pytest.raises(CorruptRecordError, match="stage"):
        parse_record(json.dumps(data).encode(), "r")


def test_lineage_lines_carry_the_stage_and_a_junk_stage_line_is_skipped():
    good = entry(3, 3000, 1, "mutate")
    assert json.loads(good.to_json_line())["stage"] == 1
    assert "stage" not in json.loads(entry(3, 3000, None).to_json_line())
    junk = json.loads(good.to_json_line())
    junk["stage"] = 99
    data = good.to_json_line() + (json.dumps(junk) + "\n").encode() + entry(4, 4000, None).to_json_line()
    parsed = parse_lineage(data, "lineage")
    assert [e.stage for e in parsed] == [1, None]
