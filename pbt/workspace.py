"""The shared PBT workspace: this module owns every byte the population writes to disk.

Layout (compatible with IsaacGymEnvs' DexPBT, so existing tools and habits carry over)::

    <root>/<idx:03d>/<iteration:06d>.pth   checkpoint: torch.save of rl_games' full state
    <root>/<idx:03d>/<iteration:06d>.yaml  its Record (YAML) naming the .pth and its sha256
    <root>/<idx:03d>/lineage.jsonl         append-only JSON lines, one per PBT event of member idx
    <root>/<idx:03d>/lock, heartbeat       which process trains member idx, and that it is alive
                                           (pbt/liveness.py writes them with atomic_write_bytes)
    <root>/<idx:03d>.old-<time>/           a member directory moved aside by pbt.overwrite=true
    <root>/best<idx>/best_obj_..._iter_..._policyNNN.{pth,yaml}
                                           member idx's copy of the best checkpoint it has seen

Protocol (correctness rests only on ``os.replace`` being atomic, never on file locks):

* Every file is written to a unique temp file in the same directory, fsynced, and renamed over
  its final name (``atomic_write_bytes``); a reader sees the old file or the new one, never a
  torn one. The writer also fsyncs the directory.
* A member publishes the ``.pth`` first and its ``.yaml`` record second, so a record never
  points at a checkpoint that is not there yet. Re-publishing an iteration removes its old
  ``.yaml`` before replacing the ``.pth``. Retention deletes the ``.yaml`` before the ``.pth``.
* Readers scan records only (no checkpoint is read during a scan; its existence and non-zero
  size are checked with one ``stat``). The full sha256 check happens when a checkpoint is loaded
  or copied; a checkpoint is always unpickled with ``torch.load(..., weights_only=True)``, so a
  planted pickle cannot run code.
* Each member writes only under ``<root>/<own idx:03d>/`` and ``<root>/best<own idx>/``.

A ``Workspace`` is not thread-safe: one member process uses it from one thread.

Records are YAML in its JSON-compatible subset (a flow mapping, one key per line), checked at
write time to read back exactly with ``yaml.safe_load``; readers parse them with ``json`` when
they can (a scan of 512 peers takes tens of milliseconds instead of hundreds) and with the safe
YAML loader otherwise (NaN/inf objectives, files edited by other tools). Nothing is ever loaded
with an unsafe YAML loader or an unrestricted unpickler.

Disk bound. After every ``cleanup()`` a member directory holds at most ``max_records`` (default
25) record + checkpoint pairs plus ``lineage.jsonl``. Between two cleanups one more pair is
published, a write in flight holds one temp file, and a writer killed mid-write leaves one temp
file that cleanup removes (at once if it carries this process's PID, which survives a restart by
exec; otherwise once untouched for ``stale_tmp_seconds``). ``best<idx>/`` holds one pair (two
for an instant while it is replaced). So at any time, with C the largest checkpoint::

    files per member directory <= 2 * (max_records + 1) + 1 lineage + lock + heartbeat
                                  + 2 in-flight temps (a PBT write and a heartbeat)
                                  (+ 1 temp per writer killed in the last stale_tmp_seconds)
    total bytes <= N * (max_records + 2) * C           member directories
                 + N * 2 * C                           best copies
                 + N * lineage (~200 bytes per PBT event) + records (~1 kB each)

Records younger than ``keep_records`` (default 8) are always kept; older ones are kept while a
slower peer may still need them (iteration >= the oldest peer's latest iteration - ``peer_margin``,
as upstream's "oldest peer iteration - 20"), but never more than ``max_records``; a peer lagging
further behind then finds no record of this member at or below its iteration and counts it as
missing.
"""
import hashlib
import io
import json
import logging
import math
import os
import re
import socket
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from pbt.errors import ConfigError, CorruptRecordError, UnsafeCheckpointError, WorkspaceError
from pbt.record import Record

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_KEEP_RECORDS = 8
"""Newest own records always kept by ``cleanup``."""
DEFAULT_MAX_RECORDS = 25
"""Hard cap on the records a member keeps, however far behind its slowest peer is."""
DEFAULT_PEER_MARGIN = 20
"""Records down to (oldest peer's latest iteration - margin) are kept for slow peers."""
DEFAULT_STALE_TMP_SECONDS = 300.0
"""A temp file of another process untouched this long is a leftover of a killed writer."""
MAX_RECORD_BYTES = 1024 * 1024
"""A record file larger than this is not ours (a record is about a kilobyte)."""

LINEAGE_FILE = "lineage.jsonl"
PROBE_FILE = ".write_probe"
"""Written and removed at start-up to check that the workspace is writable."""
CONCURRENT_TARGETS = frozenset(["heartbeat"])
"""Files a thread of the member rewrites while cleanup runs: their temp files are removed by age only."""
RECORD_SUFFIX = ".yaml"
CHECKPOINT_SUFFIX = ".pth"
TMP_SUFFIX = ".tmp"

_CHECKSUM_RE = re.compile(r"[0-9a-f]{64}")
_MEMBER_DIR_RE = re.compile(r"\d{3,}")
_TMP_RE = re.compile(r"\.(?P<target>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.(?P<token>[0-9a-f]+)\.tmp")
_RECORD_KEYS = frozenset(f.name for f in fields(Record))
MAX_RECORD_DEPTH = 16
"""Deepest nesting a record may have (ours: 3). Deeper YAML is refused before it is built."""
MAX_RECORD_NODES = 100000
MAX_RECORD_BRACKETS = 1024
_C_SAFE_LOADER = getattr(yaml, "CSafeLoader", None)  # libyaml's safe loader, when built in


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


_HOST = _host_tag()
_DIR_FSYNC_UNSUPPORTED: Dict[str, bool] = {}


def record_name(iteration: int) -> str:
    """File name of a member's record for ``iteration`` (``000042.yaml``)."""
    return f"{iteration:06d}{RECORD_SUFFIX}"


def checkpoint_name(iteration: int) -> str:
    """File name of a member's checkpoint for ``iteration`` (``000042.pth``)."""
    return f"{iteration:06d}{CHECKPOINT_SUFFIX}"


def _iteration_of(name: str, suffix: str) -> Optional[int]:
    """The iteration encoded in a member file name, or None for any other file."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) < 6 or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename in it is durable; some filesystems do not support it."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError as exc:
        raise WorkspaceError(f"cannot open directory {directory} to fsync it: {exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        key = str(directory)
        if key not in _DIR_FSYNC_UNSUPPORTED:
            _DIR_FSYNC_UNSUPPORTED[key] = True
            logger.info(
                "fsync of directory %s is not supported here (%s); renames rely on the filesystem's "
                "own durability", directory, exc,
            )
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    """Remove ``path`` if it exists; failures other than 'already gone' are logged."""
    try:
        os.unlink(str(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not remove %s: %s", path, exc)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the complete new one.

    Writes a temp file in the same directory (named ``.<name>.<host>.<pid>.<token>.tmp``), flushes
    and fsyncs it, renames it over ``path`` with ``os.replace`` and fsyncs the directory. The temp
    file is removed on any error (a SIGKILL can leave it behind; ``Workspace.cleanup`` removes it).
    Raises WorkspaceError on an OS error (disk full, permissions, missing directory).
    """
    target = Path(path)
    tmp = target.parent / f".{target.name}.{_HOST}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}"
    try:
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create a temp file in {target.parent} to write {target.name}: {exc}. "
            "Check that the directory exists, is writable and the disk is not full."
        ) from exc
    try:
        with os.fdopen(fd, "wb") as fobj:
            fobj.write(data)
            fobj.flush()
            os.fsync(fobj.fileno())
        os.replace(str(tmp), str(target))
    except OSError as exc:
        _remove_quietly(tmp)
        raise WorkspaceError(
            f"writing {target} failed: {exc}. Check free disk space and permissions."
        ) from exc
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(target.parent)


# --------------------------------------------------------------------------------------------
# Plain-data conversion (records, lineage) and checkpoint state sanitizing
# --------------------------------------------------------------------------------------------


def _numpy_kind(value: Any) -> Optional[str]:
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
    kind = _numpy_kind(value)
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


def sanitize_state(state: Any, where: str = "state") -> Any:
    """Return a copy of a checkpoint state that ``torch.load(weights_only=True)`` accepts.

    numpy scalars become Python numbers and numpy arrays become tensors; dict subclasses other than
    OrderedDict become dicts and namedtuples become tuples. Anything else that is not a tensor,
    number, string, bytes, None, torch.Size/dtype/device raises WorkspaceError naming its path.
    """
    import collections

    import torch

    kind = _numpy_kind(state)
    if kind == "array":
        if state.dtype.hasobject:
            raise WorkspaceError(f"{where} is a numpy object array; store tensors or numbers instead.")
        return torch.from_numpy(state.copy())
    if kind == "scalar":
        state = state.item()
    if state is None or type(state) in (bool, int, float, complex, str, bytes):
        return state
    if isinstance(state, torch.Tensor):
        if type(state) not in (torch.Tensor, torch.nn.Parameter):
            return state.as_subclass(torch.Tensor)
        return state
    if isinstance(state, (torch.Size, torch.dtype, torch.device)):
        return state
    for plain_type in (bool, int, float, str, bytes):  # subclasses (IntEnum, str enums, ...)
        if isinstance(state, plain_type):
            return plain_type(state)
    if isinstance(state, collections.OrderedDict):
        return collections.OrderedDict(
            (k, sanitize_state(v, f"{where}[{k!r}]")) for k, v in state.items()
        )
    if isinstance(state, Mapping):
        return {k: sanitize_state(v, f"{where}[{k!r}]") for k, v in state.items()}
    if isinstance(state, list):
        return [sanitize_state(v, f"{where}[{i}]") for i, v in enumerate(state)]
    if isinstance(state, tuple):
        return tuple(sanitize_state(v, f"{where}[{i}]") for i, v in enumerate(state))
    raise WorkspaceError(
        f"{where} has type {type(state).__module__}.{type(state).__qualname__}, which a checkpoint "
        "loaded with weights_only=True cannot hold. Store tensors, numbers, strings, lists, tuples "
        "and dicts only."
    )


def serialize_state(state: Mapping[str, Any]) -> bytes:
    """Sanitize ``state`` and ``torch.save`` it into bytes."""
    import torch

    buffer = io.BytesIO()
    torch.save(sanitize_state(state), buffer)
    return buffer.getvalue()


def _numpy_safe_globals() -> List[Any]:
    """numpy's reconstructors for scalars and dtypes: rl_games' own checkpoints carry numpy
    scalars (``last_mean_rewards``). They rebuild numbers from bytes and run no user code."""
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core")
    allowed: List[Any] = [np.dtype, core.multiarray.scalar]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed.extend(getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType"))
    return allowed


def deserialize_checkpoint(data: bytes, source: str) -> Dict[str, Any]:
    """``torch.load`` checkpoint bytes with ``weights_only=True`` onto the CPU.

    Raises UnsafeCheckpointError when the weights-only unpickler refuses the data (it would need
    to run code, or is not a torch checkpoint) and CorruptRecordError for other defects.
    """
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_safe_globals()):
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        inner = exc.__context__ if exc.__context__ is not None else exc
        reason = str(inner).strip().splitlines()[-1] if str(inner).strip() else type(inner).__name__
        raise UnsafeCheckpointError(
            f"{source}: refused to load the checkpoint: it would need to run code, or it is not a "
            f"torch checkpoint ({reason}). It was not unpickled. Delete the file; checkpoints must "
            "hold tensors, numbers, strings, lists and dicts only."
        ) from exc
    except Exception as exc:  # torch raises RuntimeError/EOFError/... for a broken archive
        raise CorruptRecordError(
            f"{source}: not a loadable torch checkpoint ({type(exc).__name__}: {exc}). "
            "Delete the file; its member will publish a new one."
        ) from exc
    if not isinstance(state, dict):
        raise CorruptRecordError(
            f"{source}: expected a checkpoint dict, got {type(state).__name__}. Delete the file."
        )
    return state


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


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


def _member_idx_of_dir(directory: Path) -> Optional[int]:
    return int(directory.name) if _MEMBER_DIR_RE.fullmatch(directory.name) else None


def _check_checkpoint_name(name: str, source: str) -> None:
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
    _check_checkpoint_name(record.checkpoint, source)
    if not _CHECKSUM_RE.fullmatch(record.checksum):
        raise CorruptRecordError(
            f"{source}: checksum {record.checksum!r} is not a sha256 hex digest; the record is torn "
            "or foreign. Delete it."
        )
    return record


def _check_checkpoint_present(record: Record, directory: Path, source: str) -> None:
    ckpt = directory / record.checkpoint
    try:
        size = os.stat(str(ckpt)).st_size
    except FileNotFoundError as exc:
        raise CorruptRecordError(f"{source}: its checkpoint {ckpt} is missing") from exc
    except OSError as exc:
        raise CorruptRecordError(f"{source}: cannot stat its checkpoint {ckpt}: {exc}") from exc
    if size == 0:
        raise CorruptRecordError(f"{source}: its checkpoint {ckpt} is empty")


def read_record(path: PathLike, member_idx: Optional[int] = None) -> Record:
    """Read and validate one record file with ``yaml.safe_load`` semantics (libyaml when available).

    ``member_idx`` defaults to the index in the directory name (``.../007/000012.yaml`` -> 7).
    Raises CorruptRecordError naming the file when it is torn, truncated or foreign, when its
    policy_idx does not match its directory, when its iteration does not match its file name, or
    when its checkpoint is missing or empty. A vanished record file raises CorruptRecordError too.
    """
    path = Path(path)
    if member_idx is None:
        member_idx = _member_idx_of_dir(path.parent)
    try:
        with open(str(path), "rb") as fobj:
            data = fobj.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError as exc:
        raise CorruptRecordError(f"{path}: record file does not exist (its member may have deleted it)") from exc
    except OSError as exc:
        raise CorruptRecordError(f"{path}: cannot read record: {exc}") from exc
    record = parse_record(data, str(path), member_idx, _iteration_of(path.name, RECORD_SUFFIX))
    _check_checkpoint_present(record, path.parent, str(path))
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


# --------------------------------------------------------------------------------------------
# Workspace
# --------------------------------------------------------------------------------------------


class _CacheEntry:
    """The last bytes read from one record file and what they parsed to (None: corrupt)."""

    __slots__ = ("data", "record", "error")

    def __init__(self, data: bytes, record: Optional[Record], error: Optional[str]) -> None:
        self.data = data
        self.record = record
        self.error = error


class Workspace:
    """One member's handle on the shared workspace directory.

    Args:
        root: the workspace directory shared by the population (created if missing).
        policy_idx: this member's index, 0 .. num_policies-1.
        num_policies: population size N.
        keep_records: newest own record+checkpoint pairs ``cleanup`` always keeps.
        max_records: hard cap on own pairs kept for slow peers (>= keep_records).
        peer_margin: keep own records down to (slowest peer's latest iteration - peer_margin).
        stale_tmp_seconds: another process's temp file untouched this long is removed by cleanup.
    """

    def __init__(
        self,
        root: PathLike,
        policy_idx: int,
        num_policies: int,
        keep_records: int = DEFAULT_KEEP_RECORDS,
        max_records: int = DEFAULT_MAX_RECORDS,
        peer_margin: int = DEFAULT_PEER_MARGIN,
        stale_tmp_seconds: float = DEFAULT_STALE_TMP_SECONDS,
    ) -> None:
        if num_policies < 1:
            raise ConfigError(f"pbt.num_policies must be >= 1, got {num_policies}")
        if not 0 <= policy_idx < num_policies:
            raise ConfigError(
                f"pbt.policy_idx must be in 0..{num_policies - 1} (pbt.num_policies={num_policies}), "
                f"got {policy_idx}"
            )
        if keep_records < 1:
            raise ConfigError(f"keep_records must be >= 1, got {keep_records}")
        if max_records < keep_records:
            raise ConfigError(f"max_records ({max_records}) must be >= keep_records ({keep_records})")
        if peer_margin < 0:
            raise ConfigError(f"peer_margin must be >= 0, got {peer_margin}")
        self.root = Path(root)
        self.policy_idx = policy_idx
        self.num_policies = num_policies
        self.keep_records = keep_records
        self.max_records = max_records
        self.peer_margin = peer_margin
        self.stale_tmp_seconds = stale_tmp_seconds
        self._cache: Dict[int, Dict[str, _CacheEntry]] = {}
        for directory in (self.own_dir, self.best_dir):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot create workspace directory {directory}: {exc}. Set pbt.workspace to a "
                    "writable directory shared by all members."
                ) from exc

    # ---- paths -------------------------------------------------------------------------------

    def member_dir(self, member_idx: int) -> Path:
        return self.root / f"{member_idx:03d}"

    @property
    def own_dir(self) -> Path:
        return self.member_dir(self.policy_idx)

    @property
    def best_dir(self) -> Path:
        return self.root / f"best{self.policy_idx}"

    def lineage_path(self, member_idx: Optional[int] = None) -> Path:
        return self.member_dir(self.policy_idx if member_idx is None else member_idx) / LINEAGE_FILE

    def checkpoint_path(self, record: Record, member_idx: Optional[int] = None) -> Path:
        """Where ``record``'s checkpoint lies (in member ``member_idx``'s dir, default its own)."""
        _check_checkpoint_name(record.checkpoint, f"record of member {record.policy_idx}")
        return self.member_dir(record.policy_idx if member_idx is None else member_idx) / record.checkpoint

    # ---- start-up ----------------------------------------------------------------------------

    def probe_writable(self) -> None:
        """Write, fsync and remove a small file in this member's directory.

        Raises WorkspaceError saying how to fix it when the workspace is read-only, full or not
        writable, so a bad ``pbt.workspace`` fails at start-up rather than at the first PBT
        iteration.
        """
        probe = self.own_dir / PROBE_FILE
        try:
            atomic_write_bytes(probe, f"{_HOST} {os.getpid()} {time.time()}\n".encode("utf-8"))
        except WorkspaceError as exc:
            raise WorkspaceError(
                f"pbt.workspace={self.root} is not writable: {exc.__cause__ or exc}. Set pbt.workspace to a "
                "directory every member can write (check permissions, free disk space, and that the "
                "filesystem is mounted read-write)."
            ) from exc
        _remove_quietly(probe)

    def has_own_files(self) -> bool:
        """True when this member's directory holds any record, checkpoint or lineage."""
        try:
            names = os.listdir(str(self.own_dir))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise WorkspaceError(f"cannot list {self.own_dir}: {exc}") from exc
        return any(
            n == LINEAGE_FILE or _iteration_of(n, RECORD_SUFFIX) is not None
            or _iteration_of(n, CHECKPOINT_SUFFIX) is not None
            for n in names
        )

    def move_aside(self) -> List[Path]:
        """Move this member's directory and its best copy aside (``<idx:03d>.old-<time>``,
        ``best<idx>.old-<time>``) and create empty ones: a fresh start that deletes nothing.

        Each move is one ``os.rename``; peers scanning meanwhile see the member's records or none.
        Returns the new paths of what was moved. Raises WorkspaceError when a rename fails.
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        moved: List[Path] = []
        for directory in (self.own_dir, self.best_dir):
            if not directory.exists():
                continue
            target = directory.with_name(f"{directory.name}.old-{stamp}")
            suffix = 1
            while target.exists():
                suffix += 1
                target = directory.with_name(f"{directory.name}.old-{stamp}-{suffix}")
            try:
                os.rename(str(directory), str(target))
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot move {directory} aside to {target}: {exc}. Move or delete it by hand."
                ) from exc
            moved.append(target)
        _fsync_dir(self.root)
        self._cache.pop(self.policy_idx, None)
        return moved

    # ---- publishing --------------------------------------------------------------------------

    def save(
        self,
        iteration: int,
        frame: int,
        objective: Optional[float],
        params: Mapping[str, Any],
        state: Mapping[str, Any],
        episode_returns: Iterable[float] = (),
        frames_since_replace: int = 0,
    ) -> Record:
        """Serialize ``state`` (rl_games' full state) and publish it with its record.

        numpy values in ``state`` are converted so the checkpoint loads with weights_only=True.
        Returns the published record. Raises WorkspaceError when writing fails or the state holds
        an object a weights-only checkpoint cannot carry.
        """
        return self.publish(iteration, frame, objective, params, serialize_state(state), episode_returns,
                            frames_since_replace)

    def publish(
        self,
        iteration: int,
        frame: int,
        objective: Optional[float],
        params: Mapping[str, Any],
        checkpoint_bytes: bytes,
        episode_returns: Iterable[float] = (),
        frames_since_replace: int = 0,
    ) -> Record:
        """Publish already-serialized checkpoint bytes: write the ``.pth``, then the ``.yaml``."""
        if iteration < 0:
            raise WorkspaceError(f"iteration must be >= 0, got {iteration}")
        if not checkpoint_bytes:
            raise WorkspaceError(f"refusing to publish an empty checkpoint for iteration {iteration}")
        try:
            objective_value = None if objective is None else float(objective)
            returns = [float(x) for x in episode_returns]
        except (TypeError, ValueError) as exc:
            raise WorkspaceError(f"objective and episode_returns must be numbers: {exc}") from exc
        record = Record(
            policy_idx=self.policy_idx,
            iteration=int(iteration),
            frame=int(frame),
            objective=objective_value,
            params=to_plain(dict(params), "params"),
            checkpoint=checkpoint_name(iteration),
            checksum=sha256_hex(checkpoint_bytes),
            time=time.time(),
            episode_returns=returns,
            frames_since_replace=int(frames_since_replace),
        )
        record_bytes = record_to_yaml(record)
        record_path = self.own_dir / record_name(iteration)
        # Re-publishing an iteration: drop the old record first, so it never names the new bytes.
        if os.path.lexists(str(record_path)):
            _remove_quietly(record_path)
        atomic_write_bytes(self.own_dir / record.checkpoint, checkpoint_bytes)
        atomic_write_bytes(record_path, record_bytes)
        logger.debug("member %d published iteration %d (%d bytes)", self.policy_idx, iteration,
                     len(checkpoint_bytes))
        return record

    # ---- reading records ---------------------------------------------------------------------

    def _cached_record(self, member_idx: int, directory: Path, name: str, iteration: int) -> Record:
        """Read ``directory/name``; parse it unless its bytes equal the last ones seen there.

        Raises CorruptRecordError (warned once per file content) or OSError/FileNotFoundError.
        """
        path = directory / name
        with open(str(path), "rb") as fobj:
            data = fobj.read(MAX_RECORD_BYTES + 1)
        cache = self._cache.setdefault(member_idx, {})
        entry = cache.get(name)
        if entry is not None and entry.data == data:
            if entry.record is None:  # warned when first seen; do not repeat every scan
                logger.debug("still skipping corrupt record %s", path)
                raise _AlreadyLogged(entry.error or f"{path}: corrupt record")
            return entry.record
        try:
            record = parse_record(data, str(path), member_idx, iteration)
        except CorruptRecordError as exc:
            cache[name] = _CacheEntry(data, None, str(exc))
            logger.warning("skipping corrupt record %s: %s", path, exc)
            raise _AlreadyLogged(str(exc)) from exc
        cache[name] = _CacheEntry(data, record, None)
        return record

    def _record_names(self, member_idx: int) -> List[Tuple[int, str]]:
        """(iteration, name) of member's record files, newest first; [] when it has no directory."""
        directory = self.member_dir(member_idx)
        try:
            names = os.listdir(str(directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise WorkspaceError(f"cannot list {directory}: {exc}. Check permissions and the mount.") from exc
        found = []
        for name in names:
            iteration = _iteration_of(name, RECORD_SUFFIX)
            if iteration is not None:
                found.append((iteration, name))
        found.sort(reverse=True)
        cache = self._cache.get(member_idx)
        if cache:
            present = set(names)
            for stale in [n for n in cache if n not in present]:
                del cache[stale]
        return found

    def latest_record(
        self, member_idx: int, max_iteration: Optional[int] = None, verify: bool = False
    ) -> Optional[Record]:
        """Member's newest intact record with iteration <= max_iteration, or None.

        Corrupt or foreign records are skipped with a warning naming the file (once per file
        content) and the next older one is tried. Only records whose checkpoint exists and is
        non-empty are returned; checkpoints are not read unless ``verify`` is set, in which case
        each candidate's checkpoint is hashed and one failing its checksum is skipped too (use it
        for resuming, not for the per-iteration scan).
        """
        directory = self.member_dir(member_idx)
        for iteration, name in self._record_names(member_idx):
            if max_iteration is not None and iteration > max_iteration:
                continue
            path = directory / name
            try:
                record = self._cached_record(member_idx, directory, name, iteration)
                _check_checkpoint_present(record, directory, str(path))
                if verify:
                    self.read_checkpoint_bytes(record, member_idx)
            except FileNotFoundError:
                logger.info("record %s vanished while reading (deleted by its member); trying an older one", path)
                continue
            except _AlreadyLogged:
                continue
            except CorruptRecordError as exc:
                if not path.exists():
                    logger.info("record %s was deleted while reading; trying an older one", path)
                else:
                    logger.warning("skipping record %s: %s", path, exc)
                continue
            except OSError as exc:
                logger.warning("skipping record %s: cannot read it: %s", path, exc)
                continue
            return record
        return None

    def latest_records(
        self, max_iteration: Optional[int] = None, verify: bool = False
    ) -> Dict[int, Record]:
        """For every member 0..N-1, its newest intact record with iteration <= max_iteration.

        Members with no usable record are absent from the result. A member whose directory cannot
        be listed is logged and left out, so one bad peer does not stop the population. ``verify``
        as in ``latest_record`` (reads every chosen checkpoint: slow).
        """
        result: Dict[int, Record] = {}
        for member_idx in range(self.num_policies):
            try:
                record = self.latest_record(member_idx, max_iteration, verify)
            except WorkspaceError as exc:
                logger.warning("leaving member %d out of this PBT step: %s", member_idx, exc)
                continue
            if record is not None:
                result[member_idx] = record
        return result

    def newest_iteration(self, member_idx: Optional[int] = None, verify: bool = False) -> Optional[int]:
        """Iteration of a member's (default: own) newest intact record, or None (e.g. for resume)."""
        record = self.latest_record(self.policy_idx if member_idx is None else member_idx, verify=verify)
        return None if record is None else record.iteration

    # ---- checkpoints -------------------------------------------------------------------------

    def read_checkpoint_bytes(self, record: Record, member_idx: Optional[int] = None) -> bytes:
        """The checkpoint's bytes, verified against the record's sha256.

        ``member_idx`` is the directory holding it (default: the record's policy_idx).
        Raises CorruptRecordError when the file is gone (peers delete old files at any time) or
        its checksum does not match.
        """
        path = self.checkpoint_path(record, member_idx)
        try:
            with open(str(path), "rb") as fobj:
                data = fobj.read()
        except FileNotFoundError as exc:
            raise CorruptRecordError(
                f"{path}: checkpoint no longer exists (its member deleted it); pick a newer record"
            ) from exc
        except OSError as exc:
            raise CorruptRecordError(f"{path}: cannot read checkpoint: {exc}") from exc
        digest = sha256_hex(data)
        if digest != record.checksum:
            raise CorruptRecordError(
                f"{path}: checksum mismatch (record {record.checksum[:12]}..., file {digest[:12]}..., "
                f"{len(data)} bytes); the file was replaced or damaged. Use another record."
            )
        return data

    def load_checkpoint(self, record: Record, member_idx: Optional[int] = None) -> Dict[str, Any]:
        """Verify and load a checkpoint onto the CPU with ``torch.load(weights_only=True)``.

        Raises CorruptRecordError (missing, checksum mismatch, broken archive) or
        UnsafeCheckpointError (the pickle would need to run code).
        """
        path = self.checkpoint_path(record, member_idx)
        return deserialize_checkpoint(self.read_checkpoint_bytes(record, member_idx), str(path))

    def export_checkpoint(
        self,
        record: Record,
        member_idx: Optional[int],
        dest_path: PathLike,
        frame: int,
        epoch: int,
    ) -> Path:
        """Copy a (donor's) checkpoint to a private path outside the workspace, for a restart.

        The copy is verified and loaded safely, its ``frame`` and ``epoch`` are set to the
        caller's own counts (a member keeps its own frame count), and it is written atomically.
        Raises CorruptRecordError when the donor's file vanished or is damaged, WorkspaceError when
        ``dest_path`` lies inside the workspace or cannot be written.
        """
        dest = Path(dest_path).absolute()
        root = self.root.absolute()
        if dest == root or root in dest.parents:
            raise WorkspaceError(
                f"export destination {dest} lies inside the workspace {root}, where retention may "
                "delete it; export into the member's own run directory instead."
            )
        state = self.load_checkpoint(record, member_idx)
        state["frame"] = int(frame)
        state["epoch"] = int(epoch)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create {dest.parent} for the exported checkpoint: {exc}") from exc
        atomic_write_bytes(dest, serialize_state(state))
        logger.info("exported member %d's iteration %d checkpoint to %s (frame %d, epoch %d)",
                    record.policy_idx, record.iteration, dest, frame, epoch)
        return dest

    # ---- lineage -----------------------------------------------------------------------------

    def append_lineage(self, entry: Mapping[str, Any]) -> None:
        """Append one JSON line to this member's ``lineage.jsonl`` (one write, then fsync).

        If a previous writer died mid-line, the torn fragment is closed with a newline first so
        it cannot swallow this entry. NaN/inf are written as JSON's NaN/Infinity extension.
        """
        line = (json.dumps(to_plain(dict(entry), "lineage entry"), sort_keys=True) + "\n").encode("utf-8")
        path = self.lineage_path()
        try:
            fd = os.open(str(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WorkspaceError(f"cannot open {path} to append lineage: {exc}") from exc
        try:
            size = os.fstat(fd).st_size
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                logger.warning("%s ended with a torn line; closing it before appending", path)
                line = b"\n" + line
            written = os.write(fd, line)
            while written < len(line):  # regular files write fully unless the disk is full
                more = os.write(fd, line[written:])
                if more == 0:
                    raise OSError(f"short write ({written} of {len(line)} bytes)")
                written += more
            os.fsync(fd)
        except OSError as exc:
            raise WorkspaceError(f"appending to {path} failed: {exc}. Check free disk space.") from exc
        finally:
            os.close(fd)

    def read_lineage(self, member_idx: Optional[int] = None) -> List[Dict[str, Any]]:
        """All entries of a member's lineage (default own); [] when it has none.

        A torn or invalid line (e.g. the last one, when its writer was killed) is skipped with a
        warning naming the file and line number.
        """
        path = self.lineage_path(member_idx)
        try:
            with open(str(path), "rb") as fobj:
                data = fobj.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise WorkspaceError(f"cannot read {path}: {exc}") from exc
        entries: List[Dict[str, Any]] = []
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            torn = number == len(lines)  # the last chunk has no newline: its writer did not finish
            try:
                entry = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                logger.warning("skipping %s line %d in %s: %s", "torn last" if torn else "invalid",
                               number, path, exc)
                continue
            if not isinstance(entry, dict):
                logger.warning("skipping line %d in %s: expected a JSON object, got %s", number, path,
                               type(entry).__name__)
                continue
            entries.append(entry)
        return entries

    # ---- best copy ---------------------------------------------------------------------------

    def best_record(self) -> Optional[Record]:
        """The record of this member's copy of the population best, or None."""
        best: Optional[Record] = None
        try:
            names = sorted(os.listdir(str(self.best_dir)))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise WorkspaceError(f"cannot list {self.best_dir}: {exc}") from exc
        for name in names:
            if name.startswith(".") or not name.endswith(RECORD_SUFFIX):
                continue
            path = self.best_dir / name
            try:
                with open(str(path), "rb") as fobj:
                    record = parse_record(fobj.read(MAX_RECORD_BYTES + 1), str(path))
                _check_checkpoint_present(record, self.best_dir, str(path))
            except CorruptRecordError as exc:
                logger.warning("ignoring best copy %s: %s", path, exc)
                continue
            if best is None or _objective_key(record) > _objective_key(best):
                best = record
        return best

    def update_best(self, record: Record, member_idx: Optional[int] = None) -> bool:
        """Keep ``best<own idx>/`` holding the best checkpoint+record this member has seen.

        ``record`` is the current population best (its checkpoint in ``member_idx``'s directory,
        default its policy_idx). It replaces the stored copy only when its objective is finite and
        strictly higher (as upstream: the all-time best is kept). The checkpoint bytes are verified
        by sha256 and copied, no unpickling. Returns True when the copy was replaced. Raises
        CorruptRecordError when the donor's checkpoint vanished or fails its checksum.
        """
        if not record.has_objective:
            return False
        current = self.best_record()
        if current is not None:
            if (current.policy_idx, current.iteration, current.checksum) == (
                record.policy_idx, record.iteration, record.checksum
            ):
                return False
            if current.has_objective and current.objective >= record.objective:  # type: ignore[operator]
                return False
        data = self.read_checkpoint_bytes(record, member_idx)
        stem = f"best_obj_{record.objective:015.5f}_iter_{record.iteration:06d}_policy{record.policy_idx:03d}"
        copy = replace(record, checkpoint=stem + CHECKPOINT_SUFFIX)
        atomic_write_bytes(self.best_dir / copy.checkpoint, data)
        atomic_write_bytes(self.best_dir / (stem + RECORD_SUFFIX), record_to_yaml(copy))
        keep = {stem + RECORD_SUFFIX, copy.checkpoint}
        old = [n for n in os.listdir(str(self.best_dir)) if n not in keep and not n.startswith(".")]
        for name in sorted(old, key=lambda n: not n.endswith(RECORD_SUFFIX)):  # records first
            _remove_quietly(self.best_dir / name)
        logger.info("member %d: new population best %s (objective %s) copied to %s", self.policy_idx,
                    record.policy_idx, record.objective, self.best_dir)
        return True

    # ---- retention ---------------------------------------------------------------------------

    def cleanup(self, latest: Optional[Mapping[int, Record]] = None) -> List[Path]:
        """Apply retention to this member's files; returns the paths removed.

        Keeps the newest ``keep_records`` pairs, plus older ones with iteration >= (the oldest
        peer's latest iteration - peer_margin), at most ``max_records`` pairs. A peer with no
        record counts as iteration 0 (it may start late). ``latest`` is a ``latest_records()``
        snapshot (scanned when None). Records are removed before their checkpoints. Orphan
        checkpoints (no kept record) and stale temp files of this member are removed too.
        """
        if latest is None:
            latest = self.latest_records()
        peers = [latest[i].iteration if i in latest else 0 for i in range(self.num_policies) if i != self.policy_idx]
        threshold = (min(peers) - self.peer_margin) if peers else None
        directory = self.own_dir
        try:
            names = os.listdir(str(directory))
        except OSError as exc:
            raise WorkspaceError(f"cannot list {directory} for cleanup: {exc}") from exc
        records = sorted((it for it in (_iteration_of(n, RECORD_SUFFIX) for n in names) if it is not None),
                         reverse=True)
        needed = 0 if threshold is None else sum(1 for it in records if it >= threshold)
        n_keep = min(self.max_records, max(self.keep_records, needed))
        kept = set(records[:n_keep])
        removed: List[Path] = []
        for iteration in records[n_keep:]:
            for path in (directory / record_name(iteration), directory / checkpoint_name(iteration)):
                _remove_quietly(path)
                removed.append(path)
        for name in names:
            iteration = _iteration_of(name, CHECKPOINT_SUFFIX)
            if iteration is not None and iteration not in kept and directory / name not in removed:
                logger.info("removing orphan checkpoint %s (no record names it)", directory / name)
                _remove_quietly(directory / name)
                removed.append(directory / name)
        removed.extend(self._remove_stale_temp_files(directory, names))
        try:
            best_names = os.listdir(str(self.best_dir))
        except FileNotFoundError:
            best_names = []
        except OSError as exc:
            raise WorkspaceError(f"cannot list {self.best_dir} for cleanup: {exc}") from exc
        removed.extend(self._remove_stale_temp_files(self.best_dir, best_names))
        if removed:
            logger.debug("member %d cleanup removed %d files (kept %d records, threshold %s)",
                         self.policy_idx, len(removed), len(kept), threshold)
        return removed

    def _remove_stale_temp_files(self, directory: Path, names: Sequence[str]) -> List[Path]:
        """Remove temp files left by killed writers: ours (no write of ours is in flight during
        cleanup) and other processes' ones untouched for ``stale_tmp_seconds``."""
        removed: List[Path] = []
        now = time.time()
        for name in names:
            match = _TMP_RE.fullmatch(name)
            if match is None:
                continue
            path = directory / name
            ours = (match.group("host") == _HOST and int(match.group("pid")) == os.getpid()
                    and match.group("target") not in CONCURRENT_TARGETS)
            if not ours:
                try:
                    age = now - os.stat(str(path)).st_mtime
                except FileNotFoundError:
                    continue
                if age < self.stale_tmp_seconds:
                    continue
            logger.info("removing stale temp file %s (left by a killed writer)", path)
            _remove_quietly(path)
            removed.append(path)
        return removed


class _AlreadyLogged(CorruptRecordError):
    """Internal: a corrupt record whose warning was already logged (once per file content)."""


def _objective_key(record: Record) -> float:
    return record.objective if record.has_objective else -math.inf  # type: ignore[return-value]
