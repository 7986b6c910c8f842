"""One PBT member's life, without torch: start-up (resume or initial mutation), the PBT iteration
(decide: publish, scan, decide; the caller acts; record: lineage, best copy, retention) and the
restart plan. What it knows of its peers is :mod:`pbt.peers`; how it outlives a failed write,
:mod:`pbt.write_errors`.

The rl_games glue (:mod:`pbt.rl_games`) feeds it numbers and an opaque state dict; every byte on
disk goes through :class:`pbt.storage.Workspace`; every decision comes from
:func:`pbt.selection.decide`; the restart itself is :mod:`pbt.restart`.
"""

import contextlib
import dataclasses
import functools
import logging
import random
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence

from pbt.config import PbtConfig
from pbt.curriculum.member import curriculum_state, restore_stage, stage_decision
from pbt.curriculum.stages import Transition, furthest_stage, same_stage
from pbt.elastic import ElasticPopulation
from pbt.errors import ConfigError, CorruptRecordError, WorkspaceError
from pbt.iteration import Iteration, Outcome, RestartPlan
from pbt.keys import set_by_key
from pbt.mutation import checked_params, current_params, validate_scheme
from pbt.mutation.network import NetworkTracker, network_overrides, network_value, resume_network
from pbt.mutation.scheme import report_explore
from pbt.mutation.shaping import RewardShaping, guard_reward_shaping
from pbt.mutation.space import resolve_space, with_fixed_values
from pbt.pacing import fresh_donor, wait_for_iteration, waits_for_donor
from pbt.peers import DonorRefusals, PeerWatch
from pbt.restart import build_restart_argv, is_restarted
from pbt.selection import KEEP, MUTATE, REPLACE, Decision, MemberState, decide, initial_mutation
from pbt.selection.base import EffectPending
from pbt.selection.experience import ObjectiveHistory
from pbt.selection.pb2_data import IntervalHistory
from pbt.storage import LineageEntry, Record, Workspace
from pbt.storage.format import LOCK_FILE
from pbt.storage.lineage import INPLACE, STARTUP
from pbt.storage.liveness import STALE, MemberLiveness
from pbt.storage.record import Histories
from pbt.write_errors import LineageLog, outlive

log = logging.getLogger(__name__)

#: Where a member keeps the checkpoint it restarts from (inside its own run directory).
RESTART_CHECKPOINT = Path("pbt") / "restart_checkpoint.pth"


def resumed_params(configured: Mapping[str, Any], saved: Any, cfg: PbtConfig, source: str) -> Dict[str, Any]:
    """The configured hyperparameters with the saved ones that pass the scheme's (and search
    space's) check; a saved value that fails it (written by another version, or planted) is logged
    and not used."""
    explore = cfg.explore
    clean, problems = checked_params(saved, configured, explore.mutation, explore.bounds, explore.search_space)
    for problem in problems:
        log.warning(
            "PBT policy %d: not resuming a hyperparameter from %s: %s; using the configured value",
            cfg.policy_idx,
            source,
            problem,
        )
    return {key: clean.get(key, value) for key, value in configured.items()}


def pbt_seed(cfg: PbtConfig, run_seed: int, frame: int) -> int:
    """PBT's rng seed: ``pbt.seed`` or one derived from the run seed, the member and its frame count
    (deterministic for a given history; different after each restart)."""
    base = cfg.seed if cfg.seed is not None else run_seed
    return zlib.crc32(f"{base}:{cfg.policy_idx}:{frame}".encode()) & 0x7FFFFFFF


def startup_reason(
    cfg: PbtConfig, before: Mapping[str, Any], sample: Mapping[str, Any], params: Mapping[str, Any]
) -> str:
    """The lineage reason of a fresh member's start: ``sample`` is its initial mutation of ``before``,
    ``params`` that with the search space's fixed values."""
    if cfg.explore.search_space and sample != before:
        return "initial sample of the search space"
    return "fixed values of the search space" if params != sample else "initial mutation of a fresh member"


def interval_start(frame: int, interval_steps: int) -> int:
    """The first frame of the PBT interval holding ``frame``. The gates (start_after, ready_after)
    count from there: an iteration runs at the first epoch past each multiple of interval_steps,
    so a change made at one iteration (frame 53,248 of interval 10,000) may be followed by the next
    fewer than interval_steps frames later (61,440), and start_after = interval_steps would otherwise
    skip an extra iteration after every change."""
    return frame - frame % interval_steps


def configured_max_frames(cfg: Mapping[str, Any]) -> Optional[int]:
    """The agent's configured ``max_frames`` (None: not set, or not a count)."""
    try:
        value = cfg["train"]["params"]["config"].get("max_frames")
        return int(value) if value is not None and int(value) > 0 else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class PbtMember:
    """Start-up and per-iteration PBT logic of one member (policy_idx) of the population."""

    def __init__(
        self, cfg: Dict[str, Any], run_dir: Path, argv: Sequence[str], shaping: Optional[RewardShaping] = None
    ) -> None:
        self.cfg = cfg
        self.pbt = PbtConfig.from_mapping(cfg["pbt"])
        self.pbt.validate_population()
        explore = self.pbt.explore
        explore.search_space = resolve_space(explore.search_space, cfg)
        validate_scheme(explore.mutation, cfg, explore.bounds, explore.search_space)
        if shaping is not None:  # what the task declares about its reward
            guard_reward_shaping(explore, self.pbt.objective, shaping, self.pbt.allow_reward_shaping_mutation)
        self.run_dir = Path(run_dir)
        self.argv = list(argv)
        self.workspace = Workspace(self.pbt.workspace, self.pbt.policy_idx, self.pbt.population_size)
        self.elastic = ElasticPopulation(self.pbt) if self.pbt.elastic else None
        self.params: Dict[str, Any] = current_params(cfg, explore.mutation, explore.search_space)
        report_explore(self.params, explore, self.pbt.policy_idx)
        self.configured = dict(self.params)
        self.curriculum = curriculum_state(self.pbt, cfg, self.params)  # None: no pbt.curriculum
        self.network = NetworkTracker.from_config(self.pbt.explore.network_mutation, cfg)  # None: not evolved
        self.resume_record: Optional[Record] = None
        self.joined_from: Optional[Record] = None  # the donor of the checkpoint it joined from (cfg.checkpoint)
        self.start_frame = 0
        self.replaced_at_frame = 0
        self.last_iteration = -1
        self.best_interval_objective: Optional[float] = None
        self.history, self.intervals = ObjectiveHistory(), IntervalHistory()
        self.rng = random.Random(pbt_seed(self.pbt, int(cfg.get("seed", 0)), 0))
        self.liveness: Optional[MemberLiveness] = None
        self.peer_watch = PeerWatch(self.workspace, self.pbt.liveness.heartbeat_timeout)
        self.lineage = LineageLog(self.workspace, self.pbt.on_write_error)
        self.write_failing = False
        self.refusals = DonorRefusals(self.pbt.policy_idx)

    # -- start-up -----------------------------------------------------------------------------
    def startup(self) -> Dict[str, Any]:
        """Check the workspace is writable, lock this member's index (refusing if another live
        process holds it), resume from the workspace or mutate a fresh member once, and start the
        heartbeat; return the updated config."""
        self.workspace.probe_writable()
        self.liveness = MemberLiveness(
            self.workspace.store,
            self.workspace.own_key,
            self.pbt.policy_idx,
            self.pbt.liveness.heartbeat_interval,
            self.pbt.liveness.heartbeat_timeout,
        )
        self.liveness.acquire()
        try:
            if not is_restarted() and not self.cfg.get("checkpoint"):
                self._resume_or_start()
            elif not is_restarted():  # a fresh member from a checkpoint: its hyperparameters are the config's
                self.params = with_fixed_values(
                    self.pbt.explore.search_space, self.params, self.params, self.pbt.policy_idx
                )
            if self.curriculum is not None:  # its stage's task settings, before the task is built
                restore_stage(self.curriculum, self.workspace)
                self.apply_params(self.curriculum.overrides())
            self.liveness.start()
        except BaseException:
            self.liveness.release()
            raise
        self.apply_params({**self.params, **network_overrides(self.network)})  # the network too (maybe resumed)
        return self.cfg

    def _resume_or_start(self) -> None:
        idx, root = self.pbt.policy_idx, self.workspace.root
        if self.pbt.resume:
            record = self.workspace.latest_record(idx, verify=True)
            if record is not None:
                self.resume_record = record
                self.params = resumed_params(
                    self.params, record.params, self.pbt, f"its record of iteration {record.iteration}"
                )
                resume_network(self.network, record.network, f"its record of iteration {record.iteration}", idx)
                log.info(
                    "PBT policy %d resumes from its iteration %d (frame %d) in %s",
                    idx,
                    record.iteration,
                    record.frame,
                    root,
                )
                return
            if self.workspace.newest_iteration() is not None:
                raise ConfigError(
                    f"policy {idx} has records in {self.workspace.own_dir} but none is intact (every "
                    "checkpoint is missing or fails its checksum; the warnings above name them), so it "
                    "cannot resume. Start it over with pbt.resume=false pbt.overwrite=true (moves its "
                    "directory aside, deletes nothing), or restore the files."
                )
        elif self.workspace.has_own_files():
            if not self.pbt.overwrite:
                raise ConfigError(
                    f"pbt.resume=false but policy {idx} already has records in {root}. Continue it with "
                    "pbt.resume=true (the default), start it over with pbt.overwrite=true (moves its "
                    f"directory aside to {idx:03d}.old-<time>; nothing is deleted), or use another pbt.workspace."
                )
            moved = self.workspace.move_aside()
            assert self.liveness is not None
            self.liveness.acquire()  # the lock moved with the directory
            for old in moved:  # our own lock moved along with the directory: drop that copy
                if isinstance(old, Path) and (old / LOCK_FILE).exists():  # a directory workspace's file lock
                    (old / LOCK_FILE).unlink()
            log.warning(
                "PBT policy %d starts over (pbt.overwrite=true): its old files were moved to %s",
                idx,
                ", ".join(str(p) for p in moved),
            )
        if self.elastic is not None and self.pbt.join == "best" and self._join():
            return
        lineage = self.workspace.read_lineage() if self.pbt.resume else []
        if lineage:  # killed before its first record: keep the hyperparameters it started with
            self.params = resumed_params(self.params, lineage[-1].params_after, self.pbt, "its lineage")
            resume_network(self.network, lineage[-1].network, "its lineage", idx)
            log.info(
                "PBT policy %d has no record yet but a lineage: starting from frame 0 with its "
                "recorded hyperparameters",
                idx,
            )
            return
        before = dict(self.params)
        sample = initial_mutation(self.params, self.pbt, self.rng, restarted=is_restarted())
        self.params = with_fixed_values(self.pbt.explore.search_space, before, sample, self.pbt.policy_idx)
        reason = startup_reason(self.pbt, before, sample, self.params)
        self.append_lineage(self.entry(MUTATE, reason, 0, 0, before, self.params, mode=STARTUP))

    def _join(self) -> bool:
        """Join a running elastic population from its best member (:mod:`pbt.elastic`)."""
        assert self.elastic is not None
        joined = self.elastic.join(
            self.workspace,
            self.peer_watch.check(),
            self.params,
            self.run_dir,
            self.rng,
            configured_max_frames(self.cfg),
        )
        if joined is None:
            log.info("PBT policy %d: no live peer has an objective to join from; starting fresh", self.pbt.policy_idx)
            return False
        donor, path, params = joined
        self.joined_from = donor
        resume_network(self.network, donor.network, f"member {donor.policy_idx}'s record", self.pbt.policy_idx)
        before, self.params = self.params, params
        self.cfg["checkpoint"] = str(path)
        reason = (
            f"joined the running population from its best member {donor.policy_idx} (objective "
            f"{donor.objective:.4g} at iteration {donor.iteration}), hyperparameters mutated"
        )
        self.append_lineage(
            self.entry(REPLACE, reason, donor.iteration, donor.frame, before, params, mode=STARTUP), donor
        )
        log.info("PBT policy %d %s", self.pbt.policy_idx, reason)
        return True

    def refuse_donor(self, idx: int, why: str, checksum: Optional[str] = None) -> None:
        """Never take member ``idx``'s record (its checkpoint ``checksum``) as a donor (:class:`DonorRefusals`)."""
        self.refusals.refuse(idx, why, checksum)

    def heartbeat(self, frame: int) -> None:
        """Tell the heartbeat thread the frame count (called after every epoch; cheap)."""
        if self.liveness is not None:
            self.liveness.frame = int(frame)

    def lost_lock(self) -> Optional[str]:
        """Why this process no longer holds its member's lock (None while it does)."""
        return None if self.liveness is None else self.liveness.lost

    def close(self, state: Optional[str] = None) -> None:
        """Write the last heartbeat (``state``: finished, stopped, exited) and release the lock."""
        if self.liveness is not None:
            self.liveness.close(state)

    def apply_params(self, params: Mapping[str, Any]) -> None:
        for key, value in params.items():
            set_by_key(self.cfg, key, value)

    def started(self, frame: int) -> None:
        """Called once the agent is built and restored: the member's own frame count at start."""
        self.start_frame = int(frame)
        self.heartbeat(frame)
        self.replaced_at_frame = self.lineage.restore()
        if self.curriculum is not None:  # objectives before the stage began are of another task
            self.replaced_at_frame = max(self.replaced_at_frame, self.curriculum.since)
        self.last_iteration = self.start_frame // self.pbt.interval_steps
        own = self.workspace.latest_record(self.pbt.policy_idx, max_iteration=self.last_iteration)
        self.history = ObjectiveHistory.restored(own, self.replaced_at_frame, self.pbt.interval_steps)
        self.intervals = IntervalHistory.restored(own)
        self.rng = random.Random(pbt_seed(self.pbt, int(self.cfg.get("seed", 0)), self.start_frame))
        if self.elastic is not None:
            self.elastic.note_progress(self.start_frame)

    def exploited(self, frame: int, params: Mapping[str, Any], replaced: bool) -> None:
        """After an in-place exploit: new hyperparameters, frames counted anew (as after a restart), hysteresis forgotten."""
        self.params = dict(params)
        self.apply_params(self.params)
        self.start_frame = int(frame)
        if replaced:
            self.replaced_at_frame = int(frame)
            self.history.forget()
        self.best_interval_objective = None

    def enter_stage(self, transition: Transition) -> None:
        """The member moves on to the next curriculum stage: objectives measured before it are of
        another task, so they leave its history and its readiness counts from here."""
        assert self.curriculum is not None
        self.curriculum.enter(transition)
        self.replaced_at_frame = transition.frame
        self.history.forget()

    # -- the iteration ------------------------------------------------------------------------
    def due(self, frame: int) -> bool:
        return frame // self.pbt.interval_steps > self.last_iteration

    def observe(self, objective: Optional[float]) -> None:
        """Feed the objective after every epoch (the best one within an interval is the hysteresis)."""
        if objective is not None and (self.best_interval_objective is None or objective > self.best_interval_objective):
            self.best_interval_objective = objective

    @contextlib.contextmanager
    def iteration(
        self,
        frame: int,
        objective: Optional[float],
        state: Mapping[str, Any],
        episode_returns: Sequence[float],
        mixed: bool = False,
        effect_pending: EffectPending = None,
        stop: Optional[Callable[[], bool]] = None,
        training_returns: Sequence[float] = (),
    ) -> Iterator[Optional[Iteration]]:
        """Decide (publish, scan, decide), the scan kept open for the act and record steps run in the
        with-block (an object store lists once per iteration). None: the workspace could not be written
        (``pbt.on_write_error=retry``). A ``mixed`` objective (partly the old weights') stays out of the history.
        With ``stop``, a replace may wait for a donor that is behind, until ``stop()`` (:func:`fresher`)."""
        self.flush_lineage()
        iteration = self.last_iteration = frame // self.pbt.interval_steps
        try:
            own = self._publish(iteration, frame, objective, state, episode_returns, mixed, training_returns)
        except WorkspaceError as exc:
            outlive(self.pbt, exc, f"could not publish iteration {iteration}", self.last_iteration)
            self.write_failing = True
            yield None
            return
        if self.write_failing:
            self.write_failing = False
            log.info(
                "PBT policy %d: the workspace is writable again; published iteration %d", self.pbt.policy_idx, iteration
            )
        announce(self, iteration, frame, stop)
        with contextlib.ExitStack() as scan:
            scan.enter_context(self.workspace.store.scan(self.pbt.population_size))
            try:
                scanned = self._decide(own, objective, mixed, effect_pending)
            except WorkspaceError as exc:
                outlive(self.pbt, exc, f"could not read the population at iteration {iteration}", self.last_iteration)
                self.write_failing = True
                scanned = None
            if scanned is not None and stop is not None:
                scanned = fresher(self, scanned, iteration, stop, scan)
            yield scanned

    def _decide(self, own: Record, objective: Optional[float], mixed: bool, effect: EffectPending) -> Iteration:
        """Read the population (inside the scan) and decide (at ``own.frame``, the frame just published)."""
        peers = self.workspace.latest_records(max_iteration=own.iteration)
        peers[self.pbt.policy_idx] = own
        statuses = self.peer_watch.check()
        members = None
        if self.elastic is not None:
            self.elastic.note_progress(own.frame)
            members = self.elastic.members(peers, statuses).members
            peers = {i: r for i, r in peers.items() if i in members}
        ranked, best = peers, peers
        if self.curriculum is not None:  # only peers in its own stage compare (pbt.curriculum.stages)
            ranked = same_stage(peers, self.curriculum.stage)
            best = furthest_stage(peers, len(self.curriculum.stages) - 1)
        refused = self.refusals.now(ranked, {i for i, status in statuses.items() if status.state == STALE})
        since = own.frame - interval_start(self.start_frame, self.pbt.interval_steps)
        member = MemberState(own, self.best_interval_objective, since, effect)
        transition = None if self.curriculum is None else self.curriculum.check(own.frame, None if mixed else objective)
        if transition is not None:  # a stage entry: new task settings, no exploit, no network change
            assert self.curriculum is not None
            decision = stage_decision(self.curriculum, transition, self.params, self.configured, self.pbt, self.rng)
        else:
            decision = decide(
                member,
                list(ranked.values()),
                self.pbt,
                self.rng,
                refused_donors=refused,
                members=members,
                network=self.network,
            )
            for idx, why in decision.refused.items():
                self.refuse_donor(idx, why)
        self.best_interval_objective = None
        return Iteration(decision, own.frame, objective, time.time(), peers, best)

    def publish_now(
        self,
        frame: int,
        objective: Optional[float],
        state: Mapping[str, Any],
        episode_returns: Sequence[float],
        training_returns: Sequence[float] = (),
    ) -> Record:
        """Publish the current state as this iteration's record (before the process stops)."""
        record = self._publish(
            frame // self.pbt.interval_steps,
            frame,
            objective,
            state,
            episode_returns,
            training_returns=training_returns,
        )
        self.flush_lineage()
        return record

    def _publish(
        self,
        iteration: int,
        frame: int,
        objective: Optional[float],
        state: Mapping[str, Any],
        episode_returns: Sequence[float],
        mixed: bool = False,
        training_returns: Sequence[float] = (),
    ) -> Record:
        """Note both histories (a ``mixed`` objective stays out of them), then write the record."""
        self.history.note(iteration, None if mixed else objective)
        self.intervals.note(iteration, self.params, self.history.values)
        return self.workspace.save(
            iteration,
            frame,
            objective,
            self.params,
            state,
            episode_returns,
            frames_since_replace=frame - interval_start(self.replaced_at_frame, self.pbt.interval_steps),
            network=network_value(self.network),
            history=Histories(self.history.values, self.intervals.params, self.intervals.gains),
            stage=None if self.curriculum is None else (self.curriculum.stage, self.curriculum.since),
            evaluated=self.pbt.eval_episodes > 0,
            family=self.lineage.family,
            training_returns=training_returns,
        )

    def entry(
        self,
        action: str,
        reason: str,
        iteration: int,
        frame: int,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        **fields: Any,
    ) -> LineageEntry:
        """A lineage entry of this member (``fields``: the other :class:`LineageEntry` fields)."""
        return LineageEntry(
            self.pbt.policy_idx,
            iteration,
            frame,
            action,
            reason,
            **fields,
            params_before=dict(before),
            params_after=dict(after),
        )

    def append_lineage(self, entry: LineageEntry, donor: Optional[Record] = None) -> None:
        """Record one PBT event in this member's lineage, with the ``donor`` record it names, the time
        and the network in force (kept pending while the disk refuses it)."""
        now = time.time()
        self.lineage.append(
            dataclasses.replace(
                entry,
                donor=None if donor is None else donor.policy_idx,
                donor_iteration=None if donor is None else donor.iteration,
                donor_objective=None if donor is None else donor.objective,
                mode=entry.mode if entry.action != KEEP else None,
                time=now,
                decided_at=entry.decided_at or now,
                network=network_value(self.network),
                stage=None if self.curriculum is None else self.curriculum.stage,
                family=None if donor is None else donor.family,
            )
        )

    def record(self, it: Iteration, outcome: Outcome) -> None:
        """The record step: what the act step did (``outcome``) becomes this member's state and a lineage
        entry; then the best copy and retention, on the population the decision saw (``it``)."""
        decision = it.decision
        if outcome.refused is not None:
            self.refuse_donor(*outcome.refused)
        if outcome.network is not None and self.network is not None:
            self.network.spec = outcome.network.after
            self.network.parameters = outcome.parameters
        if outcome.mode == INPLACE:
            self.exploited(it.frame, outcome.params_after, replaced=outcome.action == REPLACE)
        planned = decision.network if outcome.action != KEEP else None  # said even where it changed nothing
        reason = outcome.reason if planned is None else f"{outcome.reason}; {planned.describe()}"
        entry = self.entry(
            outcome.action,
            reason,
            self.last_iteration,
            it.frame,
            decision.params_before,
            outcome.params_after,
            objective=it.objective,
            mode=outcome.mode,
            mode_reason=outcome.mode_reason,
            decided_at=it.decided_at,
        )
        self.append_lineage(entry, decision.donor if outcome.action == REPLACE else None)
        log.info(
            "PBT policy %d iteration %d: %s%s (%s)",
            self.pbt.policy_idx,
            self.last_iteration,
            outcome.action,
            f" [{outcome.mode}]" if outcome.mode else "",
            reason,
        )
        self.workspace.keep_population_best(it.best)
        try:
            self.workspace.cleanup(it.peers)
        except WorkspaceError as exc:
            outlive(self.pbt, exc, f"could not apply retention at iteration {self.last_iteration}", self.last_iteration)
            self.write_failing = True

    def flush_lineage(self) -> bool:
        """Append the pending lineage entries; True when nothing is pending."""
        return self.lineage.flush()


def announce(member: PbtMember, iteration: int, frame: int, stop: Optional[Callable[[], bool]]) -> None:
    """After publishing ``iteration``: heartbeat (pacing peers see the new frame now), and with
    ``pbt.synchronous`` wait until the peers still training published it too (not on the last epoch,
    ``stop`` None: nothing is acted on there)."""
    if member.liveness is not None and member.liveness.lost is None:
        member.liveness.beat(member.liveness.state)
    if stop is not None:
        read = functools.partial(member.workspace.latest_records, max_iteration=iteration)
        wait_for_iteration(member.pbt, iteration, frame, read, member.peer_watch.check, member.liveness, stop)


def fresher(
    member: PbtMember, it: Iteration, iteration: int, stop: Callable[[], bool], scan: contextlib.ExitStack
) -> Iteration:
    """``it`` whose replace takes the donor's newest checkpoint that continues the one ranked, after
    waiting for a donor that is behind (:func:`pbt.pacing.fresh_donor`, ``pbt.max_donor_lag``). Only
    then is the iteration's ``scan`` closed (its listing would hide the donor's new records) and a new
    one opened for the act and record steps: an iteration without a wait still lists once."""
    if not waits_for_donor(it.decision, iteration, member.pbt):
        return it
    scan.close()
    newest = functools.partial(member.workspace.latest_record, max_iteration=iteration)
    decision = fresh_donor(it.decision, iteration, newest, member.peer_watch.check, member.pbt, member.liveness, stop)
    scan.enter_context(member.workspace.store.scan(member.pbt.population_size))
    return it if decision is it.decision else dataclasses.replace(it, decision=decision)


def plan_restart(
    member: "PbtMember",
    decision: Decision,
    frame: int,
    epoch: int,
    edit: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Optional[RestartPlan]:
    """Copy the checkpoint ``member`` restarts from into its run dir (``edit``: the learner's change
    to the copy, see :meth:`Workspace.export_checkpoint`) and build the new argv.

    Returns None (and the member keeps training as it is) when the donor's checkpoint vanished
    or is damaged: peers delete old files at any time.
    """
    if decision.action == KEEP:
        return None
    dest = member.run_dir / RESTART_CHECKPOINT
    source = decision.donor if decision.action == REPLACE else None
    try:
        if source is None:
            own = member.workspace.latest_record(member.pbt.policy_idx, max_iteration=member.last_iteration)
            if own is None:
                raise CorruptRecordError(f"own record of iteration {member.last_iteration} is gone")
            source = own
        member.workspace.export_checkpoint(source, None, dest, frame=frame, epoch=epoch, edit=edit)
    except (CorruptRecordError, WorkspaceError) as exc:
        log.warning(
            "PBT policy %d: cannot restart from %s's checkpoint (%s); keeping current weights",
            member.pbt.policy_idx,
            "its own" if source is None else f"policy {source.policy_idx}",
            exc,
        )
        return None
    overrides: Dict[str, Any] = dict(decision.params_after)
    if decision.network is not None:  # the network it trains next
        overrides.update(decision.network.after.overrides())
    else:
        overrides.update(network_overrides(member.network))
    overrides["experiment"] = member.cfg["experiment"]
    return RestartPlan(dest, build_restart_argv(member.argv, overrides, str(dest)))
