"""Equal-experience comparison: rank members at the same iteration, whatever their speed.

A member only sees its peers' newest records at an iteration <= its own. When a hyperparameter
changes the cost of an update (``mini_epochs``, minibatch size, network size), fast members reach
iteration 10 while slow ones are at 3; ranking the fast member's iteration-10 objective against
the slow members' iteration-3 objectives lets a bad fast member look fine against peers that are
merely early. So every record carries its member's objective history, and the comparison is made
at the *compared iteration* c: the oldest newest-iteration among the live peers (and this
member's own). Each member is ranked by its objective at c (its history entry at c; the newest
entry before c when it skipped c; the oldest entry after c when its history starts later, after a
weight replacement). Donor weights are still the donor's newest checkpoint.

Pure functions: records in, records out (copies whose ``objective`` and ``history`` are the
values at c), no I/O.
"""
import dataclasses
import math
from typing import TYPE_CHECKING, AbstractSet, Dict, List, Optional, Tuple

from pbt.storage.bounds import is_sample
from pbt.storage.record import MAX_HISTORY

if TYPE_CHECKING:
    from pbt.storage.record import Record


def _finite(value: Optional[float]) -> bool:
    """A known objective a statistic may use: finite and within MAX_ABS_VALUE."""
    return is_sample(value)


def objective_at(record: "Record", iteration: int) -> Optional[float]:
    """The member's objective at ``iteration`` from its record's history.

    At or after the record's own iteration: the record's objective. Otherwise, among the history's
    known (finite) objectives: the one at ``iteration``, else the newest before it, else the oldest
    after it (its history starts later: it took a donor's weights since, and its first episodes
    were still running), else the record's objective (no known history: e.g. a record written by
    an earlier version).
    """
    if iteration >= record.iteration:
        return record.objective
    known = {i: o for i, o in record.history.items() if i <= record.iteration and _finite(o)}
    before = [i for i in known if i <= iteration]
    if before:
        return known[max(before)]
    after = [i for i in known if i > iteration]
    return known[min(after)] if after else record.objective


def at_iteration(record: "Record", iteration: int) -> "Record":
    """A copy of ``record`` as of ``iteration``: its objective there and its history up to there
    (checkpoint, params and episode returns stay the newest: a donor gives its newest weights)."""
    if iteration >= record.iteration or not record.history:
        return record
    history = {i: o for i, o in record.history.items() if i <= iteration}
    return dataclasses.replace(record, objective=objective_at(record, iteration), history=history)


def compared_iteration(own: "Record", view: Dict[int, Optional["Record"]], stale: AbstractSet[int]) -> int:
    """The iteration members are compared at: the smallest newest-iteration of the peers in
    ``view`` that have a record and are not ``stale`` (a dead member must not freeze everyone's
    comparison at its last iteration), and never later than own. Own iteration when this member's
    own objective is not a finite number (unknown or diverged: it is judged as it is now)."""
    if not _finite(own.objective):
        return own.iteration
    iterations = [r.iteration for i, r in view.items()
                  if r is not None and i != own.policy_idx and i not in stale]
    return min([own.iteration] + iterations)


def align(own: "Record", view: Dict[int, Optional["Record"]],
          stale: AbstractSet[int] = frozenset()) -> Tuple["Record", List["Record"], int]:
    """(own record, peers' records, compared iteration) with every record as of that iteration."""
    iteration = compared_iteration(own, view, stale)
    peers = [at_iteration(r, iteration) for i, r in sorted(view.items())
             if r is not None and i != own.policy_idx]
    return at_iteration(own, iteration), peers, iteration


def fitness(record: Optional["Record"], eval_loop: int) -> Optional[float]:
    """Mean of the member's last ``eval_loop`` known objectives up to its record's iteration (the
    record's objective first); None when it has none. A non-finite newest objective is None."""
    if record is None or record.objective is None or not _finite(record.objective):
        return None
    values: List[float] = [float(record.objective)]
    for i in sorted((i for i in record.history if i < record.iteration), reverse=True):
        if len(values) >= eval_loop:
            break
        value = record.history[i]
        if value is not None and _finite(value):
            values.append(float(value))
    return math.fsum(values) / len(values)


def describe(own: "Record", iteration: int) -> str:
    """'' when nothing was aligned, else which iterations were compared (for the decision's reason)."""
    if iteration >= own.iteration:
        return ""
    return f"; compared at iteration {iteration} (own newest {own.iteration}): equal experience"


class ObjectiveHistory:
    """A member's own objective by iteration since its weights last came from a donor (or since it
    started): what its records carry for peers to compare it at equal experience."""

    def __init__(self, values: Optional[Dict[int, Optional[float]]] = None) -> None:
        self.values: Dict[int, Optional[float]] = dict(values or {})

    @classmethod
    def restored(cls, record: Optional["Record"], replaced_at_frame: int, interval_steps: int) -> "ObjectiveHistory":
        """The history of the member's newest own record (after a resume or an exec restart),
        without the iterations up to its last weight replacement at ``replaced_at_frame`` (0: never;
        those objectives belong to dropped weights)."""
        if record is None:
            return cls()
        floor = replaced_at_frame // interval_steps if replaced_at_frame else -1
        return cls({i: o for i, o in record.history.items() if i > floor})

    def note(self, iteration: int, objective: Optional[float]) -> None:
        """This iteration's objective (the newest MAX_HISTORY are kept)."""
        self.values[iteration] = objective
        for old in sorted(self.values)[:-MAX_HISTORY]:
            del self.values[old]

    def forget(self) -> None:
        """The member took a donor's weights: its past objectives no longer describe it."""
        self.values = {}
