"""The TRPO value function's learning-rate scheduler (``learning_rate_scheduler`` with its
``learning_rate_scheduler_kwargs``), as rl_games schedulers: ``update(lr, entropy_coef, epoch,
frames, kl_dist) -> (lr, entropy_coef)``, called once per value epoch (skrl steps it there too) with
the KL of the update's policy step."""

from typing import Any

from rl_games.common import schedulers

from pbt.errors import ConfigError
from pbt.rl_games.trpo.settings import PREFIX, TrpoSettings


class KLAdaptiveScheduler(schedulers.AdaptiveScheduler):
    """skrl's KL-adaptive rule, as rl_games' AdaptiveScheduler has it (the same with the default
    factors 2 and 1.5), with skrl's arguments: the lr is divided by ``lr_factor`` when the KL exceeds
    ``kl_factor * kl_threshold`` and multiplied by it when the KL is below ``kl_threshold / kl_factor``,
    within [min_lr, max_lr]."""

    def __init__(self, kl_threshold: float, min_lr: float, max_lr: float, kl_factor: float, lr_factor: float) -> None:
        super().__init__(kl_threshold)
        self.min_lr, self.max_lr = min_lr, max_lr
        self.kl_factor, self.lr_factor = kl_factor, lr_factor

    def update(
        self, current_lr: float, entropy_coef: float, epoch: int, frames: int, kl_dist: float, **kwargs: Any
    ) -> Any:
        lr = current_lr
        if kl_dist > self.kl_factor * self.kl_threshold:
            lr = max(current_lr / self.lr_factor, self.min_lr)
        elif kl_dist < self.kl_threshold / self.kl_factor:
            lr = min(current_lr * self.lr_factor, self.max_lr)
        return lr, entropy_coef


def build_scheduler(settings: TrpoSettings, max_epochs: int, max_frames: int) -> schedulers.RLScheduler:
    """The scheduler ``settings`` name, with its arguments (defaults filled in)."""
    args = settings.scheduler_arguments()
    name = settings.learning_rate_scheduler
    if name == "kl_adaptive":
        return KLAdaptiveScheduler(
            args["kl_threshold"], args["min_lr"], args["max_lr"], args["kl_factor"], args["lr_factor"]
        )
    if name == "linear":
        use_epochs = args["use_epochs"] if args["use_epochs"] is not None else max_epochs > 0
        max_steps = args["max_steps"] or (max_epochs if use_epochs else max_frames)
        if not max_steps or max_steps < 1:
            raise ConfigError(
                f"{PREFIX}learning_rate_scheduler=linear needs the length of training: set max_frames "
                f"(or max_epochs), or {PREFIX}learning_rate_scheduler_kwargs.max_steps."
            )
        return schedulers.LinearScheduler(
            settings.value_learning_rate, min_lr=args["min_lr"], max_steps=int(max_steps), use_epochs=bool(use_epochs)
        )
    return schedulers.IdentityScheduler()
