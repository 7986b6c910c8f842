"""Isaac Lab's threshold rule.

Leaders lie above max(mu + k*sigma, mu + A), underperformers below min(mu - k*sigma, mu - A) of the
known objectives. An underperformer copies a ready leader's weights and hyperparameters (when the
lead passes the significance test), or only mutates when there is none. Isaac Lab picks the leader
at random (``pbt.leader_choice=random``, the default); ``best`` takes the one with the highest
objective (on Reacher it narrowed the population to one family early and did not help). A fresh
member mutates its hyperparameters once (as under DexPBT), so a population started with one config
and seed is not N copies of one run; Isaac Lab starts from the values given
(``pbt.initial_mutation=false``, what ``task=isaaclab/<TaskId>`` sets).
"""

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence, Tuple

from pbt.sections import Section, require_choice, require_finite
from pbt.selection.base import Decision, MemberState, Strategy, fmt
from pbt.selection.population import eligible_donors, is_diverged, known_objective, mean_std, records

if TYPE_CHECKING:
    from pbt.storage.record import Record


RANDOM = "random"
BEST = "best"
LEADER_CHOICES = (RANDOM, BEST)


@dataclass
class ThresholdConfig(Section):
    """Settings of the threshold rule (flat ``pbt.*`` keys)."""

    threshold_std: float = 0.1
    """Leaders/underperformers lie more than this many stds from the mean."""
    threshold_abs: float = 0.025
    """... and more than this (objective units) from the mean."""
    threshold_abs_relative: bool = True
    """``threshold_abs`` is a fraction of the population's objective range (max - min), so it means
    the same at any reward scale; false: objective units (Isaac Lab)."""

    leader_choice: str = RANDOM
    """Which ready leader an underperformer copies: "random" (Isaac Lab) or "best" (the highest
    objective at equal experience; ties drawn at random)."""

    def __post_init__(self) -> None:
        require_finite("threshold_std", self.threshold_std, 0.0)
        require_finite("threshold_abs", self.threshold_abs, 0.0)
        require_choice("leader_choice", self.leader_choice, LEADER_CHOICES)


class Threshold(Strategy):
    """Mean +/- k*std cuts: underperformers copy leaders."""

    config_class = ThresholdConfig
    initial_mutation = True
    settings: ThresholdConfig

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        wait = self.waiting(own)
        if wait is not None:
            return self.keep(own, wait)
        gates = self.ctx.gates
        idx = own.record.policy_idx
        view = self.view(own, peers)
        known = {i: o for i, o in ((i, known_objective(view[i])) for i in sorted(view)) if o is not None}
        if not known or (len(known) == 1 and idx in known):
            return self.keep(own, f"{len(known)} objectives known: nothing to compare with")
        mean, std, upper, lower = self._cuts(list(known.values()))
        numbers = f"mean {fmt(mean)}, std {fmt(std)}, upper {fmt(upper)}, lower {fmt(lower)}"
        own_objective = known.get(idx)
        if own_objective is not None and not own_objective < lower:
            return self.keep(own, f"not an underperformer: objective {fmt(own_objective)} >= lower cut ({numbers})")
        above = records(view, [i for i, o in known.items() if o > upper and i != idx])
        if not above and is_diverged(own.record):  # no spread to cut (e.g. one known peer): the best will do
            top = max(known.values())
            above = records(view, [i for i, o in known.items() if o == top and i != idx])
        leaders = eligible_donors(above, gates.ready_frames, self.ctx.refused_donors)
        own_params = dict(own.record.params)
        if not leaders:
            reason = f"underperformer, no ready leader: mutate only ({numbers})"
            return self.act(own, None, own_params, reason, rng)
        donor = self._pick(leaders, known, rng)
        reason = (
            f"underperformer (objective {fmt(own_objective)}), leader {donor.policy_idx} "
            f"objective {fmt(donor.objective)} ({numbers})"
        )
        return self.replace_if_significant(own, donor, reason, rng)

    def _pick(self, leaders: Sequence["Record"], known: Mapping[int, float], rng: random.Random) -> "Record":
        """The leader to copy: a random one, or (``leader_choice=best``) one with the top objective."""
        if self.settings.leader_choice == BEST:
            top = max(known[r.policy_idx] for r in leaders)
            leaders = [r for r in leaders if known[r.policy_idx] == top]
        return rng.choice(leaders)

    def _cuts(self, objectives: Sequence[float]) -> Tuple[float, float, float, float]:
        """(mean, std, upper cut, lower cut) of the known objectives."""
        cfg = self.settings
        mean, std = mean_std(objectives)
        margin = (
            cfg.threshold_abs * (max(objectives) - min(objectives)) if cfg.threshold_abs_relative else cfg.threshold_abs
        )
        upper = max(mean + cfg.threshold_std * std, mean + margin)
        lower = min(mean - cfg.threshold_std * std, mean - margin)
        return mean, std, upper, lower
