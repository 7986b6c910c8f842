"""The learning rate an adaptive schedule moves, carried across PBT changes (no torch at import time).

rl_games' KL-adaptive schedule (``AdaptiveScheduler``, and TRPO's value schedule built on it) moves
``last_lr`` epoch by epoch, often far from the configured rate. A change (new weights, a mutation, a
restart) keeps that rate, scaled as the change scales the configured one, like the optimizer's
moments; the configured rate instead would cost the member the epochs the schedule needs to find it
again. PPO (:mod:`pbt.rl_games.a2c`) and TRPO (:mod:`pbt.rl_games.trpo.adapter`) share this base.
"""

from typing import Any, Dict, List, Mapping, Optional

from pbt.rl_games.agent import AgentAdapter, positive_number


def set_lr(algo: Any, value: Any) -> None:
    """Put ``value`` in force: rl_games resets the optimizer's lr from ``last_lr`` after every
    minibatch, so both are set."""
    algo.last_lr = float(value)
    algo.update_lr(float(value))


def param_groups(state: Mapping[str, Any]) -> List[Any]:
    """The optimizer's ``param_groups`` in checkpoint ``state``; [] where it has none (untrusted: a
    peer's checkpoint)."""
    optimizer = state.get("optimizer")
    groups = optimizer.get("param_groups") if isinstance(optimizer, Mapping) else None
    return groups if isinstance(groups, list) else []


class ScheduledRate(AgentAdapter):
    """An adapter whose agent keeps its learning rate in ``algo.last_lr`` and its optimizer, moved by
    ``algo.scheduler``: donor weights keep the member's rate, and changes carry the rate in force."""

    def load_weights(self, state: Mapping[str, Any]) -> None:
        # The donor's optimizer state carries the donor's lr: keep this member's own in force (the
        # exploiter then puts the rate the change carries, if any).
        super().load_weights(state)
        self.algo.update_lr(self.algo.last_lr)

    def adaptive_rate(self) -> bool:
        """Whether a KL-adaptive schedule (``AdaptiveScheduler`` or a subclass) moves the rate."""
        from rl_games.common.schedulers import AdaptiveScheduler

        return isinstance(getattr(self.algo, "scheduler", None), AdaptiveScheduler)

    def rate_in_force(self, state: Optional[Mapping[str, Any]] = None) -> Optional[float]:
        if not self.adaptive_rate():
            return None
        if state is None:
            return float(self.algo.last_lr)
        groups = param_groups(state)
        first = groups[0] if groups and isinstance(groups[0], Mapping) else {}
        return positive_number(first.get("lr"))

    def put_rate(self, rate: float) -> None:
        set_lr(self.algo, self.bounded_rate(rate))

    def write_rate(self, state: Dict[str, Any], rate: float) -> None:
        bounded = self.bounded_rate(rate)
        for group in param_groups(state):
            if isinstance(group, dict):
                group["lr"] = bounded

    def bounded_rate(self, rate: float) -> float:
        """``rate`` within the schedule's own bounds, as the schedule would keep it."""
        scheduler = self.algo.scheduler
        return min(max(float(rate), scheduler.min_lr), scheduler.max_lr)

    def restore_rate(self, state: Mapping[str, Any], configured: Optional[float]) -> None:
        """After a restore: the checkpoint's rate where the schedule had moved it (an exec restart
        wrote the carried rate there), else ``configured`` where the config gives one."""
        rate = self.rate_in_force(state)
        if rate is not None:
            self.put_rate(rate)
        elif configured is not None:
            set_lr(self.algo, configured)
