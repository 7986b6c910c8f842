"""Truncation selection (the original PBT paper, Ray Tune's PBT, and the usual PBT design).

The known objectives are ranked; a member in the bottom ``quantile`` takes the weights of a random
member of the top ``quantile``. Its new hyperparameters are the donor's, each then resampled from
the search space with probability ``resample_probability`` or perturbed: multiplied by one of
``perturbation_factors`` and clamped to the space, discrete values moved one step in their list
(:func:`pbt.mutation.scheme.perturb`). ``perturb_probability`` below 1 changes each key only with
that probability (the PBT design document's 0.5; keys not drawn keep the donor's value, and with
few keys nothing may change at all); 1, the default, changes every key.

Noise guards: the ready rule (this member and the donor), the unknown-objective wait and the
significance test apply; when the test finds the lead not significant, or no top member is ready,
the member perturbs its own hyperparameters and keeps its weights. A diverged member (NaN/inf
objective) ranks last and is replaced whatever the ready rule says. The timing gates
(``start_after``, ``initial_delay``) apply as for DexPBT.
"""

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.sections import PARSER, Section, require, type_error
from pbt.selection.base import Decision, MemberState, Strategy, fmt
from pbt.selection.population import eligible_donors, is_diverged, known_objective, rank, records

if TYPE_CHECKING:
    from pbt.storage.record import Record


def to_factors(name: str, value: Any) -> Tuple[float, ...]:
    """A non-empty list of positive finite factors."""
    if not isinstance(value, (list, tuple)) or not value:
        raise type_error(name, value, "a non-empty list of positive numbers, e.g. [0.8, 1.2]")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item) or item <= 0:
            raise type_error(name, value, "a non-empty list of positive numbers, e.g. [0.8, 1.2]")
        out.append(float(item))
    return tuple(out)


@dataclass
class TruncationConfig(Section):
    """Settings of truncation selection (flat ``pbt.*`` keys)."""

    quantile: float = 0.25
    """Bottom and top fraction of the known objectives: a member in the bottom ceil(q * known)
    takes a random top member's weights (each group at most half the known members)."""
    resample_probability: float = 0.25
    """Probability that each hyperparameter of the search space is resampled instead of perturbed."""
    perturb_probability: float = 1.0
    """Probability that each hyperparameter is changed at all (resampled or perturbed) in an
    explore step; the others keep their value. 1: every key changes (Ray Tune's PBT); the PBT
    design document perturbs each with 0.5."""
    perturbation_factors: Tuple[float, ...] = field(default=(0.8, 1.2), metadata={PARSER: to_factors})
    """A perturbed value is multiplied by one of these (drawn at random); discrete values move one
    step down for a factor below 1 and up for one above."""

    def __post_init__(self) -> None:
        require(0.0 < self.quantile <= 0.5, "quantile", self.quantile, "in (0, 0.5]")
        require(0.0 <= self.resample_probability <= 1.0, "resample_probability", self.resample_probability, "in [0, 1]")
        require(0.0 < self.perturb_probability <= 1.0, "perturb_probability", self.perturb_probability, "in (0, 1]")
        self.perturbation_factors = to_factors("perturbation_factors", self.perturbation_factors)

    def to_flat(self) -> Dict[str, Any]:
        flat = super().to_flat()
        flat["perturbation_factors"] = list(self.perturbation_factors)  # tuples are not YAML-safe
        return flat


def quantile_groups(ranking: Sequence[int], quantile: float) -> Tuple[List[int], List[int]]:
    """(top, bottom) of a best-first ranking: ceil(quantile * n) members each, never more than
    half of them (the groups never overlap), at least one each when n >= 2."""
    n = len(ranking)
    if n < 2:
        return [], []
    size = min(n // 2, max(1, math.ceil(quantile * n - 1e-9)))
    return list(ranking[:size]), list(ranking[n - size :])


class Truncation(Strategy):
    """Bottom quantile copies a random member of the top quantile, then perturbs."""

    config_class = TruncationConfig
    initial_mutation = True
    settings: TruncationConfig

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        wait = self.waiting(own)
        if wait is not None:
            return self.keep(own, wait)
        gates = self.ctx.gates
        idx = own.record.policy_idx
        view = self.view(own, peers)
        ranked = ((i, known_objective(view[i])) for i in rank(view, idx))
        objectives = {i: o for i, o in ranked if o is not None}  # best first
        known = list(objectives)
        if is_diverged(own.record):
            known.append(idx)  # ranks last
        top, bottom = quantile_groups(known, self.settings.quantile)
        numbers = f"top {top}, bottom {bottom} of {len(known)} known (quantile {self.settings.quantile:g})"
        if idx not in bottom:
            return self.keep(own, f"not in the bottom quantile: {numbers}")
        own_params = dict(own.record.params)
        own_objective = known_objective(own.record)
        better = [i for i in top if i != idx and (own_objective is None or objectives[i] > own_objective)]
        donors = eligible_donors(records(view, better), gates.ready_frames, self.ctx.refused_donors)
        if not donors:
            return self._perturbed(
                own, None, own_params, f"bottom quantile, no ready top member above it: perturb only ({numbers})", rng
            )
        donor = rng.choice(donors)
        reason = (
            f"bottom quantile (objective {fmt(own_objective)}), top member {donor.policy_idx} "
            f"objective {fmt(donor.objective)} ({numbers})"
        )
        return self.replace_if_significant(own, donor, reason, rng, "perturb only", self._perturbed)

    def _perturbed(
        self, own: MemberState, donor: Optional["Record"], base: Mapping[str, Any], reason: str, rng: random.Random
    ) -> Decision:
        settings = self.settings
        return self.perturbed(
            own,
            donor,
            base,
            reason,
            rng,
            settings.perturbation_factors,
            settings.resample_probability,
            settings.perturb_probability,
        )
