"""Network surgery on rl_games ``actor_critic`` networks (the MLP here, the RNN and CNN blocks in
:mod:`pbt.rl_games.surgery_blocks`): carry out a :class:`pbt.mutation.network.NetworkChange`
on a model's weights and its optimizer, keeping what was learned.

Everything here works on state_dicts (plain name -> tensor mappings), so one code path serves the
live agent (:func:`apply_change`, in place) and the checkpoint handed to an exec restart. What each
change does to the function the network computes (measured in tests/rl_games/test_surgery.py):

- widen a layer: the new units get random incoming weights, zero bias and ZERO outgoing weights:
  every output is unchanged (identical up to float summation order);
- narrow a layer: the units with the largest outgoing weights (L2 norm) are kept, in order;
- add a layer: a new last hidden layer initialised to the identity (W = I, b = 0): exact for relu
  (relu(relu(x)) = relu(x)), otherwise the activation is applied once more;
- remove a layer: the last hidden layer is folded into the heads, each unit's activation replaced by
  its least-squares line over standard-normal inputs (exact where the activation is linear there);
- activation: same weights, another activation;
- parameters: AgileRL's normal / super / reset noise on a random 10% of each weight matrix, clamped;
  normalizer statistics (running mean/std) and biases are never touched.

Adam's state is kept for every parameter whose tensor keeps its shape and meaning, and starts fresh
(step 0) for new or reshaped ones.
"""

import copy
import logging
import math
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

import torch

from pbt.errors import ConfigError
from pbt.mutation.network import (
    ADD_LAYER,
    ADD_UNITS,
    CLAMP_FACTOR,
    PARAMETER_FRACTION,
    PARAMETERS,
    REMOVE_LAYER,
    REMOVE_UNITS,
    RESET_PROBABILITY,
    SUPER_PROBABILITY,
    SUPER_SCALE,
    NetworkChange,
    NetworkSpec,
)
from pbt.mutation.network_blocks import cnn_from_config, rnn_from_config
from pbt.rl_games.surgery_blocks import (
    add_conv_layer,
    add_rnn_layer,
    bias_of,
    blocks_problem,
    chain_parts,
    map_hidden,
    remove_conv_layer,
    remove_rnn_layer,
    resize_conv,
    resize_rnn,
    rnn_key,
)

log = logging.getLogger(__name__)

NET = "a2c_network."
CHAINS = ("actor_mlp", "critic_mlp")
_HEAD_RE = re.compile(r"^a2c_network\.(mu|sigma|logits|value)(\.\d+)?\.weight$")

State = Dict[str, torch.Tensor]


def hidden_key(chain: str, layer: int, what: str = "weight") -> str:
    """The state_dict key of hidden layer ``layer`` of ``chain`` (Linear modules sit at even indices:
    rl_games' MLPs are Linear, activation, Linear, activation, ...)."""
    return f"{NET}{chain}.{2 * layer}.{what}"


def chain_depth(state: Mapping[str, Any], chain: str) -> int:
    depth = 0
    while hidden_key(chain, depth) in state:
        depth += 1
    return depth


def heads(state: Mapping[str, Any], chain: str, separate: bool) -> List[str]:
    """Weight keys of the heads fed by ``chain``'s last hidden layer (the value head reads the critic
    MLP when actor and critic are separate, the shared MLP otherwise)."""
    keys = [k for k in state if _HEAD_RE.match(k) and state[k].dim() == 2]
    if not separate:
        return sorted(keys)
    is_value = lambda k: k.startswith(NET + "value.")  # noqa: E731
    return sorted(k for k in keys if is_value(k) == (chain == "critic_mlp"))


def chains(state: Mapping[str, Any]) -> List[str]:
    return [chain for chain in CHAINS if chain_depth(state, chain) > 0]


def spec_problem(model_state: Any, spec: NetworkSpec) -> Optional[str]:
    """Why the weights ``model_state`` (a checkpoint's ``model``) are not a network ``spec``'s hidden
    layers (None: they are), read from the tensor shapes before anything is built: a record naming
    a network its checkpoint does not hold never makes a member or pbt.play allocate it."""
    if not isinstance(model_state, Mapping):
        return "the checkpoint holds no model weights"
    found = chains(model_state)
    if not found:
        return "the checkpoint's model has no actor_critic MLP"
    for chain in found:
        depth = chain_depth(model_state, chain)
        if depth != len(spec.units):
            return f"its {chain} has {depth} hidden layers, the network {spec.describe()} {len(spec.units)}"
        for layer, units in enumerate(spec.units):
            shape = tuple(getattr(model_state[hidden_key(chain, layer)], "shape", ()))
            if len(shape) != 2 or shape[0] != units:
                return f"its {chain} layer {layer} has shape {shape}, the network {spec.describe()} {units} units"
    return blocks_problem(model_state, spec)


def mlp_readers(state: Mapping[str, Any], chain: str, separate: bool, before_mlp: bool) -> List[str]:
    """Weight keys that read the last hidden layer of ``chain``: the RNN after the MLP, else the heads."""
    rnn = rnn_key(chain_parts(chain, separate).rnn, "weight_ih", 0)
    return [rnn] if not before_mlp and rnn in state else heads(state, chain, separate)


def rnn_readers(state: Mapping[str, Any], chain: str, separate: bool, before_mlp: bool) -> List[str]:
    """Weight keys that read the RNN's output: the MLP after the RNN, else the heads."""
    return [hidden_key(chain, 0)] if before_mlp else heads(state, chain, separate)


def cnn_readers(state: Mapping[str, Any], chain: str, separate: bool, before_mlp: bool) -> List[str]:
    """Weight keys that read the CNN's flattened output: the RNN before the MLP, else the MLP."""
    rnn = rnn_key(chain_parts(chain, separate).rnn, "weight_ih", 0)
    return [rnn] if before_mlp and rnn in state else [hidden_key(chain, 0)]


def consumers(state: Mapping[str, Any], chain: str, layer: int, separate: bool, before_mlp: bool = False) -> List[str]:
    """Weight keys that read hidden layer ``layer``'s output."""
    if layer + 1 < chain_depth(state, chain):
        return [hidden_key(chain, layer + 1)]
    return mlp_readers(state, chain, separate, before_mlp)


_bias = bias_of


def _new_rows(rows: int, fan_in: int, like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Incoming weights of new units: torch's default Linear init, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand((rows, fan_in), generator=gen, dtype=like.dtype) * 2 - 1).mul_(bound).to(like.device)


def transform_state(
    state: Mapping[str, torch.Tensor],
    change: NetworkChange,
    separate: bool,
    before_mlp: bool = False,
    hidden: Optional[Dict[str, Any]] = None,
) -> Tuple[State, Set[str]]:
    """(the model state_dict after ``change``, the keys whose optimizer state starts fresh).

    ``state`` is a model state_dict (``algo.model.state_dict()``: normalizers included, never
    changed); ``before_mlp``: rl_games' ``rnn.before_mlp``. Pure: ``state`` is not modified; the
    random draws come from ``change.seed``. ``hidden`` receives, per RNN, how its hidden state maps.
    """
    new: State = {k: v.detach().clone() for k, v in state.items()}
    fresh: Set[str] = set()
    gen = torch.Generator().manual_seed(int(change.seed))
    op = change.op
    for chain in chains(new):
        parts = chain_parts(chain, separate)
        if change.block == "rnn" and op != PARAMETERS and change.after.rnn is not None:
            readers = rnn_readers(new, chain, separate, before_mlp)
            if op in (ADD_UNITS, REMOVE_UNITS):
                keeps = resize_rnn(new, fresh, parts, readers, change.after.rnn.units, gen)
                if hidden is not None:
                    hidden[parts.rnn] = keeps
            elif op == ADD_LAYER:
                add_rnn_layer(new, fresh, parts, readers)
            elif op == REMOVE_LAYER:
                remove_rnn_layer(new, parts)
        elif change.block == "cnn" and op in (ADD_UNITS, REMOVE_UNITS):
            assert change.layer is not None
            filters = change.after.cnn[change.layer].filters
            resize_conv(new, fresh, parts, change.layer, filters, cnn_readers(new, chain, separate, before_mlp), gen)
        elif change.block == "cnn" and op == ADD_LAYER:
            add_conv_layer(new, fresh, parts)
        elif change.block == "cnn" and op == REMOVE_LAYER:
            remove_conv_layer(new, parts)
        elif op in (ADD_UNITS, REMOVE_UNITS):
            assert change.layer is not None
            _resize(new, fresh, chain, change.layer, change.after.units[change.layer], separate, before_mlp, gen)
        elif op == ADD_LAYER:
            _add_layer(new, fresh, chain)
        elif op == REMOVE_LAYER:
            _remove_layer(new, fresh, chain, separate, before_mlp, change.before.activation, gen)
    if op == PARAMETERS:
        _perturb(new, gen, change.mutation_sd)
    return new, fresh


def _resize(
    state: State,
    fresh: Set[str],
    chain: str,
    layer: int,
    units: int,
    separate: bool,
    before_mlp: bool,
    gen: torch.Generator,
) -> None:
    key = hidden_key(chain, layer)
    weight, bias = state[key], state[_bias(key)]
    old = weight.shape[0]
    readers = consumers(state, chain, layer, separate, before_mlp)
    if units > old:
        state[key] = torch.cat([weight, _new_rows(units - old, weight.shape[1], weight, gen)], 0)
        state[_bias(key)] = torch.cat([bias, bias.new_zeros(units - old)])
        for reader in readers:  # zero outgoing weights: the new units add nothing to any output
            w = state[reader]
            state[reader] = torch.cat([w, w.new_zeros((w.shape[0], units - old))], 1)
    else:
        importance = sum((state[reader].pow(2).sum(0) for reader in readers), weight.new_zeros(old))
        keep = torch.sort(torch.topk(importance, units).indices).values
        state[key], state[_bias(key)] = weight[keep].clone(), bias[keep].clone()
        for reader in readers:
            state[reader] = state[reader][:, keep].clone()
    fresh.update({key, _bias(key), *readers})


def _add_layer(state: State, fresh: Set[str], chain: str) -> None:
    depth = chain_depth(state, chain)
    last = state[hidden_key(chain, depth - 1)]
    width = last.shape[0]
    key = hidden_key(chain, depth)
    state[key] = torch.eye(width, dtype=last.dtype, device=last.device)
    state[_bias(key)] = last.new_zeros(width)
    fresh.update({key, _bias(key)})


ACTIVATION_FUNCTIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "elu": torch.nn.functional.elu,
    "selu": torch.selu,
    "swish": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "softplus": torch.nn.functional.softplus,
}
FOLD_SAMPLES = 4096
"""Inputs drawn to linearise the activation of a removed layer."""


def _remove_layer(
    state: State, fresh: Set[str], chain: str, separate: bool, before_mlp: bool, activation: str, gen: torch.Generator
) -> None:
    """Fold the last hidden layer into the heads, its activation replaced by its least-squares line
    per unit, act(z) ~ a + d z, fitted over standard-normal inputs (what rl_games' input normalizer
    produces): exact where the activation is linear on the data (an identity layer after relu)."""
    depth = chain_depth(state, chain)
    key = hidden_key(chain, depth - 1)
    weight, bias = state.pop(key), state.pop(_bias(key))
    act = ACTIVATION_FUNCTIONS[activation]
    first = state[hidden_key(chain, 0)] if depth > 1 else weight
    h = torch.randn((FOLD_SAMPLES, first.shape[1]), generator=gen, dtype=torch.float64).to(weight.device)
    for layer in range(depth - 1):
        h = act(h @ state[hidden_key(chain, layer)].double().T + state[hidden_key(chain, layer, "bias")].double())
    z = h @ weight.double().T + bias.double()
    out = act(z)
    centred = z - z.mean(0)
    variance = centred.pow(2).mean(0)
    slope = torch.where(
        variance > 1e-12,
        (centred * (out - out.mean(0))).mean(0) / variance.clamp_min(1e-12),
        torch.zeros_like(variance),
    )
    offset = out.mean(0) - slope * z.mean(0)
    slope, offset = slope.to(weight.dtype), offset.to(weight.dtype)
    for head in mlp_readers(state, chain, separate, before_mlp):
        head_weight = state[head]
        state[head] = head_weight @ (slope[:, None] * weight)
        if _bias(head) in state:
            state[_bias(head)] = state[_bias(head)] + head_weight @ (offset + slope * bias)
            fresh.add(_bias(head))
        fresh.add(head)


def _perturb(state: State, gen: torch.Generator, sd: float) -> None:
    """AgileRL's parameter mutation on every weight tensor of the network (not biases, not the
    normalizers, which live outside ``a2c_network``)."""
    for key in sorted(state):
        tensor = state[key]
        if not key.startswith(NET) or not key.rpartition(".")[2].startswith("weight") or tensor.dim() < 2:
            continue  # weight matrices, conv kernels and RNN weights; biases and LayerNorm gains kept
        flat = tensor.flatten().clone()
        count = max(1, int(math.ceil(PARAMETER_FRACTION * flat.numel())))
        index = torch.randperm(flat.numel(), generator=gen)[:count].to(flat.device)
        draw = torch.rand(count, generator=gen).to(flat.device)
        noise = torch.randn(count, generator=gen, dtype=flat.dtype).to(flat.device)
        values = flat[index]
        scale = torch.full_like(values, sd)
        scale[draw < SUPER_PROBABILITY] = SUPER_SCALE * sd
        mutated = values + noise * scale * values.abs()
        reset = (draw >= SUPER_PROBABILITY) & (draw < SUPER_PROBABILITY + RESET_PROBABILITY)
        mutated[reset] = noise[reset] * flat.std()
        limit = CLAMP_FACTOR * float(flat.abs().max().clamp_min(1e-8))
        flat[index] = mutated.clamp(-limit, limit)
        state[key] = flat.view_as(tensor)


# -- the live agent ------------------------------------------------------------------------------


def builder_of(algo: Any) -> Any:
    """rl_games' A2CBuilder behind ``algo.network`` (the model factory); ConfigError if absent."""
    builder = getattr(getattr(algo, "network", None), "network_builder", None)
    if builder is None or not isinstance(getattr(builder, "params", None), dict) or "mlp" not in builder.params:
        raise ConfigError(
            "network mutations need an rl_games agent built from an actor_critic network "
            "(algo.network.network_builder.params['mlp']); this agent has none."
        )
    return builder


def current_spec(algo: Any) -> NetworkSpec:
    params = builder_of(algo).params
    mlp = params["mlp"]
    units = tuple(int(u) for u in mlp["units"])
    return NetworkSpec(units, str(mlp["activation"]), rnn_from_config(params), cnn_from_config(params))


def is_separate(algo: Any) -> bool:
    return bool(builder_of(algo).params.get("separate", False))


def is_before_mlp(algo: Any) -> bool:
    rnn = builder_of(algo).params.get("rnn")
    return bool(isinstance(rnn, Mapping) and rnn.get("before_mlp", False))


def _set_params(params: Dict[str, Any], spec: NetworkSpec) -> None:
    """The builder's params describing ``spec``."""
    params["mlp"]["units"] = list(spec.units)
    params["mlp"]["activation"] = spec.activation
    if spec.rnn is not None and isinstance(params.get("rnn"), dict):
        params["rnn"]["units"], params["rnn"]["layers"] = spec.rnn.units, spec.rnn.layers
    if spec.cnn and isinstance(params.get("cnn"), dict):
        params["cnn"]["convs"] = [c.to_config() for c in spec.cnn]


def build_model(algo: Any, spec: NetworkSpec) -> torch.nn.Module:
    """A new model of ``spec`` built as the agent built its own (same spaces, normalizers, device).
    The builder keeps describing the agent's current network."""
    builder = builder_of(algo)
    params = copy.deepcopy(builder.params)
    _set_params(params, spec)
    kept = builder.params
    builder.params = params
    try:
        model = algo.network.build(
            {
                "actions_num": algo.actions_num,
                "input_shape": algo.obs_shape,
                "num_seqs": algo.num_actors * algo.num_agents,
                "value_size": algo.env_info.get("value_size", 1),
                "normalize_value": algo.normalize_value,
                "normalize_input": algo.normalize_input,
            }
        )
    finally:
        builder.params = kept
    return model.to(algo.ppo_device)


def _install(
    algo: Any, model: torch.nn.Module, spec: NetworkSpec, carry: Callable[[torch.optim.Optimizer], None]
) -> None:
    """Make ``model`` the agent's model with a new optimizer like the old one (same class, settings
    and learning rate in force), ``carry`` filling its state."""
    old = algo.optimizer
    # A learner whose optimizer steps only part of the model (TRPO: the value function) says which.
    chosen = getattr(algo, "optimizer_parameters", None)
    optimizer = type(old)(chosen(model) if chosen is not None else model.parameters(), **old.defaults)
    for group, old_group in zip(optimizer.param_groups, old.param_groups):
        group.update({k: v for k, v in old_group.items() if k != "params"})
    carry(optimizer)
    algo.model = model
    algo.optimizer = optimizer
    if getattr(algo, "normalize_value", False) and not getattr(algo, "has_central_value", False):
        algo.value_mean_std = model.value_mean_std
    _model_changed(algo)
    _set_params(builder_of(algo).params, spec)
    if getattr(algo, "is_rnn", False):  # rl_games' ModelA2C*: zeros shaped as the new RNN's states
        default: Callable[[], List[torch.Tensor]] = getattr(model, "get_default_rnn_state")  # noqa: B009
        _set_hidden(algo, [s.to(algo.ppo_device) for s in default()], keep_if_same=True)


def _set_hidden(algo: Any, states: List[torch.Tensor], keep_if_same: bool = False) -> None:
    """The agent's RNN hidden states (and the rollout's per-sequence copies, re-allocated when
    their shape changes: they are filled at the start of each sequence)."""
    old = getattr(algo, "rnn_states", None)
    if keep_if_same and old is not None and [tuple(s.shape) for s in old] == [tuple(s.shape) for s in states]:
        return
    algo.rnn_states = states
    buffers = getattr(algo, "mb_rnn_states", None)
    if buffers is not None:
        algo.mb_rnn_states = [
            mb.new_zeros((mb.shape[0], s.shape[0], mb.shape[2], s.shape[2])) for mb, s in zip(buffers, states)
        ]


def apply_change(algo: Any, change: NetworkChange) -> Set[str]:
    """Carry out ``change`` on the running agent: a new model holding the transformed weights (the
    normalizers copied), a new optimizer keeping Adam's state of unchanged parameters. Returns the
    parameter names whose optimizer state starts fresh."""
    refuse_unsupported(algo)
    old_model, old_optimizer = algo.model, algo.optimizer
    old_hidden = list(getattr(algo, "rnn_states", None) or [])
    hidden: Dict[str, Any] = {}
    state, fresh = transform_state(old_model.state_dict(), change, is_separate(algo), is_before_mlp(algo), hidden)
    model = build_model(algo, change.after)
    model.load_state_dict(state)
    old_params = dict(old_model.named_parameters())

    def carry(optimizer: torch.optim.Optimizer) -> None:
        for name, param in model.named_parameters():
            old_param = old_params.get(name)
            if name in fresh or old_param is None or old_param.shape != param.shape:
                continue
            old_state = old_optimizer.state.get(old_param)
            if old_state:
                optimizer.state[param] = {k: v.clone() if torch.is_tensor(v) else v for k, v in old_state.items()}

    _install(algo, model, change.after, carry)
    if change.block == "rnn" and old_hidden and change.after.rnn is not None:
        _carry_hidden(algo, change, old_hidden, hidden)
    log.info(
        "network: %s (%d parameters; optimizer state fresh for %s)",
        change.describe(),
        parameter_count(model),
        ", ".join(sorted(fresh)) or "none",
    )
    return fresh


def _carry_hidden(algo: Any, change: NetworkChange, old: List[torch.Tensor], hidden: Dict[str, Any]) -> None:
    """The agent's hidden states mapped through an RNN change (new units start at zero), so that
    the episodes under way go on as the widened network computes them."""
    assert change.after.rnn is not None
    rnns = ["a_rnn", "c_rnn"] if is_separate(algo) else ["rnn"]
    per = len(old) // len(rnns)  # LSTM: (h, c) per RNN; GRU: (h,)
    units = change.after.rnn.units
    mapped = [map_hidden(s, change.op, hidden.get(rnns[i // per]), units) for i, s in enumerate(old)]
    _set_hidden(algo, mapped)


def adopt(algo: Any, spec: NetworkSpec) -> None:
    """Rebuild the agent with the network ``spec`` (a donor's) and a fresh optimizer, ready for the
    donor's full state to be loaded into it."""
    refuse_unsupported(algo)
    model = build_model(algo, spec)
    _install(algo, model, spec, lambda optimizer: None)
    log.info("network: adopted %s (%d parameters)", spec.describe(), parameter_count(model))


def swap_in(algo: Any, spec: NetworkSpec) -> Callable[[], None]:
    """:func:`adopt` ``spec``, returning the function that puts the previous model, optimizer and
    builder settings back (a donor whose checkpoint turns out not to fit)."""
    builder = builder_of(algo)
    kept = (algo.model, algo.optimizer, copy.deepcopy(builder.params), getattr(algo, "value_mean_std", None))
    hidden = (getattr(algo, "rnn_states", None), getattr(algo, "mb_rnn_states", None))
    adopt(algo, spec)

    def undo() -> None:
        algo.model, algo.optimizer, builder.params = kept[0], kept[1], kept[2]
        if kept[3] is not None:
            algo.value_mean_std = kept[3]
        if hidden[0] is not None:
            algo.rnn_states, algo.mb_rnn_states = hidden
        _model_changed(algo)
        log.info("network: back to %s", current_spec(algo).describe())

    return undo


def _model_changed(algo: Any) -> None:
    """Tell a learner that keeps references into its model (TRPO's parameter lists) that it changed."""
    hook = getattr(algo, "model_changed", None)
    if hook is not None:
        hook()


def refuse_unsupported(algo: Any) -> None:
    if getattr(algo, "has_central_value", False):
        raise ConfigError(
            "network mutations are not supported with a central value network "
            "(train.params.config.central_value_config): use pbt/mutation=default."
        )
    if type(algo.model).__name__ == "OptimizedModule":
        raise ConfigError("network mutations need an uncompiled model: set train.params.config.torch_compile=false.")


def parameter_count(model: torch.nn.Module) -> int:
    """Trainable parameters of ``model`` (normalizer statistics are buffers, not counted)."""
    return int(sum(p.numel() for p in model.parameters()))
