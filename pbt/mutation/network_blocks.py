"""The recurrent and convolutional blocks of an rl_games ``actor_critic`` network as network
mutations (``pbt/mutation=agilerl``) see them: their specs, how records and config keys hold them,
their limits and the changes drawn for them. Pure: Python 3.8 and the standard library only; the
torch surgery is in :mod:`pbt.rl_games.surgery_blocks`.

What can change while trained weights are kept: an RNN's hidden units (every layer at once: rl_games'
LSTM/GRU layers share one width) and its number of layers; a CNN's filters per conv layer and its
number of conv layers (a last 3x3, stride 1, padding 1 layer starting as the identity is added, or a
last layer that keeps its input's shape removed). The cell type (LSTM or GRU) and the configured
layers' kernel sizes, strides and padding never change (no weight-keeping map exists).
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError

NETWORK_KEY = "train.params.network"
RNN_UNITS_KEY = NETWORK_KEY + ".rnn.units"
RNN_LAYERS_KEY = NETWORK_KEY + ".rnn.layers"
CONVS_KEY = NETWORK_KEY + ".cnn.convs"
RNN_CELLS: Tuple[str, ...] = ("lstm", "gru")
CONV_TYPES: Tuple[str, ...] = ("conv2d", "conv2d_flatten", "conv1d")
"""rl_games conv types whose layers are plain Conv1d/Conv2d modules (coord_conv2d and the spatial
softmax change what the next layer reads and are refused)."""
MAX_RNN_LAYERS = 16
MAX_CONVS = 16
MAX_WIDTH = 1 << 16
MAX_KERNEL = 64
ADDED_CONV = (3, 1, 1)
"""(kernel, stride, padding) of an added conv layer: the output keeps the input's shape."""


@dataclass(frozen=True)
class RnnSpec:
    """rl_games' ``rnn`` block: the cell, hidden units (of every layer) and layers."""

    name: str
    units: int
    layers: int

    def describe(self) -> str:
        return f"{self.name} {self.units}x{self.layers}"


@dataclass(frozen=True)
class ConvSpec:
    """One layer of rl_games' ``cnn.convs``."""

    filters: int
    kernel_size: int
    strides: int
    padding: int

    def to_config(self) -> Dict[str, int]:
        return {
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
        }


def _int_in(value: Any, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} must be an int in {low}..{high}, got {value!r:.40}")
    return value


def _int_list(value: Any, low: int, high: int, what: str) -> List[int]:
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_CONVS:
        raise ValueError(f"{what} must be a list of 1..{MAX_CONVS} ints, got {value!r:.80}")
    return [_int_in(v, low, high, what) for v in value]


def rnn_from_flat(data: Mapping[str, Any], source: str) -> Optional[RnnSpec]:
    """The RNN of a record's flat ``network`` value (``rnn``, ``rnn_units``, ``rnn_layers``); strict
    (a peer's record is untrusted): ValueError saying what is wrong."""
    name = data.get("rnn")
    if name is None:
        return None
    if name not in RNN_CELLS:
        raise ValueError(f"{source}.rnn must be one of {', '.join(RNN_CELLS)}, got {name!r:.40}")
    units = _int_in(data.get("rnn_units"), 1, MAX_WIDTH, f"{source}.rnn_units")
    layers = _int_in(data.get("rnn_layers"), 1, MAX_RNN_LAYERS, f"{source}.rnn_layers")
    return RnnSpec(str(name), units, layers)


def cnn_from_flat(data: Mapping[str, Any], source: str) -> Tuple[ConvSpec, ...]:
    """The conv layers of a record's flat ``network`` value (``cnn_filters``, ``cnn_kernels``,
    ``cnn_strides``, ``cnn_padding``: one list each); () without a CNN. Strict, as above."""
    if data.get("cnn_filters") is None:
        return ()
    filters = _int_list(data.get("cnn_filters"), 1, MAX_WIDTH, f"{source}.cnn_filters")
    kernels = _int_list(data.get("cnn_kernels"), 1, MAX_KERNEL, f"{source}.cnn_kernels")
    strides = _int_list(data.get("cnn_strides"), 1, MAX_KERNEL, f"{source}.cnn_strides")
    padding = _int_list(data.get("cnn_padding"), 0, MAX_KERNEL, f"{source}.cnn_padding")
    if not len(filters) == len(kernels) == len(strides) == len(padding):
        raise ValueError(f"{source}: cnn_filters, cnn_kernels, cnn_strides and cnn_padding differ in length")
    return tuple(ConvSpec(*layer) for layer in zip(filters, kernels, strides, padding))


def blocks_to_flat(rnn: Optional[RnnSpec], cnn: Tuple[ConvSpec, ...]) -> Dict[str, Any]:
    """The flat ``network`` entries of records (records hold scalars and lists of scalars only)."""
    out: Dict[str, Any] = {}
    if rnn is not None:
        out.update({"rnn": rnn.name, "rnn_units": rnn.units, "rnn_layers": rnn.layers})
    if cnn:
        out.update(
            {
                "cnn_filters": [c.filters for c in cnn],
                "cnn_kernels": [c.kernel_size for c in cnn],
                "cnn_strides": [c.strides for c in cnn],
                "cnn_padding": [c.padding for c in cnn],
            }
        )
    return out


def blocks_overrides(rnn: Optional[RnnSpec], cnn: Tuple[ConvSpec, ...]) -> Dict[str, Any]:
    """The config keys (Hydra overrides) that build these blocks."""
    out: Dict[str, Any] = {}
    if rnn is not None:
        out.update({RNN_UNITS_KEY: rnn.units, RNN_LAYERS_KEY: rnn.layers})
    if cnn:
        out[CONVS_KEY] = [c.to_config() for c in cnn]
    return out


def blocks_describe(rnn: Optional[RnnSpec], cnn: Tuple[ConvSpec, ...]) -> str:
    parts = [] if rnn is None else [rnn.describe()]
    if cnn:
        parts.append("cnn " + str([c.filters for c in cnn]))
    return "".join(", " + p for p in parts)


def _refuse(what: str) -> ConfigError:
    return ConfigError(f"pbt.network_mutation does not support {what}: remove it or use pbt/mutation=default.")


def rnn_from_config(network: Mapping[str, Any]) -> Optional[RnnSpec]:
    """The ``rnn`` block of a composed ``train.params.network`` (None: none); ConfigError for the
    variants whose surgery is not supported."""
    rnn = network.get("rnn")
    if not rnn:
        return None
    if not isinstance(rnn, Mapping):
        raise ConfigError(f"{NETWORK_KEY}.rnn must be a mapping (name, units, layers), got {rnn!r:.80}")
    for option in ("concat_input", "concat_output"):
        if rnn.get(option):
            raise _refuse(f"{NETWORK_KEY}.rnn.{option}=true (the RNN would read its input beside the MLP's)")
    try:
        found = rnn_from_flat(
            {"rnn": rnn.get("name"), "rnn_units": rnn.get("units"), "rnn_layers": rnn.get("layers")}, NETWORK_KEY
        )
    except ValueError as exc:
        raise ConfigError(f"pbt.network_mutation cannot mutate this network's rnn block: {exc}.") from None
    return found


def cnn_from_config(network: Mapping[str, Any]) -> Tuple[ConvSpec, ...]:
    """The ``cnn`` block of a composed ``train.params.network`` (() without one); ConfigError for
    the variants whose surgery is not supported."""
    cnn = network.get("cnn")
    if not cnn:
        return ()
    if not isinstance(cnn, Mapping) or cnn.get("type") not in CONV_TYPES:
        kind = cnn.get("type") if isinstance(cnn, Mapping) else cnn
        raise _refuse(f"{NETWORK_KEY}.cnn.type={kind!r:.40} (supported: {', '.join(CONV_TYPES)})")
    if network.get("normalization"):
        raise _refuse(f"{NETWORK_KEY}.normalization={network.get('normalization')!r:.40} with a cnn block")
    convs = cnn.get("convs")
    if (
        isinstance(convs, str)
        or not isinstance(convs, Sequence)
        or not convs
        or not all(isinstance(c, Mapping) for c in convs)
    ):
        raise ConfigError(f"{NETWORK_KEY}.cnn.convs must be a non-empty list of conv layers, got {convs!r:.80}")
    flat = {
        "cnn_filters": [c.get("filters") for c in convs],
        "cnn_kernels": [c.get("kernel_size") for c in convs],
        "cnn_strides": [c.get("strides") for c in convs],
        "cnn_padding": [c.get("padding") for c in convs],
    }
    try:
        return cnn_from_flat(flat, NETWORK_KEY + ".cnn.convs")
    except ValueError as exc:
        raise ConfigError(
            f"pbt.network_mutation cannot mutate this network's cnn block: {exc} (square kernels, strides and "
            "padding given as single ints)."
        ) from None


def check_blocks(
    settings: Any, rnn: Optional[RnnSpec], cnn: Tuple[ConvSpec, ...], reference: Any, what: str
) -> List[str]:
    """Why these blocks lie outside ``settings``' limits (a NetworkMutationConfig) or differ from
    ``reference``'s (the member's own starting network, when given) in what never mutates: the
    cell, the kernels, strides and padding. Empty: inside."""
    problems: List[str] = []
    if rnn is not None:
        if not settings.min_rnn_layers <= rnn.layers <= settings.max_rnn_layers:
            problems.append(
                f"{what} has {rnn.layers} RNN layers, outside min_rnn_layers..max_rnn_layers "
                f"{settings.min_rnn_layers}..{settings.max_rnn_layers}"
            )
        if not settings.min_rnn_units <= rnn.units <= settings.max_rnn_units:
            problems.append(
                f"{what} has {rnn.units} RNN units, outside min_rnn_units..max_rnn_units "
                f"{settings.min_rnn_units}..{settings.max_rnn_units}"
            )
    outside = [c.filters for c in cnn if not settings.min_filters <= c.filters <= settings.max_filters]
    if outside:
        problems.append(
            f"{what} has conv layers of {outside} filters, outside min_filters..max_filters "
            f"{settings.min_filters}..{settings.max_filters}"
        )
    if cnn and not settings.min_conv_layers <= len(cnn) <= settings.max_conv_layers:
        problems.append(
            f"{what} has {len(cnn)} conv layers, outside min_conv_layers..max_conv_layers "
            f"{settings.min_conv_layers}..{settings.max_conv_layers}"
        )
    if reference is not None:
        own_cell = None if reference.rnn is None else reference.rnn.name
        if (None if rnn is None else rnn.name) != own_cell:
            problems.append(f"{what} has RNN {rnn.name if rnn else None!r}, this member {own_cell!r}")
        shape = [(c.kernel_size, c.strides, c.padding) for c in cnn]
        own = [(c.kernel_size, c.strides, c.padding) for c in reference.cnn]
        expected = own[: len(shape)] + [ADDED_CONV] * max(0, len(shape) - len(own))
        if bool(shape) != bool(own) or shape != expected:
            problems.append(
                f"{what} has conv layers (kernel, stride, padding) {shape}, unlike this member's {own} "
                f"(followed by added {ADDED_CONV} layers)"
            )
    return problems


def plan_rnn(rnn: RnnSpec, settings: Any, rng: Any, new_layer: bool) -> Tuple[str, Optional[RnnSpec], str]:
    """(op, the new RNN or None, why nothing changes): a layer added or removed (``new_layer``) or
    units added or removed, inside the limits."""
    if new_layer:
        can_add, can_remove = rnn.layers < settings.max_rnn_layers, rnn.layers > settings.min_rnn_layers
        if not (can_add or can_remove):
            return "none", None, f"min_rnn_layers = max_rnn_layers = {rnn.layers}"
        add = can_add if not (can_add and can_remove) else rng.random() < 0.5
        layers = rnn.layers + (1 if add else -1)
        return ("add_layer" if add else "remove_layer"), RnnSpec(rnn.name, rnn.units, layers), ""
    step = rng.choice(list(settings.unit_changes))
    grown, shrunk = min(settings.max_rnn_units, rnn.units + step), max(settings.min_rnn_units, rnn.units - step)
    options = [(op, n) for op, n in (("add_units", grown), ("remove_units", shrunk)) if n != rnn.units]
    if not options:
        return "none", None, "the RNN is at both min_rnn_units and max_rnn_units"
    op, units = options[0] if len(options) == 1 else options[0 if rng.random() < 0.5 else 1]
    return op, RnnSpec(rnn.name, units, rnn.layers), ""


def removable(cnn: Tuple[ConvSpec, ...]) -> bool:
    """The last conv layer keeps its input's shape (stride 1, same padding, as many filters as the
    layer before): without it, the flattened features keep their size and layout."""
    last = cnn[-1]
    same = last.strides == 1 and last.kernel_size % 2 == 1 and last.padding == last.kernel_size // 2
    return len(cnn) > 1 and same and cnn[-2].filters == last.filters


def plan_cnn(
    cnn: Tuple[ConvSpec, ...], settings: Any, rng: Any, new_layer: bool = False
) -> Tuple[str, Optional[int], Tuple[ConvSpec, ...], str]:
    """(op, conv layer, the new conv layers, why nothing changes): a last conv layer added or removed
    (``new_layer``), or filters added to or removed from one conv layer, inside the limits."""
    if new_layer:
        can_add = len(cnn) < settings.max_conv_layers
        can_remove = len(cnn) > settings.min_conv_layers and removable(cnn)
        if not (can_add or can_remove):
            return "none", None, cnn, "no conv layer can be added (max_conv_layers) or removed (shape-keeping)"
        if can_add if not (can_add and can_remove) else rng.random() < 0.5:
            added = ConvSpec(cnn[-1].filters, *ADDED_CONV)
            return "add_layer", len(cnn), cnn + (added,), ""
        return "remove_layer", len(cnn) - 1, cnn[:-1], ""
    layer = rng.randrange(len(cnn))
    step = rng.choice(list(settings.filter_changes))
    old = cnn[layer]
    grown, shrunk = min(settings.max_filters, old.filters + step), max(settings.min_filters, old.filters - step)
    options = [(op, n) for op, n in (("add_units", grown), ("remove_units", shrunk)) if n != old.filters]
    if not options:
        return "none", None, cnn, f"conv layer {layer} is at both min_filters and max_filters"
    op, filters = options[0] if len(options) == 1 else options[0 if rng.random() < 0.5 else 1]
    new = ConvSpec(filters, old.kernel_size, old.strides, old.padding)
    return op, layer, cnn[:layer] + (new,) + cnn[layer + 1 :], ""
