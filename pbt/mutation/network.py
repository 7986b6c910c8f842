"""Network mutations (AgileRL's, seed of ``pbt/mutation=agilerl``): the network spec, the settings,
and the pure decision of what changes in a member's network at an explore step.

At every explore step (a member's own mutation, or right after it took a donor's weights) one kind
is drawn with the configured probabilities: ``none``, ``architecture`` (the MLP, the RNN or the CNN
block, one drawn among those the network has: add or remove a hidden layer with probability
``new_layer``, else add or remove units of one layer; :mod:`pbt.mutation.network_blocks` for the
RNN's and CNN's), ``parameters`` (Gaussian
noise on a random 10% of the weights), ``activation`` (another allowed activation) or
``hyperparameters`` (the hyperparameter scheme mutates as usual; only this kind changes them).
This module only decides; the torch surgery that carries a change out on an rl_games network is in
:mod:`pbt.rl_games.surgery`. No torch: Python 3.8 and the standard library only.
"""

import dataclasses
import logging
import math
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError, did_you_mean
from pbt.keys import get_by_key, has_key
from pbt.mutation.network_blocks import (
    MAX_CONVS,
    MAX_WIDTH,
    ConvSpec,
    RnnSpec,
    blocks_describe,
    blocks_overrides,
    blocks_to_flat,
    check_blocks,
    cnn_from_config,
    cnn_from_flat,
    plan_cnn,
    plan_rnn,
    rnn_from_config,
    rnn_from_flat,
)

NETWORK_KEY = "train.params.network"
UNITS_KEY = NETWORK_KEY + ".mlp.units"
ACTIVATION_KEY = NETWORK_KEY + ".mlp.activation"

NONE, ARCHITECTURE, PARAMETERS, ACTIVATION, HYPERPARAMETERS = (
    "none",
    "architecture",
    "parameters",
    "activation",
    "hyperparameters",
)
KINDS: Tuple[str, ...] = (NONE, ARCHITECTURE, PARAMETERS, ACTIVATION, HYPERPARAMETERS)
"""The kinds drawn at an explore step, in draw order."""

logger = logging.getLogger(__name__)

ADD_LAYER, REMOVE_LAYER, ADD_UNITS, REMOVE_UNITS = "add_layer", "remove_layer", "add_units", "remove_units"
ACTIVATIONS: Tuple[str, ...] = ("relu", "tanh", "sigmoid", "elu", "selu", "swish", "gelu", "softplus")
"""The hidden-layer activations rl_games' network builder knows."""

PARAMETER_FRACTION = 0.1
"""Share of each weight matrix that a parameter mutation changes (AgileRL's 10%)."""
SUPER_PROBABILITY = 0.05
"""Of the changed weights, the share with ``SUPER_SCALE`` x larger noise ("super" mutation)."""
RESET_PROBABILITY = 0.05
"""Of the changed weights, the share re-drawn from the layer's initial distribution ("reset")."""
SUPER_SCALE = 10.0
CLAMP_FACTOR = 2.0
"""Mutated weights are clamped to +/- this many times the largest magnitude in their matrix."""
MAX_HIDDEN_LAYERS = 64
MAX_UNITS = 1 << 16


@dataclass(frozen=True)
class NetworkSpec:
    """The mutable part of an rl_games ``actor_critic`` network: the MLP's hidden units per layer and
    activation, the ``rnn`` block (None: none) and the ``cnn`` block's conv layers (empty: none).
    Shared or separate actor and critic both use it (the critic's blocks mirror the actor's)."""

    units: Tuple[int, ...]
    activation: str
    rnn: Optional[RnnSpec] = None
    cnn: Tuple[ConvSpec, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"units": list(self.units), "activation": self.activation, **blocks_to_flat(self.rnn, self.cnn)}

    @classmethod
    def from_dict(cls, data: Any, source: str = "network") -> "NetworkSpec":
        """Strict: a peer's record is untrusted. ValueError saying what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source} must be a mapping with units and activation, got {type(data).__name__}")
        units, activation = data.get("units"), data.get("activation")
        if (
            not isinstance(units, (list, tuple))
            or not 1 <= len(units) <= MAX_HIDDEN_LAYERS
            or any(type(u) is not int or not 1 <= u <= MAX_UNITS for u in units)
        ):
            raise ValueError(
                f"{source}.units must be a list of 1..{MAX_HIDDEN_LAYERS} ints in 1..{MAX_UNITS}, got {units!r:.80}"
            )
        if activation not in ACTIVATIONS:
            raise ValueError(f"{source}.activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r:.40}")
        return cls(tuple(units), str(activation), rnn_from_flat(data, source), cnn_from_flat(data, source))

    def overrides(self) -> Dict[str, Any]:
        """The config keys (Hydra overrides) that build this network."""
        return {UNITS_KEY: list(self.units), ACTIVATION_KEY: self.activation, **blocks_overrides(self.rnn, self.cnn)}

    def describe(self) -> str:
        return f"{list(self.units)} {self.activation}{blocks_describe(self.rnn, self.cnn)}"


@dataclass(frozen=True)
class NetworkChange:
    """What to do to a member's network at one explore step (``op`` none: nothing)."""

    kind: str
    """The kind drawn (one of KINDS)."""
    before: NetworkSpec
    """The network the change starts from (the donor's when the member just took a donor's weights)."""
    after: NetworkSpec
    op: str = NONE
    """none, add_layer, remove_layer, add_units, remove_units, activation or parameters."""
    layer: Optional[int] = None
    """The hidden layer changed (add_layer: the index of the new layer; cnn: the conv layer)."""
    block: str = "mlp"
    """The block an architecture change changes: mlp, rnn (units of every layer, or its top layer)
    or cnn (filters of conv layer ``layer``)."""
    seed: int = 0
    """Seed of the torch generator that draws new weights and noise (reproducible changes)."""
    mutation_sd: float = 0.1
    why: str = ""
    """Why nothing changed (``op`` none although a network kind was drawn)."""

    @property
    def changes_network(self) -> bool:
        return self.op != NONE

    def describe(self) -> str:
        if self.op == NONE:
            return f"network kept ({self.kind}{': ' + self.why if self.why else ''})"
        if self.op == PARAMETERS:
            return f"parameter noise (mutation_sd {self.mutation_sd:g}) on {self.after.describe()}"
        block = "" if self.block == "mlp" else self.block + " "
        return f"network {block}{self.op} {self.before.describe()} -> {self.after.describe()}"


def _probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(
            f"pbt.network_mutation.{name}={value!r} must be a probability in [0, 1]. "
            f"Set pbt.network_mutation.{name} to a number between 0 and 1."
        )
    return float(value)


def _count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"pbt.network_mutation.{name}={value!r} must be a whole number >= {low}. "
            f"Set pbt.network_mutation.{name}=<int>."
        )
    return value


@dataclass(frozen=True)
class NetworkMutationConfig:
    """The ``pbt.network_mutation`` block (``pbt/mutation=agilerl``; its defaults are these fields')."""

    none: float = 0.1
    """Probability that an explore step changes nothing."""
    architecture: float = 0.3
    """Probability of an architecture change (a layer or units added or removed)."""
    parameters: float = 0.2
    """Probability of Gaussian noise on a random 10% of the weights."""
    activation: float = 0.1
    """Probability of switching to another allowed activation."""
    hyperparameters: float = 0.3
    """Probability that the hyperparameter scheme mutates (the only kind that changes them)."""
    new_layer: float = 0.2
    """Of architecture changes, the share that add or remove a layer (the rest change units)."""
    mutation_sd: float = 0.1
    """Noise of a parameter mutation, relative to each weight's magnitude."""
    min_layers: int = 1
    """Fewest hidden layers; the starting network (``train.params.network.mlp``) must lie inside the limits."""
    max_layers: int = 4
    """Most hidden layers."""
    min_units: int = 8
    """Fewest units of a hidden layer."""
    max_units: int = 256
    """Most units of a hidden layer."""
    unit_changes: Tuple[int, ...] = (16, 32, 64)
    """How many units an add/remove-units change moves (one drawn), clamped to the limits."""
    activations: Tuple[str, ...] = ("relu", "elu", "tanh")
    """The activations an activation change chooses from."""
    min_rnn_units: int = 8
    """Fewest hidden units of the ``rnn`` block (an architecture change picks the MLP, the RNN or the
    CNN with equal probability, among those the network has; RNN units move by ``unit_changes``)."""
    max_rnn_units: int = 1024
    """Most hidden units of the ``rnn`` block."""
    min_rnn_layers: int = 1
    """Fewest layers of the ``rnn`` block."""
    max_rnn_layers: int = 2
    """Most layers of the ``rnn`` block (a layer is added or removed with probability ``new_layer``)."""
    min_filters: int = 4
    """Fewest filters of a conv layer of the ``cnn`` block."""
    max_filters: int = 256
    """Most filters of a conv layer of the ``cnn`` block."""
    filter_changes: Tuple[int, ...] = (4, 8, 16)
    """How many filters an add/remove-filters change moves (one drawn), clamped to the limits."""
    min_conv_layers: int = 1
    """Fewest conv layers of the ``cnn`` block (with probability ``new_layer`` a CNN change adds a last
    3x3 identity conv layer, or removes a last conv layer that keeps its input's shape)."""
    max_conv_layers: int = 4
    """Most conv layers of the ``cnn`` block."""

    def __post_init__(self) -> None:
        probabilities = {name: _probability(name, getattr(self, name)) for name in KINDS}
        total = sum(probabilities.values())
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(
                "pbt.network_mutation probabilities "
                + ", ".join(f"{k}={v:g}" for k, v in probabilities.items())
                + f" sum to {total:g}: they must sum to 1 (one kind is drawn per explore step). Adjust them."
            )
        _probability("new_layer", self.new_layer)
        sd = self.mutation_sd
        if isinstance(sd, bool) or not isinstance(sd, (int, float)) or not (math.isfinite(sd) and sd > 0):
            raise ConfigError(
                f"pbt.network_mutation.mutation_sd={sd!r} must be a finite number > 0 (AgileRL's default is 0.1)."
            )
        low_layers, high_layers = _count("min_layers", self.min_layers, 1), _count("max_layers", self.max_layers, 1)
        low_units, high_units = _count("min_units", self.min_units, 1), _count("max_units", self.max_units, 1)
        if low_layers > high_layers or high_layers > MAX_HIDDEN_LAYERS:
            raise ConfigError(
                f"pbt.network_mutation: min_layers={low_layers} and max_layers={high_layers} must "
                f"satisfy 1 <= min_layers <= max_layers <= {MAX_HIDDEN_LAYERS}."
            )
        if low_units > high_units or high_units > MAX_UNITS:
            raise ConfigError(
                f"pbt.network_mutation: min_units={low_units} and max_units={high_units} must "
                f"satisfy 1 <= min_units <= max_units <= {MAX_UNITS}."
            )
        for low, high, limit in (
            ("min_rnn_units", "max_rnn_units", MAX_WIDTH),
            ("min_rnn_layers", "max_rnn_layers", 16),
            ("min_filters", "max_filters", MAX_WIDTH),
            ("min_conv_layers", "max_conv_layers", MAX_CONVS),
        ):
            if not 1 <= _count(low, getattr(self, low), 1) <= _count(high, getattr(self, high), 1) <= limit:
                raise ConfigError(
                    f"pbt.network_mutation: {low}={getattr(self, low)} and {high}={getattr(self, high)} must "
                    f"satisfy 1 <= {low} <= {high} <= {limit}."
                )
        for name in ("unit_changes", "filter_changes"):
            steps = getattr(self, name)
            if not steps or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in steps):
                raise ConfigError(
                    f"pbt.network_mutation.{name}={list(steps)!r} must be a non-empty "
                    "list of whole numbers >= 1, e.g. [16, 32, 64]."
                )
        if not self.activations:
            raise ConfigError(
                f"pbt.network_mutation.activations is empty: list at least one of {', '.join(ACTIVATIONS)}."
            )
        for name in self.activations:
            if name not in ACTIVATIONS:
                raise ConfigError(
                    f"pbt.network_mutation.activations: unknown activation {name!r}."
                    f"{did_you_mean(str(name), ACTIVATIONS, n=1)} rl_games knows: "
                    f"{', '.join(ACTIVATIONS)}."
                )

    def probabilities(self) -> List[Tuple[str, float]]:
        return [(name, float(getattr(self, name))) for name in KINDS]

    def check_spec(self, spec: NetworkSpec, what: str, reference: Optional[NetworkSpec] = None) -> List[str]:
        """Why ``spec`` lies outside these limits or, with ``reference`` (the member's own starting
        network), differs from it in a part that never mutates (empty: inside)."""
        problems: List[str] = []
        if not self.min_layers <= len(spec.units) <= self.max_layers:
            problems.append(
                f"{what} has {len(spec.units)} hidden layers, outside min_layers..max_layers "
                f"{self.min_layers}..{self.max_layers}"
            )
        outside = [u for u in spec.units if not self.min_units <= u <= self.max_units]
        if outside:
            problems.append(
                f"{what} has layers of {outside} units, outside min_units..max_units {self.min_units}..{self.max_units}"
            )
        if spec.activation not in self.activations:
            problems.append(f"{what} uses activation {spec.activation!r}, not in activations {list(self.activations)}")
        return problems + check_blocks(self, spec.rnn, spec.cnn, reference, what)


_LIST_FIELDS = ("unit_changes", "activations", "filter_changes")


def to_network_mutation(name: str, value: Any) -> Optional[NetworkMutationConfig]:
    """Parser of ``pbt.network_mutation``: None (network mutations off) or the checked block."""
    if value is None:
        return None
    if isinstance(value, NetworkMutationConfig):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"pbt.{name} must be a mapping (see pbt/mutation=agilerl in docs/configuration.md) or null, got "
            f"{type(value).__name__}. Select it with pbt/mutation=agilerl."
        )
    valid = list(NetworkMutationConfig.__dataclass_fields__)
    kwargs: Dict[str, Any] = {}
    for key, item in value.items():
        if key not in valid:
            raise ConfigError(
                f"Unknown key pbt.{name}.{key}.{did_you_mean(str(key), valid)} Valid keys: {', '.join(valid)}."
            )
        if key in _LIST_FIELDS:
            if isinstance(item, (str, bytes)) or not isinstance(item, Sequence):
                raise ConfigError(f"pbt.{name}.{key} must be a list, got {item!r}.")
            item = tuple(item)
        kwargs[str(key)] = item
    return NetworkMutationConfig(**kwargs)


def spec_from_config(cfg: Mapping[str, Any]) -> NetworkSpec:
    """The network spec the composed config builds; ConfigError when it is no mutable MLP."""
    if not has_key(cfg, NETWORK_KEY):
        raise ConfigError(f"pbt.network_mutation needs an rl_games network in {NETWORK_KEY}, and the config has none.")
    network = get_by_key(cfg, NETWORK_KEY)
    name = network.get("name") if isinstance(network, Mapping) else None
    if name != "actor_critic":
        raise ConfigError(
            f"pbt.network_mutation mutates rl_games' actor_critic MLP networks; {NETWORK_KEY}.name is "
            f"{name!r}. Use pbt/mutation=default for other networks."
        )
    rnn, cnn = rnn_from_config(network), cnn_from_config(network)
    compiled = (
        get_by_key(cfg, "train.params.config.torch_compile")
        if has_key(cfg, "train.params.config.torch_compile")
        else True
    )
    if str(cfg.get("rl_device", "cpu")).startswith("cuda") and compiled is not False:
        raise ConfigError(
            "pbt.network_mutation rebuilds the model, which torch.compile would wrap: set "
            "train.params.config.torch_compile=false (the runner turns it off on CPU only)."
        )
    if has_key(cfg, "train.params.config.central_value_config"):
        raise ConfigError(
            "pbt.network_mutation does not support a central value network "
            "(train.params.config.central_value_config): remove it or use pbt/mutation=default."
        )
    mlp = network.get("mlp") if isinstance(network.get("mlp"), Mapping) else {}
    if mlp.get("d2rl"):
        raise ConfigError(
            f"pbt.network_mutation does not support {NETWORK_KEY}.mlp.d2rl=true: set it to false or use "
            "pbt/mutation=default."
        )
    try:
        spec = NetworkSpec.from_dict(
            {"units": list(mlp.get("units") or []), "activation": mlp.get("activation")}, NETWORK_KEY + ".mlp"
        )
    except ValueError as exc:
        raise ConfigError(f"pbt.network_mutation cannot mutate this network: {exc}.") from None
    return NetworkSpec(spec.units, spec.activation, rnn, cnn)


def validate_start(settings: NetworkMutationConfig, cfg: Mapping[str, Any]) -> NetworkSpec:
    """The starting network, checked against the limits before training starts (ConfigError)."""
    spec = spec_from_config(cfg)
    problems = settings.check_spec(spec, f"the starting network ({NETWORK_KEY}.mlp: {spec.describe()})")
    if problems:
        raise ConfigError(
            "pbt.network_mutation does not fit the starting network:\n  - "
            + "\n  - ".join(problems)
            + "\nWiden the limits in pbt.network_mutation or start from a network inside them."
        )
    return spec


def draw_kind(settings: NetworkMutationConfig, rng: random.Random) -> str:
    """One kind, drawn with the configured probabilities (one ``rng.random()``)."""
    point = rng.random()
    total = 0.0
    chosen = HYPERPARAMETERS
    for name, probability in settings.probabilities():
        total += probability
        if probability > 0 and point < total:
            return name
        if probability > 0:
            chosen = name
    return chosen  # point fell in the rounding gap above the last kind


def plan_change(spec: NetworkSpec, kind: str, settings: NetworkMutationConfig, rng: random.Random) -> NetworkChange:
    """What the drawn ``kind`` does to ``spec``, inside the limits; pure and reproducible from ``rng``."""
    seed = rng.getrandbits(31)
    sd = float(settings.mutation_sd)
    if kind == ARCHITECTURE:
        blocks = ["mlp"] + (["rnn"] if spec.rnn is not None else []) + (["cnn"] if spec.cnn else [])
        block = blocks[0] if len(blocks) == 1 else rng.choice(blocks)  # MLP-only: the draws as before
        if block != "mlp":
            return _block_change(spec, block, settings, rng, seed, sd)
        if rng.random() < settings.new_layer:
            return _layer_change(spec, settings, rng, seed, sd)
        return _units_change(spec, settings, rng, seed, sd)
    if kind == ACTIVATION:
        others = [name for name in settings.activations if name != spec.activation]
        if not others:
            return NetworkChange(kind, spec, spec, seed=seed, mutation_sd=sd, why="no other allowed activation")
        new = dataclasses.replace(spec, activation=rng.choice(others))
        return NetworkChange(kind, spec, new, ACTIVATION, seed=seed, mutation_sd=sd)
    if kind == PARAMETERS:
        return NetworkChange(kind, spec, spec, PARAMETERS, seed=seed, mutation_sd=sd)
    return NetworkChange(kind, spec, spec, seed=seed, mutation_sd=sd)


def _block_change(
    spec: NetworkSpec, block: str, settings: NetworkMutationConfig, rng: random.Random, seed: int, sd: float
) -> NetworkChange:
    layer: Optional[int] = None
    if block == "rnn":
        assert spec.rnn is not None
        op, rnn, why = plan_rnn(spec.rnn, settings, rng, rng.random() < settings.new_layer)
        after = spec if rnn is None else dataclasses.replace(spec, rnn=rnn)
    else:
        op, layer, cnn, why = plan_cnn(spec.cnn, settings, rng, rng.random() < settings.new_layer)
        after = dataclasses.replace(spec, cnn=cnn)
    if op == NONE:
        return NetworkChange(ARCHITECTURE, spec, spec, seed=seed, mutation_sd=sd, why=why, block=block)
    return NetworkChange(ARCHITECTURE, spec, after, op, layer=layer, seed=seed, mutation_sd=sd, block=block)


def _layer_change(
    spec: NetworkSpec, settings: NetworkMutationConfig, rng: random.Random, seed: int, sd: float
) -> NetworkChange:
    units = list(spec.units)
    can_add, can_remove = len(units) < settings.max_layers, len(units) > settings.min_layers
    if not (can_add or can_remove):
        return NetworkChange(
            ARCHITECTURE, spec, spec, seed=seed, mutation_sd=sd, why=f"min_layers = max_layers = {len(units)}"
        )
    add = can_add if not (can_add and can_remove) else rng.random() < 0.5
    if add:  # a new last hidden layer as wide as the current last one (AgileRL's choice)
        new = dataclasses.replace(spec, units=tuple(units + [units[-1]]))
        return NetworkChange(ARCHITECTURE, spec, new, ADD_LAYER, layer=len(units), seed=seed, mutation_sd=sd)
    new = dataclasses.replace(spec, units=tuple(units[:-1]))
    return NetworkChange(ARCHITECTURE, spec, new, REMOVE_LAYER, layer=len(units) - 1, seed=seed, mutation_sd=sd)


def _units_change(
    spec: NetworkSpec, settings: NetworkMutationConfig, rng: random.Random, seed: int, sd: float
) -> NetworkChange:
    units = list(spec.units)
    layer = rng.randrange(len(units))
    step = rng.choice(list(settings.unit_changes))
    grown = min(settings.max_units, units[layer] + step)
    shrunk = max(settings.min_units, units[layer] - step)
    options = [(op, n) for op, n in ((ADD_UNITS, grown), (REMOVE_UNITS, shrunk)) if n != units[layer]]
    if not options:
        return NetworkChange(
            ARCHITECTURE, spec, spec, seed=seed, mutation_sd=sd, why=f"layer {layer} is at both min_units and max_units"
        )
    op, count = options[0] if len(options) == 1 else options[0 if rng.random() < 0.5 else 1]
    units[layer] = count
    return NetworkChange(
        ARCHITECTURE, spec, dataclasses.replace(spec, units=tuple(units)), op, layer=layer, seed=seed, mutation_sd=sd
    )


def network_of(data: Any) -> Optional[NetworkSpec]:
    """The spec in a record's or lineage entry's ``network`` value; None when absent or invalid."""
    if data is None:
        return None
    try:
        return NetworkSpec.from_dict(data)
    except ValueError:
        return None


class NetworkTracker:
    """A member's network as PBT tracks it (no torch): the spec in force and its parameter count
    (set by the agent glue). The change of an explore step travels in the
    :class:`pbt.selection.Decision`, not here."""

    def __init__(self, settings: NetworkMutationConfig, spec: NetworkSpec) -> None:
        self.settings = settings
        self.spec = spec
        self.start = spec
        """The configured network: a peer's differs from it only in what mutates (its RNN cell, kernels...)."""
        self.parameters: Optional[int] = None

    @classmethod
    def from_config(
        cls, settings: Optional[NetworkMutationConfig], cfg: Mapping[str, Any]
    ) -> Optional["NetworkTracker"]:
        """None when network mutations are off; ConfigError when the starting network does not fit."""
        return None if settings is None else cls(settings, validate_start(settings, cfg))

    def within_limits(self, spec: Optional[NetworkSpec], what: str) -> Optional[NetworkSpec]:
        """``spec`` when it lies inside this member's configured limits (max_units, max_layers,
        activations: a peer's record never makes it build a larger network); else None, logged."""
        problems = [] if spec is None else self.settings.check_spec(spec, what, self.start)
        if problems:
            logger.warning("not adopting %s: %s", what, "; ".join(problems))
            return None
        return spec

    def resume(self, saved: Any, source: str) -> Optional[str]:
        """Take the network saved in a record or lineage entry; why not (it is kept) otherwise."""
        if saved is None:
            return None
        try:
            spec = NetworkSpec.from_dict(saved, "network")
        except ValueError as exc:
            return f"{source} holds an invalid network ({exc})"
        problems = self.settings.check_spec(spec, f"{source}'s network", self.start)
        if problems:
            return "; ".join(problems)
        self.spec = spec
        return None

    def record_value(self) -> Dict[str, Any]:
        """The ``network`` value of records and lineage entries."""
        value = self.spec.to_dict()
        if self.parameters is not None:
            value["parameters"] = int(self.parameters)
        return value

    def draw(self, rng: random.Random) -> str:
        """This explore step's kind (one ``rng.random()``); only ``hyperparameters`` lets the scheme mutate."""
        return draw_kind(self.settings, rng)

    def plan(self, kind: str, donor_network: Any, rng: random.Random) -> NetworkChange:
        """The network change of an explore step of ``kind`` (``donor_network``: the donor's recorded
        network when the member takes a donor's weights, else None). The change starts from the
        donor's network, which the member adopts first."""
        base = self.within_limits(network_of(donor_network), "the donor's network") or self.spec
        return plan_change(base, kind, self.settings, rng)


def network_value(tracker: Optional[NetworkTracker]) -> Optional[Dict[str, Any]]:
    """The ``network`` value of records and lineage entries (None: the network is not evolved)."""
    return None if tracker is None else tracker.record_value()


def network_overrides(tracker: Optional[NetworkTracker]) -> Dict[str, Any]:
    """The config keys building the tracked network ({} when the network is not evolved)."""
    return {} if tracker is None else tracker.spec.overrides()


def resume_network(tracker: Optional[NetworkTracker], saved: Any, source: str, policy_idx: int) -> None:
    """Take a resumed member's recorded network; an invalid one is logged and the configured kept."""
    problem = None if tracker is None else tracker.resume(saved, source)
    if problem and tracker is not None:
        logger.warning(
            "PBT policy %d: %s; resuming with the configured network %s", policy_idx, problem, tracker.spec.describe()
        )
