"""Tests of the selection registry, donor bans and each strategy's declarations."""
import dataclasses
import random
from typing import Any, Dict, List, Optional, Sequence

import pytest
from conftest import pbt_config
from hypothesis import given, settings
from hypothesis import strategies as st

import pbt.config
from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.sections import Section
from pbt.selection import (
    REPLACE,
    STRATEGIES,
    Decision,
    DexPbt,
    MemberState,
    Strategy,
    Threshold,
    Tournament,
    Truncation,
    decide,
    get_strategy,
    initial_mutation,
    strategy_names,
)
from pbt.selection.mfpbt import MfPbt
from pbt.selection.pb2 import PB2
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
PARAMS = {LR: 3e-4}
FRAME = 50_000_000
SPREAD = {1: 100.0, 2: 99.0, 3: 98.0, 4: 60.0, 5: 55.0, 6: 50.0, 7: 45.0}


def rec(idx: int, objective: Optional[float]) -> Record:
    return Record(policy_idx=idx, iteration=5, frame=FRAME, objective=objective, params=dict(PARAMS),
                  checkpoint="000005.pth", checksum="0" * 64, frames_since_replace=FRAME)


def cfg_for(n: int = 8, idx: int = 0, **kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies=n, policy_idx=idx, mutation={LR: "mutate_float"},
                                  start_after=0, initial_delay=0, ready_after=0, significance=None,
                                  mutation_rate=1.0, min_mutations=0, threshold_abs_relative=False,
                                  selection="dexpbt")
    values.update(kwargs)
    return pbt_config(values)


def own_state(idx: int = 0, objective: float = 10.0) -> MemberState:
    return MemberState(rec(idx, objective), None, FRAME)


def peers(objectives: Dict[int, Optional[float]]) -> List[Record]:
    return [rec(i, o) for i, o in objectives.items()]


# -- registry -------------------------------------------------------------------------------------


def test_one_list_of_strategy_names() -> None:
    assert strategy_names() == ("dexpbt", "mfpbt", "pb2", "threshold", "tournament", "truncation") \
        == tuple(sorted(STRATEGIES))
    assert STRATEGIES == {"dexpbt": DexPbt, "threshold": Threshold, "tournament": Tournament,
                          "truncation": Truncation, "pb2": PB2, "mfpbt": MfPbt}
    assert not hasattr(pbt.config, "SELECTION_RULES")
    for name in STRATEGIES:
        assert get_strategy(name) is STRATEGIES[name]
        assert PbtConfig(selection=name).selection == name


@pytest.mark.parametrize("name, hint", [("dexbpt", "Did you mean 'dexpbt'?"), ("treshold", "Did you mean 'threshold'?"),
                                        ("tournement", "Did you mean 'tournament'?"), ("elitist", "")])
def test_unknown_strategy_says_did_you_mean_and_lists_valid_names(name: str, hint: str) -> None:
    for build in (lambda: get_strategy(name), lambda: PbtConfig(selection=name),
                  lambda: PbtConfig.from_mapping({"selection": name})):
        with pytest.raises(ConfigError) as info:
            build()
        message = str(info.value)
        assert f"pbt.selection='{name}'" in message and hint in message
        assert "Valid rules: dexpbt, mfpbt, pb2, threshold, tournament, truncation." in message


def test_strategies_declare_their_config_and_initial_mutation() -> None:
    # every shipped strategy diversifies a fresh population (the Quiet stand-in below does not)
    assert all(strategy.initial_mutation for strategy in STRATEGIES.values())
    for strategy in STRATEGIES.values():
        assert issubclass(strategy, Strategy) and dataclasses.is_dataclass(strategy.config_class)
        assert issubclass(strategy.config_class, Section)
        for spec in dataclasses.fields(strategy.config_class):
            assert spec.default is not dataclasses.MISSING  # every key has a default


def test_initial_mutation_follows_each_strategys_declaration() -> None:
    for name, strategy in STRATEGIES.items():
        mutated = initial_mutation(PARAMS, cfg_for(selection=name), random.Random(0))
        assert (mutated != PARAMS) is strategy.initial_mutation, name


@dataclasses.dataclass
class QuietConfig(Section):
    """A strategy setting no key of its own."""


class Quiet(Strategy):
    """Never acts and starts from the given hyperparameters: a stand-in for a newly added strategy."""

    config_class = QuietConfig
    initial_mutation = False

    def decide(self, own: MemberState, peers: Sequence[Record], rng: random.Random) -> Decision:
        return self.keep(own, "quiet")


def test_a_registered_strategy_is_used_by_name_without_other_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STRATEGIES, "quiet", Quiet)
    cfg = cfg_for(selection="quiet")
    assert isinstance(cfg.strategies["quiet"], QuietConfig)
    assert decide(own_state(), peers(SPREAD), cfg, random.Random(0)).reason == "quiet"
    assert initial_mutation(PARAMS, cfg, random.Random(0)) == PARAMS
    monkeypatch.setattr(Quiet, "initial_mutation", True)
    assert initial_mutation(PARAMS, cfg, random.Random(0)) != PARAMS


# -- banned donors --------------------------------------------------------------------------------


def _reason_numbers(decision: Decision) -> str:
    """The population numbers of a reason (mean/std/cuts or thresholds), without the donor's."""
    reason = decision.reason
    return reason[reason.index("std"):] if "std" in reason else reason


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_a_banned_top_member_stays_ranked_but_is_never_a_donor(rule: str) -> None:
    cfg = cfg_for(selection=rule, replace_fraction_best=0.3, replace_threshold_frac_std=0.0,
                  replace_threshold_frac_absolute=0.0, threshold_std=0.5, threshold_abs=0.0)
    top = 2 if rule == "mfpbt" else 1  # mfpbt: 1 shares 0's sub-population, the migrant from another comes first
    free = [decide(own_state(), peers(SPREAD), cfg, random.Random(s)) for s in range(40)]
    banned = [decide(own_state(), peers(SPREAD), cfg, random.Random(s), refused_donors={top}) for s in range(40)]
    assert top in {d.donor_idx for d in free}
    assert {d.action for d in banned} == {REPLACE} and top not in {d.donor_idx for d in banned}
    if rule == "threshold":  # mean, std and cuts: member 1 still counts
        assert {_reason_numbers(d) for d in banned} == {_reason_numbers(d) for d in free}
        dropped = decide(own_state(), peers({i: o for i, o in SPREAD.items() if i != 1}), cfg, random.Random(0))
        assert _reason_numbers(dropped) not in {_reason_numbers(d) for d in free}
    elif rule == "dexpbt":  # std threshold and best group: member 1 still counts (the best group stays 1, 2, 3)
        assert {d.donor_idx for d in banned} == {2, 3}
        assert {d.reason.split("std threshold ")[1] for d in banned} == {d.reason.split("std threshold ")[1]
                                                                         for d in free if d.donor_idx != 1}


def test_a_banned_member_keeps_counting_in_the_dexpbt_gates() -> None:
    # 4 members, own (0) the worst; banning 3 keeps 4 known objectives and own in the worst group,
    # where leaving 3 out would not.
    objectives = {1: 10.0, 2: 9.0, 3: 9.5}
    cfg = cfg_for(n=4, replace_fraction_best=0.75)
    dropped = decide(own_state(0, 1.0), peers({1: 10.0, 2: 9.0}), cfg, random.Random(0))
    assert dropped.action != REPLACE
    donors = {decide(own_state(0, 1.0), peers(objectives), cfg, random.Random(s), refused_donors={3}).donor_idx
              for s in range(40)}
    assert donors == {1, 2}


def test_banning_every_donor_keeps_and_positional_call_still_works() -> None:
    cfg = cfg_for()
    decision = decide(own_state(), peers(SPREAD), cfg, random.Random(0), refused_donors=frozenset({1, 2, 3}))
    assert decision.action == "keep" and decision.reason.startswith("no other ready member")
    assert decide(own_state(), peers(SPREAD), cfg, random.Random(0)).action == REPLACE


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 7)), st.integers(0, 2**32 - 1), st.sampled_from(sorted(STRATEGIES)))
def test_refused_donors_never_donate(banned: Any, seed: int, rule: str) -> None:
    cfg = cfg_for(selection=rule, replace_fraction_best=1.0, replace_fraction_worst=1.0, dbg_mode=True,
                  threshold_std=0.0)
    decision = decide(own_state(), peers(SPREAD), cfg, random.Random(seed), refused_donors=banned)
    assert decision.donor_idx is None or decision.donor_idx not in banned


# -- the timing gates hold under every strategy -----------------------------------------------------


def _acting_cfg(rule: str, **kwargs: Any) -> PbtConfig:
    """A population where member 0 (objective 10, the worst of SPREAD) acts under every rule."""
    return cfg_for(selection=rule, replace_fraction_best=0.3, replace_threshold_frac_std=0.0,
                   replace_threshold_frac_absolute=0.0, threshold_std=0.5, threshold_abs=0.0, **kwargs)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_start_after_and_initial_delay_hold_a_member_back_under_every_strategy(rule: str) -> None:
    ungated = {decide(own_state(), peers(SPREAD), _acting_cfg(rule), random.Random(s)).action for s in range(20)}
    assert ungated != {"keep"}  # no gate: it acts
    young = MemberState(rec(0, 10.0), None, frames_since_start=1_000)
    kept = decide(young, peers(SPREAD), _acting_cfg(rule, start_after=FRAME), random.Random(0))
    assert kept.action == "keep" and kept.reason.startswith("start_after")
    early = decide(own_state(), peers(SPREAD), _acting_cfg(rule, initial_delay=FRAME + 1), random.Random(0))
    assert early.action == "keep" and early.reason.startswith(f"initial_delay: frame {FRAME:.4g}")


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_a_diverged_member_waits_for_initial_delay_only(rule: str) -> None:
    diverged = MemberState(rec(0, float("nan")), None, frames_since_start=0)
    held = decide(diverged, peers(SPREAD), _acting_cfg(rule, start_after=FRAME, ready_after=FRAME,
                                                          initial_delay=FRAME + 1), random.Random(0))
    assert held.action == "keep" and held.reason.startswith("initial_delay")
    replaced = decide(diverged, peers(SPREAD), _acting_cfg(rule, start_after=FRAME, ready_after=FRAME), random.Random(0))
    assert replaced.action == REPLACE and replaced.donor_idx in SPREAD
