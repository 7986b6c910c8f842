"""One member's handle on the shared workspace: publish, lineage, best copy, retention, fresh starts.

Every write goes through the workspace's Store (:mod:`pbt.storage.local` on a filesystem), whose
puts are atomic: a reader sees an old file or a whole new one. The protocol (checkpoint before
record, records deleted before checkpoints, each member writes only its own directories) is in
:mod:`pbt.storage.format`; the disk bound in :mod:`pbt.storage.retention`.

A ``Workspace`` is not thread-safe: one member process uses it from one thread.
"""

import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from pbt.errors import ConfigError, CorruptRecordError, WorkspaceError
from pbt.storage.backend import Refused, Store, ensure_dir, exists, move, remove_stale_temps
from pbt.storage.best import is_better, write_best
from pbt.storage.checkpoints import serialize_state, sha256_hex
from pbt.storage.format import (
    CHECKPOINT_SUFFIX,
    LINEAGE_FILE,
    PROBE_FILE,
    RECORD_SUFFIX,
    best_dir_name,
    checkpoint_name,
    iteration_of,
    record_name,
)
from pbt.storage.lineage import LineageEntry
from pbt.storage.local import HOST, atomic_write_bytes
from pbt.storage.objectlog import log_dir
from pbt.storage.reader import PathLike, ReadLimits, WorkspaceReader
from pbt.storage.record import (
    MAX_GAINS,
    MAX_PARAM_HISTORY,
    NO_HISTORY,
    Histories,
    Record,
    check_policy_idx,
    plain_history,
    readable_numbers,
    record_to_yaml,
    to_plain,
)
from pbt.storage.retention import RetentionPolicy, iterations_to_keep, removal_order

logger = logging.getLogger(__name__)


class Workspace(WorkspaceReader):
    """The workspace as member ``policy_idx`` of ``num_policies`` sees and writes it.

    Args:
        root: the workspace shared by the population (a directory, created if missing, or a Store).
        policy_idx: this member's index, 0 .. num_policies-1.
        num_policies: population size N; None: an elastic population (whatever member directories exist).
        retention: how many own records to keep (:mod:`pbt.storage.retention`).
        limits: size caps of what is read (:class:`pbt.storage.reader.ReadLimits`).
    """

    def __init__(
        self,
        root: Union[PathLike, Store],
        policy_idx: int,
        num_policies: Optional[int],
        retention: Optional[RetentionPolicy] = None,
        limits: Optional[ReadLimits] = None,
    ) -> None:
        retention = retention or RetentionPolicy()
        if num_policies is not None and num_policies < 1:
            raise ConfigError(f"pbt.num_policies must be >= 1, got {num_policies}")
        check_policy_idx(policy_idx, num_policies)  # None: an elastic population, the member directories found
        if retention.keep_records < 1:
            raise ConfigError(f"keep_records must be >= 1, got {retention.keep_records}")
        if retention.max_records < retention.keep_records:
            raise ConfigError(
                f"max_records ({retention.max_records}) must be >= keep_records ({retention.keep_records})"
            )
        if retention.peer_margin < 0:
            raise ConfigError(f"peer_margin must be >= 0, got {retention.peer_margin}")
        super().__init__(root, num_policies, limits)
        self.policy_idx = policy_idx
        self.retention = retention
        self.last_published: Optional[int] = None
        """The iteration this process last published: retention ranks no own record beyond it."""
        self.own_key = self.member_key(policy_idx)
        self.best_key = best_dir_name(policy_idx)
        for key in (self.own_key, self.best_key):
            ensure_dir(self.store, key)

    @property
    def own_dir(self) -> Union[Path, str]:
        return self.member_dir(self.policy_idx)

    @property
    def best_dir(self) -> Union[Path, str]:
        return self.located(self.best_key)

    # ---- start-up ----------------------------------------------------------------------------

    def probe_writable(self) -> None:
        """Write and remove a small file in this member's directory, so a read-only, full or
        unwritable ``pbt.workspace`` fails at start-up rather than at the first PBT iteration."""
        key = f"{self.own_key}/{PROBE_FILE}"
        try:
            self.store.put_atomic(key, f"{HOST} {os.getpid()} {time.time()}\n".encode())
        except WorkspaceError as exc:
            raise WorkspaceError(
                f"pbt.workspace={self.root} is not writable: {exc.__cause__ or exc}. Set pbt.workspace to a "
                "directory every member can write (check permissions, free disk space, and that the "
                "filesystem is mounted read-write)."
            ) from exc
        self.store.delete(key)

    def has_own_files(self) -> bool:
        """True when this member's directory holds any record, checkpoint or lineage."""
        return any(
            n in (LINEAGE_FILE, log_dir(LINEAGE_FILE))
            or iteration_of(n, RECORD_SUFFIX) is not None
            or iteration_of(n, CHECKPOINT_SUFFIX) is not None
            for n in self.store.list(self.own_key)
        )

    def move_aside(self) -> List[Union[Path, str]]:
        """Move this member's directory and its best copy aside (``<idx:03d>.old-<time>``,
        ``best<idx>.old-<time>``) and create empty ones: a fresh start that deletes nothing.
        Returns the new paths of what was moved."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        moved: List[Union[Path, str]] = []
        for key in (self.own_key, self.best_key):
            if not exists(self.store, key):
                continue
            target = f"{key}.old-{stamp}"
            suffix = 1
            while exists(self.store, target):
                suffix += 1
                target = f"{key}.old-{stamp}-{suffix}"
            move(self.store, key, target)
            ensure_dir(self.store, key)
            moved.append(self.located(target))
        self._cache.pop(self.policy_idx, None)
        return moved

    # ---- publishing --------------------------------------------------------------------------

    def save(
        self,
        iteration: int,
        frame: int,
        objective: Optional[float],
        params: Mapping[str, Any],
        state: Mapping[str, Any],
        episode_returns: Iterable[float] = (),
        frames_since_replace: int = 0,
        network: Optional[Mapping[str, Any]] = None,
        history: Histories = NO_HISTORY,
        stage: Optional[Tuple[int, int]] = None,
        evaluated: bool = False,
        family: Optional[int] = None,
        training_returns: Iterable[float] = (),
    ) -> Record:
        """Serialize ``state`` (rl_games' full state) and publish it with its record."""
        return self.publish(
            iteration,
            frame,
            objective,
            params,
            serialize_state(state),
            episode_returns,
            frames_since_replace,
            network,
            history,
            stage,
            evaluated,
            family,
            training_returns,
        )

    def publish(
        self,
        iteration: int,
        frame: int,
        objective: Optional[float],
        params: Mapping[str, Any],
        checkpoint_bytes: bytes,
        episode_returns: Iterable[float] = (),
        frames_since_replace: int = 0,
        network: Optional[Mapping[str, Any]] = None,
        history: Histories = NO_HISTORY,
        stage: Optional[Tuple[int, int]] = None,
        evaluated: bool = False,
        family: Optional[int] = None,
        training_returns: Iterable[float] = (),
    ) -> Record:
        """Publish already-serialized checkpoint bytes: write the ``.pth``, then the ``.yaml``
        (``history``: what the record carries about the member's past, :class:`Histories`;
        ``stage``: (curriculum stage, frame it was entered) with a curriculum; ``evaluated``:
        ``episode_returns`` are evaluation episodes, :attr:`Record.evaluated`; ``family``: the
        family of the weights, :attr:`Record.family`; ``training_returns``: with evaluations, the
        training episodes too, :attr:`Record.training_returns`)."""
        if iteration < 0:
            raise WorkspaceError(f"iteration must be >= 0, got {iteration}")
        if not checkpoint_bytes:
            raise WorkspaceError(f"refusing to publish an empty checkpoint for iteration {iteration}")
        try:
            objective_value = None if objective is None else float(objective)
            returns = [float(x) for x in episode_returns]
            training = [float(x) for x in training_returns]
        except (TypeError, ValueError, OverflowError) as exc:
            raise WorkspaceError(f"objective and episode_returns must be numbers: {exc}") from exc
        objective_value, returns = readable_numbers(
            objective_value, returns, f"member {self.policy_idx} iteration {iteration}"
        )
        _, training = readable_numbers(None, training, f"member {self.policy_idx} iteration {iteration} (training)")
        record = Record(
            policy_idx=self.policy_idx,
            iteration=int(iteration),
            frame=int(frame),
            objective=objective_value,
            params=to_plain(dict(params), "params"),
            checkpoint=checkpoint_name(iteration),
            checksum=sha256_hex(checkpoint_bytes),
            time=time.time(),
            episode_returns=returns,
            evaluated=bool(evaluated),
            training_returns=training if evaluated else [],
            frames_since_replace=int(frames_since_replace),
            network=None if network is None else to_plain(dict(network), "network"),
            history=plain_history(history.objectives),
            param_history={
                int(i): to_plain(dict(p), "param_history")
                for i, p in sorted(history.params.items())[-MAX_PARAM_HISTORY:]
            },
            gains={int(i): float(g) for i, g in sorted(history.gains.items())[-MAX_GAINS:] if math.isfinite(g)},
            stage=None if stage is None else int(stage[0]),
            stage_frame=None if stage is None else int(stage[1]),
            family=None if family is None else int(family),
        )
        record_bytes = record_to_yaml(record)
        record_key = f"{self.own_key}/{record_name(iteration)}"
        ensure_dir(self.store, self.own_key)  # a symlink a peer put in its place is moved aside
        self.own_checkpoint_size = len(checkpoint_bytes)
        # Re-publishing an iteration: drop the old record first, so it never names the new bytes.
        if self.store.stat(record_key) is not None:  # one request on an object store (exists may list)
            self.store.delete(record_key)
        self.store.put_atomic(f"{self.own_key}/{record.checkpoint}", checkpoint_bytes)
        self.store.put_atomic(record_key, record_bytes)
        self.last_published = int(iteration)
        logger.debug("member %d published iteration %d (%d bytes)", self.policy_idx, iteration, len(checkpoint_bytes))
        return record

    def newest_iteration(self, member_idx: Optional[int] = None, verify: bool = False) -> Optional[int]:
        """Iteration of a member's (default: own) newest intact record, or None (e.g. for resume)."""
        record = self.latest_record(self.policy_idx if member_idx is None else member_idx, verify=verify)
        return None if record is None else record.iteration

    def read_lineage(self, member_idx: Optional[int] = None) -> List[LineageEntry]:
        """A member's (default: own) lineage."""
        return super().read_lineage(self.policy_idx if member_idx is None else member_idx)

    def export_state(self, state: Mapping[str, Any], dest_path: PathLike) -> Path:
        """Write a state (e.g. a live agent's, after a network change) to a private path outside the
        workspace, atomically, for a restart; WorkspaceError when it lies inside the workspace or
        cannot be written."""
        dest = Path(dest_path).absolute()
        root = Path(self.root).absolute()
        if dest == root or root in dest.parents:
            raise WorkspaceError(
                f"export destination {dest} lies inside the workspace {root}; export into the "
                "member's own run directory instead."
            )
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create {dest.parent} for the exported checkpoint: {exc}") from exc
        atomic_write_bytes(dest, serialize_state(state))
        return dest

    def export_checkpoint(
        self,
        record: Record,
        member_idx: Optional[int],
        dest_path: PathLike,
        frame: int,
        epoch: Optional[int],
        edit: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Path:
        """Copy a (donor's) checkpoint to a private path outside the workspace, for a restart.

        The copy is verified and loaded safely, its ``frame`` and ``epoch`` are set to the caller's
        own counts (a member keeps its own frame count; ``epoch`` None: the donor's, as a member
        joining an elastic population continues the donor's), ``edit`` (the learner's) changes it in
        place (e.g. the learning rate a restart carries), and it is written atomically. Raises
        CorruptRecordError when the donor's file vanished or is damaged, WorkspaceError when
        ``dest_path`` lies inside the workspace or cannot be written.
        """
        dest = Path(dest_path).absolute()
        root = self.root.absolute() if isinstance(self.root, Path) else None  # never inside an object store
        if root is not None and (dest == root or root in dest.parents):
            raise WorkspaceError(
                f"export destination {dest} lies inside the workspace {root}, where retention may "
                "delete it; export into the member's own run directory instead."
            )
        state = self.load_checkpoint(record, member_idx)
        if record.policy_idx != self.policy_idx:  # a donor's best score is not this member's
            state.pop("last_mean_rewards", None)
        state["frame"] = int(frame)
        if epoch is not None:
            state["epoch"] = int(epoch)
        if edit is not None:
            edit(state)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create {dest.parent} for the exported checkpoint: {exc}") from exc
        atomic_write_bytes(dest, serialize_state(state))
        logger.info(
            "exported member %d's iteration %d checkpoint to %s (frame %d, epoch %s)",
            record.policy_idx,
            record.iteration,
            dest,
            frame,
            state.get("epoch"),
        )
        return dest

    # ---- lineage and best --------------------------------------------------------------------

    def append_lineage(self, entry: LineageEntry) -> None:
        """Append one entry to this member's ``lineage.jsonl`` (one write, then fsync)."""
        to_plain(entry.to_dict(), "lineage entry")  # refuse what JSON readers could not read back
        key = f"{self.own_key}/{LINEAGE_FILE}"
        try:
            self.store.append(key, entry.to_json_line())
        except Refused:  # a symlink or FIFO a peer put there: move it aside (never follow it), append anew
            aside = f"{key}.foreign-{os.urandom(4).hex()}"
            logger.warning(
                "member %d: moving the foreign object at %s aside to %s",
                self.policy_idx,
                self.store.path(key),
                self.store.path(aside),
            )
            move(self.store, key, aside)
            self.store.append(key, entry.to_json_line())

    def best_record(self, member_idx: Optional[int] = None) -> Optional[Record]:
        """The record of a member's (default: own) copy of the population best, or None."""
        return super().best_record(self.policy_idx if member_idx is None else member_idx)

    def update_best(self, record: Record, member_idx: Optional[int] = None) -> bool:
        """Keep ``best<own idx>/`` holding the best checkpoint+record this member has seen.

        ``record`` is the current population best (its checkpoint in ``member_idx``'s directory,
        default its policy_idx); it replaces the copy only when its objective is finite and
        strictly higher. The bytes are verified by sha256 and copied, never unpickled. Returns True
        when the copy was replaced; raises CorruptRecordError when the checkpoint vanished or fails
        its checksum.
        """
        if not is_better(record, self.best_record()):
            return False
        write_best(self, self.best_key, record, self.read_checkpoint_bytes(record, member_idx))
        logger.info(
            "member %d: new population best %s (objective %s) copied to %s",
            self.policy_idx,
            record.policy_idx,
            record.objective,
            self.best_dir,
        )
        return True

    def keep_population_best(self, records: Mapping[int, Record]) -> None:
        """:meth:`update_best` with the best of ``records`` (a member's ranked records); a copy that
        fails (its member may have just deleted it) is logged and left to the next iteration."""
        known = [r for r in records.values() if r.has_objective]
        if not known:
            return
        best = max(known, key=lambda r: (r.objective, -r.policy_idx))
        try:
            self.update_best(best)
        except (CorruptRecordError, WorkspaceError) as exc:
            logger.warning(
                "member %d: could not copy the population best (%s); next iteration will", self.policy_idx, exc
            )

    def rollback_candidates(self, own_tries: int = 5) -> Iterator[Record]:
        """Records to roll back to after a divergence: own newest ones first (at most
        ``own_tries``), then the peers' newest records, best objective first."""
        max_iteration: Optional[int] = None
        for _ in range(own_tries):
            record = self.latest_record(self.policy_idx, max_iteration=max_iteration)
            if record is None:
                break
            yield record
            if record.iteration == 0:
                break
            max_iteration = record.iteration - 1
        peers = [r for i, r in self.latest_records().items() if i != self.policy_idx and r.has_objective]
        yield from sorted(peers, key=lambda r: (-float(r.objective), r.policy_idx))  # type: ignore[arg-type]  # peers filtered on has_objective

    # ---- retention ---------------------------------------------------------------------------

    def cleanup(self, latest: Optional[Mapping[int, Record]] = None) -> List[Union[Path, str]]:
        """Apply retention to this member's files (:mod:`pbt.storage.retention`); returns the paths
        removed. ``latest`` is a ``latest_records()`` snapshot (scanned when None). Orphan checkpoints
        (no kept record) and stale temp files of this member are removed too."""
        if latest is None:
            latest = self.latest_records()
        # A fixed population counts a member without records at iteration 0; an elastic one ranks
        # (and keeps records for) only the members in ``latest``.
        indices = sorted(latest) if self._num_policies is None else range(self.num_policies)
        peers = [latest[i].iteration if i in latest else 0 for i in indices if i != self.policy_idx]
        names = self.store.list(self.own_key)
        # Ranked: own records that parse, up to the iteration this process last published (a planted,
        # foreign or future one is neither ranked nor deleted: it never pushes real records out).
        intact = self.intact_records(self.policy_idx, names, self.last_published)
        kept = iterations_to_keep(intact, peers, self.retention)
        doomed = [record_name(it) for it in intact if it not in kept]
        named = {intact[it].checkpoint for it in kept}  # a kept record's checkpoint is never deleted
        doomed += [checkpoint_name(it) for it in intact if it not in kept and checkpoint_name(it) not in named]
        # A checkpoint beside a record file that is not ranked (planted, foreign) is not an orphan.
        unranked = {iteration_of(n, RECORD_SUFFIX) for n in names} - set(intact)
        orphans = [
            n
            for n in names
            if iteration_of(n, CHECKPOINT_SUFFIX) not in (None, *kept, *unranked) and n not in doomed and n not in named
        ]
        for name in orphans:
            logger.info("removing orphan checkpoint %s (no record names it)", self.store.path(f"{self.own_key}/{name}"))
        removed: List[str] = []
        for name in removal_order(doomed + orphans, RECORD_SUFFIX):
            self.store.delete(f"{self.own_key}/{name}")
            removed.append(f"{self.own_key}/{name}")
        for key in (self.own_key, self.best_key):
            removed.extend(remove_stale_temps(self.store, key, self.retention.stale_tmp_seconds))
        if removed:
            logger.debug(
                "member %d cleanup removed %d files (kept %d records)", self.policy_idx, len(removed), len(kept)
            )
        return [self.located(key) for key in removed]
