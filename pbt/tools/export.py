"""Export the best member: its checkpoint (sha256-verified copy), record and schedule into ``<out>/best``.

The copy is read through the read-only :class:`pbt.storage.WorkspaceReader` (verified against the
record's checksum) and written atomically; the schedule is reconstructed from the lineages
(:mod:`pbt.tools.schedule`).
"""

import datetime
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import yaml

from pbt.errors import CorruptRecordError, WorkspaceError
from pbt.mutation.network import network_of
from pbt.storage import Record
from pbt.storage.checkpoints import sha256_hex
from pbt.storage.local import atomic_write_bytes
from pbt.storage.reader import WorkspaceReader, resolved
from pbt.storage.record import record_to_yaml
from pbt.tools.schedule import Schedule, reconstruct_schedule, schedule_document
from pbt.tools.snapshot import Snapshot, open_reader

log = logging.getLogger(__name__)


@dataclass
class BestExport:
    record: Record
    schedule: Schedule
    directory: Path
    checksum: str


def scored_records(snapshot: Snapshot, reader: WorkspaceReader) -> List[Record]:
    """Each member's newest record with a known objective, best first (ties: lower policy index).

    A member's newest record has no objective for an interval or two after its weights were
    replaced (its objective restarts with the new weights); then its newest record that has one
    stands for it, so a run whose members were all replaced near the end still has a best.
    """
    records = []
    for view in snapshot.members:
        record = view.record
        while record is not None and not record.has_objective and record.iteration > 0:
            record = reader.latest_record(view.policy_idx, max_iteration=record.iteration - 1)
        if record is not None and record.objective is not None and record.has_objective:
            records.append((float(record.objective), record))
    return [r for _, r in sorted(records, key=lambda pair: (-pair[0], pair[1].policy_idx))]


def export_best(snapshot: Snapshot, out: Path) -> Optional[BestExport]:
    """Copy the best member's checkpoint (sha256-verified), record and schedule to ``out/best``.

    The best is the member whose newest scored record (:func:`scored_records`) has the highest
    objective; if its checkpoint vanished or fails its checksum (a live workspace), the next best
    is taken. Returns None when no member has a known objective yet.
    """
    reader = open_reader(snapshot.root)
    best_dir = out / "best"
    for record in scored_records(snapshot, reader):
        try:
            data = reader.read_checkpoint_bytes(record)
        except CorruptRecordError as exc:
            log.warning(
                "best candidate policy %d iteration %d unusable (%s); trying the next",
                record.policy_idx,
                record.iteration,
                exc,
            )
            continue
        best_dir.mkdir(parents=True, exist_ok=True)
        target = best_dir / "checkpoint.pth"
        atomic_write_bytes(target, data)
        copied = sha256_hex(target.read_bytes())
        if copied != record.checksum:
            raise WorkspaceError(
                f"{target}: the copy's sha256 {copied[:12]}... differs from the record's {record.checksum[:12]}...; "
                f"the disk under {out} corrupts data. Write the analysis to another directory (--out)."
            )
        atomic_write_bytes(best_dir / "record.yaml", record_to_yaml(record))
        schedule = reconstruct_schedule(snapshot.lineages, record.policy_idx, record.iteration, record.frame)
        provenance = {
            "workspace": str(resolved(snapshot.root)),
            "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "member": record.policy_idx,
            "iteration": record.iteration,
            "member_frame": record.frame,
            "frames_trained": schedule.segments[-1].to_frame if schedule.segments else record.frame,
            "objective": record.objective,
            "checkpoint": "checkpoint.pth",
            "checkpoint_sha256": record.checksum,
            "frame_count": "step frames count the training the weights received along their ancestry; "
            "member_frame is the frame count of the member training them then",
        }
        document = schedule_document(schedule, provenance)
        network = network_of(record.network)
        if network is not None and document["steps"] and document["steps"][0]["frame"] == 0:
            # an evolved network: the replay trains the best member's final architecture from the start
            document["steps"][0]["params"].update(network.overrides())
            document["provenance"]["network"] = dict(record.network or {})
        text = (
            "# Hyperparameter schedule of the best member, reconstructed from the PBT lineage.\n"
            "# Replay it: pbt-replay schedule.yaml task=<task> [overrides...]\n"
            + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
        )
        atomic_write_bytes(best_dir / "schedule.yaml", text.encode("utf-8"))
        log.info(
            "best member %d (iteration %d, objective %s) exported to %s with a %d-step schedule",
            record.policy_idx,
            record.iteration,
            record.objective,
            best_dir,
            len(schedule.steps),
        )
        return BestExport(record, schedule, best_dir, copied)
    return None
