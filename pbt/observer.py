"""The rl_games observer of a worker: restores its checkpoint safely, gathers its objective, and
(with PBT on) runs a PBT iteration every ``pbt.interval_steps`` frames at the end of an epoch, and
carries out the decision at once: in the running agent (``pbt.restart_mode=inplace``) or by
re-executing the process (``exec``)."""
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from rl_games.common.algo_observer import AlgoObserver

from pbt.checkpoint import load_state_file, model_fingerprint
from pbt.errors import CorruptRecordError, WorkspaceError
from pbt.inplace import SETTERS, apply_hyperparameters, changed, load_weights, rebuild_keys
from pbt.objective import ObjectiveTracker
from pbt.selection import KEEP, REPLACE, Decision
from pbt.vecenv import EPISODE_RETURN_KEY

log = logging.getLogger(__name__)


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

    def prepare(self) -> Dict[str, Any]:
        """Start-up work that may change the config before the task and agent are built."""
        if self.cfg.get("pbt", {}).get("enabled"):
            from pbt.member import PbtMember

            run_dir = Path(self.cfg["train_dir"]) / self.cfg["train"]["params"]["config"]["full_experiment_name"]
            self.member = PbtMember(self.cfg, run_dir, sys.argv[1:])
            self.cfg = self.member.startup()
        return self.cfg

    # -- rl_games hooks ---------------------------------------------------------------------------
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
        if self.member is None:
            return
        self.member.observe(objective)
        if self.member.due(frame):
            self.pbt_iteration(frame, objective)

    # -- PBT ----------------------------------------------------------------------------------------
    def pbt_iteration(self, frame: int, objective: Optional[float]) -> None:
        member = self.member
        scoring = self.scoring()
        recent = list(scoring.recent) if scoring is not None else []
        decision = member.iterate(frame, objective, self.algo.get_full_state_weights(), recent)
        self.decided_at = time.time()
        if decision.action == KEEP:
            self.log_decision(decision.action, decision, decision.reason, frame, objective)
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

        exec_restart(plan.argv, before_exec=[self.flush_writer])

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
