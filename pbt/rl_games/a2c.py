"""The PPO adapters: rl_games' ``a2c_continuous`` and ``a2c_discrete`` agents (no torch at import time).

The tables below list the hyperparameters that take effect when assigned to a running agent, checked
against rl_games 1.6.5 (docs/rl_games.md). Anything else (num_actors, horizon_length, minibatch_size,
the network, task parameters...) is baked into buffers, the model or the env: changing it needs a
rebuild, and the member re-executes itself instead.
"""

from typing import Any, Callable, ClassVar, Dict, Mapping

from pbt.rl_games.agent import CONFIG, Reader, Setter
from pbt.rl_games.rate import ScheduledRate, set_lr


def _set_kl_threshold(algo: Any, value: Any) -> None:
    algo.kl_threshold = float(value)
    scheduler = getattr(algo, "scheduler", None)
    if scheduler is not None and hasattr(scheduler, "kl_threshold"):
        scheduler.kl_threshold = float(value)


def _set_reward_scale(algo: Any, value: Any) -> None:
    algo.rewards_shaper.scale_value = float(value)


def _attr(name: str, cast: Callable[[Any], Any] = float) -> Setter:
    def setter(algo: Any, value: Any) -> None:
        setattr(algo, name, cast(value))

    return setter


def _reader(name: str) -> Reader:
    return lambda algo: getattr(algo, name)


#: Config key -> agent attribute, for the keys that are a plain attribute of both PPO agents.
_PLAIN: Dict[str, str] = {
    "gamma": "gamma",
    "tau": "tau",
    "e_clip": "e_clip",
    "entropy_coef": "entropy_coef",
    "critic_coef": "critic_coef",
    "grad_norm": "grad_norm",
}

#: Full config key -> how to apply a new value to a live ``a2c_discrete`` agent.
DISCRETE_SETTERS: Dict[str, Setter] = {
    CONFIG + "learning_rate": set_lr,
    **{CONFIG + key: _attr(attr) for key, attr in _PLAIN.items()},
    CONFIG + "mini_epochs": _attr("mini_epochs_num", int),
    CONFIG + "kl_threshold": _set_kl_threshold,
    CONFIG + "reward_shaper.scale_value": _set_reward_scale,
}

#: Full config key -> how to read the value in force (the learning rate from the optimizer: that is
#: what a minibatch uses).
DISCRETE_READERS: Dict[str, Reader] = {
    CONFIG + "learning_rate": lambda algo: algo.optimizer.param_groups[0]["lr"],
    **{CONFIG + key: _reader(attr) for key, attr in _PLAIN.items()},
    CONFIG + "mini_epochs": _reader("mini_epochs_num"),
    CONFIG + "kl_threshold": _reader("kl_threshold"),
    CONFIG + "reward_shaper.scale_value": lambda algo: algo.rewards_shaper.scale_value,
}

#: ``a2c_continuous`` also has the bounds loss.
CONTINUOUS_SETTERS: Dict[str, Setter] = {**DISCRETE_SETTERS, CONFIG + "bounds_loss_coef": _attr("bounds_loss_coef")}
CONTINUOUS_READERS: Dict[str, Reader] = {**DISCRETE_READERS, CONFIG + "bounds_loss_coef": _reader("bounds_loss_coef")}


class PpoAdapter(ScheduledRate):
    """What both PPO agents share: the keys both can change in place, and the learning rate kept in
    force (:class:`~pbt.rl_games.rate.ScheduledRate`)."""

    setters: ClassVar[Mapping[str, Setter]] = DISCRETE_SETTERS
    readers: ClassVar[Mapping[str, Reader]] = DISCRETE_READERS

    def restore(self, state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        # rl_games applies last_lr after every minibatch, not the checkpoint optimizer's lr: put the
        # checkpoint's rate back where the adaptive schedule had moved it, else the configured one.
        super().restore(state, config)
        self.restore_rate(state, config.get("learning_rate"))


class ContinuousPpoAdapter(PpoAdapter):
    """``a2c_continuous``: also the bounds loss (``bounds_loss_coef``)."""

    setters = CONTINUOUS_SETTERS
    readers = CONTINUOUS_READERS


class DiscretePpoAdapter(PpoAdapter):
    """``a2c_discrete``: no bounds loss (the discrete agent has none, so that key needs a rebuild)."""


for _adapter in (PpoAdapter, ContinuousPpoAdapter, DiscretePpoAdapter):
    assert set(_adapter.readers) == set(_adapter.setters), "every key applied in place must be readable back"
