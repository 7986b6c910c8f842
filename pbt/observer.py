"""The rl_games observer of a worker: restores its checkpoint safely, gathers its objective, and
(with PBT on) runs a PBT iteration every ``pbt.interval_steps`` frames at the end of an epoch, and
carries out the decision at once: in the running agent (``pbt.restart_mode=inplace``) or by
re-executing the process (``exec``)."""
import logging
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from rl_games.common.algo_observer import AlgoObserver

from pbt.checkpoint import load_state_file, model_fingerprint
from pbt.errors import ConfigError, CorruptRecordError, PbtError, WorkspaceError, did_you_mean
from pbt.inplace import SETTERS, apply_hyperparameters, changed, load_weights, rebuild_keys
from pbt.objective import ObjectiveTracker
from pbt.selection import KEEP, REPLACE, Decision
from pbt.tensorboard import PbtScalars, start_wandb
from pbt.vecenv import EPISODE_RETURN_KEY

log = logging.getLogger(__name__)

#: The objective key whose absence is fine: PBT then ranks by the mean episode return (documented).
DEFAULT_OBJECTIVE = "true_objective"


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


def nonfinite_tensors(state: Mapping[str, Any], limit: int = 3) -> List[str]:
    """Names of (up to ``limit``) floating tensors in a state_dict holding NaN or inf."""
    bad: List[str] = []
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad


class WorkerObserver(AlgoObserver):
    """Glue between rl_games' training loop and the project's modules."""

    def __init__(self, cfg: Dict[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg
        self.algo: Any = None
        self.tracker: Optional[ObjectiveTracker] = None
        self.returns: Optional[ObjectiveTracker] = None
        self.objective_key = str(cfg.get("pbt", {}).get("objective", "true_objective"))
        self.member: Any = None
        self.start_frame = 0
        self.first_step_pending = True
        self.decided_at = 0.0
        self.stop_signal: Optional[int] = None
        self.key_checked = False
        self.last_infos: Any = None

    def prepare(self) -> Dict[str, Any]:
        """Start-up work that may change the config before the task and agent are built."""
        if self.cfg.get("pbt", {}).get("enabled"):
            from pbt.member import PbtMember

            run_dir = Path(self.cfg["train_dir"]) / self.cfg["train"]["params"]["config"]["full_experiment_name"]
            self.member = PbtMember(self.cfg, run_dir, sys.argv[1:])
            self.cfg = self.member.startup()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.on_stop_signal)
        return self.cfg

    def on_stop_signal(self, signum: int, frame: Any) -> None:
        """SIGTERM (sent by the launcher and Slurm before SIGKILL): only note it here; the next env
        step or epoch end saves the state and exits (never in the middle of an update or a write)."""
        self.stop_signal = signum

    # -- rl_games hooks ---------------------------------------------------------------------------
    def before_init(self, base_name: str, config: Any, experiment_name: str) -> None:
        start_wandb(self.cfg)  # W&B (wandb_activate=true) must hook TensorBoard before rl_games' writer exists

    def after_init(self, algo: Any) -> None:
        self.algo = algo
        self.tracker = ObjectiveTracker(self.objective_key, int(algo.num_actors))
        self.returns = ObjectiveTracker(EPISODE_RETURN_KEY, int(algo.num_actors))
        checkpoint = str(self.cfg.get("checkpoint") or "")
        if checkpoint:
            self.restore(load_state_file(checkpoint), checkpoint)
        elif self.member is not None and self.member.resume_record is not None:
            record = self.member.resume_record
            self.restore(self.member.workspace.load_checkpoint(record), f"workspace iteration {record.iteration}")
        self.start_frame = int(algo.frame)
        if self.member is not None:
            self.member.started(self.start_frame)
        self.pbt_scalars = PbtScalars.for_member(algo.writer, self.member, self.start_frame)

    def restore(self, state: Dict[str, Any], source: str) -> None:
        """Load weights, optimizer, normalizers and frame count; then the configured learning rate
        (rl_games resets the optimizer's lr from ``last_lr`` after every minibatch)."""
        self.algo.set_full_state_weights(state, set_epoch=True)
        lr = float(self.cfg["train"]["params"]["config"]["learning_rate"])
        self.algo.last_lr = lr
        self.algo.update_lr(lr)
        log.info("restored %s (frame %d, epoch %d, lr %.6g, weights %s)", source, self.algo.frame, self.algo.epoch_num,
                 self.algo.optimizer.param_groups[0]["lr"], model_fingerprint(self.algo.model.state_dict())[:16])

    def process_infos(self, infos: Any, done_indices: torch.Tensor) -> None:
        if self.stop_signal is not None:
            self.stop_on_signal()
        if not self.key_checked:
            self.last_infos = infos
        if self.first_step_pending:
            # For benchmarks/exploit_latency.py: the wall time of the first env step taken with new
            # weights (after start, restart or in-place exploit); lineage entries carry decision times.
            self.first_step_pending = False
            log.info("first env step with current weights at t=%.6f (frame %d)", time.time(), self.algo.frame)
        if self.tracker is not None:
            done = done_indices.reshape(-1).tolist()
            self.tracker.update(infos, done)
            self.returns.update(infos, done)

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
        diverged = nonfinite_tensors(self.algo.model.state_dict())
        if diverged and self.member is None:
            raise PbtError(
                f"training diverged at frame {frame}: the agent's weights hold NaN/inf ({', '.join(diverged)}). "
                "Lower train.params.config.learning_rate, keep truncate_grads with a finite grad_norm, and check "
                "the task's observations and rewards for NaN/inf."
            )
        if self.member is None:
            return
        self.member.heartbeat(frame)
        lost = self.member.lost_lock()
        if lost is not None:
            raise WorkspaceError(f"{lost}. Stopping so that two processes never train one member.")
        self.check_objective_key()
        if diverged:
            # rl_games would crash in the next rollout (a NaN sigma): go back to finite weights now and
            # run a PBT iteration with objective NaN, so the member ranks last and is replaced.
            self.roll_back(frame, diverged)
            self.pbt_iteration(frame, math.nan)
        else:
            self.member.observe(objective)
            if self.member.due(frame):
                self.pbt_iteration(frame, objective, final=self.finishing(frame, epoch_num))
        if self.finishing(frame, epoch_num):
            from pbt.liveness import FINISHED

            self.member.liveness.final_state = FINISHED

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
        tracker = self.tracker
        if self.key_checked or tracker is None:
            return
        if tracker.seen or not tracker.ready:
            if tracker.seen:
                self.key_checked, self.last_infos = True, None
            return
        self.key_checked = True
        reported = info_keys(self.last_infos)
        self.last_infos = None
        if self.objective_key == DEFAULT_OBJECTIVE:
            log.info("the task does not report '%s' in its infos: PBT ranks members by their mean episode "
                     "return (keys reported: %s)", DEFAULT_OBJECTIVE, ", ".join(reported) or "none")
            return
        raise ConfigError(
            f"pbt.objective='{self.objective_key}' was never reported by the task: every env finished two "
            f"episodes and their infos had no such key.{did_you_mean(self.objective_key, reported)} The task "
            f"reports: {', '.join(reported) or 'no keys at all'}. Set pbt.objective to one of them, or to "
            f"{DEFAULT_OBJECTIVE} (the default), which ranks by the mean episode return when the task does "
            "not report it."
        )

    def roll_back(self, frame: int, diverged: List[str]) -> None:
        """Load the newest checkpoint with finite weights (own records first, then the population
        best) into the agent, keeping its frame count; raise PbtError when there is none."""
        member = self.member
        log.warning("PBT policy %d: training diverged at frame %d: the weights hold NaN/inf (%s). Rolling back to "
                    "the newest checkpoint with finite weights.", member.pbt.policy_idx, frame, ", ".join(diverged))
        for record in member.rollback_candidates():
            try:
                state = member.workspace.load_checkpoint(record)
            except CorruptRecordError as exc:
                log.warning("PBT policy %d: cannot roll back to %s: %s", member.pbt.policy_idx, record.checkpoint, exc)
                continue
            if not isinstance(state.get("model"), Mapping) or nonfinite_tensors(state["model"]):
                continue
            load_weights(self.algo, state)
            self.algo.update_lr(self.algo.last_lr)
            if self.tracker is not None:
                self.tracker.reset()
                self.returns.reset()
            source = "its own" if record.policy_idx == member.pbt.policy_idx else f"member {record.policy_idx}'s"
            reason = (f"diverged (NaN/inf in {', '.join(diverged)}): rolled back to {source} iteration "
                      f"{record.iteration} (frame {record.frame})")
            member.append_lineage("rollback", record, reason, member.params, member.params, frame=frame,
                                  iteration=member.last_iteration, objective=math.nan, mode="inplace")
            log.warning("PBT policy %d: %s", member.pbt.policy_idx, reason)
            return
        raise PbtError(
            f"PBT policy {member.pbt.policy_idx}: training diverged at frame {frame} (NaN/inf in "
            f"{', '.join(diverged)}) and no checkpoint with finite weights exists to go back to. Lower "
            "train.params.config.learning_rate, keep truncate_grads with a finite grad_norm, and check the "
            "task's observations and rewards for NaN/inf."
        )

    def publishable_objective(self, objective: Optional[float]) -> Optional[float]:
        """The objective to publish: NaN when the agent's weights hold NaN/inf (the member diverged),
        so it ranks last, is replaced from a leader and is never a donor."""
        bad = nonfinite_tensors(self.algo.model.state_dict())
        if bad:
            log.warning("PBT policy %d: the weights hold NaN/inf (%s): training diverged. Publishing objective "
                        "NaN so that the member ranks last and is replaced from a leader.",
                        self.member.pbt.policy_idx, ", ".join(bad))
            return math.nan
        return objective

    def stop_on_signal(self) -> None:
        """Publish the current state as a record (PBT on), write the last heartbeat, release the
        member's lock, flush TensorBoard and exit with 128 + the signal number."""
        signum = int(self.stop_signal or signal.SIGTERM)
        name = signal.Signals(signum).name
        if self.member is not None and self.algo is not None:
            from pbt.liveness import STOPPED

            frame = int(self.algo.frame)
            self.member.heartbeat(frame)
            try:
                scoring = self.scoring()
                recent = list(scoring.recent) if scoring is not None else []
                record = self.member.save_now(frame, self.publishable_objective(self.objective()),
                                              self.algo.get_full_state_weights(), recent)
                log.info("%s: saved the current state as iteration %d (frame %d) in %s; exiting", name,
                         record.iteration, frame, self.member.workspace.own_dir)
            except WorkspaceError as exc:
                log.error("%s: could not save the current state (%s); the member will resume from its previous "
                          "record", name, exc)
            self.member.close(STOPPED)
        else:
            log.info("%s: exiting", name)
        self.flush_writer()
        raise SystemExit(128 + signum)

    # -- PBT ----------------------------------------------------------------------------------------
    def pbt_iteration(self, frame: int, objective: Optional[float], final: bool = False) -> None:
        """Publish, decide and act. On the last epoch (``final``) the decision is logged but not
        acted on: an exploit then would leave the member nothing to train with (measured: an
        in-place replace on the last epoch reset the score buffers and the run ended without a
        result)."""
        member = self.member
        scoring = self.scoring()
        recent = list(scoring.recent) if scoring is not None else []
        objective = self.publishable_objective(objective)
        decision = member.try_iterate(frame, objective, self.algo.get_full_state_weights(), recent)
        if decision is None:  # the workspace could not be written; pbt.on_write_error=retry
            return
        self.decided_at = time.time()
        if decision.action == KEEP:
            self.log_decision(decision.action, decision, decision.reason, frame, objective)
            return
        if final:
            self.log_decision(KEEP, decision, f"{decision.reason}; not acted on: training ends this epoch", frame,
                              objective)
            return
        mode, why = self.restart_mode(decision)
        if mode == "inplace":
            self.exploit_inplace(decision, frame, objective)
            return
        plan = member.plan_restart(decision, frame, int(self.algo.epoch_num))
        if plan is None:
            self.log_decision(KEEP, decision, decision.reason + "; donor checkpoint unavailable, kept weights",
                              frame, objective)
            return
        self.log_decision(decision.action, decision, decision.reason, frame, objective, "exec", why)
        from pbt.restart import exec_restart

        if self.stop_signal is not None:
            log.warning("stop signal received: not restarting into the new weights")
            self.stop_on_signal()
        exec_restart(plan.argv, before_exec=[self.flush_writer, member.liveness.stop_thread])

    def restart_mode(self, decision: Decision) -> Tuple[str, str]:
        """("inplace" | "exec", why) for carrying out ``decision``."""
        if self.member.pbt.restart_mode == "exec":
            return "exec", "pbt.restart_mode=exec"
        needs_rebuild = rebuild_keys(changed(self.member.params, decision.params_after))
        if needs_rebuild:
            return "exec", f"{', '.join(needs_rebuild)} cannot change in a running agent"
        return "inplace", ""

    def exploit_inplace(self, decision: Decision, frame: int, objective: Optional[float]) -> None:
        """Load the donor's weights (replace) and the new hyperparameters into the running agent."""
        member = self.member
        start = time.perf_counter()
        if decision.action == REPLACE:
            try:
                state = member.workspace.load_checkpoint(decision.donor)
            except (CorruptRecordError, WorkspaceError) as exc:
                log.warning("PBT policy %d: donor checkpoint unavailable (%s); keeping own weights",
                            member.pbt.policy_idx, exc)
                self.log_decision(KEEP, decision, decision.reason + "; donor checkpoint unavailable, kept weights",
                                  frame, objective)
                return
            load_weights(self.algo, state)
        # All of them, changed or not, as a restart would: e.g. the learning rate restarts from its
        # configured value even where an adaptive schedule had moved it.
        apply_hyperparameters(self.algo, {k: v for k, v in decision.params_after.items() if k in SETTERS})
        self.algo.update_lr(self.algo.last_lr)  # a loaded optimizer state carries the donor's lr
        member.exploited(frame, decision.params_after, replaced=decision.action == REPLACE)
        if self.tracker is not None:
            self.tracker.reset()
            self.returns.reset()
        self.first_step_pending = True
        elapsed_ms = (time.perf_counter() - start) * 1000
        self.log_decision(decision.action, decision, decision.reason, frame, objective, "inplace", "")
        log.info("exploited in place in %.1f ms (frame %d, epoch %d, lr %.6g, weights %s)", elapsed_ms,
                 self.algo.frame, self.algo.epoch_num, self.algo.optimizer.param_groups[0]["lr"],
                 model_fingerprint(self.algo.model.state_dict())[:16])

    def log_decision(self, action: str, decision: Decision, reason: str, frame: int, objective: Optional[float],
                     mode: Optional[str] = None, mode_reason: str = "") -> None:
        member = self.member
        after = decision.params_after if action != KEEP else decision.params_before
        member.append_lineage(action, decision.donor if action == REPLACE else None, reason, decision.params_before,
                              after, frame=frame, iteration=member.last_iteration, objective=objective, mode=mode,
                              mode_reason=mode_reason, decided_at=self.decided_at)
        log.info("PBT policy %d iteration %d: %s%s (%s)", member.pbt.policy_idx, member.last_iteration, action,
                 f" [{mode}]" if mode else "", reason)
        if getattr(self, "pbt_scalars", None) is not None:
            self.pbt_scalars.log_member(frame, member)

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

    def scoring(self) -> Optional[ObjectiveTracker]:
        """The tracker PBT ranks by: the env's objective key when it reports it, else episode returns."""
        if self.tracker is None:
            return None
        return self.tracker if self.tracker.seen else self.returns

    def objective(self) -> Optional[float]:
        """The objective: the env's key when it reports one, else the mean episode return (both over
        each env's last finished episode, known once every env finished two episodes)."""
        scoring = self.scoring()
        return None if scoring is None else scoring.value

    def summary(self, wall_time: float) -> "Any":
        from pbt.worker import RunSummary

        objective = self.tracker.value if self.tracker is not None and self.tracker.seen else None
        return RunSummary(frames=int(self.algo.frame), wall_time=wall_time, mean_reward=self.mean_reward(),
                          objective=objective, start_frame=self.start_frame)
