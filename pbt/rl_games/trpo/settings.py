"""TRPO's ``train.params.config`` keys: defaults, validation, and the rl_games settings they imply
(no torch; a bad value fails before the agent is built).

The TRPO agent reuses rl_games' rollout, GAE, normalizers, dataset and value optimizer, which read
rl_games' own keys (``learning_rate``, ``mini_epochs``, ``minibatch_size``, ...). Those are derived here
from the TRPO keys, so a TRPO config names each setting once, under its TRPO name.
"""
import difflib
import math
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, Optional

from pbt.errors import ConfigError

PREFIX = "train.params.config."
#: ``learning_rate_scheduler`` values: none, or rl_games' linear decay to 0 over ``max_frames``.
SCHEDULERS = ("none", "linear")


@dataclass
class TrpoSettings:
    """The TRPO hyperparameters (``train.params.config.<name>``)."""

    max_kl_divergence: float = 0.01
    """delta: the largest mean KL(old || new) a policy update may reach."""
    damping: float = 0.1
    """Added to the Fisher matrix's diagonal (conditions conjugate gradient)."""
    conjugate_gradient_steps: int = 10
    """Most conjugate-gradient iterations for the search direction."""
    conjugate_gradient_tolerance: float = 1e-10
    """Stop conjugate gradient once the squared residual is below this."""
    fisher_sample_fraction: float = 1.0
    """Share of the batch the Fisher-vector products see (every k-th sample, or sequence for recurrent
    policies, k = round(1 / fraction)); 1: all of it. Lower is faster; the gradient, the line search and
    the KL bound still use the whole batch."""
    max_backtrack_steps: int = 10
    """Most step sizes the line search tries (each half the previous)."""
    accept_ratio: float = 0.5
    """Accept a step whose surrogate gain is more than this fraction of the linear model's gain."""
    step_fraction: float = 1.0
    """Fraction of the full trust-region step the line search starts from."""
    value_learning_rate: float = 1e-3
    """Adam learning rate of the value function."""
    learning_epochs: int = 8
    """Passes of value-function updates over the batch per update."""
    mini_batches: int = 2
    """Minibatches per value epoch (must divide num_envs * horizon_length)."""
    value_loss_scale: float = 1.0
    """Scale of the value loss ``mean((R - V)^2)``."""
    grad_norm_clip: float = 0.5
    """Clip the value gradient's norm to this (0: no clipping)."""
    learning_rate_scheduler: str = "none"
    """Value learning-rate schedule: none, or linear (to 0 at max_frames)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TrpoSettings":
        """Read and check the TRPO keys of ``config`` (``train.params.config``); ConfigError naming the
        key, the rule and a nearby valid key for a misspelt one."""
        _refuse_misspelt(config)
        refuse_compile(config)
        values: Dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in config or config[f.name] is None:
                continue
            raw = config[f.name]
            if f.type in (float, "float"):
                values[f.name] = _number(f.name, raw)
            elif f.type in (int, "int"):
                if isinstance(raw, bool) or not isinstance(raw, int):
                    raise ConfigError(f"{PREFIX}{f.name}={raw!r} must be a whole number.")
                values[f.name] = raw
            else:
                values[f.name] = str(raw).lower()
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """ConfigError for a value outside its range."""
        rules = [
            ("max_kl_divergence", self.max_kl_divergence > 0, "> 0 (e.g. 0.01)"),
            ("damping", self.damping >= 0, ">= 0 (e.g. 0.1)"),
            ("conjugate_gradient_steps", self.conjugate_gradient_steps >= 1, ">= 1 (e.g. 10)"),
            ("conjugate_gradient_tolerance", self.conjugate_gradient_tolerance >= 0, ">= 0 (e.g. 1e-10)"),
            ("fisher_sample_fraction", 0 < self.fisher_sample_fraction <= 1, "in (0, 1] (e.g. 1.0 or 0.2)"),
            ("max_backtrack_steps", self.max_backtrack_steps >= 1, ">= 1 (e.g. 10)"),
            ("accept_ratio", 0 <= self.accept_ratio < 1, "in [0, 1) (e.g. 0.5)"),
            ("step_fraction", 0 < self.step_fraction <= 1, "in (0, 1] (e.g. 1.0)"),
            ("value_learning_rate", self.value_learning_rate > 0, "> 0 (e.g. 1e-3)"),
            ("learning_epochs", self.learning_epochs >= 1, ">= 1 (e.g. 8)"),
            ("mini_batches", self.mini_batches >= 1, ">= 1 (e.g. 2)"),
            ("value_loss_scale", self.value_loss_scale > 0, "> 0 (e.g. 1.0)"),
            ("grad_norm_clip", self.grad_norm_clip >= 0, ">= 0 (0: no clipping)"),
            ("learning_rate_scheduler", self.learning_rate_scheduler in SCHEDULERS, f"one of {', '.join(SCHEDULERS)}"),
        ]
        for name, ok, rule in rules:
            if not ok:
                raise ConfigError(f"{PREFIX}{name}={getattr(self, name)!r} must be {rule}.")

    def fisher_stride(self) -> int:
        """k: the Fisher-vector products use every k-th sample (or sequence)."""
        return max(1, int(round(1.0 / self.fisher_sample_fraction)))

    def rl_games_config(self, config: Mapping[str, Any]) -> Dict[str, Any]:
        """``config`` with the rl_games keys the reused machinery reads set from these settings.

        ConfigError when ``mini_batches`` does not split the batch (num_actors x horizon_length)."""
        out = dict(config)
        batch = int(config["num_actors"]) * int(config["horizon_length"])
        if batch % self.mini_batches:
            works = [d for d in range(1, min(batch, 64) + 1) if batch % d == 0]
            raise ConfigError(f"{PREFIX}mini_batches={self.mini_batches} does not split the batch of num_envs "
                              f"({config['num_actors']}) x horizon_length ({config['horizon_length']}) = {batch} "
                              f"samples. Values that work: {', '.join(map(str, works))}.")
        out.update({
            "learning_rate": self.value_learning_rate,
            "lr_schedule": "linear" if self.learning_rate_scheduler == "linear" else None,
            "mini_epochs": self.learning_epochs,
            "minibatch_size": batch // self.mini_batches,
            "critic_coef": self.value_loss_scale,
            "grad_norm": self.grad_norm_clip,
            "truncate_grads": self.grad_norm_clip > 0,
            "normalize_advantage": True,
            "entropy_coef": 0.0,
            "e_clip": 0.2,  # read by rl_games' constructor only; TRPO clips nothing
            "clip_value": False,
            "ppo": True,
        })
        return out


def refuse_compile(config: Mapping[str, Any]) -> None:
    """ConfigError unless ``torch_compile`` is off (rl_games compiles when the key is absent): TRPO's
    Fisher-vector products differentiate the KL's gradient again (double backward), which
    torch.compile's AOT autograd does not support, so the first update would fail after start-up."""
    value = config.get("torch_compile", True)
    if value is not False:  # rl_games compiles for any other value (a mode, a dict, even None)
        raise ConfigError(f"{PREFIX}torch_compile={value!r}: the trpo learner cannot run a compiled model (its "
                          "Fisher-vector products need double backward, which torch.compile does not support). Set "
                          f"{PREFIX}torch_compile=false, or train with a2c_continuous (PPO) to use torch.compile.")


def _number(name: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise ConfigError(f"{PREFIX}{name}={raw!r} must be a number.")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{PREFIX}{name}={raw!r} must be a number.") from None
    if not math.isfinite(value):
        raise ConfigError(f"{PREFIX}{name}={raw!r} must be a finite number.")
    return value


def setting_names() -> List[str]:
    """The TRPO keys, in declaration order."""
    return [f.name for f in fields(TrpoSettings)]


def _refuse_misspelt(config: Mapping[str, Any]) -> None:
    """A key near a TRPO key but not one (``max_kl_divergense``) is a typo: refuse it, naming the key."""
    names = setting_names()
    for key in config:
        if key in names:
            continue
        close: Optional[List[str]] = difflib.get_close_matches(str(key), names, n=1, cutoff=0.85)
        if close:
            raise ConfigError(f"{PREFIX}{key} is not a TRPO setting. Did you mean '{PREFIX}{close[0]}'? "
                              f"TRPO settings: {', '.join(names)}.")
