"""Equal-experience comparison: each peer is compared with this member at equal experience.

When a hyperparameter changes the cost of an update (``mini_epochs``, minibatch size, network
size), fast members reach iteration 10 while slow ones are at 3. Ranking the fast member's
iteration-10 objective against the slow members' iteration-3 objectives lets a bad fast member look
fine against peers that are merely early. So every record carries its member's objective history
(since its weights last came from a donor), and the comparison is made *pairwise*:

* **The pair's iterations.** A peer is compared with this member at the newest iteration at which
  both have a known (finite) objective (an objective measured partly on the weights before a change
  is not kept in the history: :attr:`pbt.objective.ObjectiveTracker.mixed`). When they have none in common (one of them took a donor's
  weights since, or its objective was unknown for a while), the peer is taken at its newest known
  iteration and this member at its oldest known iteration at or after that one. A peer's record is
  therefore never taken at more frames than this member's compared record, and no peer (the slowest,
  one that just took weights, one whose objective is unknown) holds back the comparison with the others.
* **What strategies rank.** Each peer's record is translated into this member's present: its
  objective (and its objective history and recent episode objectives) plus this member's own
  progress since the pair's iteration (own objective now minus own objective there). The peer's lead
  over this member at equal experience is thus exactly its lead in the population a strategy ranks,
  so threshold cuts, DexPBT's groups and thresholds, truncation's quantiles, tournaments and the
  significance test all rank what they always ranked, on one scale: this member's newest objective.
  A strategy that averages a member's last ``window`` objectives (tournament's ``eval_loop``) gets
  the translation of the same window, so the averages compare at equal experience too.
* **Limits.** Two peers are compared with each other only through this member (each at its own pair
  iteration), and the translation assumes the gap at the pair's iteration persists: a peer compared
  at an old iteration (it is slow, or it just took weights) is judged by that old gap. A peer's
  weights are always its newest checkpoint. A member whose own objective is unknown or diverged is
  judged as it is (no translation); a diverged peer stays diverged (it ranks last).

Pure functions: records in, records out, no I/O.
"""

import dataclasses
import math
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from pbt.storage.bounds import is_sample
from pbt.storage.record import MAX_HISTORY

if TYPE_CHECKING:
    from pbt.storage.record import Record


def _finite(value: Optional[float]) -> bool:
    """A known objective a statistic may use: finite and within MAX_ABS_VALUE."""
    return is_sample(value)


@dataclasses.dataclass(frozen=True)
class Pair:
    """Where one peer was compared with this member: the peer's objective at ``peer_iteration``
    against this member's at ``own_iteration`` (never earlier than the peer's)."""

    peer_iteration: int
    own_iteration: int
    peer_objective: float
    own_objective: float


def known(record: "Record") -> Dict[int, float]:
    """Iteration -> the member's known (finite) objective: its history up to its record's iteration,
    and the record's own objective at that iteration (it is the newest word there)."""
    values = {i: float(o) for i, o in record.history.items() if o is not None and i < record.iteration and _finite(o)}
    objective = record.objective
    if objective is not None and _finite(objective):
        values[record.iteration] = float(objective)
    return values


def pair(own: Mapping[int, float], peer: Mapping[int, float]) -> Optional[Pair]:
    """Where a peer with known objectives ``peer`` is compared with a member with ``own`` (both
    from :func:`known`): their newest common iteration; else the peer's newest known iteration (up to
    this member's newest) against this member's oldest known iteration at or after it. None when
    either has none."""
    if not own:
        return None
    common = set(own) & set(peer)
    if common:
        at = max(common)
        return Pair(at, at, peer[at], own[at])
    newest_own = max(own)
    peer_iterations = [i for i in peer if i <= newest_own]
    if not peer_iterations:
        return None
    at = max(peer_iterations)
    mine = min(i for i in own if i >= at)
    return Pair(at, mine, peer[at], own[mine])


def window_mean(values: Mapping[int, float], up_to: int, window: int) -> Optional[float]:
    """Mean of the newest ``window`` of ``values`` at iterations <= ``up_to``; None when there is none."""
    chosen = sorted((i for i in values if i <= up_to), reverse=True)[:window]
    if not chosen:
        return None
    return math.fsum(values[i] for i in chosen) / len(chosen)


def translated(record: "Record", peer_known: Mapping[int, float], at: Pair, shift: float) -> "Record":
    """A copy of the peer's ``record`` as of the pair's iteration, moved by ``shift`` (this member's
    progress since its side of the pair): objective, history and episode objectives. Checkpoint,
    params and readiness stay the newest (a donor gives its newest weights)."""
    history: Dict[int, Optional[float]] = {i: o + shift for i, o in peer_known.items() if i <= at.peer_iteration}
    return dataclasses.replace(
        record,
        iteration=at.peer_iteration,
        objective=at.peer_objective + shift,
        history=history,
        episode_returns=[x + shift for x in record.episode_returns],
    )


def align(
    own: "Record", view: Mapping[int, Optional["Record"]], window: int = 1
) -> Tuple[List["Record"], Dict[int, Pair]]:
    """(peers' records for the strategy, policy_idx -> the pair each compared peer was taken at).

    Peers with a known objective are translated into this member's present (see the module
    docstring); the others (unknown, diverged) are passed as they are. Nothing is translated when
    this member's own objective is unknown or diverged. ``window``: how many recent objectives the
    strategy averages per member."""
    peers = [r for i, r in sorted(view.items()) if r is not None and i != own.policy_idx]
    if not _finite(own.objective):
        return peers, {}
    mine = known(own)
    now = window_mean(mine, own.iteration, window)
    out: List[Record] = []
    pairs: Dict[int, Pair] = {}
    for record in peers:
        theirs = known(record)
        at = pair(mine, theirs) if record.objective is None or _finite(record.objective) else None
        if at is None or now is None:
            out.append(record)
            continue
        then = window_mean(mine, at.own_iteration, window)
        shift = 0.0 if then is None else now - then
        pairs[record.policy_idx] = at
        out.append(translated(record, theirs, at, shift))
    return out, pairs


def fitness(record: Optional["Record"], eval_loop: int) -> Optional[float]:
    """Mean of the member's last ``eval_loop`` known objectives up to its record's iteration (the
    record's objective first); None when it has none. A non-finite newest objective is None."""
    if record is None or record.objective is None or not _finite(record.objective):
        return None
    return window_mean(known(record), record.iteration, eval_loop)


def describe(own: "Record", pairs: Mapping[int, Pair]) -> str:
    """'' when every peer was compared at this member's newest iteration, else at which iteration
    each compared peer was taken (for the decision's reason and the lineage)."""
    if all(p.peer_iteration == own.iteration == p.own_iteration for p in pairs.values()):
        return ""
    groups: Dict[Tuple[int, int], List[int]] = {}
    for idx, p in sorted(pairs.items()):
        groups.setdefault((p.peer_iteration, p.own_iteration), []).append(idx)
    parts = []
    for (theirs, mine), members in sorted(groups.items()):
        names = ", ".join(str(i) for i in members)
        parts.append(
            f"at iteration {theirs} with {names}"
            if theirs == mine
            else f"with {names} at iteration {theirs} (own at {mine})"
        )
    return f"; compared at equal experience (own newest {own.iteration}): {'; '.join(parts)}"


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
