"""The hyperparameter schedule behind a checkpoint, reconstructed from the lineages (pure, no I/O).

Schedule frames. A member that takes a donor's weights keeps its own frame count (DexPBT), while
the weights it received had trained for the donor's frame count. A schedule step's ``frame`` is
counted along the weights' own history (frames of training they had received when the step began),
which is what a single replayed worker counts; ``member_frame`` is the frame count of the member
that trained them at the time (as in its lineage and TensorBoard). Both agree until the first
replacement; after it they differ by the gap between the member's and its donor's frame counts,
either way (a donor gives its newest weights, and a member ahead of a slower donor takes weights
trained for fewer frames than it counts itself).

``best/schedule.yaml`` (:func:`schedule_document`) is what ``python -m pbt.replay`` follows.
"""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.storage import LineageEntry

SCHEDULE_VERSION = 1
MAX_ANCESTRY_DEPTH = 10_000
Lineages = Mapping[int, Sequence[LineageEntry]]


@dataclass
class Step:
    """From ``frame`` on, the weights trained with ``params``."""

    frame: int
    """Frames of training the weights had received when this step began (see module docstring)."""
    params: Dict[str, Any]
    member: int
    """The member that trained the weights from here on."""
    member_frame: int
    """That member's own frame count when the step began."""
    iteration: int
    """That member's PBT iteration of the event."""
    event: str
    """startup (a fresh member's initial hyperparameters), start (no startup entry known),
    mutate (new hyperparameters, same weights) or replace (a donor's weights, new hyperparameters)."""
    donor: Optional[int] = None
    donor_iteration: Optional[int] = None


@dataclass
class Segment:
    """Part of the weights' history trained by one member."""

    member: int
    from_frame: int
    to_frame: int
    member_from_frame: int
    member_to_frame: int


@dataclass
class Schedule:
    steps: List[Step]
    segments: List[Segment]
    complete: bool = True
    """False when an ancestor's lineage is missing (the steps then start at its replacement)."""
    notes: List[str] = field(default_factory=list)


def frame_at_iteration(lineage: Sequence[LineageEntry], iteration: int) -> Optional[int]:
    """The member's own frame count when it published ``iteration`` (its lineage entry's frame)."""
    frames = [e.frame for e in lineage if not e.is_startup and e.iteration == iteration]
    return frames[-1] if frames else None


def reconstruct_schedule(lineages: Lineages, member: int, iteration: int, frame: int) -> Schedule:
    """The hyperparameter schedule that produced ``member``'s checkpoint of ``iteration``
    (published at its own ``frame``), across all its ancestors.

    The member's own events before ``iteration`` count (a decision at ``iteration`` came after the
    checkpoint was published). Before its last replacement the schedule is the donor's up to the
    donor's checkpoint (``donor_iteration``), recursively; after it, the member's own.
    """
    notes: List[str] = []
    steps, segments, _, complete = _trace(lineages, member, iteration, frame, 0, notes)
    return Schedule(steps, segments, complete, notes)


def _trace(
    lineages: Lineages, member: int, upto: int, end_frame: int, depth: int, notes: List[str]
) -> Tuple[List[Step], List[Segment], int, bool]:
    """(steps, segments, offset, complete) of member's weights up to its checkpoint of ``upto``;
    offset = weights' frames - member's frames after its last replacement."""
    entries = [e for e in lineages.get(member, []) if e.is_startup or e.iteration < upto]
    changes = [e for e in entries if e.action in ("mutate", "replace")]
    replaces = [i for i, e in enumerate(changes) if e.action == "replace" and not e.is_startup]
    steps: List[Step] = []
    segments: List[Segment] = []
    complete = True
    if replaces:
        last = changes[replaces[-1]]
        donor = -1 if last.donor is None else last.donor
        donor_iteration = -1 if last.donor_iteration is None else last.donor_iteration
        donor_lineage = lineages.get(donor, [])
        donor_frame = frame_at_iteration(donor_lineage, donor_iteration) if donor_lineage else None
        if donor_frame is not None and depth < MAX_ANCESTRY_DEPTH and 0 <= donor_iteration:
            steps, segments, donor_offset, complete = _trace(
                lineages, donor, donor_iteration, donor_frame, depth + 1, notes
            )
            start = donor_frame + donor_offset
        else:
            complete = False
            notes.append(
                f"lineage of member {donor} (donor of member {member} at its iteration "
                f"{last.iteration}) is missing: the schedule before that is unknown"
            )
            start = last.frame
        offset = start - last.frame
        steps.append(
            Step(start, dict(last.params_after), member, last.frame, last.iteration, "replace", donor, donor_iteration)
        )
        own_changes = changes[replaces[-1] + 1 :]
        member_start = last.frame
    else:
        offset = 0
        startup = next((e for e in entries if e.is_startup), None)
        if startup is not None:
            steps.append(Step(0, dict(startup.params_after), member, 0, 0, "startup"))
        elif entries:
            steps.append(Step(0, dict(entries[0].params_before), member, 0, 0, "start"))
            notes.append(
                f"member {member} has no startup entry (resumed or lineage truncated): "
                "its first known hyperparameters are used from frame 0"
            )
        else:
            complete = False
            notes.append(f"member {member} has no lineage before iteration {upto}")
        own_changes = [e for e in changes if not e.is_startup]
        member_start = 0
    for entry in own_changes:
        steps.append(
            Step(entry.frame + offset, dict(entry.params_after), member, entry.frame, entry.iteration, entry.action)
        )
    segments.append(Segment(member, member_start + offset, end_frame + offset, member_start, end_frame))
    return steps, segments, offset, complete


def schedule_document(schedule: Schedule, provenance: Mapping[str, Any]) -> Dict[str, Any]:
    """The YAML document of ``schedule.yaml``."""
    return {
        "version": SCHEDULE_VERSION,
        "provenance": dict(
            provenance,
            complete=schedule.complete,
            notes=list(schedule.notes),
            ancestry=[asdict(s) for s in schedule.segments],
        ),
        "steps": [
            {
                "frame": s.frame,
                "params": dict(sorted(s.params.items())),
                "member": s.member,
                "member_frame": s.member_frame,
                "iteration": s.iteration,
                "event": s.event,
                **({"donor": s.donor, "donor_iteration": s.donor_iteration} if s.event == "replace" else {}),
            }
            for s in schedule.steps
        ],
    }
