"""What a member knows of its peers beyond their records: which look dead (their heartbeats) and
which it refuses as donors (stale, or a checkpoint it could not use), each change logged once."""

import logging
from typing import Dict, Iterable, Mapping, Optional, Set, Tuple

from pbt.storage import Record, Workspace
from pbt.storage.liveness import ALIVE, FINISHED, STALE, PeerStatus, peer_status

log = logging.getLogger(__name__)


def refused_stale_donors(records: Iterable[Record], stale: Iterable[int]) -> Set[int]:
    """Members that must not be donors: the stale (dead-looking) ones, except those whose record
    holds the population's best objective (then their weights are still the best there is).

    Pure: ``records`` are the newest records the member ranks (its own included), ``stale`` the
    indices whose heartbeat is older than ``pbt.heartbeat_timeout``.
    """
    records = list(records)
    stale = set(stale)
    known = [float(r.objective) for r in records if r.objective is not None and r.has_objective]
    best = max(known) if known else None
    return {r.policy_idx for r in records if r.policy_idx in stale and not (r.has_objective and r.objective == best)}


class DonorRefusals:
    """The donors a member refused: each refusal logged once per member and reason; a refused
    checkpoint stays refused while it is that member's newest."""

    def __init__(self, policy_idx: int) -> None:
        self.policy_idx = policy_idx
        self.checksums: Set[str] = set()
        self.logged: Set[Tuple[int, str]] = set()

    def now(self, peers: Mapping[int, Record], stale: Iterable[int]) -> Set[int]:
        """The members refused as donors at this iteration: the stale ones (:func:`refused_stale_donors`)
        and those whose newest checkpoint was refused."""
        refused = refused_stale_donors(peers.values(), stale)
        return refused | {i for i, r in peers.items() if r.checksum in self.checksums}

    def refuse(self, idx: int, why: str, checksum: Optional[str] = None) -> None:
        for seen in (self.checksums, self.logged):
            if len(seen) > 1000:  # a peer writing new junk every time: stay bounded
                seen.clear()
        if checksum:
            self.checksums.add(checksum)
        if (idx, why) in self.logged:
            return
        self.logged.add((idx, why))
        log.warning(
            "PBT policy %d: refusing member %d as a donor: %s. It stays ranked but neither its weights nor "
            "its hyperparameters are taken while its record is like this.",
            self.policy_idx,
            idx,
            why,
        )


class PeerWatch:
    """Peers' liveness from their heartbeats, logging each change of a peer's state once."""

    def __init__(self, workspace: Workspace, heartbeat_timeout: float) -> None:
        self.workspace = workspace
        self.timeout = heartbeat_timeout
        self.states: Dict[int, str] = {}

    def check(self, now: Optional[float] = None) -> Dict[int, PeerStatus]:
        me = self.workspace.policy_idx
        statuses: Dict[int, PeerStatus] = {}
        for idx in self.workspace.population_indices():
            if idx == me:
                continue
            status = peer_status(self.workspace.store, self.workspace.member_key(idx), self.timeout, now)
            statuses[idx] = status
            state = FINISHED if status.beat is not None and status.beat.state == FINISHED else status.state
            previous = self.states.get(idx)
            if state == previous:
                continue
            self.states[idx] = state
            if state == STALE:
                log.warning(
                    "PBT policy %d: member %d looks dead (%s; limit pbt.heartbeat_timeout=%g s). It is no "
                    "donor unless its record is the population best, and the others carry on without it.",
                    me,
                    idx,
                    status.describe(),
                    self.timeout,
                )
            elif state == FINISHED:
                log.info("PBT policy %d: member %d finished training (%s)", me, idx, status.describe())
            elif state == ALIVE and previous == STALE:
                log.warning("PBT policy %d: member %d is alive again (%s)", me, idx, status.describe())
        return statuses
