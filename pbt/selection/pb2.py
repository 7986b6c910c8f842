"""PB2 (Population-Based Bandits; Parker-Holder, Nguyen, Roberts, NeurIPS 2020), decentralized:
truncation selection whose explore step is a GP bandit instead of random perturbation.

Who acts and whose weights they take is truncation's rule (:mod:`pbt.selection.truncation`: the
bottom ``pb2_quantile`` copies a random top member, with the shared gates and significance test).
When such a member explores (after taking a donor, or perturbing its own hyperparameters because
no lead was significant), its new *continuous* hyperparameters (``loguniform``/``uniform`` keys of
the search space) are the UCB maximum of a GP fitted, by this member alone, to the data every
member's record already carries (:mod:`pbt.selection.pb2_data`: each interval's hyperparameters
and objective change, across weight replacements) (:mod:`pbt.selection.pb2_model`). Discrete keys (``int``, ``choice``) and
scheme keys outside the space keep PBT's random perturbation (as Ray's PB2, which models only
continuous bounds). With fewer than MIN_POINTS data points the continuous keys are perturbed too.

Differences to Ray Tune's central PB2: no scheduler holds the data; each member fits to the
records it scanned (so two members can see slightly different data); the other members' current
hyperparameters condition the variance (their explore steps are not known in advance); the
newest ``pb2_max_data`` points are kept (Ray also drops old data); kappa is a constant.
Needs scikit-learn (``pip install "pbt-rl[pb2]"``) and a search space with a continuous key,
checked at start-up.
"""

import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError
from pbt.sections import Section, require
from pbt.selection.base import Decision, MemberState
from pbt.selection.pb2_data import data_points, denormalise, newest, point_x
from pbt.selection.truncation import Truncation

if TYPE_CHECKING:
    from pbt.mutation.space import Dimension
    from pbt.storage.record import Record

logger = logging.getLogger(__name__)

MIN_POINTS = 3
"""Fewer data points than this: no model yet, continuous keys are perturbed like the rest."""
PERTURBATION_FACTORS = (0.8, 1.2)
"""PBT's perturbation of the keys PB2 does not model (the original PBT paper's factors)."""
RESAMPLE_PROBABILITY = 0.25
"""... and its probability of resampling such a key from the search space."""


@dataclass
class PB2Config(Section):
    """Settings of PB2 (flat ``pbt.*`` keys)."""

    pb2_quantile: float = 0.25
    """Bottom and top fraction of the known objectives (truncation's rule): a member in the bottom
    takes a random top member's weights, then PB2 chooses its continuous hyperparameters."""
    pb2_kappa: float = 1.0
    """UCB's exploration weight: the chosen point maximises mean + pb2_kappa * std of the predicted
    objective change (in units of the data's std). 0: pure exploitation of the model."""
    pb2_max_data: int = 256
    """The newest data points (one per member and interval) the GP is fitted to; older ones are
    dropped so the fit stays cheap (O(n^3)) at 64 members and 100 intervals."""

    def __post_init__(self) -> None:
        require(0.0 < self.pb2_quantile <= 0.5, "pb2_quantile", self.pb2_quantile, "in (0, 0.5]")
        require(self.pb2_kappa >= 0.0, "pb2_kappa", self.pb2_kappa, ">= 0")
        require(self.pb2_max_data >= MIN_POINTS, "pb2_max_data", self.pb2_max_data, f">= {MIN_POINTS}")

    # truncation's rule reads these names
    @property
    def quantile(self) -> float:
        return self.pb2_quantile

    @property
    def perturbation_factors(self) -> Tuple[float, ...]:
        return PERTURBATION_FACTORS

    @property
    def resample_probability(self) -> float:
        return RESAMPLE_PROBABILITY

    @property
    def perturb_probability(self) -> float:
        return 1.0  # every key PB2 does not model is perturbed (Ray's PB2)


def continuous_dims(space: Any) -> List["Dimension"]:
    """The search space's continuous dimensions, by key."""
    return [space.dims[key] for key in sorted(space.dims) if space.dims[key].continuous]


class PB2(Truncation):
    """Truncation selection with PB2's GP-bandit explore step."""

    config_class = PB2Config  # type: ignore[assignment]  # Truncation declares its own config class
    initial_mutation = True
    settings: PB2Config  # type: ignore[assignment]  # narrowed: PB2 reads its own keys too

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        space = cfg.explore.search_space
        if not continuous_dims(space):
            raise ConfigError(
                "pbt/selection=pb2 chooses continuous hyperparameters inside the bounds of a search "
                "space, and "
                + ("the search space has no loguniform/uniform key" if space else "there is no search space")
                + ". Select one with pbt/search_space=<name> (e.g. ppo_design_doc), or another "
                "pbt/selection."
            )
        from pbt.selection.pb2_model import require_sklearn

        require_sklearn()

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        self._peers = list(peers)
        return super().decide(own, peers, rng)

    def _perturbed(
        self, own: MemberState, donor: Optional["Record"], base: Mapping[str, Any], reason: str, rng: random.Random
    ) -> Decision:
        decision = super()._perturbed(own, donor, base, reason, rng)
        dims = continuous_dims(self.ctx.space)
        if not dims:  # a hand-made Context without a space
            return decision
        after, note = self.explore_pb2(own, dict(decision.params_after), dims, rng)
        return self.decision(own, donor, after, f"{decision.reason}; {note}")

    def explore_pb2(
        self, own: MemberState, params: Dict[str, Any], dims: List["Dimension"], rng: random.Random
    ) -> Tuple[Dict[str, Any], str]:
        """``params`` with the continuous keys at the UCB maximum, and a note for the reason."""
        from pbt.selection.pb2_model import acquire

        view = self.view(own, getattr(self, "_peers", []))
        records = [r for r in view.values() if r is not None]
        points = newest(data_points(records, dims), self.settings.pb2_max_data)
        if len(points) < MIN_POINTS:
            return params, f"PB2: {len(points)} data point(s) < {MIN_POINTS}, continuous keys perturbed"
        pending = [
            x
            for x in (point_x(r.params, dims) for r in records if r.policy_idx != own.record.policy_idx)
            if x is not None
        ]
        started = time.perf_counter()
        pick = acquire(
            [p.x + (float(p.time),) for p in points],
            [p.change for p in points],
            pending,
            float(own.record.iteration + 1),
            self.settings.pb2_kappa,
            rng,
        )
        elapsed = time.perf_counter() - started
        for dim, x in zip(dims, pick.x):
            params[dim.key] = denormalise(dim, x)
        members = len({p.policy_idx for p in points})
        logger.info(
            "PB2 policy %d: fit and acquisition took %.3f s over %d points", own.record.policy_idx, elapsed, len(points)
        )
        return params, (
            f"PB2: UCB over {len(points)} points of {members} member(s), predicted change "
            f"{pick.mean:.4g} +/- {pick.std:.3g}"
        )
