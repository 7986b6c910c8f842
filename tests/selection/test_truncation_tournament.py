"""Truncation and tournament selection: each rule on hand-built populations, and hypothesis
properties (never a worse donor, elitism keeps the best, truncation's groups are the quantiles,
reproducible from a seed)."""
import random
from typing import Any, Dict, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.selection import KEEP, MUTATE, REPLACE, MemberState, decide
from pbt.selection.experience import fitness
from pbt.selection.tournament import tournament_winner
from pbt.selection.truncation import quantile_groups
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
EPOCHS = "train.params.config.mini_epochs"
FRAME = 50_000_000


def rec(idx: int, objective: Optional[float], iteration: int = 5, lr: float = 3e-4,
        history: Optional[Dict[int, Optional[float]]] = None, frames_since_replace: int = FRAME) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=FRAME, objective=objective,
                  params={LR: lr, EPOCHS: 4}, checkpoint=f"{iteration:06d}.pth", checksum="0" * 64,
                  frames_since_replace=frames_since_replace, history=dict(history or {}))


def cfg_for(selection: str, n: int = 8, idx: int = 0, **kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies=n, policy_idx=idx, selection=selection,
                                  mutation={LR: "mutate_float", EPOCHS: "mutate_mini_epochs"}, start_after=0,
                                  initial_delay=0, ready_after=0, significance=None, mutation_rate=1.0)
    values.update(kwargs)
    return pbt_config(values)


def run(selection: str, objectives: Dict[int, Optional[float]], own: int = 0, seed: int = 0,
        **kwargs: Any) -> Any:
    records = {i: rec(i, o, lr=1e-4 * (i + 1)) for i, o in objectives.items()}
    state = MemberState(records[own], None, FRAME)
    cfg = cfg_for(selection, n=len(objectives), idx=own, **kwargs)
    return decide(state, [r for i, r in records.items() if i != own], cfg, random.Random(seed))


SPREAD = {0: 1.0, 1: 100.0, 2: 90.0, 3: 80.0, 4: 70.0, 5: 60.0, 6: 50.0, 7: 2.0}


# -- truncation ------------------------------------------------------------------------------------


def test_quantile_groups_are_the_top_and_bottom_quantiles() -> None:
    ranking = [7, 3, 5, 1, 0, 2, 6, 4]
    assert quantile_groups(ranking, 0.25) == ([7, 3], [6, 4])
    assert quantile_groups(ranking, 0.5) == ([7, 3, 5, 1], [0, 2, 6, 4])
    assert quantile_groups(ranking[:3], 0.25) == ([7], [5])  # ceil(0.75) = 1 each
    assert quantile_groups([1], 0.25) == ([], [])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=2, max_size=40, unique=True),
       st.floats(0.01, 0.5))
def test_truncation_groups_are_quantiles_property(members: List[int], quantile: float) -> None:
    top, bottom = quantile_groups(members, quantile)
    size = len(top)
    assert size == len(bottom) >= 1 and size <= len(members) // 2
    assert size >= min(len(members) // 2, quantile * len(members) - 1e-9)
    assert top == members[:size] and bottom == members[len(members) - size:]
    assert not set(top) & set(bottom)


def test_truncation_bottom_member_copies_a_top_member_and_perturbs() -> None:
    donors = set()
    for seed in range(30):
        decision = run("truncation", SPREAD, own=0, seed=seed)
        assert decision.action == REPLACE and decision.donor_idx in (1, 2)
        donors.add(decision.donor_idx)
        lr = decision.params_after[LR]
        donor_lr = 1e-4 * (decision.donor_idx + 1)
        # perturbed by 0.8 or 1.2 (no search space: never resampled); mini_epochs one step
        assert lr == pytest.approx(donor_lr * 0.8) or lr == pytest.approx(donor_lr * 1.2)
        assert decision.params_after[EPOCHS] in (3, 5)
    assert donors == {1, 2}


def test_truncation_members_outside_the_bottom_keep() -> None:
    for own in (1, 2, 3, 4, 5):
        decision = run("truncation", SPREAD, own=own)
        assert decision.action == KEEP and "not in the bottom quantile" in decision.reason


def test_truncation_without_a_ready_top_member_perturbs_only() -> None:
    records = {i: rec(i, o, frames_since_replace=0 if i in (1, 2) else FRAME) for i, o in SPREAD.items()}
    cfg = cfg_for("truncation", ready_after=1000)
    decision = decide(MemberState(records[0], None, FRAME), [r for i, r in records.items() if i], cfg,
                      random.Random(0))
    assert decision.action == MUTATE and "no ready top member" in decision.reason


def test_truncation_perturb_probability_changes_each_key_with_that_probability() -> None:
    changed = {LR: 0, EPOCHS: 0}
    neither = 0
    for seed in range(200):
        decision = run("truncation", SPREAD, own=0, seed=seed, perturb_probability=0.5)
        assert decision.action == REPLACE
        donor = decision.donor.params
        for key in changed:
            changed[key] += decision.params_after[key] != donor[key]
        neither += all(decision.params_after[key] == donor[key] for key in changed)
    assert 70 <= changed[LR] <= 130 and 70 <= changed[EPOCHS] <= 130  # about half of 200 each
    assert 20 <= neither <= 80  # about a quarter keep the donor's values exactly
    # the default changes every key
    assert all(run("truncation", SPREAD, own=0, seed=s).params_after[EPOCHS] != 4 for s in range(20))


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 1.0), st.integers(0, 2**31))
def test_truncation_perturbation_property(probability: float, seed: int) -> None:
    decision = run("truncation", SPREAD, own=0, seed=seed, perturb_probability=probability)
    assert decision == run("truncation", SPREAD, own=0, seed=seed, perturb_probability=probability)
    assert decision.action == REPLACE and decision.donor_idx in (1, 2)
    donor = decision.donor.params
    lr = decision.params_after[LR]
    assert lr == donor[LR] or lr == pytest.approx(donor[LR] * 0.8) or lr == pytest.approx(donor[LR] * 1.2)
    assert decision.params_after[EPOCHS] in (3, 4, 5)
    if probability == 1.0:
        assert lr != donor[LR] and decision.params_after[EPOCHS] != 4


def test_truncation_settings_are_validated() -> None:
    for bad in ({"perturb_probability": 0}, {"perturb_probability": 1.5}):
        with pytest.raises(ConfigError, match="pbt.perturb_probability"):
            cfg_for("truncation", **bad)
    for bad in ({"quantile": 0.7}, {"quantile": 0}, {"resample_probability": 1.5},
                {"perturbation_factors": []}, {"perturbation_factors": [0.8, -1]}):
        with pytest.raises(ConfigError, match="pbt."):
            cfg_for("truncation", **bad)


# -- tournament ------------------------------------------------------------------------------------


def test_tournament_winner_is_the_fittest_contestant() -> None:
    assert tournament_winner([3, 1, 2], {1: 5.0, 2: 7.0, 3: 7.0}) == 2
    assert tournament_winner([0, 4], {0: 1.0, 4: 0.5}) == 0


def test_tournament_loser_takes_the_winner_and_mutates() -> None:
    decisions = [run("tournament", SPREAD, own=7, seed=s) for s in range(40)]
    assert {d.action for d in decisions} == {REPLACE, KEEP}
    for d in decisions:  # 7 only wins a tournament against 0, the one member it beats
        assert d.action == REPLACE or ("won its tournament" in d.reason and "contestants [0, 7]" in d.reason)
    decision = run("tournament", SPREAD, own=7, seed=1)
    assert decision.params_after[LR] != decision.donor.params[LR]  # mutated after copying


def test_tournament_elitism_keeps_the_fittest_unchanged_and_off_lets_it_mutate() -> None:
    for seed in range(30):
        decision = run("tournament", SPREAD, own=1, seed=seed)
        assert decision.action == KEEP and decision.reason.startswith("elite")
    actions = {run("tournament", SPREAD, own=1, seed=s, elitism=False).action for s in range(30)}
    assert REPLACE not in actions and MUTATE in actions  # left out of a draw: mutates, never a worse donor


def test_tournament_mutate_winners_mutates_a_winner_as_agilerl_does() -> None:
    for seed in range(40):
        default = run("tournament", SPREAD, own=7, seed=seed)
        agile = run("tournament", SPREAD, own=7, seed=seed, mutate_winners=True)
        if default.action == KEEP:  # 7 won its tournament: now it mutates, keeping its weights
            assert agile.action == MUTATE and agile.donor is None
            assert "won its tournament, mutate_winners" in agile.reason
            assert agile.params_after != agile.params_before
        else:
            assert agile == default  # losers are untouched by the option
    # the elite still changes nothing
    elite = run("tournament", SPREAD, own=1, seed=0, mutate_winners=True)
    assert elite.action == KEEP and elite.reason.startswith("elite")
    # without elitism the fittest member mutates whenever it wins too, never taking weights
    actions = {run("tournament", SPREAD, own=1, seed=s, elitism=False, mutate_winners=True).action
               for s in range(30)}
    assert actions == {MUTATE}


def test_tournament_fitness_is_the_mean_of_the_last_eval_loop_objectives() -> None:
    record = rec(0, 10.0, iteration=5, history={2: 100.0, 3: 4.0, 4: None, 5: 10.0})
    assert fitness(record, 1) == 10.0
    assert fitness(record, 2) == pytest.approx(7.0)  # 10 and 4 (4 is unknown: skipped)
    assert fitness(record, 3) == pytest.approx(38.0)
    assert fitness(rec(0, None), 3) is None and fitness(rec(0, float("nan")), 3) is None


def test_tournament_with_eval_loop_ranks_by_the_mean() -> None:
    # member 1 had one lucky objective; member 2 is steadily good: with eval_loop 3 member 2 is fitter
    records = {0: rec(0, 1.0, history={3: 1.0, 4: 1.0, 5: 1.0}),
               1: rec(1, 50.0, history={3: 1.0, 4: 1.0, 5: 50.0}),
               2: rec(2, 30.0, history={3: 30.0, 4: 30.0, 5: 30.0})}
    cfg = cfg_for("tournament", n=3, eval_loop=3, tournament_size=3)
    decision = decide(MemberState(records[1], None, FRAME), [records[0], records[2]], cfg, random.Random(0))
    assert decision.action == REPLACE and decision.donor_idx == 2


def test_tournament_settings_are_validated() -> None:
    for bad in ({"tournament_size": 1}, {"eval_loop": 0}, {"elitism": "yes"}, {"mutate_winners": "yes"}):
        with pytest.raises(ConfigError, match="pbt."):
            cfg_for("tournament", **bad)


# -- properties of both ----------------------------------------------------------------------------

objective = st.one_of(st.none(), st.floats(-1e6, 1e6), st.just(float("nan")))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["truncation", "tournament"]), st.lists(objective, min_size=2, max_size=10),
       st.integers(0, 9), st.integers(0, 2**31), st.booleans(), st.integers(2, 4), st.booleans(),
       st.floats(0.01, 1.0))
def test_never_a_worse_donor_and_reproducible(selection: str, objectives: List[Optional[float]], own: int,
                                              seed: int, elitism: bool, size: int, mutate_winners: bool,
                                              probability: float) -> None:
    own %= len(objectives)
    population = dict(enumerate(objectives))
    kwargs: Dict[str, Any] = (dict(elitism=elitism, tournament_size=size, mutate_winners=mutate_winners)
                              if selection == "tournament" else dict(perturb_probability=probability))
    decision = run(selection, population, own=own, seed=seed, **kwargs)
    assert decision == run(selection, population, own=own, seed=seed, **kwargs)  # reproducible from a seed
    if decision.action == KEEP:
        assert decision.params_after == decision.params_before
        if mutate_winners and selection == "tournament":
            assert "won its tournament" not in decision.reason  # a winner mutates under mutate_winners
    if decision.action != REPLACE:
        assert decision.donor is None
        return
    donor = decision.donor
    assert donor.policy_idx != own and donor.has_objective
    mine = population[own]
    assert mine is None or mine != mine or donor.objective > mine  # None/NaN own: any finite donor is better


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=10, unique=True), st.integers(0, 2**31))
def test_elitism_keeps_the_best_property(objectives: List[float], seed: int) -> None:
    best = max(range(len(objectives)), key=lambda i: objectives[i])
    decision = run("tournament", dict(enumerate(objectives)), own=best, seed=seed)
    assert decision.action == KEEP and decision.params_after == decision.params_before
