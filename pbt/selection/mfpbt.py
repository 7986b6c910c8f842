"""Multiple-Frequencies PBT (Doulazmi et al., "Multiple-Frequencies Population-Based Training",
arXiv 2506.03225, 2025), one member deciding at a time.

The population is split into sub-populations of consecutive policy indices, each with its own
evolution frequency (``mfpbt_frequencies``, in PBT intervals; the paper's 1, 10, 25, 50). A member
of a sub-population with frequency f acts only at its own iterations that are multiples of f, so
the slow sub-populations judge members over long horizons and are not greedy. When it acts, its
sub-population is ranked by objective and split into quarters (at least one member each):

- bottom quarter: its members, in rank order, take the weights and hyperparameters of the top
  quarter's, in rank order (the paper's pairing: the best of the bottom copies the best), then
  perturb them (factors 0.8 / 1.25, the paper's);
- third quarter (the migration bracket): in rank order, each takes the best member of the other
  sub-populations not yet taken by a better one, when that member ranks above it in the whole
  population. Asymmetric: the migrant's weights always move, its hyperparameters only from a
  slower sub-population into a faster one; from a faster one the member takes the hyperparameters
  of the best member of its own sub-population, so short-term greedy schedules never reach the
  slow sub-populations. No perturbation after a migration (as the paper).

A sub-population of two has no separate third quarter: its worst member is the migration bracket
first (when a better migrant exists and its lead is significant) and copies its best member
otherwise.

Differences to the central version: each member decides alone from the records it scanned (the
paper's rounds are synchronous); the shared gates apply (timing, ready rule, significance test:
a migration whose lead is not significant is skipped, an internal copy falls back to perturbing
its own hyperparameters); the default layout is scaled to the population size
(:func:`default_layout`); elastic populations are refused (membership must not change).
"""

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.errors import ConfigError
from pbt.sections import PARSER, Section, type_error
from pbt.selection.base import KEEP, Decision, MemberState, Strategy, fmt
from pbt.selection.population import eligible_donors, is_diverged, known_objective, merge_params, rank

if TYPE_CHECKING:
    from pbt.storage.record import Record

PAPER_FREQUENCIES = (1, 10, 25, 50)
"""The paper's reference frequencies (in PBT intervals)."""
PERTURBATION_FACTORS = (0.8, 1.25)
"""The paper's perturbation after an internal copy."""


def to_ints(name: str, value: Any) -> Tuple[int, ...]:
    """A non-empty list of whole numbers >= 1."""
    if (
        not isinstance(value, (list, tuple))
        or not value
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)
    ):
        raise type_error(name, value, "a non-empty list of whole numbers >= 1, e.g. [1, 10, 25, 50]")
    return tuple(int(v) for v in value)


def to_sizes(name: str, value: Any) -> Optional[Tuple[int, ...]]:
    return None if value is None else to_ints(name, value)


@dataclass
class MfPbtConfig(Section):
    """Settings of Multiple-Frequencies PBT (flat ``pbt.*`` keys)."""

    mfpbt_frequencies: Tuple[int, ...] = field(default=PAPER_FREQUENCIES, metadata={PARSER: to_ints})
    """Evolution frequency of each sub-population, in PBT intervals, strictly increasing (the
    paper's [1, 10, 25, 50]). With mfpbt_sizes null, a population too small for all of them uses
    an evenly spread subset keeping the fastest and the slowest (sub-populations of >= 2)."""
    mfpbt_sizes: Optional[Tuple[int, ...]] = field(default=None, metadata={PARSER: to_sizes})
    """Members of each sub-population (same length as mfpbt_frequencies, summing to num_policies;
    members are assigned in policy_idx order, fastest sub-population first). null: equal sizes
    (the paper's layout), scaled to the population size."""

    def __post_init__(self) -> None:
        self.mfpbt_frequencies = to_ints("mfpbt_frequencies", self.mfpbt_frequencies)
        if list(self.mfpbt_frequencies) != sorted(set(self.mfpbt_frequencies)):
            raise ConfigError(
                f"pbt.mfpbt_frequencies must be strictly increasing, got {list(self.mfpbt_frequencies)} "
                "(the migration rule compares sub-populations by frequency)."
            )
        self.mfpbt_sizes = to_sizes("mfpbt_sizes", self.mfpbt_sizes)
        if self.mfpbt_sizes is not None and len(self.mfpbt_sizes) != len(self.mfpbt_frequencies):
            raise ConfigError(
                f"pbt.mfpbt_sizes has {len(self.mfpbt_sizes)} entries but pbt.mfpbt_frequencies "
                f"{len(self.mfpbt_frequencies)}: give one size per frequency, or null."
            )

    def to_flat(self) -> Dict[str, Any]:
        flat = super().to_flat()  # tuples are not YAML-safe
        flat["mfpbt_frequencies"] = list(self.mfpbt_frequencies)
        flat["mfpbt_sizes"] = None if self.mfpbt_sizes is None else list(self.mfpbt_sizes)
        return flat


@dataclass(frozen=True)
class SubPopulation:
    index: int
    frequency: int
    members: Tuple[int, ...]


def default_layout(num_policies: int, frequencies: Sequence[int]) -> List[Tuple[int, int]]:
    """(frequency, size) per sub-population: min(len(frequencies), N // 2) sub-populations (each of
    >= 2 members, so selection inside is possible), their frequencies evenly spread over the list
    (the fastest and the slowest kept), sizes equal (the first ones one larger for a remainder)."""
    count = max(1, min(len(frequencies), num_policies // 2))
    if count == 1:
        chosen = [frequencies[0]]
    else:
        chosen = [frequencies[int(math.floor(i * (len(frequencies) - 1) / (count - 1) + 0.5))] for i in range(count)]
    base, extra = divmod(num_policies, count)
    return [(freq, base + (1 if i < extra else 0)) for i, freq in enumerate(chosen)]


def layout(cfg: MfPbtConfig, num_policies: int) -> List[SubPopulation]:
    """The sub-populations of a population of ``num_policies``; ConfigError when mfpbt_sizes does
    not add up to it."""
    if cfg.mfpbt_sizes is None:
        pairs = default_layout(num_policies, cfg.mfpbt_frequencies)
    else:
        if sum(cfg.mfpbt_sizes) != num_policies:
            raise ConfigError(
                f"pbt.mfpbt_sizes {list(cfg.mfpbt_sizes)} sums to {sum(cfg.mfpbt_sizes)}, but "
                f"pbt.num_policies is {num_policies}: make them add up, or set mfpbt_sizes=null."
            )
        pairs = list(zip(cfg.mfpbt_frequencies, cfg.mfpbt_sizes))
    subs: List[SubPopulation] = []
    start = 0
    for i, (freq, size) in enumerate(pairs):
        subs.append(SubPopulation(i, freq, tuple(range(start, start + size))))
        start += size
    return subs


def subpopulation_of(cfg: MfPbtConfig, num_policies: int, policy_idx: int) -> SubPopulation:
    """The sub-population member ``policy_idx`` belongs to."""
    for sub in layout(cfg, num_policies):
        if policy_idx in sub.members:
            return sub
    raise ConfigError(f"pbt.policy_idx={policy_idx} is in no MF-PBT sub-population of {num_policies} members")


def brackets(ranking: Sequence[int]) -> Tuple[List[int], List[int], List[int]]:
    """(top quarter, migration bracket, bottom quarter) of a best-first ranking of a
    sub-population; quarters hold max(1, n // 4) members (none below 2 members); the migration
    bracket is the quarter above the bottom, or the bottom itself when no member lies between top
    and bottom (two members)."""
    n = len(ranking)
    if n < 2:
        return [], [], []
    share = max(1, n // 4)
    top, bottom = list(ranking[:share]), list(ranking[n - share :])
    middle = list(ranking[max(share, n - 2 * share) : n - share])
    return top, (middle or bottom), bottom


class MfPbt(Strategy):
    """Sub-populations evolving at their own frequencies, with asymmetric migration."""

    config_class = MfPbtConfig
    initial_mutation = True
    settings: MfPbtConfig

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if cfg.population_size is None:
            raise ConfigError(
                "pbt/selection=mfpbt needs a fixed population (sub-populations are blocks of "
                "policy indices): set pbt.num_policies=N instead of auto."
            )
        layout(cfg.strategies["mfpbt"], cfg.population_size)

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        wait = self.waiting(own)
        if wait is not None:
            return self.keep(own, wait)
        idx = own.record.policy_idx
        subs = layout(self.settings, self.ctx.num_policies)
        sub = next(s for s in subs if idx in s.members)
        where = f"sub-population {sub.index} (frequency {sub.frequency}, members {list(sub.members)})"
        iteration = own.record.iteration
        if iteration % sub.frequency:
            return self.keep(own, f"{where} evolves at multiples of {sub.frequency} intervals, not at {iteration}")
        view = self.view(own, peers)
        ranking = [i for i in rank(view, idx) if known_objective(view[i]) is not None]
        if is_diverged(own.record):
            ranking.append(idx)  # ranks last
        local = [i for i in ranking if i in sub.members]
        top, migration, bottom = brackets(local)
        numbers = f"{where}: ranked {local}, top {top}, migration {migration}, bottom {bottom}"
        if idx in migration:
            migrated = self._migrate(own, view, ranking, local, migration, subs, sub, numbers, rng)
            if migrated is not None and (migrated.action != KEEP or idx not in bottom):  # two members: copy then
                return migrated
        if idx in bottom:
            return self._copy(own, view, top, bottom, numbers, rng)
        return self.keep(own, f"neither bottom nor migration bracket: {numbers}")

    def _migrate(
        self,
        own: MemberState,
        view: Mapping[int, Optional["Record"]],
        ranking: List[int],
        local: List[int],
        migration: List[int],
        subs: List[SubPopulation],
        sub: SubPopulation,
        numbers: str,
        rng: random.Random,
    ) -> Optional[Decision]:
        """The asymmetric migration into this member, or None when no migrant ranks above it."""
        idx = own.record.policy_idx
        outside = [
            r.policy_idx
            for r in eligible_donors(
                [r for r in (view[i] for i in ranking if i not in sub.members) if r is not None],
                self.ctx.gates.ready_frames,
                self.ctx.refused_donors,
            )
        ]
        position = {i: p for p, i in enumerate(ranking)}
        taken = 0
        migrant: Optional[int] = None
        for member in migration:  # the paper's order: better members of the bracket take better migrants
            if taken >= len(outside):
                break
            if position[outside[taken]] < position[member]:
                if member == idx:
                    migrant = outside[taken]
                    break
                taken += 1
            elif member == idx:
                break
        if migrant is None:
            return None
        donor = view[migrant]
        assert donor is not None
        origin = next(s for s in subs if migrant in s.members)
        if sub.frequency < origin.frequency:
            params, whose = merge_params(own.record.params, donor), "its hyperparameters (slower sub-population)"
        else:
            best = view[local[0]]
            assert best is not None
            params = merge_params(own.record.params, best)
            whose = f"member {local[0]}'s hyperparameters (best of its own sub-population: the migrant's is faster)"
        reason = (
            f"migration from member {migrant} of sub-population {origin.index} (frequency {origin.frequency}, "
            f"objective {fmt(donor.objective)}): its weights and {whose}; {numbers}"
        )

        def carry_out(
            own: MemberState, taken_donor: Optional["Record"], base: Mapping[str, Any], why: str, rng: random.Random
        ) -> Decision:
            if taken_donor is None:
                return self.keep(own, why)
            return self.decision(own, taken_donor, params, why)

        return self.replace_if_significant(own, donor, reason, rng, "no migration", carry_out)

    def _copy(
        self,
        own: MemberState,
        view: Mapping[int, Optional["Record"]],
        top: List[int],
        bottom: List[int],
        numbers: str,
        rng: random.Random,
    ) -> Decision:
        """The bottom quarter's copy of the matching top member, then the perturbation."""
        idx = own.record.policy_idx
        own_objective = known_objective(own.record)
        partner = top[bottom.index(idx)] if bottom.index(idx) < len(top) else top[0]
        order = [partner] + [i for i in top if i != partner]

        def beats_own(record: "Record") -> bool:
            value = known_objective(record)
            return own_objective is None or (value is not None and value > own_objective)

        better = [r for r in (view[i] for i in order if i != idx) if r is not None and beats_own(r)]
        donors = eligible_donors(better, self.ctx.gates.ready_frames, self.ctx.refused_donors)
        if not donors:
            return self._perturbed(
                own,
                None,
                dict(own.record.params),
                f"bottom quarter, no ready top member above it: perturb only ({numbers})",
                rng,
            )
        donor = donors[0]
        reason = (
            f"bottom quarter (objective {fmt(own_objective)}), copies member {donor.policy_idx} of its "
            f"top quarter (objective {fmt(donor.objective)}); {numbers}"
        )
        return self.replace_if_significant(own, donor, reason, rng, "perturb only", self._perturbed)

    def _perturbed(
        self, own: MemberState, donor: Optional["Record"], base: Mapping[str, Any], reason: str, rng: random.Random
    ) -> Decision:
        return self.perturbed(own, donor, base, reason, rng, PERTURBATION_FACTORS, 0.0)
