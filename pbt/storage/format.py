"""The workspace's on-disk format: names of every file and directory, in one place.

Layout (compatible with IsaacGymEnvs' DexPBT, so existing tools and habits carry over)::

    <root>/<idx:03d>/<iteration:06d>.pth   checkpoint: torch.save of rl_games' full state
    <root>/<idx:03d>/<iteration:06d>.yaml  its Record (YAML) naming the .pth and its sha256
    <root>/<idx:03d>/lineage.jsonl         append-only JSON lines, one LineageEntry per PBT event
    <root>/<idx:03d>/lock, heartbeat       which process trains member idx, and that it is alive
    <root>/<idx:03d>/lock.takeover.*       exist for an instant while a stale lock is taken over
    <root>/<idx:03d>.old-<time>/           a member directory moved aside by pbt.overwrite=true
    <root>/best<idx>/best_obj_..._iter_..._policyNNN.{pth,yaml}
                                           member idx's copy of the best checkpoint it has seen

On an object store (``pbt.workspace=s3://bucket/prefix``, :mod:`pbt.storage.s3`) the keys are the
same below the prefix, except the lineage: ``<idx:03d>/lineage.jsonl.d/p<seq>`` (one object per
append) and ``b<seq>`` (a compacted base), see :mod:`pbt.storage.objectlog`.

Protocol: a member publishes the ``.pth`` first and its ``.yaml`` record second, so a record never
points at a checkpoint that is not there yet; re-publishing an iteration removes its old ``.yaml``
before replacing the ``.pth``; retention deletes the ``.yaml`` before the ``.pth``. Each member
writes only under ``<root>/<own idx:03d>/`` and ``<root>/best<own idx>/``.
"""

import re
from typing import Optional

RECORD_SUFFIX = ".yaml"
CHECKPOINT_SUFFIX = ".pth"
LINEAGE_FILE = "lineage.jsonl"
LOCK_FILE = "lock"
HEARTBEAT_FILE = "heartbeat"
TAKEOVER_FILE = "lock.takeover"
PROBE_FILE = ".write_probe"
"""Written and removed at start-up to check that the workspace is writable."""

_MEMBER_DIR_RE = re.compile(r"\d{3,}")


def member_dir_name(member_idx: int) -> str:
    """``7`` -> ``007``."""
    return f"{member_idx:03d}"


def best_dir_name(member_idx: int) -> str:
    """``7`` -> ``best7``."""
    return f"best{member_idx}"


def member_idx_of(name: str) -> Optional[int]:
    """The member index a directory name stands for (``007`` -> 7), or None."""
    return int(name) if _MEMBER_DIR_RE.fullmatch(name) and name.isascii() else None


def record_name(iteration: int) -> str:
    """File name of a member's record for ``iteration`` (``000042.yaml``)."""
    return f"{iteration:06d}{RECORD_SUFFIX}"


def checkpoint_name(iteration: int) -> str:
    """File name of a member's checkpoint for ``iteration`` (``000042.pth``)."""
    return f"{iteration:06d}{CHECKPOINT_SUFFIX}"


def iteration_of(name: str, suffix: str) -> Optional[int]:
    """The iteration encoded in a member file name, or None for any other file."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) < 6 or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def best_stem(objective: float, iteration: int, policy_idx: int) -> str:
    """File stem of a best copy (as upstream: the objective first, so names sort by it)."""
    return f"best_obj_{objective:015.5f}_iter_{iteration:06d}_policy{policy_idx:03d}"
