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
from typing import Any, Dict, List, Mapping, Optional

import yaml

from pbt.errors import CorruptRecordError, WorkspaceError
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

RECORD_VERSION = 1


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

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["params"] = dict(self.params)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<record>") -> "Record":
        """Build a record from parsed YAML, raising CorruptRecordError naming ``source`` on any defect."""
        if not isinstance(data, Mapping):
            raise CorruptRecordError(f"{source}: expected a mapping, got {type(data).__name__}")
        try:
            objective = data.get("objective")
            return cls(
                policy_idx=int(data["policy_idx"]),
                iteration=int(data["iteration"]),
                frame=int(data["frame"]),
                objective=None if objective is None else float(objective),
                params=dict(data.get("params") or {}),
                checkpoint=str(data["checkpoint"]),
                checksum=str(data["checksum"]),
                time=float(data.get("time", 0.0)),
                episode_returns=[float(x) for x in data.get("episode_returns") or []],
                frames_since_replace=int(data.get("frames_since_replace", 0)),
                version=int(data.get("version", RECORD_VERSION)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(f"{source}: not a valid PBT record ({exc!r})") from exc

    @property
    def has_objective(self) -> bool:
        """True when the objective is a finite number (None, NaN and inf never lead)."""
        return self.objective is not None and math.isfinite(self.objective)


_RECORD_KEYS = frozenset(f.name for f in fields(Record))


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


def safe_load_yaml(text: str, source: str = "<yaml>") -> Any:
    """``yaml.safe_load`` hardened for files other processes can write.

    libyaml's safe loader crashes the interpreter (stack overflow) on ~100k nested brackets, and
    PyYAML's pure-Python one takes seconds on them, so texts with more than
    MAX_RECORD_BRACKETS flow brackets are refused unparsed (a record has a handful; block nesting
    is bounded by the size cap). Before constructing anything, documents nested deeper than
    MAX_RECORD_DEPTH, with more than MAX_RECORD_NODES nodes, or using aliases (whose expansion
    can be exponential) are refused. Raises CorruptRecordError naming ``source``.
    """
    if text.count("[") + text.count("{") > MAX_RECORD_BRACKETS:
        raise CorruptRecordError(f"{source}: far too many brackets for a PBT record; not ours")
    loader = (_C_SAFE_LOADER or yaml.SafeLoader)(text)
    try:
        try:
            node = loader.get_single_node()
        except (yaml.YAMLError, RecursionError) as exc:
            raise CorruptRecordError(
                f"{source}: not valid YAML ({type(exc).__name__}); the file is torn or foreign. Delete it."
            ) from exc
        if node is None:
            return None
        seen = set()
        stack = [(node, 1)]
        while stack:
            current, depth = stack.pop()
            if id(current) in seen:
                raise CorruptRecordError(f"{source}: uses YAML aliases, which records never do; not ours")
            seen.add(id(current))
            if depth > MAX_RECORD_DEPTH or len(seen) > MAX_RECORD_NODES:
                raise CorruptRecordError(f"{source}: nested too deep or too large for a PBT record; not ours")
            if isinstance(current, yaml.SequenceNode):
                stack.extend((child, depth + 1) for child in current.value)
            elif isinstance(current, yaml.MappingNode):
                for key, value in current.value:
                    stack.append((key, depth + 1))
                    stack.append((value, depth + 1))
        try:
            return loader.construct_document(node)
        except (yaml.YAMLError, RecursionError) as exc:
            raise CorruptRecordError(f"{source}: invalid YAML value ({exc}); the file is foreign") from exc
    finally:
        loader.dispose()


def check_checkpoint_name(name: str, source: str) -> None:
    if (
        not name
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


def parse_record(data: bytes, source: str, expected_idx: Optional[int] = None,
                 expected_iteration: Optional[int] = None) -> Record:
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
    try:
        record = Record.from_dict(parsed, source=source)
    except (ArithmeticError, RecursionError) as exc:  # e.g. int(.inf); from_dict maps the rest
        raise CorruptRecordError(f"{source}: not a valid PBT record ({exc!r})") from exc
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
    if record.iteration < 0 or record.frame < 0:
        raise CorruptRecordError(f"{source}: negative iteration or frame; not a valid record")
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
        return _NON_ASCII_BMP_RE.sub(lambda m: "\\u%04x" % ord(m.group()), json.dumps(value, ensure_ascii=False))
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
