"""The ``pbt`` config group as a validated dataclass, plus dotted-key helpers for nested configs.

``PbtConfig`` carries DexPBT's keys with IsaacGymEnvs' defaults, Isaac Lab's threshold rule keys and
the mutation scheme. ``PbtConfig.from_mapping`` checks names, types and ranges before training
starts, so a typo fails in the first second with a "Did you mean ...?" instead of hours later.

No torch, no numpy, no hydra: this module runs on Python 3.8 with the standard library only.
"""
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from difflib import get_close_matches
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Tuple

from pbt.errors import ConfigError, did_you_mean

logger = logging.getLogger(__name__)

SELECTION_RULES: Tuple[str, ...] = ("dexpbt", "threshold")
"""Names accepted by ``pbt.selection``."""
RESTART_MODES: Tuple[str, ...] = ("inplace", "exec")
"""Names accepted by ``pbt.restart_mode``."""
WRITE_ERROR_POLICIES: Tuple[str, ...] = ("retry", "fail")
"""Names accepted by ``pbt.on_write_error``."""

_PREFIX = "train.params.config."

DEFAULT_MUTATION: Dict[str, str] = {
    _PREFIX + "learning_rate": "mutate_float",
    _PREFIX + "grad_norm": "mutate_float",
    _PREFIX + "entropy_coef": "mutate_float",
    _PREFIX + "critic_coef": "mutate_float",
    _PREFIX + "bounds_loss_coef": "mutate_float",
    _PREFIX + "kl_threshold": "mutate_float",
    _PREFIX + "e_clip": "mutate_eps_clip",
    _PREFIX + "mini_epochs": "mutate_mini_epochs",
    _PREFIX + "gamma": "mutate_discount",
    _PREFIX + "tau": "mutate_discount",
}
"""The default mutation scheme (the same mapping as ``configs/pbt/mutation/default.yaml``)."""


@dataclass
class PbtConfig:
    """Settings of one PBT member (the ``pbt`` config group)."""

    enabled: bool = False
    """Run population-based training. False: plain single-run training, every other key ignored."""
    policy_idx: int = 0
    """Index of this member in the population, 0 .. num_policies-1. Unique per process."""
    num_policies: int = 8
    """Population size N. Every member must be started with the same value."""
    workspace: str = "pbt_workspace"
    """Shared directory (relative to the working directory, or absolute) where members publish records."""
    interval_steps: int = 10_000_000
    """Env frames between two PBT iterations (``iteration = frame // interval_steps``)."""
    start_after: int = 10_000_000
    """Env frames a member trains after its process started (or was replaced) before it may act."""
    initial_delay: int = 20_000_000
    """Absolute env frames (the member's total) before any member may act."""
    replace_fraction_worst: float = 0.125
    """Fraction of the population, ceil(f*N) members at the bottom of the ranking, that may act."""
    replace_fraction_best: float = 0.3
    """Fraction of the population, ceil(f*N) members at the top of the ranking, that may be donors."""
    replace_threshold_frac_std: float = 0.5
    """Weights are replaced only if the donor leads by more than this many (trimmed) stds."""
    replace_threshold_frac_absolute: float = 0.05
    """Weights are replaced only if the donor leads by more than this fraction of |donor objective|."""
    mutation_rate: float = 0.15
    """Probability that each whitelisted hyperparameter is mutated when a member mutates."""
    change_min: float = 1.1
    """Smallest multiplicative change of a mutated float (x*k or x/k, k ~ U(change_min, change_max))."""
    change_max: float = 1.5
    """Largest multiplicative change of a mutated float."""
    dbg_mode: bool = False
    """Debug: every member past start_after/initial_delay acts (worst-group, hysteresis and
    known-objective gates are skipped). Only for testing the restart machinery."""
    objective: str = "true_objective"
    """Dotted key into the env infos of the objective to maximise; the mean episode reward is used
    when the env never reports it."""
    selection: str = "dexpbt"
    """Selection rule: "dexpbt" (IsaacGymEnvs: worst/best groups, hysteresis, std thresholds) or
    "threshold" (Isaac Lab: mean +/- k*std cuts)."""
    threshold_std: float = 0.1
    """Threshold rule: leaders/underperformers lie more than this many stds from the mean."""
    threshold_abs: float = 0.025
    """Threshold rule: ... and more than this (objective units) from the mean."""
    threshold_abs_relative: bool = True
    """Threshold rule: ``threshold_abs`` is a fraction of the population's objective range
    (max - min), so it means the same at any reward scale; false: objective units (Isaac Lab)."""
    ready_after: int = 10_000_000
    """The "ready" rule: a member is neither replaced nor used as a donor until it has trained this
    many frames since it started or last took a donor's weights (DexPBT's start_after generalised
    to every exploit). 0 disables it."""
    significance: Optional[float] = 0.05
    """Noise-aware replacement: replace weights only when the donor's recent per-episode
    objectives are higher than this member's with a one-sided Welch t-test p-value below this
    (as in the original PBT paper). null disables the test (means only)."""
    min_mutations: int = 1
    """A mutation step changes at least this many whitelisted hyperparameters (forcing extra ones
    when the per-key coin flips changed fewer), so explore really explores. 0: upstream behaviour."""
    discount_change_min: float = 1.1
    """mutate_discount's own change range: 1 - x is multiplied or divided by k ~ U(min, max)."""
    discount_change_max: float = 1.2
    """Upper end of mutate_discount's change range."""
    bounds: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    """Typed bounds per mutated key: ``{min: .., max: .., scale: log|linear}``. Every mutated value
    is clamped into [min, max]; ``scale: linear`` makes mutate_float step additively by
    (k - 1) * (max - min) instead of multiplying by k."""
    mutation: Dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MUTATION))
    """Mutation scheme: full config key (``train.params.config.gamma``) -> mutation function name."""
    initial_mutation: bool = True
    """A fresh member mutates its starting hyperparameters once so the population starts diverse
    (DexPBT). false: start from the hyperparameters given (e.g. an ablation that seeds both arms with
    the same samples)."""
    restarted: bool = False
    """Set on the argv of a re-executed worker; a fresh member mutates its hyperparameters once only
    when this is False."""
    seed: Optional[int] = None
    """Seed of PBT's own random generator; None: derived from the run seed and policy_idx."""
    restart_mode: str = "inplace"
    """How a member takes new weights/hyperparameters: "inplace" (loaded into the running agent,
    milliseconds) or "exec" (the process re-executes itself with the new overrides, seconds).
    Changes that need a rebuild (num_envs, horizon_length, network, task parameters...) always use
    exec; the lineage records which mode was used and why."""
    heartbeat_interval: float = 30.0
    """Seconds between two heartbeats: a daemon thread of each member rewrites
    ``<workspace>/<idx:03d>/heartbeat`` (pid, host, frame, time) this often, also during long epochs."""
    heartbeat_timeout: float = 600.0
    """A member whose heartbeat is older than this many seconds is reported dead: a warning names it,
    and it is no donor unless its record is still the population best. A lock left by a dead member
    on another host is taken over after this long (on the same host: as soon as its PID is gone)."""
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

    def __post_init__(self) -> None:
        self._check_ranges()
        self._check_mutation_names()

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "PbtConfig":
        """Build a config from a (Hydra/YAML) mapping, checking names, types and ranges.

        Raises ConfigError naming the offending ``pbt.<key>`` and how to fix it.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                f"The pbt config must be a mapping of keys to values, got {type(mapping).__name__}. "
                "Select a config with pbt=pbt_default (or pbt=no_pbt)."
            )
        names = field_names()
        kwargs: Dict[str, Any] = {}
        for key, value in mapping.items():
            name = str(key)
            if name not in names:
                raise ConfigError(
                    f"Unknown PBT config key 'pbt.{name}'.{did_you_mean(name, names)} "
                    f"Valid keys: {', '.join(names)}."
                )
            kwargs[name] = _coerce(name, value)
        return cls(**kwargs)

    def to_dict(self) -> Dict[str, Any]:
        """Plain-data copy (YAML-safe)."""
        return asdict(self)

    # -- validation ----------------------------------------------------------------------------

    def validate_population(self) -> None:
        """Check the population settings of an enabled PBT run (N >= 2, policy_idx in range)."""
        if self.num_policies < 2:
            raise ConfigError(
                f"PBT needs at least 2 policies, got pbt.num_policies={self.num_policies}. "
                "Set pbt.num_policies=N>=2 or pbt=no_pbt to train a single policy."
            )
        check_policy_idx(self.policy_idx, self.num_policies)

    def _check_ranges(self) -> None:
        for name in ("replace_fraction_worst", "replace_fraction_best"):
            _require(0.0 < getattr(self, name) <= 1.0, name, getattr(self, name), "in (0, 1]")
        for name in ("replace_threshold_frac_std", "replace_threshold_frac_absolute",
                     "threshold_std", "threshold_abs"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0.0, name, value, "a finite number >= 0")
        _require(0.0 <= self.mutation_rate <= 1.0, "mutation_rate", self.mutation_rate, "in [0, 1]")
        _require(math.isfinite(self.change_min) and self.change_min >= 1.0, "change_min",
                 self.change_min, "a finite number >= 1")
        _require(math.isfinite(self.change_max) and self.change_max >= self.change_min, "change_max",
                 self.change_max, f"a finite number >= pbt.change_min ({self.change_min})")
        _require(self.interval_steps > 0, "interval_steps", self.interval_steps, "> 0")
        _require(self.ready_after >= 0, "ready_after", self.ready_after, ">= 0")
        _require(self.min_mutations >= 0, "min_mutations", self.min_mutations, ">= 0")
        _require(self.significance is None or 0.0 < self.significance < 1.0, "significance",
                 self.significance, "in (0, 1), or null to compare means only")
        _require(math.isfinite(self.discount_change_min) and self.discount_change_min >= 1.0,
                 "discount_change_min", self.discount_change_min, "a finite number >= 1")
        _require(math.isfinite(self.discount_change_max) and self.discount_change_max >= self.discount_change_min,
                 "discount_change_max", self.discount_change_max,
                 f"a finite number >= pbt.discount_change_min ({self.discount_change_min})")
        self.bounds = _to_bounds(self.bounds)
        _require(self.start_after >= 0, "start_after", self.start_after, ">= 0")
        _require(self.initial_delay >= 0, "initial_delay", self.initial_delay, ">= 0")
        _require(self.num_policies >= 1, "num_policies", self.num_policies, ">= 1")
        _require(bool(self.workspace), "workspace", self.workspace, "a non-empty directory name")
        _require(bool(self.objective), "objective", self.objective, "a non-empty dotted key")
        if self.selection not in SELECTION_RULES:
            raise ConfigError(
                f"Unknown selection rule pbt.selection='{self.selection}'."
                f"{did_you_mean(self.selection, SELECTION_RULES, n=1)} "
                f"Valid rules: {', '.join(SELECTION_RULES)}."
            )
        if self.restart_mode not in RESTART_MODES:
            raise ConfigError(
                f"Unknown pbt.restart_mode='{self.restart_mode}'."
                f"{did_you_mean(self.restart_mode, RESTART_MODES, n=1)} Valid modes: {', '.join(RESTART_MODES)}."
            )
        _require(math.isfinite(self.heartbeat_interval) and self.heartbeat_interval > 0, "heartbeat_interval",
                 self.heartbeat_interval, "a number of seconds > 0")
        _require(math.isfinite(self.heartbeat_timeout) and self.heartbeat_timeout >= 2 * self.heartbeat_interval,
                 "heartbeat_timeout", self.heartbeat_timeout,
                 f"at least twice pbt.heartbeat_interval ({self.heartbeat_interval:g} s)")
        if self.on_write_error not in WRITE_ERROR_POLICIES:
            raise ConfigError(
                f"Unknown pbt.on_write_error='{self.on_write_error}'."
                f"{did_you_mean(self.on_write_error, WRITE_ERROR_POLICIES, n=1)} "
                f"Valid values: {', '.join(WRITE_ERROR_POLICIES)}."
            )
        if self.overwrite and self.resume:
            raise ConfigError(
                "pbt.overwrite=true only applies with pbt.resume=false (start over, moving the old records "
                "aside). Set pbt.resume=false to start over, or drop pbt.overwrite to continue the member."
            )

    def _check_mutation_names(self) -> None:
        # Imported here: pbt.mutation imports this module for flatten/get_by_key.
        from pbt.mutation import get_mutation_func

        for key, name in self.mutation.items():
            if not isinstance(key, str) or not isinstance(name, str):
                raise ConfigError(
                    f"pbt.mutation must map config keys to function names (strings), got "
                    f"{key!r}: {name!r}. "
                    "Write entries like 'train.params.config.gamma: mutate_discount'."
                )
            try:
                get_mutation_func(name)
            except ConfigError as exc:
                raise ConfigError(f"pbt.mutation['{key}']: {exc}") from exc


def field_names() -> List[str]:
    """Names of all PbtConfig fields (the valid keys of the ``pbt`` group)."""
    return [f.name for f in fields(PbtConfig)]


def check_policy_idx(policy_idx: int, num_policies: int) -> None:
    """Raise ConfigError unless 0 <= policy_idx < num_policies."""
    if not 0 <= policy_idx < num_policies:
        raise ConfigError(
            f"pbt.policy_idx={policy_idx} is out of range for pbt.num_policies={num_policies}. "
            f"Valid range: 0..{num_policies - 1}; set pbt.policy_idx to one of them "
            "(one process per index)."
        )


# -- type coercion ------------------------------------------------------------------------------

_BOOL_FIELDS = ("enabled", "dbg_mode", "restarted", "resume", "threshold_abs_relative", "initial_mutation",
                "overwrite")
_INT_FIELDS = ("policy_idx", "num_policies", "interval_steps", "start_after", "initial_delay", "ready_after",
               "min_mutations")
_STR_FIELDS = ("workspace", "objective", "selection", "restart_mode", "on_write_error")


def _coerce(name: str, value: Any) -> Any:
    """Convert a parsed config value to the field's type, or raise ConfigError."""
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        raise _type_error(name, value, "true or false")
    if name in _INT_FIELDS:
        return _to_int(name, value)
    if name in _STR_FIELDS:
        if isinstance(value, str):
            return value
        raise _type_error(name, value, "a string")
    if name == "seed":
        return None if value is None else _to_int(name, value)
    if name == "significance":
        return None if value is None else _to_float(name, value)
    if name == "bounds":
        return _to_bounds(value)
    if name == "mutation":
        return _to_scheme(value)
    return _to_float(name, value)


def _to_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _type_error(name, value, "a whole number")
    if isinstance(value, int):
        return value
    number = _parse_number(value)
    if number is None or not math.isfinite(number) or not number.is_integer():
        raise _type_error(name, value, "a whole number (e.g. 10000000 or 1e7)")
    return int(number)


def _to_float(name: str, value: Any) -> float:
    number = None if isinstance(value, bool) else _parse_number(value)
    if number is None:
        raise _type_error(name, value, "a number")
    return number


def _parse_number(value: Any) -> Optional[float]:
    """int/float as float; numeric strings too (PyYAML reads ``1e-4`` as a string)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


BOUND_SCALES = ("log", "linear")


def _to_bounds(value: Any) -> Dict[str, Dict[str, Any]]:
    """``{key: {min, max, scale}}`` with numbers checked; ConfigError saying what is wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _type_error("bounds", value, "a mapping of config key -> {min, max, scale}")
    bounds: Dict[str, Dict[str, Any]] = {}
    for key, spec in value.items():
        if not isinstance(spec, Mapping):
            raise _type_error(f"bounds['{key}']", spec, "a mapping with min, max and/or scale")
        unknown = sorted(set(map(str, spec)) - {"min", "max", "scale"})
        if unknown:
            raise ConfigError(f"pbt.bounds['{key}'] has unknown field(s) {', '.join(unknown)}: use min, max, scale.")
        low = None if spec.get("min") is None else _to_float(f"bounds['{key}'].min", spec["min"])
        high = None if spec.get("max") is None else _to_float(f"bounds['{key}'].max", spec["max"])
        scale = str(spec.get("scale", "log"))
        if scale not in BOUND_SCALES:
            raise ConfigError(f"pbt.bounds['{key}'].scale must be one of {', '.join(BOUND_SCALES)}, got {scale!r}.")
        if low is not None and high is not None and low > high:
            raise ConfigError(f"pbt.bounds['{key}']: min {low} > max {high}; swap them.")
        if scale == "linear" and (low is None or high is None):
            raise ConfigError(f"pbt.bounds['{key}']: scale linear needs both min and max (the step is a "
                              "fraction of max - min).")
        bounds[str(key)] = {"min": low, "max": high, "scale": scale}
    return bounds


def _to_scheme(value: Any) -> Dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _type_error("mutation", value, "a mapping of config key -> mutation function name")
    return {str(key): name for key, name in value.items()}


def _type_error(name: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(
        f"pbt.{name} must be {expected}, got {value!r} ({type(value).__name__}). "
        f"Fix the value in the pbt config or on the command line (pbt.{name}=...)."
    )


def _require(ok: bool, name: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(
            f"pbt.{name}={value!r} is out of range: it must be {expected}. "
            f"Set pbt.{name} to a value {expected}."
        )


# -- dotted keys ----------------------------------------------------------------------------------

_MISSING = object()


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Flatten nested mappings into ``{"a.b.c": leaf}``. Lists and empty mappings are leaves."""
    flat: Dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and len(value) > 0:
            flat.update(flatten(value, full))
        else:
            flat[full] = value
    return flat


def _lookup(mapping: Mapping[str, Any], parts: List[str]) -> Any:
    """Walk ``parts``; a key may itself contain dots, so the longest matching prefix wins."""
    for split in range(len(parts), 0, -1):
        key = ".".join(parts[:split])
        if key not in mapping:
            continue
        value = mapping[key]
        if split == len(parts):
            return value
        if isinstance(value, Mapping):
            found = _lookup(value, parts[split:])
            if found is not _MISSING:
                return found
    return _MISSING


def has_key(cfg: Mapping[str, Any], dotted_key: str) -> bool:
    """True when ``dotted_key`` names a value in the nested mapping ``cfg``."""
    return _lookup(cfg, dotted_key.split(".")) is not _MISSING


def get_by_key(cfg: Mapping[str, Any], dotted_key: str) -> Any:
    """Value at ``dotted_key`` (``"train.params.config.gamma"``) of a nested mapping."""
    value = _lookup(cfg, dotted_key.split("."))
    if value is _MISSING:
        raise missing_key_error(dotted_key, cfg)
    return value


def set_by_key(cfg: MutableMapping[str, Any], dotted_key: str, value: Any) -> None:
    """Set the existing key ``dotted_key`` of a nested mapping in place."""
    parts = dotted_key.split(".")
    if len(parts) > 1:
        parent = _lookup(cfg, parts[:-1])
        if isinstance(parent, MutableMapping) and parts[-1] in parent:
            parent[parts[-1]] = value
            return
    if dotted_key in cfg:
        cfg[dotted_key] = value
        return
    raise missing_key_error(dotted_key, cfg)


def missing_key_error(dotted_key: str, cfg: Mapping[str, Any], what: str = "") -> ConfigError:
    """ConfigError for a key absent from ``cfg``, naming the nearest existing keys."""
    flat = list(flatten(cfg))
    prefix = _existing_prefix(dotted_key, flat)
    hint = did_you_mean(dotted_key, _close_keys(dotted_key, prefix, flat))
    if not hint and prefix:
        siblings = sorted(k for k in flat if k.startswith(prefix))[:8]
        hint = " Keys next to it: " + ", ".join(f"'{k}'" for k in siblings) + "."
    subject = what or f"Config key '{dotted_key}'"
    return ConfigError(
        f"{subject} does not exist in the config.{hint} Fix the key, or add the parameter to the config."
    )


def _existing_prefix(dotted_key: str, flat: List[str]) -> str:
    """The longest ``a.b.`` prefix of ``dotted_key`` under which the config has keys ('' if none)."""
    parts = dotted_key.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:depth]) + "."
        if any(k.startswith(prefix) for k in flat):
            return prefix
    return ""


def _close_keys(dotted_key: str, prefix: str, flat: List[str]) -> List[str]:
    """Existing keys close to ``dotted_key``, comparing only the part after the shared prefix (long
    common prefixes would otherwise make every sibling look close)."""
    under = [k[len(prefix):] for k in flat if k.startswith(prefix)]
    close = get_close_matches(dotted_key[len(prefix):], under, n=3, cutoff=0.6)
    return [prefix + k for k in close]
