"""The ``pbt`` config group as a validated dataclass.

The user-facing keys are flat (``pbt.threshold_std=0.2``); :class:`PbtConfig` groups them into
sections, each validating itself: the root keys (this run and its population), ``gates`` (when a
member may act, :class:`pbt.selection.base.SelectionGates`), one settings dataclass per selection
strategy (``strategies``, from :mod:`pbt.selection.registry`; every strategy's keys are accepted,
the selected one is used), ``explore`` (the mutation scheme, :class:`pbt.mutation.ExploreConfig`) and
``liveness`` (heartbeats). ``PbtConfig.from_mapping`` checks names, types and ranges before training
starts, so a typo fails in the first second with a "Did you mean ...?" instead of hours later.

No torch, no numpy, no hydra: this module runs on Python 3.8 with the standard library only.
"""

import math
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, Union

from pbt.curriculum.config import CurriculumConfig
from pbt.errors import ConfigError, did_you_mean
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.network import NetworkMutationConfig
from pbt.sections import PARSER, Section, parse_field, require, require_choice, section_keys, to_int, type_error
from pbt.selection.base import EPISODES, EVALUATIONS, TRAINING, SelectionGates
from pbt.selection.registry import STRATEGIES, default_settings, get_strategy
from pbt.storage.record import check_policy_idx

RESTART_MODES: Tuple[str, ...] = ("inplace", "exec")
"""Names accepted by ``pbt.restart_mode``."""
WRITE_ERROR_POLICIES: Tuple[str, ...] = ("retry", "fail")
"""Names accepted by ``pbt.on_write_error``."""
ELASTIC = "auto"
"""``pbt.num_policies=auto``: an elastic population (members join and leave while it runs)."""
JOIN_MODES: Tuple[str, ...] = ("best", "fresh")
"""Names accepted by ``pbt.join``."""


def to_num_policies(name: str, value: Any) -> Union[int, str]:
    """A whole number, or "auto" (an elastic population)."""
    if isinstance(value, str) and value.strip().lower() == ELASTIC:
        return ELASTIC
    try:
        return to_int(name, value)
    except ConfigError:
        raise type_error(name, value, 'a whole number (e.g. 8), or "auto" for an elastic population') from None


@dataclass
class LivenessConfig(Section):
    """Heartbeats: how often a member proves it is alive, and when it counts as dead."""

    heartbeat_interval: float = 30.0
    """Seconds between two heartbeats: a daemon thread of each member rewrites
    ``<workspace>/<idx:03d>/heartbeat`` (pid, host, frame, time) this often, also during long epochs."""
    heartbeat_timeout: float = 600.0
    """A member whose heartbeat is older than this many seconds is reported dead: a warning names it,
    and it is no donor unless its record is still the population best. A lock left by a dead member
    on another host is taken over after this long (on the same host: as soon as its PID is gone)."""

    def __post_init__(self) -> None:
        require(
            math.isfinite(self.heartbeat_interval) and self.heartbeat_interval > 0,
            "heartbeat_interval",
            self.heartbeat_interval,
            "a number of seconds > 0",
        )
        require(
            math.isfinite(self.heartbeat_timeout) and self.heartbeat_timeout >= 2 * self.heartbeat_interval,
            "heartbeat_timeout",
            self.heartbeat_timeout,
            f"at least twice pbt.heartbeat_interval ({self.heartbeat_interval:g} s)",
        )


@dataclass
class PbtConfig:
    """Settings of one PBT member (the ``pbt`` config group): the root keys, then the sections."""

    enabled: bool = False
    """Run population-based training. False: plain single-run training, every other key ignored."""
    policy_idx: int = 0
    """Index of this member in the population, 0 .. num_policies-1 (any index >= 0 in an elastic
    population). Unique per process."""
    num_policies: Union[int, str] = field(default=8, metadata={PARSER: to_num_policies})
    """Population size N; every member must be started with the same value. "auto": an elastic
    population: each member ranks the members that published within the last ``elastic_window``
    intervals, so members can join (any unused policy_idx) and leave while it runs."""
    elastic_window: int = 3
    """With ``num_policies=auto``: a member stays in the ranking while its newest record is younger
    than this many PBT intervals (of the ranking member's own pace, in seconds), or while its
    heartbeat says it is still training. Finished and dead members drop out after it."""
    join: str = "best"
    """With ``num_policies=auto``, how a member starts that has no records in a population that
    already has objectives: "best" (the weights and mutated hyperparameters of the best member
    ranked) or "fresh" (its own initial weights and hyperparameters, like a member of the first
    generation)."""
    workspace: str = "pbt_workspace"
    """Shared directory (relative to the working directory, or absolute) where members publish records."""
    interval_steps: int = 10_000_000
    """Env frames between two PBT iterations (``iteration = frame // interval_steps``). An iteration runs
    at the end of an epoch (num_envs x horizon_length frames), so an interval shorter than one epoch
    means one iteration per epoch, with iteration numbers that skip (a start-up warning says so)."""
    max_lead: Optional[int] = 1
    """Pacing: a member more than this many PBT intervals (in frames) ahead of the slowest member
    still training waits at its PBT iteration, heartbeating ("waiting for peers" in status and
    progress), until that member is within reach or stops training, so the evidence that it is worse
    (which arrives at the slow members' pace) arrives before its budget is spent. null: never wait
    (:mod:`pbt.pacing`). Not applied in an elastic population (``num_policies=auto``)."""
    synchronous: bool = False
    """Rank in lockstep (Ray Tune's synchronous PBT): after publishing an iteration a member waits,
    heartbeating ("waiting for peers"), until every peer still training has published it too, so
    every member ranks the same records, and a population run again on the same machine decides the
    same. false: rank at once on the peers' newest records, comparing with a peer that is an interval
    behind at its own iteration (equal experience), that is on a gap one interval old. Not for an
    elastic population (``num_policies=auto``)."""
    max_donor_lag: Optional[int] = 0
    """A member taking a donor's weights whose newest checkpoint is more than this many PBT
    intervals behind the member's own iteration (a slower donor) waits, heartbeating ("waiting for
    peers" in status; its log names the donor), until the donor publishes a newer one that
    continues the same weights, and takes that: weights from an older checkpoint would lose the
    frames between for good. It stops waiting when the donor stops training or trains past the
    member's iteration without publishing it (its writes failed). null: take the checkpoint the
    decision saw at once. Not applied in an elastic population (``num_policies=auto``)."""
    objective: str = "true_objective"
    """What to maximise: a trainer statistic (``episode_return``, ``episode_length``:
    :data:`pbt.objective.TRAINER_STATISTICS`) or a dotted key into the env infos (``episode.<key>``
    for a scalar under ``infos["episode"]``); the default ``true_objective`` falls back to the mean
    episode return when the env never reports it."""
    eval_episodes: int = 0
    """Rank by a deterministic evaluation: at each PBT iteration the member plays this many episodes
    (one per env, mean actions, in a second instance of its task) and ranks, publishes and reports
    their mean ``pbt.objective``. Known at once after a change, of the current weights only. 0: rank
    by the training episodes. Not for Isaac Gym / Isaac Lab tasks (one simulation per process)."""
    eval_window: int = 1
    """With ``pbt.eval_episodes``: the objective pools the episodes of the member's last this many
    evaluations (its own since it took weights, and before that its donor's, which played the weights
    it took; across an exec restart, a resume and a join too), and the significance test sees them
    all. One evaluation shows one snapshot of weights that swing between PPO updates; 1: the last
    evaluation only."""
    allow_reward_shaping_mutation: bool = False
    """Accept mutating the keys a task declares as reward shaping (``task.env.actionCost``...) while
    ranking by the shaped episode return (``episode_return``, or ``true_objective`` falling back to
    it). False: such a start-up is refused (:mod:`pbt.mutation.shaping`)."""
    selection: str = "threshold"
    """Selection strategy, a name in :data:`pbt.selection.registry.STRATEGIES` (chosen with
    ``pbt/selection=<name>``): "threshold" (Isaac Lab: mean +/- k*std cuts), "dexpbt" (IsaacGymEnvs:
    worst/best groups, hysteresis, std thresholds), "truncation" (bottom quantile copies the top)
    or "tournament" (AgileRL: random tournaments with elitism)."""
    seed: Optional[int] = None
    """Seed of PBT's own random generator; None: derived from the run seed and policy_idx."""
    restart_mode: str = "inplace"
    """How a member takes new weights/hyperparameters: "inplace" (loaded into the running agent,
    milliseconds) or "exec" (the process re-executes itself with the new overrides, seconds).
    Changes that need a rebuild (num_envs, horizon_length, network, task parameters...) always use
    exec; the lineage records which mode was used and why."""
    on_write_error: str = "retry"
    """When publishing to the workspace fails (disk full, read-only, permissions): "retry" logs the
    error, keeps training and tries again at the next PBT interval; "fail" stops the worker."""
    overwrite: bool = False
    """With ``resume=false``: start this member over even though it has records, after moving its
    directory aside to ``<idx:03d>.old-<time>`` (nothing is deleted). Without it such a start is
    refused. Leave it out of launcher commands: a rerun would start the member over again."""
    resume: bool = True
    """A member started on a workspace where its policy_idx already has records resumes from its
    newest intact checkpoint with that record's hyperparameters (unless ``checkpoint=`` is given)."""

    gates: SelectionGates = field(default_factory=SelectionGates)
    """When a member may act or be a donor (start_after, initial_delay, ready_after, significance,
    dbg_mode)."""
    strategies: Dict[str, Section] = field(default_factory=default_settings)
    """Every selection strategy's settings by strategy name; ``selection`` picks the one used."""
    explore: ExploreConfig = field(default_factory=ExploreConfig)
    """The mutation scheme and its change ranges."""
    liveness: LivenessConfig = field(default_factory=LivenessConfig)
    """Heartbeat interval and timeout."""
    course: CurriculumConfig = field(default_factory=CurriculumConfig)
    """The curriculum (``pbt.curriculum``, ``pbt.curriculum_mode``; :mod:`pbt.curriculum`)."""

    def __post_init__(self) -> None:
        require(self.interval_steps > 0, "interval_steps", self.interval_steps, "> 0")
        require(
            self.max_lead is None or self.max_lead >= 1,
            "max_lead",
            self.max_lead,
            ">= 1 (PBT intervals), or null to never wait for peers",
        )
        require(
            self.max_donor_lag is None or self.max_donor_lag >= 0,
            "max_donor_lag",
            self.max_donor_lag,
            ">= 0 (PBT intervals), or null to take the donor's checkpoint the decision saw",
        )
        require(
            self.num_policies == ELASTIC or (isinstance(self.num_policies, int) and self.num_policies >= 1),
            "num_policies",
            self.num_policies,
            '>= 1, or "auto"',
        )
        require(self.elastic_window >= 1, "elastic_window", self.elastic_window, ">= 1 (PBT intervals)")
        if self.synchronous and self.num_policies == ELASTIC:
            raise ConfigError(
                "pbt.synchronous=true makes every member wait for the others at each iteration, but "
                "pbt.num_policies=auto is an elastic population: a member joining late starts at frame 0 "
                "and would stall everyone. Set pbt.synchronous=false, or give pbt.num_policies a number."
            )
        require_choice("join", self.join, JOIN_MODES, noun="modes")
        require(bool(self.workspace), "workspace", self.workspace, "a non-empty directory name")
        require(bool(self.objective), "objective", self.objective, "a non-empty dotted key")
        require(self.eval_episodes >= 0, "eval_episodes", self.eval_episodes, ">= 0 (0: rank by the training episodes)")
        require(self.eval_window >= 1, "eval_window", self.eval_window, ">= 1 (evaluations pooled)")
        if self.eval_episodes == 0:
            problems = evaluation_needs({key: self.flat_value(key) for key in EVALUATION_NEEDS})
            if problems:
                raise ConfigError(next(iter(problems.values())))
        if self.gates.significance_samples == EVALUATIONS and self.eval_window < 2:
            raise ConfigError(
                "pbt.significance_samples=evaluations tests the means of the pooled evaluations, but "
                f"pbt.eval_window={self.eval_window} pools one: a test needs two per member. Set "
                "pbt.eval_window >= 3, or drop pbt.significance_samples."
            )
        get_strategy(self.selection)
        require_choice("restart_mode", self.restart_mode, RESTART_MODES, noun="modes")
        require_choice("on_write_error", self.on_write_error, WRITE_ERROR_POLICIES)
        if self.overwrite and self.resume:
            raise ConfigError(
                "pbt.overwrite=true only applies with pbt.resume=false (start over, moving the old records "
                "aside). Set pbt.resume=false to start over, or drop pbt.overwrite to continue the member."
            )

    # -- flat keys -----------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "PbtConfig":
        """Build a config from the flat (Hydra/YAML) ``pbt`` mapping, routing each key to its
        section and checking names, types and ranges.

        Raises ConfigError naming the offending ``pbt.<key>`` and how to fix it.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                f"The pbt config must be a mapping of keys to values, got {type(mapping).__name__}. "
                "Select a config with pbt=pbt_default (or pbt=no_pbt)."
            )
        names = flat_keys()
        flat = {str(key): value for key, value in mapping.items()}
        for name in flat:
            if name not in names:
                raise ConfigError(
                    f"Unknown PBT config key 'pbt.{name}'.{did_you_mean(name, names)} Valid keys: {', '.join(names)}."
                )
        check_placement(flat)
        root = {spec.name: parse_field(spec, flat[spec.name]) for spec in _root_fields() if spec.name in flat}
        return cls(
            **root,
            gates=SelectionGates.from_flat(flat),
            strategies={name: strategy.config_class.from_flat(flat) for name, strategy in STRATEGIES.items()},
            explore=ExploreConfig.from_flat(flat),
            liveness=LivenessConfig.from_flat(flat),
            course=CurriculumConfig.from_flat(flat),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The flat ``pbt`` mapping (plain data, YAML-safe): what :meth:`from_mapping` reads back
        (the selected strategy's keys only, as a composed config has them)."""
        flat = {spec.name: getattr(self, spec.name) for spec in _root_fields()}
        for section in (self.gates, self.strategies[self.selection], self.explore, self.liveness, self.course):
            flat.update(section.to_flat())
        return flat

    def flat_value(self, key: str) -> Any:
        """The value of the flat key ``pbt.<key>``, in whichever section holds it (the selected
        strategy's, for a strategy key); KeyError for a key no section holds."""
        strategy = self.strategies.get(self.selection)
        for holder in (self, self.gates, self.explore, self.liveness, self.course, strategy):
            if holder is not None and key in {spec.name for spec in fields(holder)} and key not in _SECTION_FIELDS:
                return getattr(holder, key)
        raise KeyError(f"pbt.{key}")

    # -- validation ----------------------------------------------------------------------------

    @property
    def elastic(self) -> bool:
        """True for an elastic population (``num_policies=auto``)."""
        return self.num_policies == ELASTIC

    @property
    def population_size(self) -> Optional[int]:
        """N of a fixed population; None for an elastic one."""
        return None if self.elastic else int(self.num_policies)

    def validate_population(self) -> None:
        """Check the population settings of an enabled PBT run (N >= 2, policy_idx in range) and
        the selected strategy's own start-up checks (``Strategy.check_config``)."""
        get_strategy(self.selection).check_config(self)
        if self.elastic:
            check_policy_idx(self.policy_idx, None)
            return
        assert isinstance(self.num_policies, int)
        if self.num_policies < 2:
            raise ConfigError(
                f"PBT needs at least 2 policies, got pbt.num_policies={self.num_policies}. "
                "Set pbt.num_policies=N>=2 or pbt=no_pbt to train a single policy."
            )
        check_policy_idx(self.policy_idx, self.num_policies)


_SECTION_FIELDS = ("gates", "strategies", "explore", "liveness", "course")


def _root_fields() -> List["Field[Any]"]:
    return [spec for spec in fields(PbtConfig) if spec.name not in _SECTION_FIELDS]


def section_classes() -> Dict[str, Type[Section]]:
    """Section name -> its dataclass (a strategy's section is named ``strategies.<name>``)."""
    classes: Dict[str, Type[Section]] = {"gates": SelectionGates}
    classes.update({f"strategies.{name}": strategy.config_class for name, strategy in STRATEGIES.items()})
    classes.update({"explore": ExploreConfig, "liveness": LivenessConfig, "curriculum": CurriculumConfig})
    return classes


def key_sections() -> Dict[str, str]:
    """Every flat key -> the section holding it ("" for a root key); ConfigError if two sections
    declare the same key."""
    owner = {spec.name: "" for spec in _root_fields()}
    for key, section in section_keys(section_classes()).items():
        if key in owner:
            raise ConfigError(
                f"Config key pbt.{key} is declared by the root config and by {section}: "
                "rename one of them (flat pbt.* keys must be unique)."
            )
        owner[key] = section
    return owner


def flat_keys() -> List[str]:
    """All valid keys of the ``pbt`` group: the root keys, then each section's."""
    return list(key_sections())


# -- keys that need the evaluation ---------------------------------------------------------------


@dataclass(frozen=True)
class EvaluationNeed:
    """A setting that only means something while members run the deterministic evaluation
    (``pbt.eval_episodes > 0``): one row of the table behind the start-up check and the overrides
    an Isaac task's error names (:func:`evaluation_free_settings`)."""

    fallback: Any
    """The value that runs without the evaluation (the key's default)."""
    problem: Callable[[Any], Optional[str]]
    """The start-up error for a value that needs the evaluation (what fails, how to fix it); None
    for a value that does not."""


_SIGNIFICANCE_WITHOUT_EVALUATION: Dict[str, str] = {
    EVALUATIONS: "pbt.significance_samples=evaluations tests the means of the pooled evaluations, but "
    "pbt.eval_episodes=0 runs none: a test needs two per member. Set pbt.eval_episodes (e.g. 16) and "
    "pbt.eval_window >= 3, or drop pbt.significance_samples.",
    TRAINING: "pbt.significance_samples=training tests the training episodes while members rank by a "
    "deterministic evaluation, but pbt.eval_episodes=0: members rank by the training episodes already. "
    "Set pbt.eval_episodes (e.g. 16), or drop pbt.significance_samples.",
}


def _window_without_evaluation(value: Any) -> Optional[str]:
    if int(value) <= 1:
        return None
    return (
        f"pbt.eval_window={value} pools evaluations, but pbt.eval_episodes=0 runs none. "
        "Set pbt.eval_episodes (e.g. pbt.eval_episodes=16) or drop pbt.eval_window."
    )


EVALUATION_NEEDS: Dict[str, EvaluationNeed] = {
    "eval_window": EvaluationNeed(fallback=1, problem=_window_without_evaluation),
    "significance_samples": EvaluationNeed(fallback=EPISODES, problem=_SIGNIFICANCE_WITHOUT_EVALUATION.get),
}
"""Flat ``pbt`` key -> what it needs of the evaluation, in the order the start-up check reports."""


def evaluation_needs(flat: Mapping[str, Any]) -> Dict[str, str]:
    """Each key of the flat ``pbt`` mapping whose value needs the evaluation -> its start-up error (a
    key missing from the mapping has its default, which needs nothing)."""
    problems = {key: need.problem(flat[key]) for key, need in EVALUATION_NEEDS.items() if key in flat}
    return {key: problem for key, problem in problems.items() if problem is not None}


def evaluation_free_settings(flat: Mapping[str, Any]) -> List[str]:
    """The overrides that turn every key needing ``pbt.eval_episodes`` back to its default, so that
    appended to a command (later overrides win) they leave a config that runs without the evaluation."""
    settings = {"eval_episodes": 0}
    settings.update({key: EVALUATION_NEEDS[key].fallback for key in evaluation_needs(flat)})
    return [f"pbt.{key}={value}" for key, value in settings.items()]


# -- where each key belongs ----------------------------------------------------------------------

STRATEGY_ONLY_GATES: Dict[str, str] = {"dbg_mode": "dexpbt"}
"""Gate keys that only one strategy honours: key -> that strategy."""


def strategy_of(key: str) -> Optional[str]:
    """The selection strategy whose setting ``key`` is (None: a key every strategy uses)."""
    for name, strategy in STRATEGIES.items():
        if key in strategy.config_class.keys():
            return name
    return None


def misplaced_key_error(key: str, value: Any, selection: str) -> Optional[ConfigError]:
    """ConfigError for ``pbt.<key>`` given while ``selection`` is the strategy, when only another
    strategy reads it (it would be ignored without a word); None when the key is in effect."""
    owner = strategy_of(key)
    if owner is None and key in STRATEGY_ONLY_GATES and value not in (None, False):
        owner = STRATEGY_ONLY_GATES[key]
    if owner is None or owner == selection:
        return None
    return ConfigError(
        f"pbt.{key} is a setting of pbt/selection={owner}; the selection is {selection}: add "
        f"pbt/selection={owner} or remove the key."
    )


def check_placement(flat: Mapping[str, Any]) -> None:
    """Refuse keys that the selected strategy would ignore (see :func:`misplaced_key_error`), all of
    them in one error. Command-line keys are refused before composing (:mod:`pbt.overrides`), so
    these came from a config file, such as a preset: the error names the removals that undo it."""
    selection = flat.get("selection", PbtConfig.selection)
    if not isinstance(selection, str) or selection not in STRATEGIES:
        return  # PbtConfig's own check names the unknown strategy
    errors = [(key, misplaced_key_error(key, value, selection)) for key, value in flat.items()]
    misplaced = [(key, error) for key, error in errors if error is not None]
    if not misplaced:
        return
    removals = " ".join(f"~pbt.{key}" for key, _ in misplaced)
    raise ConfigError(
        f"{misplaced[0][1]} Where a config file (a preset such as pbt=evaluated_lockstep) set it, "
        f"remove what the selection would ignore on the command line: {removals}"
    )


# -- the Hydra config nodes, generated from the sections -----------------------------------------

GROUP_KEYS = ("selection", "mutation", "network_mutation", "search_space")
"""Keys set by a config group file (pbt/selection, pbt/mutation, pbt/search_space), not by the
generated key node."""


def _field_default(spec: "Field[Any]") -> Any:
    default = spec.default_factory() if callable(spec.default_factory) else spec.default
    return list(default) if isinstance(default, tuple) else default


def key_defaults(cls: Type[Any]) -> Dict[str, Any]:
    """``cls``'s fields and their declared defaults (before ``__post_init__`` derives any), YAML-safe."""
    return {spec.name: _field_default(spec) for spec in fields(cls)}


def hydra_nodes() -> Dict[str, Dict[str, Any]]:
    """The ``pbt`` group's generated config nodes, the one source of every key's default:
    ``"keys"`` (the root keys and the sections every strategy uses), ``"network_mutation"`` (the
    settings ``pbt/mutation=agilerl`` composes) and ``"selection/<name>"`` (one per strategy:
    ``selection: <name>`` and its settings). ``pbt.resolvers.register_configs`` stores
    them in Hydra's ConfigStore; ``configs/pbt/pbt_default.yaml`` composes them."""
    keys: Dict[str, Any] = {}
    for cls in (PbtConfig, SelectionGates, ExploreConfig, LivenessConfig, CurriculumConfig):
        keys.update({k: v for k, v in key_defaults(cls).items() if k not in _SECTION_FIELDS})
    for name in GROUP_KEYS:
        keys.pop(name, None)
    keys["search_space"] = {}
    nodes = {"keys": keys, "network_mutation": key_defaults(NetworkMutationConfig)}
    for name, strategy in STRATEGIES.items():
        nodes[f"selection/{name}"] = {"selection": name, **key_defaults(strategy.config_class)}
    return nodes
