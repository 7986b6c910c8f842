"""TRPO's ``train.params.config`` keys: defaults, validation, and the rl_games settings they imply
(no torch; a bad value fails before the agent is built).

The TRPO agent reuses rl_games' rollout, GAE, normalizers, dataset and value optimizer, which read
rl_games' own keys (``learning_rate``, ``mini_epochs``, ``minibatch_size``, ...). Those are derived here
from the TRPO keys, so a TRPO config names each setting once, under its TRPO name.
"""

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any, Collection, Dict, List, Mapping, MutableMapping, Optional

from pbt.errors import ConfigError, did_you_mean

PREFIX = "train.params.config."
#: ``learning_rate_scheduler`` -> the ``learning_rate_scheduler_kwargs`` it takes, with their defaults:
#: none; rl_games' linear decay (to ``min_lr`` at ``max_steps``: max_epochs when set, else max_frames;
#: ``use_epochs`` counts epochs instead of frames); skrl's KL-adaptive rule as rl_games' AdaptiveScheduler
#: has it (the lr is divided by ``lr_factor`` when the policy step's KL exceeds ``kl_factor *
#: kl_threshold``, multiplied by it below ``kl_threshold / kl_factor``, within [min_lr, max_lr]).
SCHEDULER_ARGUMENTS: Dict[str, Dict[str, Any]] = {
    "none": {},
    "linear": {"min_lr": 1e-6, "max_steps": None, "use_epochs": None},
    "kl_adaptive": {"kl_threshold": 0.008, "min_lr": 1e-6, "max_lr": 1e-2, "kl_factor": 2.0, "lr_factor": 1.5},
}
SCHEDULERS = tuple(SCHEDULER_ARGUMENTS)
#: skrl's TRPO names accepted in a TRPO config -> the rl_games keys they set (:func:`resolve_aliases`).
ALIASES: Dict[str, str] = {
    "rollouts": "horizon_length",
    "discount_factor": "gamma",
    "lambda": "tau",
    "gae_lambda": "tau",  # skrl 2.x's name of 1.x's lambda
}


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
    """Value learning-rate schedule: none, linear or kl_adaptive (:data:`SCHEDULER_ARGUMENTS`)."""
    learning_rate_scheduler_kwargs: Dict[str, Any] = field(default_factory=dict)
    """The scheduler's arguments (skrl's name), e.g. ``{kl_threshold: 0.01}``; unnamed ones take their defaults."""
    random_timesteps: int = 0
    """Env steps (each a step of every env) at the start of training whose actions are drawn uniformly
    from the action space instead of the policy (skrl's random exploration)."""
    learning_starts: int = 0
    """Env steps collected before the first update: rollouts that end at or before it update nothing."""
    time_limit_bootstrap: Optional[bool] = None
    """skrl's name of rl_games' ``value_bootstrap``: bootstrap the value at time-outs (None: rl_games' own
    ``value_bootstrap``, True by default)."""

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
            if f.name == "learning_rate_scheduler_kwargs":
                if not isinstance(raw, Mapping):
                    raise ConfigError(
                        f"{PREFIX}{f.name}={raw!r} must be a mapping of argument -> value, "
                        "e.g. '+train.params.config.learning_rate_scheduler_kwargs={kl_threshold:0.01}'."
                    )
                values[f.name] = {str(k): v for k, v in raw.items()}
            elif f.name == "time_limit_bootstrap":
                if not isinstance(raw, bool):
                    raise ConfigError(f"{PREFIX}{f.name}={raw!r} must be True or False.")
                values[f.name] = raw
            elif f.type in (float, "float"):
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
            ("random_timesteps", self.random_timesteps >= 0, ">= 0 (0: no random actions)"),
            ("learning_starts", self.learning_starts >= 0, ">= 0 (0: update from the first rollout)"),
        ]
        for name, ok, rule in rules:
            if not ok:
                raise ConfigError(f"{PREFIX}{name}={getattr(self, name)!r} must be {rule}.")
        self.scheduler_arguments()

    def scheduler_arguments(self) -> Dict[str, Any]:
        """The scheduler's arguments, defaults filled in; ConfigError naming a wrong or misspelt one."""
        where = f"{PREFIX}learning_rate_scheduler_kwargs"
        known = SCHEDULER_ARGUMENTS[self.learning_rate_scheduler]
        for name in self.learning_rate_scheduler_kwargs:
            if name not in known:
                takes = ", ".join(known) or "no arguments"
                raise ConfigError(
                    f"{where}: {self.learning_rate_scheduler} takes {takes}, not '{name}'."
                    f"{did_you_mean(name, list(known))}"
                )
        args = {**known, **self.learning_rate_scheduler_kwargs}
        for name, value in args.items():
            if value is None:
                continue
            if name == "use_epochs":
                if not isinstance(value, bool):
                    raise ConfigError(f"{where}.use_epochs={value!r} must be True or False.")
            elif name == "max_steps":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigError(f"{where}.max_steps={value!r} must be a whole number >= 1.")
            else:
                args[name] = _number(f"learning_rate_scheduler_kwargs.{name}", value)
                low, rule = (1.0, "> 1") if name in ("kl_factor", "lr_factor") else (0.0, "> 0")
                if not args[name] > low and not (name == "min_lr" and args[name] == 0.0):
                    raise ConfigError(f"{where}.{name}={value!r} must be {rule}.")
        if "max_lr" in args and not args["min_lr"] < args["max_lr"]:
            raise ConfigError(f"{where}: min_lr ({args['min_lr']:g}) must be below max_lr ({args['max_lr']:g}).")
        return args

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
            raise ConfigError(
                f"{PREFIX}mini_batches={self.mini_batches} does not split the batch of num_envs "
                f"({config['num_actors']}) x horizon_length ({config['horizon_length']}) = {batch} "
                f"samples. Values that work: {', '.join(map(str, works))}."
            )
        if self.time_limit_bootstrap is not None:
            given = config.get("value_bootstrap")
            if given is not None and bool(given) != self.time_limit_bootstrap:
                raise ConfigError(
                    f"{PREFIX}time_limit_bootstrap={self.time_limit_bootstrap} and its rl_games name "
                    f"{PREFIX}value_bootstrap={given} disagree: give one of them."
                )
            out["value_bootstrap"] = self.time_limit_bootstrap
        out.update(
            {
                "learning_rate": self.value_learning_rate,
                "lr_schedule": None,  # the agent builds its scheduler (pbt/rl_games/trpo/schedule.py)
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
            }
        )
        return out


def refuse_compile(config: Mapping[str, Any]) -> None:
    """ConfigError unless ``torch_compile`` is off (rl_games compiles when the key is absent): TRPO's
    Fisher-vector products differentiate the KL's gradient again (double backward), which
    torch.compile's AOT autograd does not support, so the first update would fail after start-up."""
    value = config.get("torch_compile", True)
    if value is not False:  # rl_games compiles for any other value (a mode, a dict, even None)
        raise ConfigError(
            f"{PREFIX}torch_compile={value!r}: the trpo learner cannot run a compiled model (its "
            "Fisher-vector products need double backward, which torch.compile does not support). Set "
            f"{PREFIX}torch_compile=false, or train with a2c_continuous (PPO) to use torch.compile."
        )


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


def resolve_aliases(config: MutableMapping[str, Any], explicit: Collection[str] = ()) -> List[str]:
    """skrl's names in a TRPO config (``rollouts``, ``discount_factor``, ``lambda`` or 2.x's ``gae_lambda``) replaced in place by the
    rl_games keys they set (:data:`ALIASES`); returns a note per alias, saying what it maps to.

    An alias wins over the train config's value of its key, but not over one given on the command line
    (``explicit``: the overridden keys under ``train.params.config.``), which is also how a PBT restart
    passes its values. ConfigError for a value the key cannot take."""
    notes: List[str] = []
    both = [alias for alias in ALIASES if ALIASES[alias] == "tau" and alias in config]
    if len(both) > 1:
        raise ConfigError(
            f"{PREFIX}lambda and {PREFIX}gae_lambda are both given: they are skrl 1.x's and 2.x's name of "
            f"the same key (rl_games' tau). Keep one."
        )
    for alias, key in ALIASES.items():
        if alias not in config:
            continue
        value = config.pop(alias)
        if key == "horizon_length":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{PREFIX}{alias}={value!r} (horizon_length) must be a whole number >= 1.")
        elif not 0.0 <= _number(alias, value) <= 1.0:
            raise ConfigError(f"{PREFIX}{alias}={value!r} ({key}) must be in [0, 1].")
        current = config.get(key)
        if key in explicit and current is not None and current != value:
            notes.append(
                f"{PREFIX}{alias}={value!r} (skrl's name of {key}) is not used: {PREFIX}{key}={current!r} "
                "is given on the command line"
            )
            continue
        config[key] = value
        replaced = f" (instead of the train config's {current!r})" if current is not None and current != value else ""
        notes.append(f"{PREFIX}{alias}={value!r} is skrl's name of rl_games' {key}: {PREFIX}{key}={value!r}{replaced}")
    return notes


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
            raise ConfigError(
                f"{PREFIX}{key} is not a TRPO setting. Did you mean '{PREFIX}{close[0]}'? "
                f"TRPO settings: {', '.join(names)}."
            )
