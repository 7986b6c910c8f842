"""Families: the starting member whose weights each member carries, from the lineages (pure, no I/O).

A member starts as its own family; when it takes a donor's checkpoint (a replace, or a diverged
member's rollback) it joins the family of the weights in that checkpoint. A checkpoint published at
iteration ``k`` holds the weights from before the decision at ``k``, so a change decided at
iteration ``k`` shows in checkpoints from ``k + 1`` on. Events are applied in the order they were
written (``time``). When every member belongs to one family, the population only explores around
that family's weights: ``pbt-analyze`` reports since when, because a population that collapsed
early has thrown away the members that were slow to start (docs/benchmarks/outcome.md).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from pbt.storage import LineageEntry
from pbt.tools.schedule import Lineages


@dataclass(frozen=True)
class Families:
    """Each member's family now, and the event that made the population one family."""

    of: Dict[int, Optional[int]]
    """policy_idx -> the starting member whose weights it carries (None: an ancestor without a
    lineage in this workspace)."""
    one_since: Optional[LineageEntry] = None
    """The event after which every member carried one family's weights, for good (None: the
    population holds several families, or fewer than two members)."""

    def members(self) -> Dict[Optional[int], List[int]]:
        """family -> its members, ascending; the largest family first."""
        groups: Dict[Optional[int], List[int]] = {}
        for idx in sorted(self.of):
            groups.setdefault(self.of[idx], []).append(idx)
        return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[1][0])))


def families(lineages: Lineages) -> Families:
    """The families of the members that have a lineage (see the module docstring)."""
    changes: Dict[int, List[Tuple[int, Optional[int]]]] = {idx: [] for idx in lineages}
    current: Dict[int, Optional[int]] = {idx: idx for idx in lineages}

    def family_at(member: int, iteration: Optional[int]) -> Optional[int]:
        """The family of ``member``'s checkpoint of ``iteration`` (None: its newest weights)."""
        if member not in current:
            return None
        if iteration is None:
            return current[member]
        family: Optional[int] = member
        for changed_at, joined in changes[member]:  # in the order applied
            if changed_at < iteration:
                family = joined
        return family

    events = sorted(
        (entry for entries in lineages.values() for entry in entries), key=lambda e: (e.time, e.policy_idx, e.iteration)
    )
    one_since: Optional[LineageEntry] = None
    for entry in events:
        if entry.donor is None or entry.policy_idx not in current:  # kept its weights (or a stray entry)
            continue
        joined = family_at(entry.donor, entry.donor_iteration)
        changes[entry.policy_idx].append((entry.iteration, joined))
        current[entry.policy_idx] = joined
        one = len(current) > 1 and len(set(current.values())) == 1 and joined is not None
        one_since = (one_since or entry) if one else None
    return Families(dict(current), one_since)


def family_lines(found: Families) -> List[str]:
    """The report's lines about families (Markdown)."""
    if len(found.of) < 2:
        return []
    lines = ["A member's family is the starting member whose weights it carries, followed through every replace.", ""]
    for family, members in found.members().items():
        name = "unknown (an ancestor without a lineage here)" if family is None else f"policy {family}"
        lines.append(
            f"- {name}: {len(members)} member{'' if len(members) == 1 else 's'}, policies {', '.join(map(str, members))}"
        )
    event = found.one_since
    if event is not None:
        lines += [
            "",
            f"Every member has carried policy {found.of[event.policy_idx]}'s weights since policy "
            f"{event.policy_idx}'s {event.action} at its iteration {event.iteration} (frame {event.frame}): from "
            "there the population explores only around that family's weights.",
        ]
    return lines
