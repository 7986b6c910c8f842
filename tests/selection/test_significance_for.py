"""``pbt.significance_for``: the significance test guards every replace (the default), or with
"last_of_family" only a replace that would take the last copy of a family's weights out of the
population. Families come from the peers' records (``Record.family``), for every strategy that
tests significance. No torch."""
import dataclasses
import random
from typing import Any, List, Optional

import pytest
from test_insignificant_lead import FRAME, config, noisy
from test_insignificant_lead import rec as plain_rec

from pbt.errors import ConfigError
from pbt.selection import REPLACE, MemberState, decide
from pbt.selection.base import family_lives_on
from pbt.storage.record import Record

RULES = ["threshold", "dexpbt", "truncation", "tournament", "pb2", "mfpbt"]


def rec(idx: int, objective: float, returns: List[float], family: Optional[int]) -> Record:
    return dataclasses.replace(plain_rec(idx, objective, returns), family=family)


def population(own_family: Optional[int], peer_families: List[Optional[int]]) -> tuple:
    """Member 0 at the bottom with noisy episodes; members 1-3 ahead by 20 each, with these families."""
    own = MemberState(rec(0, 0.0, noisy(0.0), own_family), None, FRAME)
    peers = [rec(i, 20.0 * i, noisy(20.0 * i), peer_families[i - 1]) for i in (1, 2, 3)]
    return own, peers


def decisions(rule: str, own: MemberState, peers: List[Record], **kw: Any) -> List[Any]:
    """The decisions of 12 seeds that reached the replace step (a tournament may draw nobody better)."""
    out = []
    for seed in range(12):
        decision = decide(own, peers, config(rule, **kw), random.Random(seed))
        if decision.action == REPLACE or "lead not significant" in decision.reason:
            out.append(decision)
    assert out, f"{rule}: no draw reached the replace step"
    return out


@pytest.mark.parametrize("rule", RULES)
def test_the_last_of_a_family_is_replaced_only_on_a_significant_lead(rule: str) -> None:
    own, peers = population(0, [1, 2, 3])  # every member its own family
    for decision in decisions(rule, own, peers, significance_for="last_of_family"):
        assert decision.action != REPLACE, decision.reason
        assert "lead not significant" in decision.reason and "Welch p=" in decision.reason, decision.reason


@pytest.mark.parametrize("rule", RULES)
def test_a_member_whose_family_lives_on_is_replaced_on_the_lead_alone(rule: str) -> None:
    own, peers = population(0, [0, 2, 3])  # member 1 carries member 0's family too
    for decision in decisions(rule, own, peers, significance_for="last_of_family"):
        if decision.donor_idx == 1:  # the donor carries member 0's family itself
            assert "the donor is of this member's family (policy 0)" in decision.reason, decision.reason
        else:
            assert decision.action == REPLACE, decision.reason
            assert "significance test skipped: policy 0's family lives on in member 1, ranked above" in decision.reason


@pytest.mark.parametrize("rule", RULES)
def test_the_default_tests_every_replace(rule: str) -> None:
    own, peers = population(0, [0, 0, 0])  # the whole population of one family: still tested
    for decision in decisions(rule, own, peers):
        assert decision.action != REPLACE and "lead not significant" in decision.reason, decision.reason


@pytest.mark.parametrize("own_family, peer_families", [(None, [None, None, None]), (0, [None, 5, 7])])
def test_an_unknown_or_unmatched_family_is_tested(own_family: Optional[int], peer_families: List[Optional[int]]) -> None:
    own, peers = population(own_family, peer_families)
    for decision in decisions("threshold", own, peers, significance_for="last_of_family"):
        assert decision.action != REPLACE and "lead not significant" in decision.reason, decision.reason


def test_a_family_member_refused_as_a_donor_does_not_count() -> None:
    own, peers = population(0, [0, 2, 3])
    view = {r.policy_idx: r for r in [own.record, *peers]}
    assert family_lives_on(own.record, peers[2], view) == (
        "policy 0's family lives on in member 1, ranked above this one and trained as long since its copy"
    )
    assert family_lives_on(own.record, peers[2], view, refused=frozenset({1})) is None
    assert family_lives_on(own.record, peers[0], view, refused=frozenset({1})) == (
        "the donor is of this member's family (policy 0)"
    )


@pytest.mark.parametrize("rule", ["threshold", "dexpbt"])
def test_no_lead_never_replaces(rule: str) -> None:
    """Skipping the test never replaces where the strategy itself sees no lead."""
    own = MemberState(rec(0, 5.0, noisy(5.0), 0), None, FRAME)
    peers = [rec(i, 5.0, noisy(5.0), 0) for i in (1, 2, 3)]
    decision = decide(own, peers, config(rule, significance_for="last_of_family"), random.Random(0))
    assert decision.action != REPLACE, decision.reason


def test_a_misspelt_value_names_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        config("threshold", significance_for="last_of_famly")
    message = str(err.value)
    assert "pbt.significance_for='last_of_famly'" in message and "Did you mean 'last_of_family'" in message
    assert "every_replace, last_of_family" in message


def test_only_a_family_member_ranked_above_counts() -> None:
    """Members decide at once, from records written before their decisions: two last members of one
    family that each counted the other could both be replaced. Only one ranked above counts, so the
    family's best-ranked member is always tested (ties: the lower index ranks first, in every view)."""
    donor = rec(2, 50.0, noisy(50.0), 2)

    def lives_on(own: Record, kin: Record) -> Optional[str]:
        return family_lives_on(own, donor, {r.policy_idx: r for r in (own, kin, donor)})

    assert lives_on(rec(0, 10.0, noisy(10.0), 0), rec(1, 5.0, noisy(5.0), 0)) is None
    assert lives_on(rec(0, 10.0, noisy(10.0), 0), rec(1, 15.0, noisy(15.0), 0)) is not None
    tied = [rec(0, 10.0, noisy(10.0), 0), rec(1, 10.0, noisy(10.0), 0)]
    assert lives_on(tied[0], tied[1]) is None and lives_on(tied[1], tied[0]) is not None


@pytest.mark.parametrize("rule", RULES)
def test_a_younger_copy_does_not_keep_the_family(rule: str) -> None:
    """A copy that took member 0's weights more recently than member 0 took its own (ready, so a donor)
    has not shown its hyperparameters, so its rank above member 0 says nothing: member 0 is still tested;
    a copy as old as member 0 counts."""
    own, peers = population(0, [0, 2, 3])
    young = dataclasses.replace(peers[0], frames_since_replace=FRAME // 2)
    for decision in decisions(rule, own, [young, *peers[1:]], significance_for="last_of_family"):
        if decision.donor_idx != 1:
            assert decision.action != REPLACE and "lead not significant" in decision.reason, decision.reason
    view = {r.policy_idx: r for r in [own.record, young, *peers[1:]]}
    assert family_lives_on(own.record, peers[2], view) is None
    as_old = dataclasses.replace(young, frames_since_replace=own.record.frames_since_replace)
    assert family_lives_on(own.record, peers[2], {**view, 1: as_old}) is not None
    younger_self = dataclasses.replace(own.record, frames_since_replace=FRAME // 4)  # a copy itself: its elder counts
    assert family_lives_on(younger_self, peers[2], {**view, 0: younger_self}) is not None
