"""The PBT decision: a pure function from a population snapshot to keep / mutate / replace.

``decide`` reads no files and starts nothing: it takes this member's state, the peers' records and
the config, and returns a ``Decision`` saying what to do, with which donor, why (the rule that fired
and its numbers) and the hyperparameters before and after. Two rules are available:

- ``"dexpbt"`` (IsaacGymEnvs, arXiv 2305.12127): worst/best groups, in-interval hysteresis, a
  minimum number of known objectives, and std/absolute thresholds before weights are replaced;
- ``"threshold"`` (Isaac Lab): leaders above max(mu + k*sigma, mu + A), underperformers below
  min(mu - k*sigma, mu - A).

All randomness comes from the ``rng`` argument; peers are visited in policy_idx order, so a
decision is reproducible from a seed.
"""
import logging
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pbt.config import PbtConfig, check_policy_idx
from pbt.errors import ConfigError, did_you_mean
from pbt.mutation import mutate_params
from pbt.stats import welch_greater
from pbt.record import Record

logger = logging.getLogger(__name__)

KEEP = "keep"
MUTATE = "mutate"
REPLACE = "replace"

_EPS = 1e-9  # guards ceil(fraction * N) against float fuzz such as 0.3 * 10 = 3.0000000000000004


@dataclass(frozen=True)
class MemberState:
    """What this member knows about itself when it decides."""

    record: Record
    """The record this member has just published for the current iteration."""
    best_interval_objective: Optional[float]
    """Best objective seen within the current interval (hysteresis against dips); None: unknown."""
    frames_since_start: int
    """Frames trained since this process started or was last replaced."""


@dataclass(frozen=True)
class Decision:
    """The outcome of one PBT iteration for one member."""

    action: str
    """"keep" (change nothing), "mutate" (own weights, new hyperparameters) or "replace"
    (the donor's weights, new hyperparameters)."""
    donor: Optional[Record]
    """The record whose checkpoint to load when replacing; None otherwise."""
    reason: str
    """Which rule fired, with its numbers."""
    params_before: Dict[str, Any]
    """Hyperparameters in force before the decision (the own record's)."""
    params_after: Dict[str, Any]
    """Hyperparameters to train with next (equal to params_before when keeping)."""

    @property
    def donor_idx(self) -> Optional[int]:
        return None if self.donor is None else self.donor.policy_idx

    @property
    def donor_iteration(self) -> Optional[int]:
        return None if self.donor is None else self.donor.iteration

    @property
    def changed_params(self) -> Dict[str, Any]:
        """The hyperparameters whose value changed: key -> (before, after)."""
        keys = sorted(set(self.params_before) | set(self.params_after))
        return {
            key: (self.params_before.get(key), self.params_after.get(key))
            for key in keys
            if self.params_before.get(key) != self.params_after.get(key)
        }


# -- entry points ---------------------------------------------------------------------------------


def decide(own: MemberState, peers: Sequence[Record], cfg: PbtConfig, rng: random.Random) -> Decision:
    """Decide what this member does at this PBT iteration, by the rule ``cfg.selection``."""
    rule = _RULES.get(cfg.selection)
    if rule is None:
        raise ConfigError(
            f"Unknown selection rule pbt.selection='{cfg.selection}'."
            f"{did_you_mean(cfg.selection, sorted(_RULES))} Valid rules: {', '.join(sorted(_RULES))}."
        )
    decision = rule(own, peers, cfg, rng)
    logger.debug("PBT policy %d: %s (%s)", own.record.policy_idx, decision.action, decision.reason)
    return decision


def initial_mutation(params: Mapping[str, Any], cfg: PbtConfig, rng: random.Random) -> Dict[str, Any]:
    """The one mutation of a fresh member's hyperparameters, so the population starts diverse.

    Returns the params unchanged for a restarted member (``cfg.restarted``) and for the threshold
    rule, which (as in Isaac Lab) has no initial mutation.
    """
    if cfg.restarted or not cfg.initial_mutation or cfg.selection == "threshold":
        return dict(params)
    return mutate_params(params, cfg, rng)


# -- population snapshot ---------------------------------------------------------------------------


def population_view(own: Record, peers: Sequence[Record],
                    num_policies: int) -> Dict[int, Optional[Record]]:
    """policy_idx -> the record to compare with: own record for self, else the peer's newest record
    with no more iterations than own (None: unknown). Peers outside 0..N-1 are ignored."""
    view: Dict[int, Optional[Record]] = {idx: None for idx in range(num_policies)}
    for record in peers:
        idx = record.policy_idx
        if idx == own.policy_idx or idx not in view or record.iteration > own.iteration:
            continue
        current = view[idx]
        if current is None or _age_key(record) > _age_key(current):
            view[idx] = record
    view[own.policy_idx] = own
    return view


def _age_key(record: Record) -> Tuple[int, int, float, str, str, str]:
    """Newest first by iteration, frame, time; the rest only makes the order total."""
    return (record.iteration, record.frame, record.time, record.checksum, record.checkpoint,
            repr(record.objective))


def known_objective(record: Optional[Record]) -> Optional[float]:
    """The record's objective when finite; None for missing records, None, NaN and inf."""
    if record is None or not record.has_objective:
        return None
    return float(record.objective)  # type: ignore[arg-type]


def rank(view: Mapping[int, Optional[Record]], own_idx: int) -> List[int]:
    """Policy indices best first. Known objectives descending (ties: lower index first), then the
    unknown ones by index, then this member last if its own objective is unknown."""

    def key(idx: int) -> Tuple[int, float, int]:
        objective = known_objective(view[idx])
        if objective is not None:
            return (0, -objective, idx)
        return (2 if idx == own_idx else 1, 0.0, idx)

    return sorted(view, key=key)


def group_size(fraction: float, num_policies: int) -> int:
    """ceil(fraction * N), at least 1 and at most N."""
    return min(num_policies, max(1, math.ceil(fraction * num_policies - _EPS)))


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and population std (numpy's default) of finite values; (0, 0) when empty.

    Two-pass over values scaled to [-1, 1], so it neither overflows nor trips Python 3.8's
    ``statistics.pstdev`` assertion on nearly equal floats.
    """
    if not values:
        return 0.0, 0.0
    scale = max(abs(v) for v in values) or 1.0
    scaled = [v / scale for v in values]
    mean = math.fsum(scaled) / len(scaled)
    variance = math.fsum((v - mean) ** 2 for v in scaled) / len(scaled)
    return mean * scale, math.sqrt(variance) * scale


def trimmed_std(objectives: Sequence[float]) -> float:
    """Population std of the objectives after dropping the lowest floor(0.2 * n) (crashed members
    would otherwise inflate it). 0.0 for fewer than two values."""
    values = sorted(objectives)[int(math.floor(0.2 * len(objectives))):]
    return mean_std(values)[1]


def _fmt(value: Optional[float]) -> str:
    return "unknown" if value is None or not math.isfinite(value) else f"{value:.4g}"


# -- decisions ------------------------------------------------------------------------------------


def _keep(own: MemberState, reason: str) -> Decision:
    params = dict(own.record.params)
    return Decision(KEEP, None, reason, params, dict(params))


def _act(own: MemberState, donor: Optional[Record], base: Mapping[str, Any], reason: str,
         cfg: PbtConfig, rng: random.Random) -> Decision:
    """Mutate ``base`` params; replace weights with ``donor``'s when given, else keep own weights."""
    after = mutate_params(base, cfg, rng)
    action = REPLACE if donor is not None else MUTATE
    return Decision(action, donor, reason, dict(own.record.params), after)


def _records(view: Mapping[int, Optional[Record]], indices: Sequence[int]) -> List[Record]:
    """The records of ``indices`` in that order, skipping unknown members."""
    return [record for record in (view[i] for i in indices) if record is not None]


def _merge_params(own: Mapping[str, Any], donor: Record) -> Dict[str, Any]:
    """Own keys with the donor's values where the donor has them (a scheme edit cannot add keys)."""
    return {key: donor.params.get(key, value) for key, value in own.items()}


# -- DexPBT rule ----------------------------------------------------------------------------------


def _timing_gate(own: MemberState, cfg: PbtConfig) -> Optional[str]:
    """Why the member is too young to act, or None."""
    if own.frames_since_start < cfg.start_after:
        return (f"start_after: {_fmt(own.frames_since_start)} of {_fmt(cfg.start_after)} frames "
                "since start/replacement")
    if own.record.frame < cfg.initial_delay:
        return f"initial_delay: frame {_fmt(own.record.frame)} < {_fmt(cfg.initial_delay)}"
    return None


def _ready_gate(own: MemberState, cfg: PbtConfig) -> Optional[str]:
    """The ready rule: a member that took a donor's weights (or started) less than ready_after frames
    ago is not judged yet: its objective still reflects the start, not its hyperparameters."""
    if own.record.frames_since_replace < cfg.ready_after:
        return (f"not ready: {_fmt(own.record.frames_since_replace)} of ready_after {_fmt(cfg.ready_after)} "
                "frames since it started or took a donor's weights")
    return None


def is_ready(record: Record, cfg: PbtConfig) -> bool:
    """May this member be a donor (the ready rule)?"""
    return record.frames_since_replace >= cfg.ready_after


def _significance(donor: Record, own: Record, cfg: PbtConfig) -> Tuple[bool, str]:
    """(donor significantly better?, text) by a one-sided Welch t-test on per-episode objectives."""
    if cfg.significance is None:
        return True, ""
    p = welch_greater(donor.episode_returns, own.episode_returns)
    if p is None:
        return False, (f"; too few episode samples for a significance test ({len(donor.episode_returns)} "
                       f"donor, {len(own.episode_returns)} own)")
    return p < cfg.significance, f"; Welch p={p:.3g} vs significance {cfg.significance:g}"


def _unknown_gate(own: MemberState) -> Optional[str]:
    """A member whose own objective is not measured yet (None: e.g. just restarted, its envs have not
    finished their episodes) waits; NaN/inf (diverged) is not unknown: it ranks last and acts."""
    if own.record.objective is None:
        return "own objective not known yet (episodes still running)"
    return None


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


def _dexpbt_gates(own: MemberState, view: Mapping[int, Optional[Record]], ranking: List[int],
                  cfg: PbtConfig) -> Optional[str]:
    """Why a member past the timing gates should not act (worst group, known count, hysteresis)."""
    n = cfg.num_policies
    idx = own.record.policy_idx
    n_worst = group_size(cfg.replace_fraction_worst, n)
    known = [o for o in (known_objective(view[i]) for i in ranking) if o is not None]
    if idx not in ranking[-n_worst:]:
        return f"not in the worst {n_worst} of {n} (rank {ranking.index(idx) + 1})"
    need = max(2, n // 2)
    if len(known) <= need:
        return f"only {len(known)} objectives known, need > {need}"
    best_objectives = [known_objective(view[i]) for i in _best_group(ranking, view, cfg)]
    hysteresis = _hysteresis_value(own)
    weakest_best = min(o for o in best_objectives if o is not None)
    if hysteresis >= weakest_best:
        return (f"best in-interval objective {_fmt(hysteresis)} >= {_fmt(weakest_best)}, "
                "the weakest of the best group: doing okay")
    return None


def _best_group(ranking: List[int], view: Mapping[int, Optional[Record]], cfg: PbtConfig) -> List[int]:
    """The first ceil(replace_fraction_best * N) of the ranking, restricted to known objectives."""
    n_best = group_size(cfg.replace_fraction_best, cfg.num_policies)
    return [i for i in ranking[:n_best] if known_objective(view[i]) is not None]


def _decide_dexpbt(own: MemberState, peers: Sequence[Record], cfg: PbtConfig,
                   rng: random.Random) -> Decision:
    idx = own.record.policy_idx
    check_policy_idx(idx, cfg.num_policies)
    timing = _timing_gate(own, cfg) or _unknown_gate(own) or _ready_gate(own, cfg)
    if timing is not None:
        return _keep(own, timing)
    view = population_view(own.record, peers, cfg.num_policies)
    ranking = rank(view, idx)
    gate = None if cfg.dbg_mode else _dexpbt_gates(own, view, ranking, cfg)
    if gate is not None:
        return _keep(own, gate)
    candidates = [r for r in _records(view, [i for i in _best_group(ranking, view, cfg) if i != idx])
                  if is_ready(r, cfg)]
    if not candidates:
        return _keep(own, "no other ready member with a known objective in the best group")
    return _dexpbt_act(own, view, rng.choice(candidates), cfg, rng)


def _dexpbt_act(own: MemberState, view: Mapping[int, Optional[Record]], donor: Record,
                cfg: PbtConfig, rng: random.Random) -> Decision:
    """Replace weights if the donor leads by enough, else mutate own hyperparameters only."""
    candidate = float(donor.objective)  # type: ignore[arg-type]
    own_objective = known_objective(own.record)
    delta = math.inf if own_objective is None else candidate - own_objective
    known = [o for o in (known_objective(r) for r in view.values()) if o is not None]
    std_threshold = cfg.replace_threshold_frac_std * trimmed_std(known)
    abs_threshold = cfg.replace_threshold_frac_absolute * abs(candidate)
    numbers = (f"candidate {donor.policy_idx} objective {_fmt(candidate)} vs own {_fmt(own_objective)}: "
               f"delta {_fmt(delta)}, std threshold {_fmt(std_threshold)}, "
               f"absolute threshold {_fmt(abs_threshold)}")
    own_params = dict(own.record.params)
    if delta > std_threshold and delta > abs_threshold:
        significant, test = _significance(donor, own.record, cfg)
        if significant:
            base = _merge_params(own_params, donor) if rng.random() < 0.5 else own_params
            return _act(own, donor, base, f"replace: {numbers}{test}", cfg, rng)
        return _act(own, None, own_params, f"mutate only, lead not significant: {numbers}{test}", cfg, rng)
    return _act(own, None, own_params, f"mutate only, lead too small: {numbers}", cfg, rng)


# -- Isaac Lab threshold rule ---------------------------------------------------------------------


def _cuts(objectives: Sequence[float], cfg: PbtConfig) -> Tuple[float, float, float, float]:
    """(mean, std, upper cut, lower cut) of the known objectives."""
    mean, std = mean_std(objectives)
    margin = cfg.threshold_abs * (max(objectives) - min(objectives)) if cfg.threshold_abs_relative else cfg.threshold_abs
    upper = max(mean + cfg.threshold_std * std, mean + margin)
    lower = min(mean - cfg.threshold_std * std, mean - margin)
    return mean, std, upper, lower


def _decide_threshold(own: MemberState, peers: Sequence[Record], cfg: PbtConfig,
                      rng: random.Random) -> Decision:
    idx = own.record.policy_idx
    check_policy_idx(idx, cfg.num_policies)
    unknown = _unknown_gate(own) or _ready_gate(own, cfg)
    if unknown is not None:
        return _keep(own, unknown)
    view = population_view(own.record, peers, cfg.num_policies)
    known = {i: o for i, o in ((i, known_objective(view[i])) for i in sorted(view)) if o is not None}
    if not known or (len(known) == 1 and idx in known):
        return _keep(own, f"{len(known)} objectives known: nothing to compare with")
    mean, std, upper, lower = _cuts(list(known.values()), cfg)
    numbers = f"mean {_fmt(mean)}, std {_fmt(std)}, upper {_fmt(upper)}, lower {_fmt(lower)}"
    own_objective = known.get(idx)
    if own_objective is not None and not own_objective < lower:
        return _keep(own, f"not an underperformer: objective {_fmt(own_objective)} >= lower cut "
                          f"({numbers})")
    leaders = [r for r in _records(view, [i for i, o in known.items() if o > upper and i != idx])
               if is_ready(r, cfg)]
    own_params = dict(own.record.params)
    if not leaders:
        reason = f"underperformer, no ready leader: mutate only ({numbers})"
        return _act(own, None, own_params, reason, cfg, rng)
    donor = rng.choice(leaders)
    reason = (f"underperformer (objective {_fmt(own_objective)}), leader {donor.policy_idx} "
              f"objective {_fmt(donor.objective)} ({numbers})")
    significant, test = _significance(donor, own.record, cfg)
    if not significant:
        return _act(own, None, own_params, f"mutate only, lead not significant: {reason}{test}", cfg, rng)
    return _act(own, donor, _merge_params(own_params, donor), f"replace: {reason}{test}", cfg, rng)


_RULES: Dict[str, Callable[[MemberState, Sequence[Record], PbtConfig, random.Random], Decision]] = {
    "dexpbt": _decide_dexpbt,
    "threshold": _decide_threshold,
}
