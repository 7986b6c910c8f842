"""What PBT can change in a running TRPO agent (no torch at import time).

Every TRPO setting but ``mini_batches`` (the dataset's minibatch size is allocated once) takes effect
at the next update when assigned to the live agent; so do ``gamma``, ``tau`` (GAE is computed after
each rollout) and the reward scale. The value learning rate is set as rl_games keeps it: ``last_lr``
and the optimizer's lr; with the ``kl_adaptive`` value schedule a change carries the rate it found,
as PPO's adaptive learning rate (:mod:`pbt.rl_games.rate`).
"""

import dataclasses
from typing import Any, Callable, ClassVar, Dict, Mapping

from pbt.rl_games.agent import CONFIG, Reader, Setter
from pbt.rl_games.rate import ScheduledRate, set_lr


def _set_setting(name: str, cast: Callable[[Any], Any]) -> Setter:
    def setter(algo: Any, value: Any) -> None:
        updated = dataclasses.replace(algo.trpo, **{name: cast(value)})
        updated.check()  # a value out of range is refused, the agent keeps the old one
        algo.trpo = updated

    return setter


def _set_grad_clip(algo: Any, value: Any) -> None:
    _set_setting("grad_norm_clip", float)(algo, value)
    algo.grad_norm = float(value)
    algo.truncate_grads = float(value) > 0


def _set_epochs(algo: Any, value: Any) -> None:
    _set_setting("learning_epochs", int)(algo, value)
    algo.mini_epochs_num = int(value)


def _set_value_scale(algo: Any, value: Any) -> None:
    _set_setting("value_loss_scale", float)(algo, value)
    algo.critic_coef = float(value)


def _get_setting(name: str) -> Reader:
    return lambda algo: getattr(algo.trpo, name)


def _set_attr(name: str) -> Setter:
    def setter(algo: Any, value: Any) -> None:
        setattr(algo, name, float(value))

    return setter


def _set_reward_scale(algo: Any, value: Any) -> None:
    algo.rewards_shaper.scale_value = float(value)


#: TRPO settings read by the update only (the agent keeps them in ``algo.trpo``).
_SETTINGS: Dict[str, Callable[[Any], Any]] = {
    "max_kl_divergence": float,
    "damping": float,
    "conjugate_gradient_steps": int,
    "conjugate_gradient_tolerance": float,
    "fisher_sample_fraction": float,
    "max_backtrack_steps": int,
    "accept_ratio": float,
    "step_fraction": float,
}

TRPO_SETTERS: Dict[str, Setter] = {
    **{CONFIG + name: _set_setting(name, cast) for name, cast in _SETTINGS.items()},
    CONFIG + "value_learning_rate": set_lr,
    CONFIG + "learning_epochs": _set_epochs,
    CONFIG + "value_loss_scale": _set_value_scale,
    CONFIG + "grad_norm_clip": _set_grad_clip,
    CONFIG + "gamma": _set_attr("gamma"),
    CONFIG + "tau": _set_attr("tau"),
    CONFIG + "reward_shaper.scale_value": _set_reward_scale,
}

TRPO_READERS: Dict[str, Reader] = {
    **{CONFIG + name: _get_setting(name) for name in _SETTINGS},
    CONFIG + "value_learning_rate": lambda algo: algo.optimizer.param_groups[0]["lr"],
    CONFIG + "learning_epochs": lambda algo: algo.mini_epochs_num,
    CONFIG + "value_loss_scale": lambda algo: algo.critic_coef,
    CONFIG + "grad_norm_clip": lambda algo: algo.grad_norm,
    CONFIG + "gamma": lambda algo: algo.gamma,
    CONFIG + "tau": lambda algo: algo.tau,
    CONFIG + "reward_shaper.scale_value": lambda algo: algo.rewards_shaper.scale_value,
}


class TrpoAdapter(ScheduledRate):
    """The ``trpo`` agent (:class:`pbt.rl_games.trpo.agent.TrpoAgent`)."""

    setters: ClassVar[Mapping[str, Setter]] = TRPO_SETTERS
    readers: ClassVar[Mapping[str, Reader]] = TRPO_READERS
    follows_rank0 = True
    rate_key = CONFIG + "value_learning_rate"

    # Each change bumps ``algo.generation``: in a multi-process run, rank 0 (the only one running PBT)
    # then sends its agent to the other ranks before the next rollout (pbt/rl_games/trpo/spmd.py).
    def set_hyperparameters(self, params: Mapping[str, Any]) -> None:
        super().set_hyperparameters(params)
        self._changed()

    def restore(self, state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        # The checkpoint's optimizer carries the lr it was saved with: it stays in force where the
        # kl_adaptive schedule had moved it, else the configured one (maybe mutated since) is.
        super().restore(state, config)
        lr = config.get("value_learning_rate")
        self.restore_rate(state, self.algo.trpo.value_learning_rate if lr is None else lr)
        self._changed()

    def put_rate(self, rate: float) -> None:
        super().put_rate(rate)
        self._changed()

    def load_weights(self, state: Mapping[str, Any]) -> None:
        super().load_weights(state)  # keeps this member's own lr in force
        self._changed()

    def _changed(self) -> None:
        self.algo.generation = int(getattr(self.algo, "generation", 0)) + 1


assert set(TrpoAdapter.readers) == set(TrpoAdapter.setters), "every key applied in place must be readable back"
