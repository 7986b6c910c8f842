"""Exploit and explore inside the running rl_games agent: no process restart.

Measured on rl_games 1.6.5 (DESIGN.md section 4): these hyperparameters take effect when assigned
to the agent, so changing them needs no rebuild. Anything else (num_envs, horizon_length,
minibatch_size, the network, task parameters...) is baked into buffers or the env and needs a
restart: :func:`rebuild_keys` names those, and the member falls back to exec mode for them.
"""
import logging
from typing import Any, Callable, Dict, List, Mapping

log = logging.getLogger(__name__)

CONFIG = "train.params.config."


def _set_lr(algo: Any, value: Any) -> None:
    # rl_games resets the optimizer's lr from last_lr after every minibatch; set both.
    algo.last_lr = float(value)
    algo.update_lr(float(value))


def _set_kl_threshold(algo: Any, value: Any) -> None:
    algo.kl_threshold = float(value)
    scheduler = getattr(algo, "scheduler", None)
    if scheduler is not None and hasattr(scheduler, "kl_threshold"):
        scheduler.kl_threshold = float(value)


def _attr(name: str, cast: Callable[[Any], Any] = float) -> Callable[[Any, Any], None]:
    def setter(algo: Any, value: Any) -> None:
        setattr(algo, name, cast(value))

    return setter


def _set_reward_scale(algo: Any, value: Any) -> None:
    algo.rewards_shaper.scale_value = float(value)


#: Full config key -> how to apply a new value to a live a2c_continuous agent.
SETTERS: Dict[str, Callable[[Any, Any], None]] = {
    CONFIG + "learning_rate": _set_lr,
    CONFIG + "gamma": _attr("gamma"),
    CONFIG + "tau": _attr("tau"),
    CONFIG + "e_clip": _attr("e_clip"),
    CONFIG + "entropy_coef": _attr("entropy_coef"),
    CONFIG + "critic_coef": _attr("critic_coef"),
    CONFIG + "grad_norm": _attr("grad_norm"),
    CONFIG + "bounds_loss_coef": _attr("bounds_loss_coef"),
    CONFIG + "mini_epochs": _attr("mini_epochs_num", int),
    CONFIG + "kl_threshold": _set_kl_threshold,
    CONFIG + "reward_shaper.scale_value": _set_reward_scale,
}


def _reader(name: str) -> Callable[[Any], Any]:
    return lambda algo: getattr(algo, name)


#: Full config key -> how to read the value in force from a live a2c_continuous agent (the twin of
#: SETTERS: the learning rate is read from the optimizer, which is what a minibatch uses).
READERS: Dict[str, Callable[[Any], Any]] = {
    CONFIG + "learning_rate": lambda algo: algo.optimizer.param_groups[0]["lr"],
    CONFIG + "gamma": _reader("gamma"),
    CONFIG + "tau": _reader("tau"),
    CONFIG + "e_clip": _reader("e_clip"),
    CONFIG + "entropy_coef": _reader("entropy_coef"),
    CONFIG + "critic_coef": _reader("critic_coef"),
    CONFIG + "grad_norm": _reader("grad_norm"),
    CONFIG + "bounds_loss_coef": _reader("bounds_loss_coef"),
    CONFIG + "mini_epochs": _reader("mini_epochs_num"),
    CONFIG + "kl_threshold": _reader("kl_threshold"),
    CONFIG + "reward_shaper.scale_value": lambda algo: algo.rewards_shaper.scale_value,
}
assert set(READERS) == set(SETTERS), "every key applied in place must be readable back"


def changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, Any]:
    """The keys whose value differs, with their new values."""
    return {k: v for k, v in after.items() if before.get(k) != v}


def rebuild_keys(changes: Mapping[str, Any]) -> List[str]:
    """Changed keys that cannot be applied in place (they need a process restart)."""
    return sorted(k for k in changes if k not in SETTERS)


def apply_hyperparameters(algo: Any, changes: Mapping[str, Any]) -> None:
    """Apply changed hyperparameters to the live agent; every key must be in :data:`SETTERS`."""
    for key, value in changes.items():
        SETTERS[key](algo, value)


def load_weights(algo: Any, state: Dict[str, Any]) -> None:
    """Load a donor's weights, optimizer state and normalizers, keeping the member's own frame and
    epoch counts (``set_epoch=False``), and clear the score buffers of the old policy."""
    algo.set_full_state_weights(state, set_epoch=False)
    for meter in ("game_rewards", "game_shaped_rewards", "game_lengths"):
        getattr(algo, meter).clear()
