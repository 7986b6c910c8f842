"""DexPBT's selection rule (IsaacGymEnvs, arXiv 2305.12127).

A member in the worst ceil(f*N) group, with more than max(2, N/2) objectives known and whose best
objective within the interval is below the whole best group, takes a random ready member of the
best group as its candidate. It copies the candidate's weights only when the lead beats both the
std threshold (a fraction of the trimmed std) and the absolute threshold (a fraction of
|candidate objective|) and passes the significance test; otherwise it only mutates.
"""

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence

from pbt.sections import Section, require, require_finite
from pbt.selection.base import Decision, MemberState, Strategy, fmt
from pbt.selection.population import (
    View,
    eligible_donors,
    group_size,
    is_diverged,
    known_objective,
    merge_params,
    rank,
    records,
    trimmed_std,
)

if TYPE_CHECKING:
    from pbt.storage.record import Record


@dataclass
class DexPbtConfig(Section):
    """Settings of the DexPBT rule (flat ``pbt.*`` keys)."""

    replace_fraction_worst: float = 0.125
    """Fraction of the population, ceil(f*N) members at the bottom of the ranking, that may act."""
    replace_fraction_best: float = 0.3
    """Fraction of the population, ceil(f*N) members at the top of the ranking, that may be donors."""
    replace_threshold_frac_std: float = 0.5
    """Weights are replaced only if the donor leads by more than this many (trimmed) stds."""
    replace_threshold_frac_absolute: float = 0.05
    """Weights are replaced only if the donor leads by more than this fraction of |donor objective|."""

    def __post_init__(self) -> None:
        for name in ("replace_fraction_worst", "replace_fraction_best"):
            require(0.0 < getattr(self, name) <= 1.0, name, getattr(self, name), "in (0, 1]")
        require_finite("replace_threshold_frac_std", self.replace_threshold_frac_std, 0.0)
        require_finite("replace_threshold_frac_absolute", self.replace_threshold_frac_absolute, 0.0)


class DexPbt(Strategy):
    """Worst/best groups, in-interval hysteresis, known-objective count, std/absolute thresholds."""

    config_class = DexPbtConfig
    initial_mutation = True
    settings: DexPbtConfig

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        gates = self.ctx.gates
        idx = own.record.policy_idx
        diverged = is_diverged(own.record)
        timing = self.waiting(own)
        if timing is not None:
            return self.keep(own, timing)
        view = self.view(own, peers)
        ranking = rank(view, idx)
        gate = None if gates.dbg_mode or diverged else self._gates(own, view, ranking)
        if gate is not None:
            return self.keep(own, gate)
        best = [i for i in self._best_group(ranking, view) if i != idx]
        candidates = eligible_donors(records(view, best), gates.ready_frames, self.ctx.refused_donors)
        if not candidates:
            return self.keep(own, "no other ready member with a known objective in the best group")
        return self._act(own, view, rng.choice(candidates), rng)

    def _gates(self, own: MemberState, view: View, ranking: List[int]) -> Optional[str]:
        """Why a member past the timing gates should not act (worst group, known count, hysteresis)."""
        n = self.ctx.num_policies
        idx = own.record.policy_idx
        n_worst = group_size(self.settings.replace_fraction_worst, n)
        known = [o for o in (known_objective(view[i]) for i in ranking) if o is not None]
        if idx not in ranking[-n_worst:]:
            return f"not in the worst {n_worst} of {n} (rank {ranking.index(idx) + 1})"
        need = max(2, n // 2)
        if len(known) <= need:
            return f"only {len(known)} objectives known, need > {need}"
        best_objectives = [known_objective(view[i]) for i in self._best_group(ranking, view)]
        hysteresis = _hysteresis_value(own)
        weakest_best = min(o for o in best_objectives if o is not None)
        if hysteresis >= weakest_best:
            return (
                f"best in-interval objective {fmt(hysteresis)} >= {fmt(weakest_best)}, "
                "the weakest of the best group: doing okay"
            )
        return None

    def _best_group(self, ranking: List[int], view: View) -> List[int]:
        """The first ceil(replace_fraction_best * N) of the ranking, restricted to known objectives."""
        n_best = group_size(self.settings.replace_fraction_best, self.ctx.num_policies)
        return [i for i in ranking[:n_best] if known_objective(view[i]) is not None]

    def _act(self, own: MemberState, view: View, donor: "Record", rng: random.Random) -> Decision:
        """Replace weights if the donor leads by enough, else mutate own hyperparameters only."""
        candidate = float(donor.objective)  # type: ignore[arg-type]  # donors come from the known-objective group
        own_objective = known_objective(own.record)
        delta = math.inf if own_objective is None else candidate - own_objective
        known = [o for o in (known_objective(r) for r in view.values()) if o is not None]
        std_threshold = self.settings.replace_threshold_frac_std * trimmed_std(known)
        abs_threshold = self.settings.replace_threshold_frac_absolute * abs(candidate)
        numbers = (
            f"candidate {donor.policy_idx} objective {fmt(candidate)} vs own {fmt(own_objective)}: "
            f"delta {fmt(delta)}, std threshold {fmt(std_threshold)}, "
            f"absolute threshold {fmt(abs_threshold)}"
        )
        own_params = dict(own.record.params)
        if delta > std_threshold and delta > abs_threshold:
            significant, test = self.lead_test(own, donor, view)
            if significant:
                # A diverged member's own hyperparameters diverged: it takes the donor's.
                take_donors = rng.random() < 0.5 or is_diverged(own.record)
                base = merge_params(own_params, donor) if take_donors else own_params
                return self.act(own, donor, base, f"replace: {numbers}{test}", rng)
            return self.not_significant(own, f"{numbers}{test}", rng)
        return self.act(own, None, own_params, f"mutate only, lead too small: {numbers}", rng)


def _hysteresis_value(own: MemberState) -> float:
    """Best in-interval objective (fallback: own objective); -inf when own objective is unknown,
    so a member with a NaN/None objective is treated as the worst."""
    own_objective = known_objective(own.record)
    if own_objective is None:
        return -math.inf
    best = own.best_interval_objective
    if best is None or not math.isfinite(best):
        return own_objective
    return best
