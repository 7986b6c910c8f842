"""The record a member publishes at every PBT iteration, next to its checkpoint, and its codec.

A record is the only thing peers read to rank a member. It is plain data (YAML-safe types only) so
it can be loaded with ``yaml.safe_load`` and compared on any Python >= 3.8 without torch.

Records are YAML in its JSON-compatible subset (a flow mapping, one key per line), checked at
write time to read back exactly with ``yaml.safe_load``; readers parse them with ``json`` when
they can (a scan of 512 peers takes tens of milliseconds instead of hundreds) and with the safe
YAML loader otherwise (NaN/inf objectives, files edited by other tools). Nothing is ever loaded
with an unsafe YAML loader.
"""

import json
import logging
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from pbt.errors import ConfigError, CorruptRecordError, WorkspaceError
from pbt.storage.bounds import MAX_ABS_VALUE, MAX_FRAMES, bounded_float, is_sample, wall_time
from pbt.storage.format import CHECKPOINT_SUFFIX

logger = logging.getLogger(__name__)

MAX_RECORD_BYTES = 1024 * 1024
"""A record file larger than this is not ours (a record is about a kilobyte)."""
MAX_RECORD_DEPTH = 16
"""Deepest nesting a record may have (ours: 3). Deeper YAML is refused before it is built."""
MAX_RECORD_NODES = 100000
MAX_RECORD_BRACKETS = 1024
_C_SAFE_LOADER = getattr(yaml, "CSafeLoader", None)  # libyaml's safe loader, when built in
_CHECKSUM_RE = re.compile(r"[0-9a-f]{64}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

RECORD_VERSION = 1


@dataclass(frozen=True)
class Histories:
    """What a member's record carries about its past (written by :meth:`Workspace.publish`)."""

    objectives: Mapping[int, Optional[float]] = field(default_factory=dict)
    """The objective by iteration (the newest MAX_HISTORY are kept)."""
    params: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    """The hyperparameter change points by iteration (the newest MAX_PARAM_HISTORY)."""
    gains: Mapping[int, float] = field(default_factory=dict)
    """Each interval's objective change (the newest MAX_GAINS, finite ones only)."""


NO_HISTORY = Histories()


@dataclass(frozen=True)
class Record:
    """One member's state at one PBT iteration."""

    policy_idx: int
    """Index of the member in the population, 0 .. num_policies-1."""
    iteration: int
    """PBT iteration: ``frame // interval_steps`` when the record was written."""
    frame: int
    """Env frames this member (its own lineage of training, not its donors') has trained."""
    objective: Optional[float]
    """The member's objective (higher is better); None when not yet known. NaN/inf rank last."""
    params: Dict[str, Any]
    """The mutable hyperparameters in force, keyed by full config key (``train.params.config.gamma``)."""
    checkpoint: str
    """File name of the checkpoint, relative to the member's directory."""
    checksum: str
    """sha256 hex digest of the checkpoint's bytes; a reader trusts the record only if it matches."""
    time: float = 0.0
    """Unix time the record was written."""
    episode_returns: List[float] = field(default_factory=list)
    """Recent per-episode objectives, kept for noise-aware comparisons."""
    frames_since_replace: int = 0
    """Frames this member trained since its weights last came from a donor (or since it started
    fresh): the "ready" rule keeps younger members from being replaced or used as donors."""
    version: int = RECORD_VERSION
    network: Optional[Dict[str, Any]] = None
    """The network in force when its members evolve it (``pbt/mutation=agilerl``): hidden ``units``,
    ``activation`` and the ``parameters`` count; None otherwise (and in older records)."""
    history: Dict[int, Optional[float]] = field(default_factory=dict)
    """This member's objective by iteration since its weights last came from a donor (or since it
    started), the newest MAX_HISTORY: peers rank it at equal experience and average its recent
    objectives (``eval_loop``). Optional on disk: older records have none."""
    param_history: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    """The hyperparameters this member trained with, as change points: iteration i -> the params in
    force in the interval ending at i and every later one, up to the next entry (the newest
    MAX_PARAM_HISTORY, across weight replacements). With ``gains`` it gives each interval's
    (hyperparameters, objective change), the data PB2 fits. Optional on disk: older records have
    none (then only ``params``, in force over the newest interval, is known)."""
    gains: Dict[int, float] = field(default_factory=dict)
    """The objective change over each interval (iteration i: objective at i minus at i - 1, both
    measured on this member's weights; none for the interval after a weight replacement), the
    newest MAX_GAINS, across weight replacements. Optional on disk: older records have none (then
    the changes within ``history`` are used)."""
    stage: Optional[int] = None
    """The curriculum stage the member trained in (``pbt.curriculum``, 0-based); None without a
    curriculum (and in older records: stage 0)."""
    stage_frame: Optional[int] = None
    """The frame at which the member entered ``stage``; None without a curriculum."""
    evaluated: bool = False
    """True when ``episode_returns`` are deterministic evaluations' episodes (``pbt.eval_episodes``),
    which a copy's evaluation window may start from; False: training episodes (and older records)."""
    training_returns: List[float] = field(default_factory=list)
    """With evaluations (``evaluated``): the member's recent training episodes' per-episode objectives
    as well, which ``pbt.significance_samples=training`` tests; empty otherwise (and in older records)."""
    family: Optional[int] = None
    """The member's family: the starting member whose weights this checkpoint carries, followed
    through every replace (its own policy_idx until it first takes a donor's weights). None:
    unknown (older records, or weights taken from a record without one). Untrusted like every
    field: a wrong value only changes which replaces ``pbt.significance_for=last_of_family`` tests."""

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["params"] = dict(self.params)
        data["history"] = {str(k): v for k, v in sorted(self.history.items())}  # YAML/JSON keys are strings
        for name in ("param_history", "gains"):  # records without them stay as the format before them
            value = getattr(self, name)
            if value:
                data[name] = {str(k): (dict(v) if isinstance(v, dict) else v) for k, v in sorted(value.items())}
            else:
                del data[name]
        for name in ("stage", "stage_frame"):  # without a curriculum the format stays as before it
            if data[name] is None:
                del data[name]
        if not data["evaluated"]:  # without evaluations too
            del data["evaluated"]
        if not data["training_returns"]:
            del data["training_returns"]
        if data["family"] is None:  # and records that do not know their family
            del data["family"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<record>") -> "Record":
        """Build a record from parsed YAML, raising CorruptRecordError naming ``source`` on any defect.

        Types are strict (a peer's record is untrusted input): ints are ints (not 3.9, "3" or true),
        the objective a number or null (not "1_000" or true), params a mapping from strings to
        scalars, episode_returns a list of numbers."""
        if not isinstance(data, Mapping):
            raise CorruptRecordError(f"{source}: expected a mapping, got {type(data).__name__}")
        try:
            objective = data.get("objective")
            return cls(
                policy_idx=_int_field(data, "policy_idx", MAX_POLICY_IDX),
                iteration=_int_field(data, "iteration", MAX_COUNT),
                frame=_int_field(data, "frame", MAX_COUNT),
                objective=None if objective is None else bounded_float(objective, "objective", allow_nonfinite=True),
                params=_params(data.get("params")),
                checkpoint=_str_field(data, "checkpoint", 255),
                checksum=_str_field(data, "checksum", 64),
                time=wall_time(data.get("time", 0.0), "time"),
                episode_returns=_numbers(data.get("episode_returns")),
                evaluated=_bool_field(data, "evaluated"),
                training_returns=_numbers(data.get("training_returns"), "training_returns"),
                frames_since_replace=_int_field(data, "frames_since_replace", MAX_COUNT, 0),
                version=_int_field(data, "version", MAX_COUNT, RECORD_VERSION),
                network=_network(data.get("network")),
                history=_history(data.get("history")),
                param_history=_param_history(data.get("param_history")),
                gains=_gains(data.get("gains")),
                stage=_optional_int(data, "stage", MAX_STAGES),
                stage_frame=_optional_int(data, "stage_frame", MAX_COUNT),
                family=_optional_int(data, "family", MAX_POLICY_IDX),
            )
        except KeyError as exc:
            raise CorruptRecordError(f"{source}: not a valid PBT record (missing {exc})") from exc
        except (TypeError, ValueError, ArithmeticError) as exc:  # OverflowError included: never a crash
            raise CorruptRecordError(f"{source}: not a valid PBT record: {exc}") from exc

    @property
    def has_objective(self) -> bool:
        """True when the objective is a finite number within MAX_ABS_VALUE (None, NaN and inf never lead)."""
        return is_sample(self.objective)


_RECORD_KEYS = frozenset(f.name for f in fields(Record)) - {
    "network",
    "history",
    "param_history",
    "gains",
    "stage",
    "stage_frame",
    "evaluated",
    "training_returns",
    "family",
}  # optional


MAX_POLICY_IDX = 1_000_000
"""policy_idx must lie in 0 .. MAX_POLICY_IDX-1."""


def check_policy_idx(policy_idx: int, num_policies: Optional[int]) -> None:
    """Raise ConfigError unless 0 <= policy_idx < num_policies (None: an elastic population, any
    index a record can carry)."""
    if num_policies is None:
        if not 0 <= policy_idx < MAX_POLICY_IDX:
            raise ConfigError(
                f"pbt.policy_idx={policy_idx} is out of range: in an elastic population "
                f"(pbt.num_policies=auto) it must be in 0..{MAX_POLICY_IDX - 1}."
            )
        return
    if not 0 <= policy_idx < num_policies:
        raise ConfigError(
            f"pbt.policy_idx={policy_idx} is out of range for pbt.num_policies={num_policies}. "
            f"Valid range: 0..{num_policies - 1}; set pbt.policy_idx to one of them "
            "(one process per index)."
        )


MAX_COUNT = MAX_FRAMES + 1
"""Iterations, frames and versions lie in 0 .. MAX_COUNT-1 (:data:`pbt.storage.bounds.MAX_FRAMES`)."""
MAX_PARAM_INT = 2**63
"""An int hyperparameter has a magnitude below this (arithmetic on it stays inside floats' range)."""
MAX_PARAMS = 1000
MAX_PARAM_STRING = 4096
MAX_EPISODE_RETURNS = 100_000
MAX_HISTORY = 512
"""A record keeps at most this many iterations of objective history."""
MAX_PARAM_HISTORY = 64
"""A record keeps at most this many hyperparameter change points (each a flow mapping: the
record reader allows MAX_RECORD_BRACKETS brackets in all)."""
MAX_GAINS = 256
"""A record keeps at most this many intervals' objective changes."""
MAX_STAGES = 64
"""A record's curriculum stage lies in 0 .. MAX_STAGES-1 (:data:`pbt.curriculum.MAX_STAGES`)."""


def _int_field(data: Mapping[str, Any], key: str, limit: int, default: Optional[int] = None) -> int:
    value = data[key] if default is None else data.get(key, default)
    if type(value) is not int or not 0 <= value < limit:
        raise ValueError(f"{key} must be an int in 0..{limit - 1}, got {value!r:.80}")
    return value


def _optional_int(data: Mapping[str, Any], key: str, limit: int) -> Optional[int]:
    """An optional int field: absent or null is None; else an int in 0..limit-1."""
    if data.get(key) is None:
        return None
    return _int_field(data, key, limit)


def _bool_field(data: Mapping[str, Any], key: str) -> bool:
    """An optional bool field, False when absent; strictly a bool (not 1 or "true")."""
    value = data.get(key, False)
    if type(value) is not bool:
        raise ValueError(f"{key} must be true or false, got {value!r:.80}")
    return value


def _str_field(data: Mapping[str, Any], key: str, limit: int) -> str:
    value = data[key]
    if type(value) is not str or len(value) > limit:
        raise ValueError(f"{key} must be a string of at most {limit} characters, got {value!r:.80}")
    return value


def _scalar(value: Any, key: str) -> Any:
    if type(value) is int and abs(value) >= MAX_PARAM_INT:
        raise ValueError(f"params[{key!r:.80}] is an int of {len(str(abs(value)))} digits; too large")
    if value is None or type(value) in (bool, int, float):
        return value
    if type(value) is str and len(value) <= MAX_PARAM_STRING:
        return value
    raise ValueError(f"params[{key!r:.80}] must be a number, bool, short string or null, got {type(value).__name__}")


def _params(value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_PARAMS:
        raise ValueError(f"params must be a mapping of at most {MAX_PARAMS} keys, got {type(value).__name__}")
    out: Dict[str, Any] = {}
    for key, sub in value.items():
        if type(key) is not str or len(key) > MAX_PARAM_STRING:
            raise ValueError(f"params keys must be strings, got {key!r:.80}")
        if type(sub) is list and len(sub) <= 64:  # a list-valued setting (e.g. layer sizes)
            out[key] = [_scalar(v, key) for v in sub]
        else:
            out[key] = _scalar(sub, key)
    return out


def _network(value: Any) -> Optional[Dict[str, Any]]:
    """A record's ``network`` as plain data (its meaning is checked by the member that uses it)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or len(value) > 16:
        raise ValueError(f"network must be a mapping of at most 16 keys or null, got {type(value).__name__}")
    return _params(value)


def _history(value: Any) -> Dict[int, Optional[float]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_HISTORY:
        raise ValueError(f"history must be a mapping of at most {MAX_HISTORY} iteration -> objective")
    out: Dict[int, Optional[float]] = {}
    for key, objective in value.items():
        if type(key) is not str or not key.isdigit() or not key.isascii() or len(key) > 16 or int(key) > MAX_FRAMES:
            raise ValueError(f"history keys must be iteration numbers, got {key!r:.80}")
        out[int(key)] = None if objective is None else bounded_float(objective, "history[]")
    return out


def _param_history(value: Any) -> Dict[int, Dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_PARAM_HISTORY:
        raise ValueError(f"param_history must be a mapping of at most {MAX_PARAM_HISTORY} iteration -> params")
    out: Dict[int, Dict[str, Any]] = {}
    for key, params in value.items():
        if type(key) is not str or not key.isdigit() or not key.isascii() or len(key) > 16 or int(key) > MAX_FRAMES:
            raise ValueError(f"param_history keys must be iteration numbers, got {key!r:.80}")
        out[int(key)] = _params(params)
    return out


def _gains(value: Any) -> Dict[int, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_GAINS:
        raise ValueError(f"gains must be a mapping of at most {MAX_GAINS} iteration -> objective change")
    out: Dict[int, float] = {}
    for key, gain in value.items():
        if type(key) is not str or not key.isdigit() or not key.isascii() or len(key) > 16 or int(key) > MAX_FRAMES:
            raise ValueError(f"gains keys must be iteration numbers, got {key!r:.80}")
        out[int(key)] = bounded_float(gain, "gains[]")
    return out


def plain_history(history: Optional[Mapping[int, Optional[float]]]) -> Dict[int, Optional[float]]:
    """The newest MAX_HISTORY entries of ``history`` with finite, bounded objectives as floats,
    others None (a NaN has no JSON spelling and ranks as unknown in comparisons anyway; readers
    refuse values beyond :data:`pbt.storage.bounds.MAX_ABS_VALUE`)."""
    if not history:
        return {}
    out: Dict[int, Optional[float]] = {}
    for iteration in sorted(history)[-MAX_HISTORY:]:
        value = history[iteration]
        try:
            number = None if value is None or isinstance(value, bool) else float(value)  # numpy scalars too
        except (TypeError, ValueError, OverflowError):
            number = None
        out[int(iteration)] = number if is_sample(number) else None
    return out


def readable_numbers(
    objective: Optional[float], returns: List[float], where: str
) -> Tuple[Optional[float], List[float]]:
    """A member's objective and episode returns as readers accept them (:mod:`pbt.storage.bounds`):
    a finite objective beyond MAX_ABS_VALUE becomes NaN (diverged: it ranks last), and returns that
    are not finite or beyond it are left out (a diverging run's inf returns); each logged."""
    if objective is not None and math.isfinite(objective) and not is_sample(objective):
        logger.warning(
            "%s: objective %g lies beyond +-%g; published as NaN (diverged)", where, objective, MAX_ABS_VALUE
        )
        objective = math.nan
    kept = [x for x in returns if is_sample(x)]
    if len(kept) < len(returns):
        logger.warning(
            "%s: %d episode return(s) not finite or beyond +-%g left out of its record",
            where,
            len(returns) - len(kept),
            MAX_ABS_VALUE,
        )
    return objective, kept


def _numbers(value: Any, name: str = "episode_returns") -> List[float]:
    if value is None:
        return []
    if type(value) is not list or len(value) > MAX_EPISODE_RETURNS:
        raise ValueError(f"{name} must be a list of at most {MAX_EPISODE_RETURNS} numbers, got {type(value).__name__}")
    return [bounded_float(v, f"{name}[]") for v in value]


def numpy_kind(value: Any) -> Optional[str]:
    """'scalar' for a numpy scalar, 'array' for a numpy array, else None (numpy never imported)."""
    numpy = sys.modules.get("numpy")  # no numpy object can exist unless numpy was imported
    if numpy is None:
        return None
    if isinstance(value, numpy.generic):
        return "scalar"
    if isinstance(value, numpy.ndarray):
        return "array"
    return None


def to_plain(value: Any, where: str = "value") -> Any:
    """Convert ``value`` to YAML/JSON-safe plain data (numpy scalars to Python numbers).

    Raises WorkspaceError naming ``where`` for anything that is not a bool, number, string, None,
    list/tuple or mapping with string keys.
    """
    kind = numpy_kind(value)
    if kind == "array":
        raise WorkspaceError(f"{where} is a numpy array; records hold plain values only. Use .tolist().")
    if kind == "scalar":
        value = value.item()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: Dict[str, Any] = {}
        for key, sub in value.items():
            if not isinstance(key, str):
                raise WorkspaceError(f"{where} has a non-string key {key!r}; use string keys.")
            out[key] = to_plain(sub, f"{where}[{key!r}]")
        return out
    raise WorkspaceError(
        f"{where} has type {type(value).__name__}, which a record cannot hold. "
        "Use bool, int, float, str, None, lists or dicts."
    )


def _check_shape(text: str, loader_class: Any, source: str) -> None:
    """Walk the YAML event stream (libyaml's parser is iterative: no recursion, no objects built)
    and refuse documents nested deeper than MAX_RECORD_DEPTH, with more than MAX_RECORD_NODES
    nodes, or with aliases. Block nesting (``"- " * 50000``, no brackets) and flow nesting alike:
    the composer, which recurses in C, never sees them."""
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=loader_class):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                nodes += 1
                if depth > MAX_RECORD_DEPTH:
                    raise CorruptRecordError(
                        f"{source}: nested deeper than {MAX_RECORD_DEPTH} levels; not a PBT record"
                    )
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
            elif isinstance(event, yaml.AliasEvent):
                raise CorruptRecordError(f"{source}: uses YAML aliases, which records never do; not ours")
            if nodes > MAX_RECORD_NODES:
                raise CorruptRecordError(f"{source}: more than {MAX_RECORD_NODES} values; not a PBT record")
    except (yaml.YAMLError, RecursionError, MemoryError) as exc:
        raise CorruptRecordError(
            f"{source}: not valid YAML ({type(exc).__name__}); the file is torn or foreign. Delete it."
        ) from exc


def safe_load_yaml(text: str, source: str = "<yaml>") -> Any:
    """``yaml.safe_load`` hardened for files other processes can write.

    Texts with more than MAX_RECORD_BRACKETS flow brackets are refused unparsed (a record has a
    handful). Then the event stream is checked (:func:`_check_shape`: depth, size, no aliases)
    before anything is composed or constructed. Raises CorruptRecordError naming ``source``.
    """
    if text.count("[") + text.count("{") > MAX_RECORD_BRACKETS:
        raise CorruptRecordError(f"{source}: far too many brackets for a PBT record; not ours")
    loader_class = _C_SAFE_LOADER or yaml.SafeLoader
    _check_shape(text, loader_class, source)
    loader = loader_class(text)
    try:
        try:
            return loader.get_single_data()
        except Exception as exc:  # the safe constructor raises ValueError, OverflowError, ... on foreign text
            raise CorruptRecordError(
                f"{source}: not valid YAML ({type(exc).__name__}); the file is torn or foreign. Delete it."
            ) from exc
    finally:
        loader.dispose()


def check_checkpoint_name(name: str, source: str) -> None:
    if (
        not name
        or type(name) is not str
        or len(name) > 255
        or _CONTROL_RE.search(name)
        or name != os.path.basename(name)
        or "/" in name
        or "\\" in name
        or name.startswith(".")
        or not name.endswith(CHECKPOINT_SUFFIX)
    ):
        raise CorruptRecordError(
            f"{source}: checkpoint {name!r} is not a plain '.pth' file name in the record's "
            "directory; the record is foreign or tampered with. Delete it."
        )


def parse_record(
    data: bytes, source: str, expected_idx: Optional[int] = None, expected_iteration: Optional[int] = None
) -> Record:
    """Parse and validate record bytes (YAML) written by ``Workspace``; no filesystem access.

    Raises CorruptRecordError naming ``source`` for torn, truncated or foreign content, or when the
    record's policy_idx / iteration do not match ``expected_idx`` / ``expected_iteration``.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise CorruptRecordError(f"{source}: {len(data)} bytes is far too large for a PBT record; not ours")
    parsed: Any = None
    if data[:1] == b"{":  # our writer's JSON-compatible YAML: json reads it the same, much faster
        try:
            parsed = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError):  # NaN/inf objective, torn or foreign text: YAML decides
            parsed = None
    if parsed is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{source}: not UTF-8 text; the file is torn or foreign. Delete it.") from exc
        parsed = safe_load_yaml(text, source)
    if not isinstance(parsed, Mapping):
        raise CorruptRecordError(
            f"{source}: expected a YAML mapping, got {type(parsed).__name__}; the file is torn or foreign."
        )
    missing = sorted(_RECORD_KEYS - set(parsed))
    if missing:
        raise CorruptRecordError(
            f"{source}: missing key(s) {', '.join(missing)}; the record is truncated or was written "
            "by another tool. Delete it."
        )
    record = Record.from_dict(parsed, source=source)
    if expected_idx is not None and record.policy_idx != expected_idx:
        raise CorruptRecordError(
            f"{source}: record says policy_idx {record.policy_idx} but lies in member {expected_idx}'s "
            "directory; it was copied or written by a misconfigured member. Delete it."
        )
    if expected_iteration is not None and record.iteration != expected_iteration:
        raise CorruptRecordError(
            f"{source}: record says iteration {record.iteration} but its file name says "
            f"{expected_iteration}; it was renamed or copied. Delete it."
        )
    check_checkpoint_name(record.checkpoint, source)
    if not _CHECKSUM_RE.fullmatch(record.checksum):
        raise CorruptRecordError(
            f"{source}: checksum {record.checksum!r} is not a sha256 hex digest; the record is torn "
            "or foreign. Delete it."
        )
    return record


_NON_ASCII_BMP_RE = re.compile("[\u007f-\uffff]")


def _flow_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        if math.isnan(value):
            return ".nan"  # YAML only: such a record is read by yaml.safe_load, not json
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, sep, exponent = text.partition("e")
        if sep and "." not in mantissa:  # YAML 1.1 floats need a dot: 1e-05 -> 1.0e-05
            text = f"{mantissa}.0e{exponent}"
        return text
    if type(value) is str:
        # JSON escapes, with every non-ASCII BMP character as \uXXXX (both parsers agree on those)
        return _NON_ASCII_BMP_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))
    if type(value) is list:
        return "[" + ", ".join(_flow_scalar(v) for v in value) + "]"
    if type(value) is dict:
        return "{" + ", ".join(f"{_flow_scalar(k)}: {_flow_scalar(v)}" for k, v in value.items()) + "}"
    raise WorkspaceError(f"cannot write {type(value).__name__} in a record")


def _same(a: Any, b: Any) -> bool:
    """Deep equality with NaN == NaN and exact types (1 vs 1.0 vs True differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def record_to_yaml(record: Record) -> bytes:
    """Serialize a record as YAML that ``yaml.safe_load`` reads back exactly.

    The text is a YAML flow mapping in the JSON-compatible subset of YAML (one key per line), so
    readers can parse it with ``json.loads`` (~50x faster than PyYAML, which matters when a member
    scans hundreds of peers each PBT iteration) while any YAML tool reads the same values. Both
    readings are checked here. A record holding NaN/inf (``.nan``/``.inf``, which JSON lacks) is
    still valid YAML and readers fall back to the safe YAML loader. On any mismatch (exotic
    strings) the record is written with ``yaml.safe_dump`` instead; if even that would not read
    back exactly (e.g. a value readers refuse as too large), WorkspaceError is raised.
    """
    data = to_plain(record.to_dict(), "record")
    try:  # never publish what readers refuse (numbers beyond pbt.storage.bounds included)
        Record.from_dict(data, "new record")
    except CorruptRecordError as exc:
        raise WorkspaceError(
            f"record of member {record.policy_idx} iteration {record.iteration} would not read back: {exc}"
        ) from exc
    lines = [f"{_flow_scalar(key)}: {_flow_scalar(value)}" for key, value in data.items()]
    text = "{" + ",\n ".join(lines) + "}\n"
    if _reads_back(text, data, allow_json=True):
        return text.encode("utf-8")
    logger.debug("record of member %d iteration %d needs block YAML", record.policy_idx, record.iteration)
    block = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    if _reads_back(block, data, allow_json=False):
        return block.encode("utf-8")
    raise WorkspaceError(
        f"record of member {record.policy_idx} iteration {record.iteration} would not read back "
        "exactly (a parameter value is too large or too deeply nested); use plain numbers and short strings"
    )


def _reads_back(text: str, data: Mapping[str, Any], allow_json: bool) -> bool:
    """True when ``text`` reads back as ``data`` with the safe YAML loader (and with json, when
    json can parse it, as readers try json first)."""
    try:
        as_yaml = safe_load_yaml(text, "new record")
    except CorruptRecordError:
        return False
    if not _same(as_yaml, data):
        return False
    if text[:1] == "{":
        try:
            as_json = json.loads(text)
        except (ValueError, RecursionError):
            return True  # readers fall back to YAML, which agrees
        return allow_json and _same(as_json, data)
    return True
