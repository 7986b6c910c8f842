"""What every selection strategy shares: the decision types, the Strategy interface and the gates.

A strategy turns this member's state and the peers' records into a :class:`Decision`; it reads no
files and draws every random number from the ``rng`` it is given. The gates here (timing, unknown
objective, ready rule, significance test) are the same for every strategy: each strategy starts
with :meth:`Strategy.waiting`, so ``pbt.start_after``/``pbt.initial_delay`` mean the same whatever
rule ranks.
"""

import abc
import math
import random
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from pbt.sections import Section, require, require_choice
from pbt.selection.population import View, diverged_significance, is_diverged, merge_params, population_view, rank
from pbt.selection.stats import group_means, welch_greater

if TYPE_CHECKING:
    from pbt.mutation.network import NetworkChange
    from pbt.storage.record import Record

KEEP = "keep"
MUTATE = "mutate"
REPLACE = "replace"
INSIGNIFICANT_LEAD_ACTIONS = (MUTATE, KEEP)
"""Values of ``pbt.insignificant_lead``."""
EVERY_REPLACE = "every_replace"
LAST_OF_FAMILY = "last_of_family"
SIGNIFICANCE_FOR = (EVERY_REPLACE, LAST_OF_FAMILY)
"""Values of ``pbt.significance_for``."""
EPISODES = "episodes"
EVALUATIONS = "evaluations"
TRAINING = "training"
SIGNIFICANCE_SAMPLES = (EPISODES, EVALUATIONS, TRAINING)
"""Values of ``pbt.significance_samples``."""


EffectPending = Optional[Tuple[int, int]]
"""(envs that finished an episode since a member's last change, all envs) while its objective does
not show that change yet (:attr:`pbt.objective.ObjectiveTracker.effect_pending`); None: it does."""


@dataclass(frozen=True)
class MemberState:
    """What this member knows about itself when it decides."""

    record: "Record"
    """The record this member has just published for the current iteration."""
    best_interval_objective: Optional[float]
    """Best objective seen within the current interval (hysteresis against dips); None: unknown."""
    frames_since_start: int
    """Frames trained since this process started or was last replaced."""
    effect_pending: EffectPending = None
    """See :data:`EffectPending` (``pbt.wait_for_effect``)."""


@dataclass(frozen=True)
class Decision:
    """Everything one PBT iteration will do to one member: the action, the donor, the
    hyperparameters and the network change (an actuator carries it out)."""

    action: str
    """"keep" (change nothing), "mutate" (own weights, new hyperparameters) or "replace"
    (the donor's weights, new hyperparameters)."""
    donor: Optional["Record"]
    """The record whose checkpoint to load when replacing; None otherwise."""
    reason: str
    """Which rule fired, with its numbers."""
    params_before: Dict[str, Any]
    """Hyperparameters in force before the decision (the own record's)."""
    params_after: Dict[str, Any]
    """Hyperparameters to train with next (equal to params_before when keeping)."""
    compared: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    """Equal experience: policy_idx -> (the peer's iteration, this member's iteration) at which
    each peer with a known objective was compared (:mod:`pbt.selection.experience`); empty when
    records were compared as they are."""
    network: Optional["NetworkChange"] = None
    """The change to this member's network at this explore step (``pbt.network_mutation``), starting
    from the donor's network when it takes a donor's weights; None: the network is not evolved, or
    the decision keeps."""
    refused: Dict[int, str] = field(default_factory=dict)
    """Peers refused as donors at this iteration for hyperparameters no member may train with
    (policy_idx -> why); they stayed ranked. The caller logs them (the member: once per reason)."""

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


@dataclass
class SelectionGates(Section):
    """When a member may act or be a donor, whatever the strategy (the ``gates`` config section)."""

    start_after: int = 10_000_000
    """Env frames a member trains after its process started (or it changed) before it may act,
    counted from the start of the PBT interval in which that happened (an iteration runs at the first
    epoch past each multiple of interval_steps: start_after = interval_steps means the next iteration)."""
    initial_delay: int = 20_000_000
    """Absolute env frames (the member's total) before any member may act."""
    ready_after: Optional[int] = None
    """The "ready" rule: a member is neither replaced nor used as a donor until it has trained this
    many frames since it started or last took a donor's weights (counted as start_after is;
    DexPBT's start_after generalised to every exploit). 0 disables it. None (the default): the same as ``start_after``, resolved
    here, so lowering start_after alone never leaves every member "not ready" for the whole run."""
    significance: Optional[float] = 0.05
    """Noise-aware replacement: replace weights only when the donor's recent per-episode
    objectives are higher than this member's with a one-sided Welch t-test p-value below this
    (as in the original PBT paper). null disables the test (means only)."""
    significance_for: str = EVERY_REPLACE
    """Which replaces the significance test guards: "every_replace"; or "last_of_family": only one
    that would take the last copy of a family's weights out of the population (a family: the starting
    member whose weights a member carries, followed through every replace). A member whose family
    lives on in a member ranked above it that is not refused as a donor and has trained at least as
    long since its copy (a younger copy still plays its donor's weights), or whose donor is of its
    own family, is replaced on the strategy's lead alone: copies within a family follow their best
    at once, while a family's best-ranked (or longest-trained) member, and with it the family, goes
    only on a significant lead."""
    significance_samples: str = EPISODES
    """What the significance test counts as one sample: "episodes" (each ranked episode's objective:
    the training episodes', or with ``pbt.eval_episodes`` the pooled evaluations'). With
    ``pbt.eval_episodes``: "evaluations" (needs ``pbt.eval_window`` >= 2): the mean of each pooled
    evaluation, one snapshot of the weights, so the swing between PPO updates counts as noise; or
    "training": the training episodes (which records carry beside the evaluations), so members rank
    by evaluation while a replace needs a lead in the stochastic policy's returns. Near a random
    policy's score a deterministic evaluation is consistent from snapshot to snapshot, so leads
    there pass a test over its episodes or snapshots (0.0034 against 0.0002 at p=0.01 on 192
    episodes), while training returns overlap."""
    insignificant_lead: str = MUTATE
    """What an underperformer does when its donor's lead fails the significance test: "mutate" (keep
    its weights, explore its hyperparameters) or "keep" (change nothing until the evidence is
    significant). With a decision at every epoch, "mutate" random-walks an underperformer's
    hyperparameters on leads that are noise."""
    equal_experience: bool = True
    """Rank members at equal experience, pairwise: each peer is compared with this member at the
    newest iteration both have an objective for (records carry their objective history), so fast
    members are not judged against slow members' early objectives and no slow or unscored peer
    holds back the others (:mod:`pbt.selection.experience`). false: compare newest records as they are."""
    wait_for_effect: bool = True
    """A member that changed (a mutation, or a donor's weights) mutates again only once every one of
    its envs has finished an episode since, so a mutation is judged by an objective (each env's last
    episode) that measures its setting for about half its steps instead of none; until then it keeps.
    Taking a leader's weights is not held back (the significance test compares the episodes as they
    are). With intervals of many episodes this always holds by the next iteration; with a decision
    every epoch and episodes several epochs long it stops the random walk of an underperformer's
    hyperparameters on its former setting's objective. Ranked by evaluation (``pbt.eval_episodes``)
    the training episodes say when: an evaluation right after a change plays weights barely trained
    under it. false: it may mutate at its next iteration."""
    dbg_mode: bool = False
    """Debug: every member past start_after/initial_delay acts (worst-group, hysteresis and
    known-objective gates are skipped). Only for testing the restart machinery; only DexPBT's rule
    honours it (use it with pbt/selection=dexpbt)."""

    def __post_init__(self) -> None:
        require(self.start_after >= 0, "start_after", self.start_after, ">= 0")
        if self.ready_after is None:
            self.ready_after = self.start_after
        require(self.ready_after >= 0, "ready_after", self.ready_after, ">= 0")
        require(
            self.significance is None or 0.0 < self.significance < 1.0,
            "significance",
            self.significance,
            "in (0, 1), or null to compare means only",
        )
        require(self.initial_delay >= 0, "initial_delay", self.initial_delay, ">= 0")
        require_choice("insignificant_lead", self.insignificant_lead, INSIGNIFICANT_LEAD_ACTIONS, noun="actions")
        require_choice("significance_for", self.significance_for, SIGNIFICANCE_FOR, noun="values")
        require_choice("significance_samples", self.significance_samples, SIGNIFICANCE_SAMPLES, noun="values")

    @property
    def ready_frames(self) -> int:
        """``ready_after`` as resolved at construction (None there means ``start_after``)."""
        return self.start_after if self.ready_after is None else self.ready_after


Explore = Callable[[Mapping[str, Any], random.Random], Dict[str, Any]]
"""``explore(params, rng) -> mutated copy``: the configured mutation of hyperparameters."""
Perturb = Callable[[Mapping[str, Any], random.Random, Sequence[float], float, float], Dict[str, Any]]
"""``perturb(params, rng, factors, resample_probability, perturb_probability) -> perturbed copy``:
PBT's perturbation (resample from the search space, or multiply by a factor / move one step),
inside the space, of each key with probability ``perturb_probability``."""


@dataclass(frozen=True)
class Context:
    """What a strategy needs besides its own settings."""

    num_policies: int
    """Population size N (of an elastic population: the members ranked at this iteration)."""
    gates: SelectionGates
    """The shared gates."""
    explore: Explore
    """Mutates hyperparameters (the ``explore`` config section applied)."""
    refused_donors: AbstractSet[int] = frozenset()
    """Members that stay ranked (counts, groups, spread) but are never taken as donors."""
    perturb: Optional[Perturb] = None
    """The perturbation explore step (truncation); None: ``explore`` is used instead."""
    members: Optional[Tuple[int, ...]] = None
    """The policy indices ranked (an elastic population); None: 0 .. num_policies-1."""
    space: Any = None
    """The search space (:class:`pbt.mutation.space.SearchSpace`) explore steps stay inside; None:
    none given (a hand-made Context)."""
    view: Optional[View] = None
    """The population as ranked (each member's record, at equal experience when the gate is on),
    computed once by :func:`pbt.selection.decide`; None: a hand-made Context (see :meth:`Strategy.view`)."""
    evaluation_episodes: int = 0
    """Episodes per evaluation (``pbt.eval_episodes``): the size of one sample of the significance test
    with ``pbt.significance_samples=evaluations``; 0: members rank by training episodes."""

    @property
    def population(self) -> Union[int, Tuple[int, ...]]:
        """What :func:`pbt.selection.population.population_view` takes: N, or the members' indices."""
        return self.num_policies if self.members is None else self.members


class Strategy(abc.ABC):
    """A selection strategy: one abstract method, :meth:`decide`."""

    config_class: ClassVar[Type[Section]]
    """The dataclass of this strategy's settings (its flat ``pbt.*`` keys)."""
    initial_mutation: ClassVar[bool] = True
    """Whether a fresh member mutates its starting hyperparameters once (DexPBT does, Isaac Lab's
    threshold rule does not)."""

    def __init__(self, settings: Any, context: Context) -> None:
        self.settings = settings
        self.ctx = context

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Start-up checks of the whole ``pbt`` config (a :class:`pbt.config.PbtConfig`) when this
        strategy is selected; ConfigError saying what to change. Default: none."""
        return None  # an optional hook: most strategies need no check

    @property
    def window(self) -> int:
        """How many of a member's recent objectives this strategy averages (equal experience
        translates peers by this member's progress over the same window)."""
        return 1

    @abc.abstractmethod
    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        """What this member does at this PBT iteration."""

    # -- helpers every strategy uses ----------------------------------------------------------------

    def view(self, own: MemberState, peers: Sequence["Record"]) -> Dict[int, Optional["Record"]]:
        """policy_idx -> the record ranked: the context's (decide computed it once), else (a strategy
        called with a hand-made Context) :func:`population_view` of ``peers``."""
        if self.ctx.view is not None:
            return dict(self.ctx.view)
        return population_view(own.record, peers, self.ctx.population)

    def waiting(self, own: MemberState) -> Optional[str]:
        """Why this member does not act yet (timing gates, unknown objective, ready rule), or None;
        a diverged member (NaN/inf objective) waits only for the population's warm-up
        (``initial_delay``)."""
        gates = self.ctx.gates
        if is_diverged(own.record):
            return initial_delay_gate(own, gates)
        return timing_gate(own, gates) or unknown_gate(own) or ready_gate(own, gates)

    def keep(self, own: MemberState, reason: str) -> Decision:
        params = dict(own.record.params)
        return Decision(KEEP, None, reason, params, dict(params))

    def act(
        self, own: MemberState, donor: Optional["Record"], base: Mapping[str, Any], reason: str, rng: random.Random
    ) -> Decision:
        """Mutate ``base`` params; replace weights with ``donor``'s when given, else keep own weights."""
        return self.decision(own, donor, self.ctx.explore(base, rng), reason)

    def replace_if_significant(
        self,
        own: MemberState,
        donor: "Record",
        reason: str,
        rng: random.Random,
        fallback: str = "mutate only",
        carry_out: Optional[Callable[..., Decision]] = None,
    ) -> Decision:
        """Take ``donor``'s weights and hyperparameters when its lead passes the significance test (a
        diverged member skips it), else :meth:`not_significant`; ``carry_out`` (default :meth:`act`)
        explores from the weights and hyperparameters taken."""
        carry_out = carry_out or self.act
        own_params = dict(own.record.params)
        significant, test = self.lead_test(own, donor, self.ctx.view or {})
        if not significant:
            return self.not_significant(own, f"{reason}{test}", rng, fallback, carry_out)
        return carry_out(own, donor, merge_params(own_params, donor), f"replace: {reason}{test}", rng)

    def lead_test(self, own: MemberState, donor: "Record", view: View) -> Tuple[bool, str]:
        """(may ``donor``'s weights replace this member's?, text): a diverged member always may; with
        ``significance_for=last_of_family`` a member whose family lives on in ``view`` (or whose donor
        is of its family) may on the lead alone; else the significance test decides."""
        gates = self.ctx.gates
        skipped = diverged_significance(own.record)
        if skipped is not None:
            return skipped
        if gates.significance is not None and gates.significance_for == LAST_OF_FAMILY:
            kin = family_lives_on(own.record, donor, view, self.ctx.refused_donors)
            if kin is not None:
                return True, f"; significance test skipped: {kin}"
        return significance(donor, own.record, gates, self.ctx.evaluation_episodes)

    def not_significant(
        self,
        own: MemberState,
        reason: str,
        rng: random.Random,
        fallback: str = "mutate only",
        carry_out: Optional[Callable[..., Decision]] = None,
    ) -> Decision:
        """A donor's lead failed the significance test: keep everything (``insignificant_lead=keep``),
        else explore from own weights and hyperparameters with ``carry_out`` (default :meth:`act`)."""
        if self.ctx.gates.insignificant_lead == KEEP:
            return self.keep(own, f"keep (insignificant_lead=keep), lead not significant: {reason}")
        carry_out = carry_out or self.act
        return carry_out(own, None, dict(own.record.params), f"{fallback}, lead not significant: {reason}", rng)

    def decision(self, own: MemberState, donor: Optional["Record"], after: Mapping[str, Any], reason: str) -> Decision:
        """Replace (with ``donor``) or mutate, training next with ``after``; a mutation of a member whose
        last change does not show in its objective yet keeps instead (:func:`effect_gate`)."""
        wait = None if donor is not None else effect_gate(own, self.ctx.gates)
        if wait is not None:
            return self.keep(own, f"{reason}; not mutated: {wait}")
        action = REPLACE if donor is not None else MUTATE
        return Decision(action, donor, reason, dict(own.record.params), dict(after))

    def perturbed(
        self,
        own: MemberState,
        donor: Optional["Record"],
        base: Mapping[str, Any],
        reason: str,
        rng: random.Random,
        factors: Sequence[float],
        resample_probability: float,
        perturb_probability: float = 1.0,
    ) -> Decision:
        """Replace (with ``donor``) or mutate, training next with ``base`` perturbed (the context's
        perturbation explore step; a hand-made Context without one: the configured mutation)."""
        if self.ctx.perturb is None:
            return self.act(own, donor, base, reason, rng)
        after = self.ctx.perturb(base, rng, factors, resample_probability, perturb_probability)
        return self.decision(own, donor, after, reason)


# -- shared gates -----------------------------------------------------------------------------------


def fmt(value: Optional[float]) -> str:
    """A number for a decision's reason."""
    return "unknown" if value is None or not math.isfinite(value) else f"{value:.4g}"


def timing_gate(own: MemberState, gates: SelectionGates) -> Optional[str]:
    """Why the member is too young to act, or None."""
    if own.frames_since_start < gates.start_after:
        return f"start_after: {fmt(own.frames_since_start)} of {fmt(gates.start_after)} frames since start/replacement"
    return initial_delay_gate(own, gates)


def initial_delay_gate(own: MemberState, gates: SelectionGates) -> Optional[str]:
    """Why the population is too young for anyone to act (``initial_delay``), or None."""
    if own.record.frame < gates.initial_delay:
        return f"initial_delay: frame {fmt(own.record.frame)} < {fmt(gates.initial_delay)}"
    return None


def unknown_gate(own: MemberState) -> Optional[str]:
    """A member whose own objective is not measured yet (None: e.g. just restarted, its envs have not
    finished their episodes) waits; NaN/inf (diverged) is not unknown: it ranks last and acts."""
    if own.record.objective is None:
        return "own objective not known yet (episodes still running)"
    return None


def effect_gate(own: MemberState, gates: SelectionGates) -> Optional[str]:
    """Why a member whose objective does not show its last change yet does not mutate (``wait_for_effect``;
    not in ``dbg_mode``, where every member acts), or None."""
    if not gates.wait_for_effect or gates.dbg_mode or own.effect_pending is None:
        return None
    finished, envs = own.effect_pending
    return (
        f"waiting for the effect of its last change: {finished} of {envs} envs finished an episode since "
        "(pbt.wait_for_effect)"
    )


def ready_gate(own: MemberState, gates: SelectionGates) -> Optional[str]:
    """The ready rule: a member that took a donor's weights (or started) less than ready_after frames
    ago is not judged yet: its objective still reflects the start, not its hyperparameters."""
    if own.record.frames_since_replace < gates.ready_frames:
        return (
            f"not ready: {fmt(own.record.frames_since_replace)} of ready_after {fmt(gates.ready_after)} "
            "frames since it started or took a donor's weights"
        )
    return None


def family_lives_on(
    own: "Record", donor: "Record", view: View, refused: AbstractSet[int] = frozenset()
) -> Optional[str]:
    """Why replacing ``own``'s weights with ``donor``'s loses no family (None: it may; an unknown
    family never matches). Another member carries ``own``'s family when its record in ``view`` says
    so, it ranks above ``own``, it is not ``refused`` as a donor, and it has trained at least as long
    since its weights were copied as ``own`` has since its own were. Only one ranked above counts:
    members decide at the same time from records written before their decisions, so two members
    of one family that each counted the other could both be replaced; the family's best-ranked
    member is always tested. Only one as old counts: a copy made an epoch ago plays its donor's
    weights, so its rank above them is noise and says nothing of its own hyperparameters; counting
    it replaced founders on the lead alone whose families then died out with their young copies."""
    family = own.family
    if family is None:
        return None
    if donor.family == family:
        return f"the donor is of this member's family (policy {family})"
    ranked = rank({**view, own.policy_idx: own}, own.policy_idx)
    above = ranked[: ranked.index(own.policy_idx)]
    relatives = {
        idx: record
        for idx, record in view.items()
        if record is not None and record.family == family and idx not in refused
    }
    old = sorted(
        idx for idx in above if idx in relatives and relatives[idx].frames_since_replace >= own.frames_since_replace
    )
    if not old:
        return None
    return (
        f"policy {family}'s family lives on in member{'s' if len(old) > 1 else ''} {', '.join(map(str, old))}, "
        "ranked above this one and trained as long since its copy"
    )


def significance(
    donor: "Record", own: "Record", gates: SelectionGates, evaluation_episodes: int = 0
) -> Tuple[bool, str]:
    """(donor significantly better?, text) by a one-sided Welch t-test on per-episode objectives, or
    with ``significance_samples=evaluations`` on per-evaluation means (``evaluation_episodes`` each)."""
    if gates.significance is None:
        return True, ""
    donor_samples, own_samples = list(donor.episode_returns), list(own.episode_returns)
    unit = "episode"
    if gates.significance_samples == TRAINING:
        donor_samples, own_samples = training_samples(donor), training_samples(own)
        unit = "training episode"
    elif gates.significance_samples == EVALUATIONS and evaluation_episodes > 0:
        donor_samples = group_means(donor_samples, evaluation_episodes)
        own_samples = group_means(own_samples, evaluation_episodes)
        unit = "evaluation"
    p = welch_greater(donor_samples, own_samples)
    if p is None:
        return False, (
            f"; too few {unit} samples for a significance test ({len(donor_samples)} donor, {len(own_samples)} own)"
        )
    over = {
        "episode": "",
        "training episode": f" over {len(donor_samples)} and {len(own_samples)} training episodes",
        "evaluation": f" over {len(donor_samples)} and {len(own_samples)} evaluations",
    }[unit]
    return p < gates.significance, f"; Welch p={p:.3g}{over} vs significance {gates.significance:g}"


def training_samples(record: "Record") -> List[float]:
    """A record's training episodes: carried beside its evaluations (``training_returns``), or its
    episodes when they are the training episodes themselves (a member ranking by them)."""
    return list(record.training_returns) if record.evaluated else list(record.episode_returns)
