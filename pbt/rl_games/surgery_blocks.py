"""Surgery on the ``rnn`` and ``cnn`` blocks of rl_games ``actor_critic`` networks (the MLP's is in
:mod:`pbt.rl_games.surgery`, which calls these). Tensor names follow rl_games' A2CBuilder: the RNN
is ``rnn`` (shared) or ``a_rnn``/``c_rnn`` (separate), an ``LSTMWithDones``/``GRUWithDones``
wrapping ``torch.nn.LSTM``/``GRU`` (``<rnn>.rnn.weight_ih_l<k>``, gates stacked along dim 0: LSTM
i, f, g, o; GRU r, z, n), followed by ``layer_norm`` (``a_``/``c_layer_norm``) when ``layer_norm``
is set; the CNN is ``actor_cnn``/``critic_cnn``, Conv layers at even indices (conv, activation).

What each change does to the function the network computes (tests/rl_games/test_surgery_blocks.py):

- RNN units widened: new units get random incoming weights (input and recurrent), zero bias and
  ZERO weights into every old unit and every reader: exact (with a zero initial state for them),
  except under ``rnn.layer_norm``, whose mean and variance then run over the new units too
  (measured: outputs 20% off after widening 16 to 40 units);
- RNN units narrowed: per layer, the units with the largest outgoing weights are kept;
- RNN layer added on top: a near-identity cell (input weights eps*I into the candidate, saturated
  gates, no recurrence) and readers scaled by 1/gain: equal up to O(eps^2) (about 1%), not exact,
  since no LSTM/GRU cell computes the identity;
- RNN top layer removed: the readers read the layer below as they are: not function-preserving;
- conv filters widened: new filters with random weights, zero bias and zero weights in every
  reader (the next conv layer, or the flattened features' reader): exact;
- conv filters narrowed: the filters with the largest outgoing weights are kept;
- conv layer added (last, 3x3, stride 1, padding 1): the identity kernel, exact when the CNN's
  activation is relu (its input is already >= 0), else the activation is applied once more;
- last conv layer removed (only one that keeps its input's shape): the readers read the layer
  below as they are: exact when that layer is the identity (an added one, under relu).
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set

import torch

from pbt.mutation.network import NetworkSpec

NET = "a2c_network."
EPS = 0.1
"""Input scale of an added RNN layer: its candidate sees eps*x, where tanh is nearly linear."""
SATURATION = 5.0
"""Gate bias of an added RNN layer: sigmoid(5) = 0.993 (open), sigmoid(-5) = 0.007 (shut)."""

State = Dict[str, torch.Tensor]


@dataclass(frozen=True)
class Chain:
    """One path from the observation to the heads: the actor's (or the shared one) or the critic's."""

    mlp: str
    rnn: str
    norm: str
    cnn: str


def chain_parts(mlp_chain: str, separate: bool) -> Chain:
    if not separate:
        return Chain(mlp_chain, "rnn", "layer_norm", "actor_cnn")
    if mlp_chain == "critic_mlp":
        return Chain(mlp_chain, "c_rnn", "c_layer_norm", "critic_cnn")
    return Chain(mlp_chain, "a_rnn", "a_layer_norm", "actor_cnn")


def rnn_key(rnn: str, what: str, layer: int) -> str:
    return f"{NET}{rnn}.rnn.{what}_l{layer}"


def conv_key(cnn: str, layer: int, what: str = "weight") -> str:
    return f"{NET}{cnn}.{2 * layer}.{what}"


def rnn_depth(state: Any, rnn: str) -> int:
    depth = 0
    while rnn_key(rnn, "weight_hh", depth) in state:
        depth += 1
    return depth


def conv_depth(state: Any, cnn: str) -> int:
    depth = 0
    while conv_key(cnn, depth) in state:
        depth += 1
    return depth


def bias_of(key: str) -> str:
    """``...weight`` -> ``...bias``, ``...weight_ih_l0`` -> ``...bias_ih_l0``."""
    head, _, last = key.rpartition(".")
    return f"{head}.{last.replace('weight', 'bias', 1)}"


def _uniform(shape: Any, bound: float, like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=like.dtype) * 2 - 1).mul_(bound).to(like.device)


def _pad_columns(state: State, readers: List[str], old: int, extra: int) -> None:
    """Zero columns for ``extra`` new channels in each reader (``old`` channels before; a reader of
    flattened conv features has a block of positions per channel, channel-major)."""
    for reader in readers:
        w = state[reader]
        block = w.shape[1] // old
        grouped = w.reshape(w.shape[0], old, block, *w.shape[2:])
        zeros = grouped.new_zeros((w.shape[0], extra, block, *w.shape[2:]))
        state[reader] = torch.cat([grouped, zeros], 1).reshape(w.shape[0], (old + extra) * block, *w.shape[2:])


def _keep_columns(state: State, readers: List[str], old: int, keep: torch.Tensor) -> None:
    for reader in readers:
        w = state[reader]
        block = w.shape[1] // old
        grouped = w.reshape(w.shape[0], old, block, *w.shape[2:])
        state[reader] = grouped[:, keep].reshape(w.shape[0], len(keep) * block, *w.shape[2:]).clone()


def _importance(state: State, readers: List[str], old: int) -> torch.Tensor:
    """Per channel: the squared norm of every weight reading it."""
    total = torch.zeros(old, dtype=torch.float64)
    for reader in readers:
        w = state[reader].detach().double().cpu()
        total += w.reshape(w.shape[0], old, -1).pow(2).sum((0, 2))
    return total


def _top(importance: torch.Tensor, count: int, device: Any) -> torch.Tensor:
    return torch.sort(torch.topk(importance, count).indices).values.to(device)


# -- RNN -------------------------------------------------------------------------------------------


def resize_rnn(
    state: State, fresh: Set[str], chain: Chain, readers: List[str], units: int, gen: torch.Generator
) -> Optional[List[Any]]:
    """Every layer of ``chain.rnn`` to ``units`` hidden units. Returns how each layer's hidden state
    maps (None: padded with zeros; else the kept indices)."""
    depth = rnn_depth(state, chain.rnn)
    old = state[rnn_key(chain.rnn, "weight_hh", 0)].shape[1]
    gates = state[rnn_key(chain.rnn, "weight_hh", 0)].shape[0] // old
    names = [rnn_key(chain.rnn, w, k) for k in range(depth) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    norm = [f"{NET}{chain.norm}.weight", f"{NET}{chain.norm}.bias"]
    norm = [key for key in norm if key in state]
    fresh.update(names, readers, norm)
    if units > old:
        _widen_rnn(state, chain.rnn, depth, gates, old, units - old, gen)
        _pad_columns(state, readers, old, units - old)
        for key in norm:  # LayerNorm's new units: weight 1, bias 0 (their readers' columns are zero)
            fill = 1.0 if key.endswith("weight") else 0.0
            state[key] = torch.cat([state[key], state[key].new_full((units - old,), fill)])
        return None
    keeps: List[torch.Tensor] = []
    for k in range(depth):  # kept units per layer, by what reads them: the recurrence and the layer above
        above = [rnn_key(chain.rnn, "weight_ih", k + 1)] if k + 1 < depth else readers
        importance = _importance(state, above + [rnn_key(chain.rnn, "weight_hh", k)], old)
        keeps.append(_top(importance, units, state[names[0]].device))
    for k, keep in enumerate(keeps):
        rows = (keep[None, :] + old * torch.arange(gates, device=keep.device)[:, None]).flatten()
        ih, hh = rnn_key(chain.rnn, "weight_ih", k), rnn_key(chain.rnn, "weight_hh", k)
        state[ih] = state[ih][rows] if k == 0 else state[ih][rows][:, keeps[k - 1]]
        state[hh] = state[hh][rows][:, keep]
        for bias in (bias_of(ih), bias_of(hh)):
            state[bias] = state[bias][rows]
    _keep_columns(state, readers, old, keeps[-1])
    for key in norm:
        state[key] = state[key][keeps[-1]]
    return [keep.cpu() for keep in keeps]


def _widen_rnn(state: State, rnn: str, depth: int, gates: int, old: int, extra: int, gen: torch.Generator) -> None:
    new = old + extra
    bound = 1.0 / math.sqrt(new)  # torch's LSTM/GRU init
    for k in range(depth):
        ih, hh = rnn_key(rnn, "weight_ih", k), rnn_key(rnn, "weight_hh", k)
        w_ih = state[ih].reshape(gates, old, -1)
        if k > 0:  # old units never read the new units of the layer below
            w_ih = torch.cat([w_ih, w_ih.new_zeros((gates, old, extra))], 2)
        fan_in = w_ih.shape[2]
        state[ih] = torch.cat([w_ih, _uniform((gates, extra, fan_in), bound, w_ih, gen)], 1).reshape(
            gates * new, fan_in
        )
        w_hh = torch.cat([state[hh].reshape(gates, old, old), state[hh].new_zeros((gates, old, extra))], 2)
        state[hh] = torch.cat([w_hh, _uniform((gates, extra, new), bound, w_hh, gen)], 1).reshape(gates * new, new)
        for bias in (bias_of(ih), bias_of(hh)):
            b = state[bias].reshape(gates, old)
            state[bias] = torch.cat([b, b.new_zeros((gates, extra))], 1).reshape(gates * new)


def add_rnn_layer(state: State, fresh: Set[str], chain: Chain, readers: List[str]) -> None:
    """A near-identity top layer: its candidate reads eps*x, its gates are saturated open (LSTM input
    and output, GRU update towards the candidate) or shut (LSTM forget), nothing recurrent; the
    readers are scaled by 1/gain (not under layer_norm, which is scale-invariant)."""
    depth = rnn_depth(state, chain.rnn)
    top = state[rnn_key(chain.rnn, "weight_hh", depth - 1)]
    units = top.shape[1]
    gates = top.shape[0] // units
    open_gate = 1.0 / (1.0 + math.exp(-SATURATION))
    ih = top.new_zeros((gates, units, units))
    ih[2] = EPS * torch.eye(units, dtype=top.dtype, device=top.device)  # LSTM g, GRU n: the candidate
    bias = top.new_zeros((gates, units))
    if gates == 4:  # LSTM i, f, g, o: c = i*g (+ ~0.007 c_prev), h = o*tanh(c)
        bias[0], bias[1], bias[3] = SATURATION, -SATURATION, SATURATION
        gain = open_gate * open_gate * EPS
    else:  # GRU r, z, n: h = (1 - z) n + z h_prev, z shut
        bias[1] = -SATURATION
        gain = open_gate * EPS
    keys = {w: rnn_key(chain.rnn, w, depth) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    state[keys["weight_ih"]] = ih.reshape(gates * units, units)
    state[keys["weight_hh"]] = top.new_zeros((gates * units, units))
    state[keys["bias_ih"]] = bias.reshape(gates * units)
    state[keys["bias_hh"]] = top.new_zeros(gates * units)
    fresh.update(keys.values())
    if f"{NET}{chain.norm}.weight" not in state:
        for reader in readers:
            state[reader] = state[reader] / gain
            fresh.add(reader)


def remove_rnn_layer(state: State, chain: Chain) -> None:
    depth = rnn_depth(state, chain.rnn)
    for what in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        state.pop(rnn_key(chain.rnn, what, depth - 1))


def map_hidden(hidden: Any, op: str, keeps: Optional[List[Any]], units: int) -> Any:
    """One hidden-state tensor (layers, seqs, units) after an RNN change of ``op`` (``keeps``: the
    kept units per layer of a narrowing; None: zeros for the new units)."""
    if op == "add_layer":
        return torch.cat([hidden, hidden.new_zeros((1, *hidden.shape[1:]))], 0)
    if op == "remove_layer":
        return hidden[:-1].clone()
    if keeps is None:
        extra = units - hidden.shape[2]
        return torch.cat([hidden, hidden.new_zeros((*hidden.shape[:2], extra))], 2)
    return torch.stack([hidden[k][:, keep.to(hidden.device)] for k, keep in enumerate(keeps)])


# -- CNN -------------------------------------------------------------------------------------------


def resize_conv(
    state: State, fresh: Set[str], chain: Chain, layer: int, filters: int, readers: List[str], gen: torch.Generator
) -> None:
    """Conv layer ``layer`` of ``chain.cnn`` to ``filters`` output channels; ``readers``: what reads
    the last conv layer's flattened output."""
    key = conv_key(chain.cnn, layer)
    weight, bias = state[key], state[bias_of(key)]
    old = weight.shape[0]
    after = [conv_key(chain.cnn, layer + 1)] if layer + 1 < conv_depth(state, chain.cnn) else readers
    fresh.update({key, bias_of(key), *after})
    if filters > old:
        fan_in = int(weight[0].numel())
        grown = _uniform((filters - old, *weight.shape[1:]), 1.0 / math.sqrt(fan_in), weight, gen)
        state[key] = torch.cat([weight, grown], 0)
        state[bias_of(key)] = torch.cat([bias, bias.new_zeros(filters - old)])
        _pad_columns(state, after, old, filters - old)
        return
    keep = _top(_importance(state, after, old), filters, weight.device)
    state[key], state[bias_of(key)] = weight[keep].clone(), bias[keep].clone()
    _keep_columns(state, after, old, keep)


def add_conv_layer(state: State, fresh: Set[str], chain: Chain) -> None:
    depth = conv_depth(state, chain.cnn)
    last = state[conv_key(chain.cnn, depth - 1)]
    filters, spatial = last.shape[0], last.dim() - 2
    weight = last.new_zeros((filters, filters, 3**spatial))  # the kernel flattened: its centre is 3**spatial // 2
    weight[:, :, 3**spatial // 2] = torch.eye(filters, dtype=last.dtype, device=last.device)
    weight = weight.reshape(filters, filters, *([3] * spatial))
    key = conv_key(chain.cnn, depth)
    state[key], state[bias_of(key)] = weight, last.new_zeros(filters)
    fresh.update({key, bias_of(key)})


def remove_conv_layer(state: State, chain: Chain) -> None:
    key = conv_key(chain.cnn, conv_depth(state, chain.cnn) - 1)
    state.pop(key)
    state.pop(bias_of(key))


# -- checks --------------------------------------------------------------------------------------


def blocks_problem(model_state: Any, spec: NetworkSpec) -> Optional[str]:
    """Why the weights ``model_state`` do not hold ``spec``'s RNN and CNN (None: they do), from the
    tensor shapes alone (an untrusted record never makes anything be built)."""
    rnns = [name for name in ("rnn", "a_rnn", "c_rnn") if rnn_key(name, "weight_hh", 0) in model_state]
    if bool(rnns) != (spec.rnn is not None):
        return f"its model {'has' if rnns else 'has no'} RNN, the network {spec.describe()} {'none' if rnns else 'one'}"
    for rnn in rnns:
        assert spec.rnn is not None
        depth = rnn_depth(model_state, rnn)
        shape = tuple(getattr(model_state[rnn_key(rnn, "weight_hh", 0)], "shape", ()))
        gates = {"lstm": 4, "gru": 3}[spec.rnn.name]
        if depth != spec.rnn.layers or shape != (gates * spec.rnn.units, spec.rnn.units):
            return f"its {rnn} has {depth} layers of shape {shape}, the network {spec.describe()} another"
    cnns = [name for name in ("actor_cnn", "critic_cnn") if conv_key(name, 0) in model_state]
    if bool(cnns) != bool(spec.cnn):
        return f"its model {'has' if cnns else 'has no'} CNN, the network {spec.describe()} {'none' if cnns else 'one'}"
    for cnn in cnns:
        if conv_depth(model_state, cnn) != len(spec.cnn):
            return f"its {cnn} has {conv_depth(model_state, cnn)} conv layers, the network {spec.describe()} {len(spec.cnn)}"
        for k, conv in enumerate(spec.cnn):
            shape = tuple(getattr(model_state[conv_key(cnn, k)], "shape", ()))
            if len(shape) < 3 or shape[0] != conv.filters or any(s != conv.kernel_size for s in shape[2:]):
                return f"its {cnn} layer {k} has shape {shape}, the network {spec.describe()} {conv.filters} filters"
    return None
