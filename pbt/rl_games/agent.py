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
import logging
import math
from typing import Any, Callable, ClassVar, Dict, List, Mapping

from pbt.errors import ConfigError
from pbt.storage.checkpoints import model_fingerprint

log = logging.getLogger(__name__)

#: Prefix of the rl_games agent settings in the composed config.
CONFIG = "train.params.config."

Setter = Callable[[Any, Any], None]
Reader = Callable[[Any], Any]


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


def changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, Any]:
    """The keys whose value differs, with their new values."""
    return {k: v for k, v in after.items() if before.get(k) != v}


class AgentAdapter:
    """A live rl_games agent as PBT sees it. Subclasses fill :attr:`setters` and :attr:`readers`."""

    #: Full config key -> how to apply a new value to the live agent (empty: exec-only).
    setters: ClassVar[Mapping[str, Setter]] = {}
    #: Full config key -> how to read the value in force (same keys as :attr:`setters`).
    readers: ClassVar[Mapping[str, Reader]] = {}
    #: rl_games score meters that describe the policy that filled them (cleared on new weights).
    SCORE_METERS: ClassVar[tuple] = ("game_rewards", "game_shaped_rewards", "game_lengths")

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
                f"restart). Keys that can: {', '.join(self.inplace_keys()) or 'none'}.")
        for key, value in params.items():
            self.setters[key](self.algo, value)

    def read(self, key: str) -> Any:
        """The value of ``key`` in force in the agent (None when the adapter cannot read it)."""
        reader = self.readers.get(key)
        if reader is None:
            return None
        value = reader(self.algo)
        return value.item() if hasattr(value, "item") else value

    # -- state and weights ------------------------------------------------------------------------
    def full_state(self) -> Dict[str, Any]:
        """Weights, normalizers, optimizer, frame and epoch counts and env state (a checkpoint)."""
        return self.algo.get_full_state_weights()

    def restore(self, state: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        """Load a checkpoint of this member (frame and epoch counts included), then put the
        configured hyperparameters (``config``: the rl_games agent settings) back in force."""
        self.algo.set_full_state_weights(state, set_epoch=True)

    def load_weights(self, state: Mapping[str, Any]) -> None:
        """Load a donor's weights, optimizer state and normalizers, keeping the member's own frame
        and epoch counts, and clear the score meters of the old policy."""
        self.algo.set_full_state_weights(state, set_epoch=False)
        for meter in self.SCORE_METERS:
            if hasattr(self.algo, meter):
                getattr(self.algo, meter).clear()

    def nonfinite_weights(self, limit: int = 3) -> List[str]:
        """Names of (up to ``limit``) weights holding NaN or inf: the member diverged."""
        return nonfinite_tensors(self.algo.model.state_dict(), limit)

    def fingerprint(self) -> str:
        """sha256 of the model weights: two agents with the same fingerprint hold identical weights."""
        return model_fingerprint(self.algo.model.state_dict())

    def learning_rate(self) -> float:
        """The learning rate the optimizer uses now (NaN when the agent has no single optimizer)."""
        optimizer = getattr(self.algo, "optimizer", None)
        return float(optimizer.param_groups[0]["lr"]) if optimizer is not None else math.nan

    def describe(self) -> str:
        """``frame F, epoch E, lr L, weights W`` for the log lines tests and benchmarks parse."""
        return (f"frame {int(self.algo.frame)}, epoch {int(self.algo.epoch_num)}, lr {self.learning_rate():.6g}, "
                f"weights {self.fingerprint()[:16]}")
