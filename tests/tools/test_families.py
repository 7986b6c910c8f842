"""Families from lineages (pbt.tools.families): who carries whose starting weights, and since when
the population is one family."""
from typing import Optional

from pbt.storage import LineageEntry
from pbt.tools.families import families, family_lines


def event(member: int, iteration: int, time: float, donor: Optional[int] = None,
          donor_iteration: Optional[int] = None, action: str = "replace") -> LineageEntry:
    return LineageEntry(policy_idx=member, iteration=iteration, frame=iteration * 100, action=action, donor=donor,
                        donor_iteration=donor_iteration, mode="inplace", time=1000.0 + time)


def keep(member: int, iteration: int, time: float) -> LineageEntry:
    return LineageEntry(policy_idx=member, iteration=iteration, frame=iteration * 100, action="keep",
                        time=1000.0 + time)


def test_without_replaces_every_member_is_its_own_family() -> None:
    found = families({0: [keep(0, 1, 1)], 1: [event(1, 1, 2, action="mutate")], 2: []})
    assert found.of == {0: 0, 1: 1, 2: 2} and found.one_since is None
    assert "policy 0: 1 member, policies 0" in "\n".join(family_lines(found))


def test_a_chain_of_replaces_carries_the_first_donors_family() -> None:
    # 1 takes 0's weights, then 2 takes 1's (after 1's replace): 2 is of 0's family too
    found = families({0: [keep(0, 1, 1)], 1: [event(1, 2, 2, donor=0, donor_iteration=2)],
                      2: [event(2, 4, 3, donor=1, donor_iteration=3)], 3: []})
    assert found.of == {0: 0, 1: 0, 2: 0, 3: 3} and found.one_since is None
    assert found.members() == {0: [0, 1, 2], 3: [3]}


def test_a_donors_checkpoint_from_before_its_own_replace_keeps_the_donors_own_family() -> None:
    # 1 takes 0's weights at its iteration 5; 2 then takes 1's checkpoint of iteration 5, published
    # before that decision: those weights are still 1's own
    found = families({0: [], 1: [event(1, 5, 1, donor=0, donor_iteration=5)],
                      2: [event(2, 6, 2, donor=1, donor_iteration=5)]})
    assert found.of == {0: 0, 1: 0, 2: 1}


def test_the_population_is_one_family_from_the_last_merge_on() -> None:
    lineages = {0: [keep(0, 3, 1)], 1: [event(1, 3, 2, donor=0, donor_iteration=3)],
                2: [event(2, 3, 3, donor=1, donor_iteration=4), event(2, 6, 5, donor=0, donor_iteration=6)]}
    found = families(lineages)
    assert found.of == {0: 0, 1: 0, 2: 0}
    first = lineages[2][0]
    assert found.one_since == first  # the later replace within the family does not move "since"
    lines = "\n".join(family_lines(found))
    assert "policy 0: 3 members, policies 0, 1, 2" in lines
    assert "Every member has carried policy 0's weights since policy 2's replace at its iteration 3" in lines


def test_a_rollback_to_an_own_older_checkpoint_returns_to_that_checkpoints_family() -> None:
    # 1 took 0's weights at iteration 4, diverged, and rolled back to its own checkpoint of iteration 3
    found = families({0: [], 1: [event(1, 4, 1, donor=0, donor_iteration=4),
                                 event(1, 6, 2, donor=1, donor_iteration=3, action="rollback")]})
    assert found.of == {0: 0, 1: 1} and found.one_since is None


def test_a_donor_without_a_lineage_here_is_an_unknown_family() -> None:
    found = families({0: [event(0, 2, 1, donor=7, donor_iteration=2)], 1: []})
    assert found.of == {0: None, 1: 1}
    assert "unknown (an ancestor without a lineage here): 1 member, policies 0" in "\n".join(family_lines(found))
    # and one member alone says nothing
    assert family_lines(families({0: [keep(0, 1, 1)]})) == []
