"""The rl_games observer of a worker: rl_games' hooks and the stop signal.

It restores the worker's checkpoint, gathers its objective from the env's infos and (with PBT on)
runs a PBT iteration every ``pbt.interval_steps`` frames at the end of an epoch; the member
(:class:`pbt.member.PbtMember`) decides and :class:`pbt.rl_games.exploit.Exploiter` carries the
decision out. Which hook fires when: docs/rl_games.md.
"""

import logging
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from rl_games.common.algo_observer import AlgoObserver

from pbt.devices import global_rank
from pbt.errors import ConfigError, PbtError, WorkspaceError, did_you_mean
from pbt.iteration import Outcome
from pbt.member import PbtMember
from pbt.objective import TRAINER_STATISTICS, MemberObjective, objective_choices
from pbt.pacing import wait_for_peers
from pbt.rl_games.agent import AgentAdapter
from pbt.rl_games.evaluation import Evaluator, evaluations_of, read_carried
from pbt.rl_games.exploit import DIVERGED_HELP, Exploiter, changes_task
from pbt.rl_games.registry import adapter_class, algo_name, make_adapter
from pbt.rl_games.tensorboard import PbtScalars, start_wandb
from pbt.rl_games.vecenv import EPISODE_RETURN_KEY
from pbt.storage.checkpoints import load_state_file
from pbt.storage.lineage import INPLACE

log = logging.getLogger(__name__)

#: The objective key whose absence is fine: PBT then ranks by the mean episode return (documented).
DEFAULT_OBJECTIVE = "true_objective"
#: The trainer statistic taken from the agent (``episode_return`` is added to the infos by vecenv).
EPISODE_LENGTH_KEY = "episode_length"


def short_interval_warning(interval_steps: int, epoch_frames: int) -> Optional[str]:
    """What to tell a user whose ``pbt.interval_steps`` is shorter than one epoch, or None: an
    iteration runs at the end of an epoch, so such a member decides once per epoch, not once per
    interval, and its iteration numbers skip."""
    if epoch_frames <= 0 or interval_steps >= epoch_frames:
        return None
    return (
        f"pbt.interval_steps={interval_steps} is shorter than one epoch ({epoch_frames} frames: num_envs x "
        f"horizon_length): PBT runs once per epoch, not every {interval_steps} frames, and iteration numbers "
        f"skip. Set pbt.interval_steps to {epoch_frames} or a multiple of it for one iteration per interval"
    )


def info_keys(infos: Any, prefix: str = "") -> List[str]:
    """Dotted keys of an infos dict (nested mappings flattened), for error messages."""
    if not isinstance(infos, Mapping):
        return []
    keys: List[str] = []
    for key, value in infos.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            keys.extend(info_keys(value, full + "."))
        else:
            keys.append(full)
    return sorted(keys)


def _follower_rank(cfg: Dict[str, Any]) -> bool:
    """This process is rank > 0 of a multi-process (``multi_gpu``, torchrun) PBT member. ConfigError,
    on every rank before anything is built, when such a member cannot be kept in step (only rank 0
    runs PBT): a learner that does not follow rank 0 (PPO: rl_games' collectives would pair across
    ranks doing different things and hang), or anything that would rebuild or restart it."""
    if not cfg.get("train", {}).get("params", {}).get("config", {}).get("multi_gpu", False):
        return False
    name = algo_name(cfg)
    adapter = adapter_class(name)
    if not adapter.follows_rank0:
        raise ConfigError(
            f"PBT with a multi-process member (train.params.config.multi_gpu=True) needs a learner that keeps "
            f"its ranks in step with rank 0, the only rank running PBT; {name} does not: rl_games' collectives "
            "would pair across ranks doing different things (a hang until the NCCL timeout), and the other ranks "
            "would never take donor weights or mutated hyperparameters. Give each member one GPU instead "
            "(multi_gpu=False; python -m launcher.run spreads members over the GPUs), or use "
            "train.params.algo.name=trpo (train=<task>TRPO), which follows rank 0."
        )
    from pbt.config import PbtConfig

    explore = PbtConfig.from_mapping(cfg["pbt"]).explore
    inplace = set(adapter.inplace_keys())
    keys = set(explore.mutation) | set(explore.search_space.dims)
    restart = sorted(k for k in keys if k not in inplace)
    if explore.network_mutation is not None:
        restart.append("pbt.network_mutation (rank 0 alone would change its architecture)")
    if cfg["pbt"].get("curriculum"):
        restart.append("pbt.curriculum (rank 0 alone would change its task)")
    if restart or cfg["pbt"].get("restart_mode") == "exec":
        raise ConfigError(
            f"a multi-process member (multi_gpu=True) can only change hyperparameters in place, but "
            f"{', '.join(restart) or 'pbt.restart_mode=exec'} would rebuild or restart it. Mutate and "
            f"search only in-place keys ({', '.join(sorted(inplace))}) with pbt.restart_mode=inplace "
            "and no network mutation (pbt/mutation=default)."
        )
    return global_rank() > 0


class WorkerObserver(AlgoObserver):
    """Glue between rl_games' training loop and the project's modules."""

    def __init__(self, cfg: Dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        self.algo: Any = None
        self.agent: Optional[AgentAdapter] = None
        self.score: Optional[MemberObjective] = None
        self.evaluator: Optional[Evaluator] = None
        self.exploiter: Optional[Exploiter] = None
        self.objective_key = str(cfg.get("pbt", {}).get("objective", DEFAULT_OBJECTIVE))
        self.member: Optional[PbtMember] = None
        self.start_frame = 0
        self.first_step_pending = True
        self.stop_signal: Optional[int] = None
        self.key_checked = False
        self.last_infos: Any = None

    def prepare(self) -> Dict[str, Any]:
        """Start-up work that may change the config before the task and agent are built."""
        if self.cfg.get("pbt", {}).get("curriculum") and not self.cfg["pbt"].get("enabled"):
            raise ConfigError(
                "pbt.curriculum is set but PBT is off (pbt=no_pbt): the PBT member is what moves a run through "
                "the stages. Use pbt=pbt_default (with pbt.start_after beyond max_frames for a population that "
                "never exploits), or drop pbt/curriculum."
            )
        if self.cfg.get("pbt", {}).get("enabled") and _follower_rank(self.cfg):
            # A multi-process member: rank 0 runs PBT and writes; its decisions reach this rank through
            # the learner (pbt/rl_games/trpo/spmd.py).
            log.info("rank %s of a multi-process member: PBT runs on rank 0", os.environ.get("RANK"))
            self.cfg["pbt"]["enabled"] = False
        if self.cfg.get("pbt", {}).get("enabled"):
            from pbt.member import PbtMember
            from pbt.tasks.registry import reward_shaping, task_ref_of

            run_dir = Path(self.cfg["train_dir"]) / self.cfg["train"]["params"]["config"]["full_experiment_name"]
            shaping = reward_shaping(task_ref_of(self.cfg["task"]))
            self.member = PbtMember(self.cfg, run_dir, sys.argv[1:], shaping=shaping)
            self.cfg = self.member.startup()
        return self.cfg

    def on_stop_signal(self, signum: int, frame: Any) -> None:
        """SIGTERM (sent by the launcher and Slurm before SIGKILL; :func:`pbt.rl_games.runner.run`
        installs this handler for its one member): only note it here; the next env step or epoch end
        saves the state and exits (never in the middle of an update or a write)."""
        self.stop_signal = signum

    # -- rl_games hooks ---------------------------------------------------------------------------
    def before_init(self, base_name: str, config: Any, experiment_name: str) -> None:
        start_wandb(self.cfg)  # W&B (wandb_activate=true) must hook TensorBoard before rl_games' writer exists

    def after_init(self, algo: Any) -> None:
        self.algo = algo
        self.agent = agent = make_adapter(algo, algo_name(self.cfg))
        self.score = MemberObjective(self.objective_key, EPISODE_RETURN_KEY, int(algo.num_actors))
        checkpoint = str(self.cfg.get("checkpoint") or "")
        carried: List[float] = []  # the evaluation episodes that played the weights restored
        if checkpoint:
            carried = self.restore_checkpoint(agent, checkpoint)
        elif self.member is not None and self.member.resume_record is not None:
            record = self.member.resume_record
            self.restore(
                agent, self.member.workspace.load_checkpoint(record), f"workspace iteration {record.iteration}"
            )
            carried = evaluations_of(record)  # published with the weights it resumes
        self.start_frame = int(algo.frame)
        if self.member is not None and self.member.network is not None:
            from pbt.rl_games.surgery import parameter_count

            self.member.network.parameters = parameter_count(algo.model)
        if self.member is not None:
            epoch_frames = int(getattr(algo, "batch_size_envs", 0) or 0) * int(getattr(algo, "world_size", 1) or 1)
            warning = short_interval_warning(self.member.pbt.interval_steps, epoch_frames)
            if warning:
                log.warning(warning)
            self.member.started(self.start_frame)
            scalars = PbtScalars.for_member(algo.writer, self.member, self.start_frame)
            live = getattr(getattr(algo.vec_env, "task", None), "live_setters", None)
            episodes = self.member.pbt.eval_episodes
            if episodes > 0:  # rank by a deterministic evaluation in a second task instance
                self.evaluator = Evaluator.build(algo, self.cfg, episodes, self.member.pbt.eval_window)
                # A restarted, resumed or joining member's window starts from them, as an in-place copy's.
                self.evaluator.objective.reset(carried=carried)
            ranked = self.score if self.evaluator is None else self.evaluator.objective
            self.exploiter = Exploiter(
                self.member,
                agent,
                ranked,
                scalars,
                task_setters=live() if live else None,
                stop=lambda: self.stop_signal is not None,
                training=None if self.evaluator is None else self.score,
            )

    def restore_checkpoint(self, agent: AgentAdapter, checkpoint: str) -> List[float]:
        """Restore ``checkpoint=`` (ConfigError when it does not fit); a joiner whose donor's
        checkpoint does not fit trains fresh instead, the donor refused, rather than die at every start.
        Returns the evaluation episodes that played the restored weights: those an exec restart's
        copy carries, or a joiner's donor's published ones (none when the joiner trains another task)."""
        state = load_state_file(checkpoint)
        member = self.member
        donor = None if member is None else member.joined_from
        problem = agent.state_problem(state, counts=True) if donor is not None else None
        if member is None or donor is None or problem is None:  # only a joiner's checkpoint is checked
            self.restore(agent, state, checkpoint)
            if member is None or donor is None:
                return read_carried(state)
            return [] if changes_task(member.params, donor.params) else evaluations_of(donor)
        log.warning(
            "member %d's checkpoint %s does not fit this agent (%s); this joiner starts fresh from frame 0",
            donor.policy_idx,
            checkpoint,
            problem,
        )
        member.refuse_donor(donor.policy_idx, f"its checkpoint does not fit this agent ({problem})", donor.checksum)
        return []

    def restore(self, agent: AgentAdapter, state: Dict[str, Any], source: str) -> None:
        """Load weights, optimizer, normalizers and frame count; then the configured hyperparameters."""
        agent.restore(state, self.cfg["train"]["params"]["config"])
        log.info("restored %s (%s)", source, agent.describe())

    def new_weights(self) -> None:
        """The next env step is the first with new weights (logged for benchmarks/exploit_latency.py)."""
        self.first_step_pending = True

    def process_infos(self, infos: Any, done_indices: Any) -> None:
        if self.stop_signal is not None:
            self.stop_on_signal()
        if not self.key_checked:
            self.last_infos = infos
        if self.first_step_pending:
            # The wall time of the first env step taken with new weights (after start, restart or
            # in-place exploit); lineage entries carry decision times.
            self.first_step_pending = False
            log.info("first env step with current weights at t=%.6f (frame %d)", time.time(), self.algo.frame)
        if self.score is not None:
            if self.objective_key == EPISODE_LENGTH_KEY and isinstance(infos, Mapping):
                # rl_games has not zeroed the finished episodes' lengths yet when it calls this hook
                infos = dict(infos, **{EPISODE_LENGTH_KEY: self.algo.current_lengths})
            self.score.update(infos, done_indices)  # a tensor: kept on its device until read (once per epoch)

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        """End of an epoch (rollout and update done): log, and run a PBT iteration when one is due.

        Acting here rather than in ``after_steps`` (where DexPBT acts, before the update) means the
        published checkpoint carries this epoch's update, no collected rollout is thrown away, and
        an in-place exploit takes effect before the next rollout: PPO never updates the donor's
        weights with data collected by another policy.
        """
        objective = self.objective()
        frame = int(self.algo.frame)
        if objective is not None and self.algo.writer is not None:
            self.algo.writer.add_scalar("pbt/objective", objective, frame)
        if self.stop_signal is not None:
            self.stop_on_signal()
        if self.agent is None:  # no agent yet: rl_games calls after_init first
            return
        diverged = self.agent.nonfinite_weights()
        if diverged and self.member is None:
            raise PbtError(
                f"training diverged at frame {frame}: the agent's weights hold NaN/inf "
                f"({', '.join(diverged)}). {DIVERGED_HELP}"
            )
        if self.member is None or self.exploiter is None:
            return
        self.member.heartbeat(frame)
        lost = self.member.lost_lock()
        if lost is not None:
            raise WorkspaceError(f"{lost}. Stopping so that two processes never train one member.")
        self.check_objective_key()
        if diverged:
            # rl_games would crash in the next rollout (a NaN sigma): go back to finite weights now and
            # run a PBT iteration with objective NaN, so the member ranks last and is replaced.
            self.exploiter.roll_back(frame, diverged)
            self.carry_out(self.exploiter.iterate(frame, math.nan))
        else:
            if self.evaluator is not None:  # only an iteration's evaluation is ranked
                objective = self.evaluator.evaluate() if self.member.due(frame) else None
            self.member.observe(objective)
            if self.member.due(frame):
                final = self.finishing(frame, epoch_num)
                self.carry_out(self.exploiter.iterate(frame, objective, final=final))
                if not final:  # pacing: far ahead of the slowest peer, wait for its evidence
                    wait_for_peers(
                        self.member.pbt,
                        frame,
                        self.member.peer_watch.check,
                        self.member.liveness,
                        lambda: self.stop_signal is not None,
                    )
                    if self.stop_signal is not None:
                        self.stop_on_signal()
        if self.finishing(frame, epoch_num):
            from pbt.storage.liveness import FINISHED

            if self.member.liveness is not None:  # set by startup
                self.member.liveness.final_state = FINISHED
            if self.evaluator is not None and self.evaluator.objective.value is None:
                self.evaluator.evaluate()  # new weights since the last iteration: the SUMMARY scores these

    def carry_out(self, outcome: Optional[Outcome]) -> None:
        """The end of an iteration that acted: the next env step is the first with new weights (in
        place), or the process re-executes into the exec plan (a stop signal wins: save and exit)."""
        if outcome is None:
            return
        if outcome.mode == INPLACE:
            self.new_weights()
        if outcome.restart is not None and self.member is not None:
            from pbt.restart import exec_restart

            liveness = self.member.liveness
            stop_heartbeat = [liveness.stop_thread] if liveness is not None else []
            exec_restart(outcome.restart.argv, before_exec=[self.stop_if_signalled, self.flush_writer, *stop_heartbeat])

    def finishing(self, frame: int, epoch_num: int) -> bool:
        """True at the last epoch (rl_games stops right after this hook)."""
        max_frames = int(getattr(self.algo, "max_frames", -1))
        max_epochs = int(getattr(self.algo, "max_epochs", -1))
        return (max_frames != -1 and frame >= max_frames) or (max_epochs != -1 and epoch_num >= max_epochs)

    # -- reliability ----------------------------------------------------------------------------------
    def check_objective_key(self) -> None:
        """Once every env finished two episodes, fail if ``pbt.objective`` was never in the infos.

        The default key ``true_objective`` may be absent: PBT then ranks members by their mean
        episode return (the documented fallback). Any other key is a request the task cannot meet:
        a misspelt key would otherwise rank the population on returns without anyone noticing.
        """
        tracker = self.score.reported if self.score is not None else None
        if self.key_checked or tracker is None:
            return
        if tracker.seen or not tracker.settled:
            if tracker.seen:
                self.key_checked, self.last_infos = True, None
            return
        self.key_checked = True
        reported = info_keys(self.last_infos)
        self.last_infos = None
        if self.objective_key == DEFAULT_OBJECTIVE:
            log.info(
                "the task does not report '%s' in its infos: PBT ranks members by their mean episode "
                "return (keys reported: %s)",
                DEFAULT_OBJECTIVE,
                ", ".join(reported) or "none",
            )
            return
        names = sorted(set(reported) | set(TRAINER_STATISTICS))
        raise ConfigError(
            f"pbt.objective='{self.objective_key}' is neither a trainer statistic nor reported by the task: "
            f"every env finished two episodes and their infos had no such key.{did_you_mean(self.objective_key, names)} "
            f"pbt.objective may name {objective_choices(reported)}. Or use {DEFAULT_OBJECTIVE} (the default), "
            "which ranks by the mean episode return when the task does not report it."
        )

    def stop_if_signalled(self) -> None:
        """Before an exec restart: a stop signal wins (save, release and exit instead)."""
        if self.stop_signal is not None:
            log.warning("stop signal received: not restarting into the new weights")
            self.stop_on_signal()

    def stop_on_signal(self) -> None:
        """Publish the current state as a record (PBT on), write the last heartbeat, release the
        member's lock, flush TensorBoard and exit with 128 + the signal number."""
        signum = int(self.stop_signal or signal.SIGTERM)
        name = signal.Signals(signum).name
        if self.member is not None and self.algo is not None:
            from pbt.storage.liveness import STOPPED

            frame = int(self.algo.frame)
            self.member.heartbeat(frame)
            if self.exploiter is not None:
                self.exploiter.publish_before_stop(frame, name)
            self.member.close(STOPPED)
        else:
            log.info("%s: exiting", name)
        self.flush_writer()
        raise SystemExit(128 + signum)

    def flush_writer(self) -> None:
        writer = getattr(self.algo, "writer", None)
        if writer is not None:
            writer.flush()
            writer.close()

    # -- results ----------------------------------------------------------------------------------
    def mean_reward(self) -> float:
        meter = self.algo.game_rewards
        if meter.current_size == 0:
            return math.nan
        return float(meter.get_mean()[0])

    def objective(self) -> Optional[float]:
        """The objective PBT ranks by: the env's key when it reports one, else the mean episode
        return (both over each env's last counted episode: :mod:`pbt.objective`); with
        ``pbt.eval_episodes``, the last evaluation's."""
        if self.evaluator is not None:
            return self.evaluator.objective.value
        return None if self.score is None else self.score.value
