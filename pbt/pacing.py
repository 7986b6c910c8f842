"""Pacing: a member far ahead of the slowest live peer waits for it (``pbt.max_lead``).

Equal experience compares a fast member with a slow peer at the slow peer's newest iteration, so
the evidence that a fast member is worse arrives at the slow members' pace. A member that runs
more than ``max_lead`` PBT intervals ahead of the slowest member still training could spend its
whole budget before that evidence exists, and finish untouched. So at each PBT iteration it waits
(heartbeating, shown as "waiting for peers") until the slowest live peer is within ``max_lead``
intervals, or is no longer training (finished, stopped, dead). The population's wall time does not
grow: it is the slowest member's anyway.

With ``pbt.synchronous`` every member waits, right after publishing an iteration and before it
ranks, until each peer still training has published that iteration too (Ray Tune's synchronous
PBT): all of them then rank the same records, none on a gap one interval old.

A member taking a donor's weights waits the same way for a donor that is behind it
(``pbt.max_donor_lag``): the donor's checkpoint from an earlier iteration would cost the copy the
frames between, for good, since the member keeps its own frame count.

Pure decisions (:func:`pacing_reason`, :func:`donor_lag_reason`, :func:`continues`) and the
waiting loop (:func:`wait_while`); no torch.
"""

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Callable, List, Mapping, Optional, Tuple

from pbt.errors import WorkspaceError
from pbt.selection.base import REPLACE, Decision
from pbt.storage.liveness import ALIVE, RUNNING, TRAINING_STATES, WAITING, MemberLiveness, PeerStatus
from pbt.storage.record import Record

if TYPE_CHECKING:
    from pbt.config import PbtConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
"""Longest pause between two looks at the peers' heartbeats while waiting."""
SYNC_POLL_SECONDS = 0.5
"""Pause between two looks at the peers' records at a synchronous iteration: every member waits there
at every iteration, so a pause as long as the heartbeat's would add up over a run."""


def training_frame(status: Optional[PeerStatus]) -> Optional[int]:
    """The frame count of a peer still training (a fresh heartbeat that says running or waiting,
    with a frame count); None for one that is not."""
    if status is None or status.state != ALIVE or status.beat is None or status.beat.state not in TRAINING_STATES:
        return None
    return status.beat.frame


def slowest_live_peer(statuses: Mapping[int, PeerStatus]) -> Optional[Tuple[int, int]]:
    """(policy_idx, frame) of the peer that trained the fewest frames among those still training
    (a fresh heartbeat that says running or waiting, with a frame count); None when there is none.
    Peers that finished, stopped, died or never started hold nobody back."""
    live = [(frame, idx) for idx, status in statuses.items() if (frame := training_frame(status)) is not None]
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


def unpublished_peers(
    iteration: int, frame: int, newest: Mapping[int, Record], statuses: Mapping[int, PeerStatus], own_idx: int
) -> List[int]:
    """The peers still training that have neither published ``iteration`` (``newest``: each member's
    newest record up to it) nor trained past ``frame``. Finished, stopped, dead and not yet started
    peers hold nobody back; a peer past ``frame`` published this iteration, or skipped it."""
    late = []
    for idx, status in sorted(statuses.items()):
        peer_frame = training_frame(status)
        if idx == own_idx or peer_frame is None or peer_frame > frame:
            continue
        record = newest.get(idx)
        if record is None or record.iteration < iteration:
            late.append(idx)
    return late


def synchronous_reason(
    iteration: int, frame: int, newest: Mapping[int, Record], statuses: Mapping[int, PeerStatus], own_idx: int
) -> Optional[str]:
    """Why a member that published ``iteration`` does not rank yet (``pbt.synchronous``); None when
    every peer still training has published it."""
    late = unpublished_peers(iteration, frame, newest, statuses, own_idx)
    if not late:
        return None
    return f"members {', '.join(map(str, late))} have not published iteration {iteration} yet (pbt.synchronous)"


def donor_lag_reason(
    own_iteration: int, donor: Record, status: Optional[PeerStatus], max_lag: Optional[int]
) -> Optional[str]:
    """Why a member at ``own_iteration`` waits before taking ``donor`` (the donor's newest record
    seen): its checkpoint is more than ``max_lag`` iterations older and the donor is still training;
    None when the checkpoint is recent enough, the donor stopped, or ``max_lag`` is None."""
    if max_lag is None or donor.iteration >= own_iteration - max_lag or training_frame(status) is None:
        return None
    return (
        f"donor {donor.policy_idx}'s newest checkpoint is from its iteration {donor.iteration}, "
        f"{own_iteration - donor.iteration} behind this member's {own_iteration} (pbt.max_donor_lag={max_lag})"
    )


def continues(old: Record, new: Record) -> bool:
    """True when ``new``, a later record of the same member, trains on ``old``'s weights with its
    hyperparameters and network unchanged: no replace and no mutation came between (its frames since
    the last replace grew by exactly the frames between the two)."""
    return (
        new.policy_idx == old.policy_idx
        and new.iteration > old.iteration
        and new.params == old.params
        and new.network == old.network
        and new.frames_since_replace - old.frames_since_replace == new.frame - old.frame
    )


def wait_while(
    reason: Callable[[], Optional[str]],
    what: str,
    pbt: "PbtConfig",
    liveness: Optional[MemberLiveness],
    stop: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    poll: float = POLL_SECONDS,
    level: int = logging.INFO,
) -> float:
    """Wait while ``reason()`` gives one, or until ``stop()`` or the member lost its lock; the heartbeat
    says "waiting" meanwhile, the log says ``what`` it waits for and why. ``reason()`` is asked again
    every ``poll`` seconds at most. Returns the seconds waited."""
    why = reason()
    if why is None:
        return 0.0
    start = clock()
    poll = min(poll, pbt.liveness.heartbeat_interval)
    log.log(level, "PBT policy %d: waiting for %s: %s", pbt.policy_idx, what, why)
    if liveness is not None:
        liveness.state = WAITING
        liveness.beat(WAITING)
    try:
        while why is not None and not stop() and (liveness is None or liveness.lost is None):
            sleep(poll)
            why = reason()
    finally:
        if liveness is not None:
            liveness.state = RUNNING
            liveness.beat(RUNNING)
    waited = clock() - start
    log.log(level, "PBT policy %d: goes on after waiting %.1f s for %s", pbt.policy_idx, waited, what)
    return waited


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
    return wait_while(
        lambda: pacing_reason(frame, check(), pbt.interval_steps, pbt.max_lead),
        "peers",
        pbt,
        liveness,
        stop,
        sleep,
        clock,
    )


def wait_for_iteration(
    pbt: "PbtConfig",
    iteration: int,
    frame: int,
    newest: Callable[[], Mapping[int, Record]],
    check: Callable[[], Mapping[int, PeerStatus]],
    liveness: Optional[MemberLiveness],
    stop: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> float:
    """With ``pbt.synchronous``, wait while :func:`synchronous_reason` says so, or until ``stop()``;
    the heartbeat says "waiting" meanwhile. ``newest()`` reads every member's newest record up to
    ``iteration``, ``check()`` the peers' liveness. Returns the seconds waited."""
    if not pbt.synchronous:
        return 0.0
    return wait_while(
        lambda: synchronous_reason(iteration, frame, newest(), check(), pbt.policy_idx),
        f"peers to publish iteration {iteration}",
        pbt,
        liveness,
        stop,
        sleep,
        clock,
        poll=SYNC_POLL_SECONDS,
        level=logging.DEBUG,  # at every iteration: the info log would be mostly this
    )


def waits_for_donor(decision: Decision, own_iteration: int, pbt: "PbtConfig") -> bool:
    """True when ``decision`` is a replace whose donor's record is more than ``pbt.max_donor_lag``
    iterations behind ``own_iteration`` (not in an elastic population): :func:`fresh_donor` waits."""
    donor, lag = decision.donor, pbt.max_donor_lag
    return (
        decision.action == REPLACE
        and donor is not None
        and lag is not None
        and not pbt.elastic
        and donor.iteration < own_iteration - lag
    )


def fresh_donor(
    decision: Decision,
    own_iteration: int,
    newest: Callable[[int], Optional[Record]],
    check: Callable[[], Mapping[int, PeerStatus]],
    pbt: "PbtConfig",
    liveness: Optional[MemberLiveness],
    stop: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Decision:
    """``decision`` with its donor's newest record that :func:`continues` the one it was decided on,
    waiting (:func:`wait_while`) while that donor is more than ``pbt.max_donor_lag`` iterations behind
    ``own_iteration`` and still training. ``newest(idx)`` reads a member's newest record up to
    ``own_iteration``. A donor that changed since (replaced, mutated), cannot be read, or trained past
    ``own_iteration`` without publishing it ends the wait, and the decision keeps the newest record
    it saw that continues the ranked one."""
    donor, lag = decision.donor, pbt.max_donor_lag
    if donor is None or lag is None or not waits_for_donor(decision, own_iteration, pbt):
        return decision
    seen: List[Record] = [donor]
    changed: List[str] = []

    def reason() -> Optional[str]:
        # Liveness first: a donor seen past this member's next iteration had published (or failed to
        # publish) its record of this one before the listing below.
        status = check().get(donor.policy_idx)
        try:
            record = newest(donor.policy_idx)
        except WorkspaceError as exc:
            changed.append(f"its newest record cannot be read ({exc})")
            return None
        if record is not None and record.iteration > seen[-1].iteration:
            if not continues(donor, record):
                changed.append(f"it changed at its iteration {record.iteration} (new weights or hyperparameters)")
                return None
            seen.append(record)
        why = donor_lag_reason(own_iteration, seen[-1], status, lag)
        frame = training_frame(status)
        if why is not None and frame is not None and frame >= (own_iteration + 1) * pbt.interval_steps:
            # e.g. its writes failed during a storage outage: the records it skipped never come
            changed.append(
                f"it trained past this member's iteration {own_iteration} (frame {frame}) without publishing it"
            )
            return None
        return why

    waited = wait_while(reason, f"donor {donor.policy_idx}", pbt, liveness, stop, sleep, clock)
    if seen[-1] is donor:
        why = changed[0] if changed else "it published no newer checkpoint while this member waited"
        note = f"took donor {donor.policy_idx}'s checkpoint of its iteration {donor.iteration} after waiting {waited:.0f} s: {why}"
        return dataclasses.replace(decision, reason=f"{decision.reason}; {note}")
    note = (
        f"took donor {donor.policy_idx}'s checkpoint of its iteration {seen[-1].iteration} (ranked at its "
        f"iteration {donor.iteration}) after waiting {waited:.0f} s{': ' + changed[0] if changed else ''}"
    )
    return dataclasses.replace(decision, donor=seen[-1], reason=f"{decision.reason}; {note}")
