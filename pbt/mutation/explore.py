"""The ``explore`` config section: which keys mutate, how often and by how much.

Its keys stay flat in the ``pbt`` group (``pbt.mutation_rate=0.2``); :class:`pbt.config.PbtConfig`
routes them here.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from pbt.errors import ConfigError
from pbt.mutation.base import HyperparameterMutation
from pbt.mutation.network import NetworkMutationConfig, to_network_mutation
from pbt.mutation.registry import get_mutation
from pbt.mutation.space import SearchSpace, parse_space
from pbt.sections import PARSER, Section, require, require_finite, to_float, type_error

_PREFIX = "train.params.config."

DEFAULT_MUTATION: Dict[str, str] = {
    _PREFIX + "learning_rate": "mutate_float",
    _PREFIX + "grad_norm": "mutate_float",
    _PREFIX + "entropy_coef": "mutate_float",
    _PREFIX + "critic_coef": "mutate_float",
    _PREFIX + "bounds_loss_coef": "mutate_float",
    _PREFIX + "kl_threshold": "mutate_float",
    _PREFIX + "e_clip": "mutate_eps_clip",
    _PREFIX + "mini_epochs": "mutate_mini_epochs",
    _PREFIX + "gamma": "mutate_discount",
    _PREFIX + "tau": "mutate_discount",
}
"""The default mutation scheme (the same mapping as ``configs/pbt/mutation/default.yaml``)."""

FROZEN_TREES: Dict[str, str] = {
    "pbt": "PBT's own settings: a donor's pbt.policy_idx would make two processes train one member",
    "hydra": "Hydra's run settings",
    "train.params.algo": "the learner",
}
"""Config keys that never mutate, with everything under them, and why."""
FROZEN_KEYS: Dict[str, str] = {
    **{
        key: "the member's identity or run"
        for key in (
            "seed",
            "experiment",
            "train_dir",
            "checkpoint",
            "task",
            "task_name",
            "task.name",
            "task.kind",
            "train.params.seed",
            "train.params.config.name",
            "train.params.config.full_experiment_name",
            "train.params.config.env_name",
            "sim_device",
            "rl_device",
            "graphics_device_id",
            "headless",
            "torch_threads",
            "wandb_activate",
            "wandb_project",
            "wandb_entity",
            "wandb_group",
            "wandb_name",
        )
    },
    **{
        key: "the training budget, counted across restarts"
        for key in ("max_frames", "train.params.config.max_frames", "train.params.config.max_epochs")
    },
}
"""Single config keys that never mutate, and why."""


def frozen_reason(key: str) -> Optional[str]:
    """Why the config key ``key`` must never be mutated (None: it may be)."""
    if key in FROZEN_KEYS:
        return FROZEN_KEYS[key]
    for tree, why in FROZEN_TREES.items():
        if key == tree or key.startswith(tree + "."):
            return why
    return None


BOUND_SCALES = ("log", "linear")
"""Values of ``scale`` in ``pbt.bounds``."""


def to_bounds(name: str, value: Any) -> Dict[str, Dict[str, Any]]:
    """``{key: {min, max, scale}}`` with numbers checked; ConfigError saying what is wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise type_error(name, value, "a mapping of config key -> {min, max, scale}")
    bounds: Dict[str, Dict[str, Any]] = {}
    for key, spec in value.items():
        if not isinstance(spec, Mapping):
            raise type_error(f"{name}['{key}']", spec, "a mapping with min, max and/or scale")
        unknown = sorted(set(map(str, spec)) - {"min", "max", "scale"})
        if unknown:
            raise ConfigError(f"pbt.{name}['{key}'] has unknown field(s) {', '.join(unknown)}: use min, max, scale.")
        low = None if spec.get("min") is None else to_float(f"{name}['{key}'].min", spec["min"])
        high = None if spec.get("max") is None else to_float(f"{name}['{key}'].max", spec["max"])
        scale = str(spec.get("scale", "log"))
        if scale not in BOUND_SCALES:
            raise ConfigError(f"pbt.{name}['{key}'].scale must be one of {', '.join(BOUND_SCALES)}, got {scale!r}.")
        if low is not None and high is not None and low > high:
            raise ConfigError(f"pbt.{name}['{key}']: min {low} > max {high}; swap them.")
        if scale == "linear" and (low is None or high is None):
            raise ConfigError(
                f"pbt.{name}['{key}']: scale linear needs both min and max (the step is a fraction of max - min)."
            )
        bounds[str(key)] = {"min": low, "max": high, "scale": scale}
    return bounds


def to_scheme(name: str, value: Any) -> Dict[str, str]:
    """A scheme mapping with string keys (the names are checked by :class:`ExploreConfig`)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise type_error(name, value, "a mapping of config key -> mutation function name")
    return {str(key): name for key, name in value.items()}


@dataclass
class ExploreConfig(Section):
    """How a member explores: the mutation scheme and its change ranges."""

    mutation: Dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MUTATION), metadata={PARSER: to_scheme})
    """Mutation scheme: full config key (``train.params.config.gamma``) -> mutation function name."""
    mutation_rate: float = 0.15
    """Probability that each whitelisted hyperparameter is mutated when a member mutates."""
    change_min: float = 1.1
    """Smallest multiplicative change of a mutated float (x*k or x/k, k ~ U(change_min, change_max))."""
    change_max: float = 1.5
    """Largest multiplicative change of a mutated float."""
    discount_change_min: float = 1.1
    """mutate_discount's own change range: 1 - x is multiplied or divided by k ~ U(min, max)."""
    discount_change_max: float = 1.2
    """Upper end of mutate_discount's change range."""
    bounds: Dict[str, Dict[str, Any]] = field(default_factory=dict, metadata={PARSER: to_bounds})
    """Typed bounds per mutated key: ``{min: .., max: .., scale: log|linear}``. Every mutated value
    is clamped into [min, max]; ``scale: linear`` makes mutate_float step additively by
    (k - 1) * (max - min) instead of multiplying by k."""
    min_mutations: int = 1
    """A mutation step changes at least this many whitelisted hyperparameters (forcing extra ones
    when the per-key coin flips changed fewer), so explore really explores. 0: upstream behaviour."""
    initial_mutation: bool = True
    """A fresh member mutates its starting hyperparameters once so the population starts diverse
    (when its selection strategy does so, as DexPBT). false: start from the hyperparameters given
    (e.g. an ablation that seeds both arms with the same samples)."""
    network_mutation: Optional[NetworkMutationConfig] = field(default=None, metadata={PARSER: to_network_mutation})
    """AgileRL's network mutations (``pbt/mutation=agilerl``, :mod:`pbt.mutation.network`): the
    probabilities of each kind drawn at an explore step, the noise and the network's limits. None:
    only hyperparameters mutate."""

    search_space: SearchSpace = field(default_factory=lambda: SearchSpace({}), metadata={PARSER: parse_space})
    """Typed search space (``pbt/search_space=<name>``, :mod:`pbt.mutation.space`): full config key ->
    ``{type: loguniform|uniform|int|choice, low, high | values}``. A fresh member samples its keys;
    every mutation of them stays inside. Its keys are explored whether ``pbt.mutation`` names them or
    not (a fixed key never is). Empty: no search space."""

    def to_flat(self) -> Dict[str, Any]:
        flat = super().to_flat()
        flat["search_space"] = self.search_space.to_spec()
        if flat.get("network_mutation") is not None:  # tuples are not YAML-safe
            flat["network_mutation"] = {
                k: list(v) if isinstance(v, tuple) else v for k, v in flat["network_mutation"].items()
            }
        return flat

    def __post_init__(self) -> None:
        require(0.0 <= self.mutation_rate <= 1.0, "mutation_rate", self.mutation_rate, "in [0, 1]")
        require_finite("change_min", self.change_min, 1.0)
        require(
            math.isfinite(self.change_max) and self.change_max >= self.change_min,
            "change_max",
            self.change_max,
            f"a finite number >= pbt.change_min ({self.change_min})",
        )
        require(self.min_mutations >= 0, "min_mutations", self.min_mutations, ">= 0")
        require_finite("discount_change_min", self.discount_change_min, 1.0)
        require(
            math.isfinite(self.discount_change_max) and self.discount_change_max >= self.discount_change_min,
            "discount_change_max",
            self.discount_change_max,
            f"a finite number >= pbt.discount_change_min ({self.discount_change_min})",
        )
        self.bounds = to_bounds("bounds", self.bounds)
        self.search_space = parse_space("search_space", self.search_space)
        for key in self.search_space.dims:
            why = frozen_reason(key)
            if why is not None:
                raise ConfigError(
                    f"pbt.search_space['{key}']: this key must never change ({why}). Remove it from the search space."
                )
        self._check_mutation_names()
        self._check_bounds()

    def _check_mutation_names(self) -> None:
        for key, name in self.mutation.items():
            if not isinstance(key, str) or not isinstance(name, str):
                raise ConfigError(
                    f"pbt.mutation must map config keys to function names (strings), got "
                    f"{key!r}: {name!r}. "
                    "Write entries like 'train.params.config.gamma: mutate_discount'."
                )
            why = frozen_reason(key)
            if why is not None:
                raise ConfigError(
                    f"pbt.mutation['{key}']: this key must never mutate ({why}): members would "
                    "copy it from donors. Remove it from the pbt.mutation scheme."
                )
            try:
                get_mutation(name)
            except ConfigError as exc:
                raise ConfigError(f"pbt.mutation['{key}']: {exc}") from exc

    def _check_bounds(self) -> None:
        """Bounds must leave room inside the function's own range (the range wins, bounds narrow it)."""
        for key, bound in self.bounds.items():
            mutation = get_mutation(self.mutation[key]) if key in self.mutation else None
            if not isinstance(mutation, HyperparameterMutation):
                continue
            low, high = mutation.allowed_range(bound)
            if low > high:
                own_low, own_high = mutation.value_range
                raise ConfigError(
                    f"pbt.bounds['{key}'] (min {bound['min']}, max {bound['max']}) does not overlap {mutation.name}'s own "
                    f"range [{own_low:g}, {own_high:g}]: no value could satisfy both. Set bounds inside that "
                    "range or use another mutation function."
                )
