"""Pacing: a member far ahead of the slowest live peer waits for it (``pbt.max_lead``).

Equal experience compares a fast member with a slow peer at the slow peer's newest iteration, so
the evidence that a fast member is worse arrives at the slow members' pace. A member that runs
more than ``max_lead`` PBT intervals ahead of the slowest member still training could spend its
whole budget before that evidence exists, and finish untouched. So at each PBT iteration it waits
(heartbeating, shown as "waiting for peers") until the slowest live peer is within ``max_lead``
intervals, or is no longer training (finished, stopped, dead). The population's wall time does not
grow: it is the slowest member's anyway.

Pure decision (:func:`pacing_reason`) and the waiting loop (:func:`wait_for_peers`); no torch.
"""

import logging
import time
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Tuple

from pbt.storage.liveness import ALIVE, RUNNING, TRAINING_STATES, WAITING, MemberLiveness, PeerStatus

if TYPE_CHECKING:
    from pbt.config import PbtConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
"""Longest pause between two looks at the peers' heartbeats while waiting."""


def slowest_live_peer(statuses: Mapping[int, PeerStatus]) -> Optional[Tuple[int, int]]:
    """(policy_idx, frame) of the peer that trained the fewest frames among those still training
    (a fresh heartbeat that says running or waiting, with a frame count); None when there is none.
    Peers that finished, stopped, died or never started hold nobody back."""
    live = [
        (status.beat.frame, idx)
        for idx, status in statuses.items()
        if status.state == ALIVE
        and status.beat is not None
        and status.beat.state in TRAINING_STATES
        and status.beat.frame is not None
    ]
    if not live:
        return None
    frame, idx = min(live)
    return idx, frame


def pacing_reason(
    frame: int, statuses: Mapping[int, PeerStatus], interval_steps: int, max_lead: Optional[int]
) -> Optional[str]:
    """Why a member at ``frame`` waits: more than ``max_lead`` intervals ahead of the slowest live
    peer; None when it may go on (``max_lead`` None: pacing off)."""
    if max_lead is None:
        return None
    slowest = slowest_live_peer(statuses)
    if slowest is None:
        return None
    idx, peer_frame = slowest
    lead = (frame - peer_frame) / interval_steps
    if lead <= max_lead:
        return None
    return f"{lead:.1f} intervals ahead of member {idx} (frame {peer_frame}), more than pbt.max_lead={max_lead}"


def wait_for_peers(
    pbt: "PbtConfig",
    frame: int,
    check: Callable[[], Mapping[int, PeerStatus]],
    liveness: Optional[MemberLiveness],
    stop: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> float:
    """Wait while :func:`pacing_reason` says so (``pbt.max_lead``), or until ``stop()``; the heartbeat
    says "waiting" meanwhile. ``check()`` reads the peers' liveness. Returns the seconds waited.
    Not in an elastic population: a member joining late starts at frame 0 and would stall everyone."""
    if pbt.elastic:
        return 0.0
    why = pacing_reason(frame, check(), pbt.interval_steps, pbt.max_lead)
    if why is None:
        return 0.0
    start = clock()
    poll = min(POLL_SECONDS, pbt.liveness.heartbeat_interval)
    log.info("PBT policy %d: waiting for peers at frame %d: %s", pbt.policy_idx, frame, why)
    if liveness is not None:
        liveness.state = WAITING
        liveness.beat(WAITING)
    try:
        while why is not None and not stop() and (liveness is None or liveness.lost is None):
            sleep(poll)
            why = pacing_reason(frame, check(), pbt.interval_steps, pbt.max_lead)
    finally:
        if liveness is not None:
            liveness.state = RUNNING
            liveness.beat(RUNNING)
    waited = clock() - start
    log.info("PBT policy %d: goes on after waiting %.0f s for peers", pbt.policy_idx, waited)
    return waited
