"""What PBT needs from a live rl_games agent, behind one small interface (no torch at import time).

An :class:`AgentAdapter` wraps the agent rl_games built (``algo``) and offers: its full state, loading
a donor's weights, setting and reading hyperparameters in the running agent, which changed keys need
a rebuild (an exec restart), the non-finite weight check and a weight fingerprint. Which
hyperparameters can change in place is learner-specific: each learner's adapter declares its table
(:mod:`pbt.rl_games.a2c` for PPO). See docs/rl_games.md.

This base class is the exec-only adapter: it changes nothing in place, so every hyperparameter change
is carried out by re-executing the process (:mod:`pbt.restart`), which works for any rl_games agent
that saves and loads its full state.
"""

import collections
import logging
import math
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError
from pbt.storage.checkpoints import model_fingerprint

log = logging.getLogger(__name__)

#: Prefix of the rl_games agent settings in the composed config.
CONFIG = "train.params.config."

Setter = Callable[[Any, Any], None]
Reader = Callable[[Any], Any]


#: The attribute torch.compile's wrapper (``OptimizedModule``) keeps the module under: a compiled
#: model's state_dict names every tensor ``_orig_mod.<name>``.
COMPILED_SEGMENT = "_orig_mod"
#: Checkpoint entries that are module state_dicts (the model, the central value net), whose keys
#: change when rl_games compiles the module (``train.params.config.torch_compile``).
MODULE_STATES = ("model", "assymetric_vf_nets")


def plain_key(key: Any) -> Any:
    """``key`` without torch.compile's ``_orig_mod`` segments (at any depth)."""
    if not isinstance(key, str) or COMPILED_SEGMENT not in key:
        return key
    return ".".join(part for part in key.split(".") if part != COMPILED_SEGMENT)


def plain_state_dict(state: Any) -> Any:
    """A state_dict with the keys an uncompiled module has (anything else returned unchanged)."""
    if not isinstance(state, Mapping) or not any(plain_key(k) != k for k in state):
        return state
    return _same_kind(state, ((plain_key(k), v) for k, v in state.items()))


def _same_kind(state: Mapping[str, Any], items: Any) -> Dict[str, Any]:
    return collections.OrderedDict(items) if isinstance(state, collections.OrderedDict) else dict(items)


def plain_checkpoint(state: Any) -> Any:
    """A checkpoint whose module states have uncompiled keys: what this project writes, so a compiled
    and an uncompiled agent (a GPU member, a CPU play or a restart before rl_games compiles) load it."""
    if not isinstance(state, Mapping):
        return state
    if not any(
        isinstance(state.get(name), Mapping) and plain_state_dict(state[name]) is not state[name]
        for name in MODULE_STATES
    ):
        return state
    out = dict(state)
    for name in MODULE_STATES:
        if name in out:
            out[name] = plain_state_dict(out[name])
    return out


def live_state_dict(state: Any, module: Any) -> Any:
    """``state`` (any key form) with the keys ``module`` has now, compiled or not."""
    if not isinstance(state, Mapping):
        return state
    live = {plain_key(k): k for k in module.state_dict()}
    return _same_kind(state, ((live.get(plain_key(k), k), v) for k, v in state.items()))


def nonfinite_tensors(state: Mapping[str, Any], limit: int = 3) -> List[str]:
    """Names of (up to ``limit``) floating tensors in a state_dict holding NaN or inf."""
    import torch

    bad: List[str] = []
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad


def state_dict_mismatch(own: Mapping[str, Any], other: Any, where: str, limit: int = 3) -> Optional[str]:
    """Why ``other`` cannot be loaded into a module whose state_dict is ``own`` with
    ``load_state_dict`` (strict): missing or unexpected keys, a value that is no tensor, another
    shape. None when it fits. Reads only; copies nothing."""
    import torch

    if not isinstance(other, Mapping):
        return f"{where} is a {type(other).__name__}, not a state_dict"
    missing = sorted(set(own) - set(other))
    extra = sorted(str(k) for k in set(other) - set(own))
    if missing or extra:
        parts = (
            [f"missing {', '.join(missing[:limit])}{' ...' if len(missing) > limit else ''}"] if missing else []
        ) + ([f"unexpected {', '.join(extra[:limit])}{' ...' if len(extra) > limit else ''}"] if extra else [])
        return f"{where} keys differ: {'; '.join(parts)}"
    for key in own:
        mine, theirs = own[key], other[key]
        if not isinstance(mine, torch.Tensor):
            continue
        if not isinstance(theirs, torch.Tensor):
            return f"{where}['{key}'] is a {type(theirs).__name__}, not a tensor"
        if tuple(theirs.shape) != tuple(mine.shape):
            return f"{where}['{key}'] has shape {tuple(theirs.shape)}, this agent's {tuple(mine.shape)}"
    return None


def optimizer_mismatch(optimizer: Any, other: Any, where: str) -> Optional[str]:
    """Why ``other`` cannot be loaded into ``optimizer`` (torch.optim): another number of groups or
    parameters, or per-parameter state (Adam's moments) shaped unlike the parameter. None: fits."""
    import torch

    if (
        not isinstance(other, Mapping)
        or not isinstance(other.get("param_groups"), Sequence)
        or not isinstance(other.get("state"), Mapping)
    ):
        return f"{where} is not an optimizer state_dict (param_groups and state)"
    groups = optimizer.param_groups
    theirs = other["param_groups"]
    if len(theirs) != len(groups):
        return f"{where} has {len(theirs)} parameter groups, this agent's {len(groups)}"
    shapes: Dict[Any, Tuple[int, ...]] = {}
    for index, (mine, group) in enumerate(zip(groups, theirs)):
        ids = group.get("params") if isinstance(group, Mapping) else None
        if not isinstance(ids, Sequence) or len(ids) != len(mine["params"]):
            return (
                f"{where} group {index} holds {len(ids) if isinstance(ids, Sequence) else '?'} parameters, "
                f"this agent's {len(mine['params'])}"
            )
        shapes.update({pid: tuple(param.shape) for pid, param in zip(ids, mine["params"])})
    for pid, entry in other["state"].items():
        if pid not in shapes or not isinstance(entry, Mapping):
            return f"{where} has state for an unknown parameter {pid!r:.80}"
        for name, value in entry.items():
            if not isinstance(value, torch.Tensor):
                if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > 2**53:
                    return f"{where} state {pid}.{name!r:.80} is a {type(value).__name__}, not a tensor or count"
                continue
            if value.dim() > 0 and tuple(value.shape) != shapes[pid]:
                return f"{where} state {pid}.{name} has shape {tuple(value.shape)}, its parameter {shapes[pid]}"
            if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
                return f"{where} state {pid}.{name} holds NaN or inf"
            if name in _SQUARES and bool((value < 0).any()):
                return f"{where} state {pid}.{name} holds negative second moments"
    return None


_SQUARES = ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum")
"""Optimizer state that is a sum of squares (Adam, RMSprop, Adagrad): never negative."""


def donor_optimizer_state(optimizer: Any, other: Mapping[str, Any]) -> Dict[str, Any]:
    """``other``'s per-parameter state (the moments; checked by :func:`optimizer_mismatch`) under
    ``optimizer``'s own ``param_groups``: a donor's hyperparameters (lr, betas, eps, maximize,
    capturable, ...) are never loaded, only its tensors, mapped onto this optimizer's parameters
    by position."""
    own = optimizer.state_dict()
    theirs = [pid for group in other["param_groups"] for pid in group["params"]]
    mine = [pid for group in own["param_groups"] for pid in group["params"]]
    ids = dict(zip(theirs, mine))
    return {
        "state": {ids[pid]: dict(entry) for pid, entry in other["state"].items()},
        "param_groups": own["param_groups"],
    }


def _plain_score(value: Any) -> bool:
    """True for a finite score within 1e12: a number, a numpy scalar or a one-element tensor (as
    rl_games saves ``last_mean_rewards``); not a string, a bool or an array."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return False
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return False
    return math.isfinite(number) and abs(number) <= 1e12


def changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, Any]:
    """The keys whose value differs, with their new values."""
    return {k: v for k, v in after.items() if before.get(k) != v}


LEARNING_RATE = CONFIG + "learning_rate"


def rate_factor(before: Mapping[str, Any], after: Mapping[str, Any], key: str = LEARNING_RATE) -> float:
    """How many times ``after``'s learning rate (``key``) is ``before``'s (1 where either lacks a
    positive one)."""
    old, new = positive_number(before.get(key)), positive_number(after.get(key))
    return new / old if old is not None and new is not None else 1.0


def positive_number(value: Any) -> Optional[float]:
    """``value`` as a float when it is a finite positive number (not a bool); else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


class AgentAdapter:
    """A live rl_games agent as PBT sees it. Subclasses fill :attr:`setters` and :attr:`readers`."""

    #: Full config key -> how to apply a new value to the live agent (empty: exec-only).
    setters: ClassVar[Mapping[str, Setter]] = {}
    #: Full config key -> how to read the value in force (same keys as :attr:`setters`).
    readers: ClassVar[Mapping[str, Reader]] = {}
    #: The learner keeps the ranks of a multi-process (``multi_gpu``) agent in step with rank 0, the
    #: only rank running PBT (TRPO: pbt/rl_games/trpo/spmd.py). False: such a member is refused.
    follows_rank0: ClassVar[bool] = False
    #: The config key of the learning rate a schedule may move (:meth:`rate_in_force`): a change
    #: scales the rate it carries as it scales this key.
    rate_key: ClassVar[str] = LEARNING_RATE
    #: rl_games score meters that describe the policy that filled them (cleared on new weights).
    SCORE_METERS: ClassVar[Tuple[str, ...]] = ("game_rewards", "game_shaped_rewards", "game_lengths")

    def __init__(self, algo: Any) -> None:
        self.algo = algo

    # -- the in-place table -----------------------------------------------------------------------
    @classmethod
    def inplace_keys(cls) -> List[str]:
        """Full config keys that can change in the running agent."""
        return sorted(cls.setters)

    @classmethod
    def rebuild_keys(cls, changes: Mapping[str, Any]) -> List[str]:
        """Changed keys that cannot be applied in place (they need a process restart)."""
        return sorted(k for k in changes if k not in cls.setters)

    @classmethod
    def inplace_part(cls, params: Mapping[str, Any]) -> Dict[str, Any]:
        """The entries of ``params`` that can be applied in place."""
        return {k: v for k, v in params.items() if k in cls.setters}

    # -- hyperparameters --------------------------------------------------------------------------
    def set_hyperparameters(self, params: Mapping[str, Any]) -> None:
        """Apply ``params`` to the running agent; every key must be in :meth:`inplace_keys`."""
        refused = self.rebuild_keys(params)
        if refused:
            raise ConfigError(
                f"{', '.join(refused)} cannot change in a running {type(self).__name__} agent (they need a "
                f"restart). Keys that can: {', '.join(self.inplace_keys()) or 'none'}."
            )
        for key, value in params.items():
            self.setters[key](self.algo, value)

    def rate_in_force(self, state: Optional[Mapping[str, Any]] = None) -> Optional[float]:
        """The learning rate a schedule has moved the agent to (``state``: a checkpoint's instead),
        which a change carries on like the optimizer's moments; None where the configured learning
        rate is the rate in force (no such schedule, or the checkpoint does not say)."""
        return None

    def put_rate(self, rate: float) -> None:
        """Put ``rate`` in force; called only where :meth:`rate_in_force` gave one."""
        raise NotImplementedError(f"{type(self).__name__} gives a rate in force but cannot put one")

    def write_rate(self, state: Dict[str, Any], rate: float) -> None:
        """Write ``rate`` into checkpoint ``state``, for a restarted process to restore it (as
        :meth:`put_rate` would put it in force); called only where :meth:`rate_in_force` gave one."""
        raise NotImplementedError(f"{type(self).__name__} gives a rate in force but cannot write one")

    def read(self, key: str) -> Any:
        """The value of ``key`` in force in the agent (None when the adapter cannot read it)."""
        reader = self.readers.get(key)
        if reader is None:
            return None
        value = reader(self.algo)
        return value.item() if hasattr(value, "item") else value

    # -- state and weights ------------------------------------------------------------------------
    def full_state(self) -> Dict[str, Any]:
        """Weights, normalizers, optimizer, frame and epoch counts and env state (a checkpoint), with
        the module keys of an uncompiled agent (:func:`plain_checkpoint`)."""
        return plain_checkpoint(self.algo.get_full_state_weights())

    def _live_modules(self) -> Dict[str, Any]:
        """The modules behind :data:`MODULE_STATES` in this agent."""
        modules = {"model": self.algo.model}
        if getattr(self.algo, "has_central_value", False):
            modules["assymetric_vf_nets"] = self.algo.central_value_net
        return modules

    def live_checkpoint(self, state: Mapping[str, Any]) -> Dict[str, Any]:
        """``state`` with its module keys as this agent's modules name them now (compiled or not)."""
        out = dict(state)
        for name, module in self._live_modules().items():
            if name in out:
                out[name] = live_state_dict(out[name], module)
        return out

    def state_problem(self, state: Any, counts: bool = False) -> Optional[str]:
        """Why ``state`` (a checkpoint) cannot be loaded into this agent, checked before one tensor is
        copied: the model's keys and shapes, the normalizers, the optimizer, the central value net
        (everything ``set_full_state_weights`` loads), and with ``counts`` the frame and epoch.
        None when it fits."""
        algo = self.algo
        if not isinstance(state, Mapping):
            return f"the checkpoint is a {type(state).__name__}, not a dict"
        state = self.live_checkpoint(state)
        problem = state_dict_mismatch(algo.model.state_dict(), state.get("model"), "model")
        for name, module in self._stats_modules().items():  # set_stats_weights loads these when present
            if problem is None and (name in state or name == "advantage_mean_std"):
                problem = state_dict_mismatch(module.state_dict(), state.get(name), name)
        if problem is None and getattr(algo, "optimizer", None) is not None:
            problem = optimizer_mismatch(algo.optimizer, state.get("optimizer"), "optimizer")
        if problem is None and getattr(algo, "has_central_value", False):
            net = algo.central_value_net
            problem = state_dict_mismatch(net.state_dict(), state.get("assymetric_vf_nets"), "assymetric_vf_nets")
            if problem is None and "assymetric_vf_optimizer" in state:
                problem = optimizer_mismatch(net.optimizer, state["assymetric_vf_optimizer"], "assymetric_vf_optimizer")
        if problem is None and counts:
            for key in ("frame", "epoch"):
                value = state.get(key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    problem = f"its {key} is {value!r}, not a count"
        return problem

    def _stats_modules(self) -> Dict[str, Any]:
        """The normalizers rl_games' ``set_stats_weights`` loads, by checkpoint key."""
        algo = self.algo
        model = algo.model
        modules: Dict[str, Any] = {}
        if getattr(algo, "normalize_rms_advantage", False):
            modules["advantage_mean_std"] = algo.advantage_mean_std
        if getattr(algo, "normalize_input", False) and hasattr(model, "running_mean_std"):
            modules["running_mean_std"] = model.running_mean_std
        if getattr(algo, "normalize_value", False) and hasattr(model, "value_mean_std"):
            modules["reward_mean_std"] = model.value_mean_std
        return modules

    def restore(self, state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        """Load a checkpoint of this member (frame and epoch counts included), then put the
        configured hyperparameters (``config``: the rl_games agent settings) back in force.
        ConfigError, before anything is loaded, when the checkpoint does not fit this agent."""
        problem = self.state_problem(state, counts=True)
        if problem is not None:
            raise ConfigError(
                f"the checkpoint does not fit this agent: {problem}. It was written by an agent with "
                "another network or observation/action space: start from a checkpoint of this "
                "configuration, or set the network (train.params.network) it was trained with."
            )
        self.algo.set_full_state_weights(self.own_settings(self.live_checkpoint(state), donor=False), set_epoch=True)

    def own_settings(self, state: Mapping[str, Any], donor: bool) -> Dict[str, Any]:
        """``state`` (checked by :meth:`state_problem`) with this agent's own optimizer
        hyperparameters (``param_groups``) in place of the checkpoint's: a checkpoint contributes
        tensors only. A ``donor``'s ``last_mean_rewards`` (rl_games' best-ever score), mixed-precision
        scaler and env state are replaced by this agent's own; a checkpoint of its own keeps them
        when they are plain finite numbers."""
        algo = self.algo
        out = dict(state)
        if getattr(algo, "optimizer", None) is not None and "optimizer" in out:
            out["optimizer"] = donor_optimizer_state(algo.optimizer, out["optimizer"])
        if getattr(algo, "has_central_value", False) and "assymetric_vf_optimizer" in out:
            out["assymetric_vf_optimizer"] = donor_optimizer_state(
                algo.central_value_net.optimizer, out["assymetric_vf_optimizer"]
            )
        if donor or not _plain_score(out.get("last_mean_rewards")):
            out["last_mean_rewards"] = getattr(algo, "last_mean_rewards", -1000000000)
        if donor:
            out.pop("env_state", None)  # rl_games keeps the env's own state when given none
            if getattr(algo, "mixed_precision", False):
                out["scaler"] = algo.scaler.state_dict()
            else:
                out.pop("scaler", None)
        return out

    def load_weights(self, state: Mapping[str, Any]) -> None:
        """Load a donor's weights, optimizer moments and normalizers, keeping the member's own frame
        and epoch counts, optimizer hyperparameters and bookkeeping (:meth:`own_settings`), and
        clear the score meters of the old policy."""
        self.algo.set_full_state_weights(self.own_settings(self.live_checkpoint(state), donor=True), set_epoch=False)
        for meter in self.SCORE_METERS:
            if hasattr(self.algo, meter):
                getattr(self.algo, meter).clear()

    def nonfinite_weights(self, limit: int = 3) -> List[str]:
        """Names of (up to ``limit``) weights holding NaN or inf: the member diverged."""
        return nonfinite_tensors(plain_state_dict(self.algo.model.state_dict()), limit)

    def fingerprint(self) -> str:
        """sha256 of the model weights: two agents with the same fingerprint hold identical weights."""
        return model_fingerprint(plain_state_dict(self.algo.model.state_dict()))

    def learning_rate(self) -> float:
        """The learning rate the optimizer uses now (NaN when the agent has no single optimizer)."""
        optimizer = getattr(self.algo, "optimizer", None)
        return float(optimizer.param_groups[0]["lr"]) if optimizer is not None else math.nan

    def describe(self) -> str:
        """``frame F, epoch E, lr L, weights W`` for the log lines tests and benchmarks parse."""
        return (
            f"frame {int(self.algo.frame)}, epoch {int(self.algo.epoch_num)}, lr {self.learning_rate():.6g}, "
            f"weights {self.fingerprint()[:16]}"
        )
