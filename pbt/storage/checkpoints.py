"""Checkpoints as bytes: serialized with ``torch.save`` and loaded with ``torch.load(weights_only=True)``
(or, on torch < 2.6, the allow-list unpickler of ``pbt.storage.unpickler``) only, so a planted pickle
cannot run code. torch is imported inside the functions: the storage
package itself stays importable without it.
"""

import hashlib
import io
import os
from typing import Any, Dict, List, Literal, Mapping, Tuple, Union

from pbt.errors import CorruptRecordError, UnsafeCheckpointError, WorkspaceError
from pbt.storage.record import numpy_kind
from pbt.storage.unpickler import restricted_torch_load

PathLike = Union[str, "os.PathLike[str]"]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sanitize_state(state: Any, where: str = "state") -> Any:
    """Return a copy of a checkpoint state that ``torch.load(weights_only=True)`` accepts.

    numpy scalars become Python numbers and numpy arrays become tensors; dict subclasses other than
    OrderedDict become dicts and namedtuples become tuples. Anything else that is not a tensor,
    number, string, bytes, None, torch.Size/dtype/device raises WorkspaceError naming its path.
    """
    import collections

    import torch

    kind = numpy_kind(state)
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
    plain_types: Tuple[type, ...] = (bool, int, float, str, bytes)  # subclasses (IntEnum, str enums, ...)
    for plain_type in plain_types:
        if isinstance(state, plain_type):
            return plain_type(state)
    if isinstance(state, collections.OrderedDict):
        return collections.OrderedDict((k, sanitize_state(v, f"{where}[{k!r}]")) for k, v in state.items())
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


_PLAIN_DTYPES = frozenset(["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"])
"""numpy dtypes a checkpoint may hold scalars of: plain numbers (rl_games saves ``last_mean_rewards``
as one). Never structured, object, string or datetime dtypes."""
MAX_STATE_NODES = 1_000_000
MAX_STATE_DEPTH = 64


class _DtypeSpec:
    """Stands in for ``numpy.dtype`` while unpickling: it records the arguments and the state, and
    numpy never sees them unless they describe a plain numeric dtype (a pickled structured dtype
    with an object field, then a scalar from 8 attacker bytes, is a pointer numpy would follow)."""

    def __init__(self, spec: Any = None, align: Any = False, copy: Any = True) -> None:
        self.spec = spec
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    """``numpy.core.multiarray.scalar`` for plain numeric dtypes only (a numpy scalar)."""
    import pickle

    import numpy as np

    if not isinstance(dtype, _DtypeSpec) or type(dtype.spec) is not str or dtype.spec not in _PLAIN_DTYPES:
        spec = getattr(dtype, "spec", dtype)
        raise pickle.UnpicklingError(f"numpy scalar of dtype {spec!r:.60} is not a plain number")
    order: Literal["<", ">", "|", "="] = "|"
    state = dtype.state
    if state is not None:  # (version, byteorder, subarray, names, fields, elsize, alignment, flags)
        if (
            type(state) is not tuple
            or len(state) != 8
            or state[1] not in ("<", ">", "|", "=")
            or state[2:5] != (None, None, None)
            or state[5:] != (-1, -1, 0)
        ):
            raise pickle.UnpicklingError("numpy dtype state is not a plain number's")
        order = state[1]
    np_dtype = np.dtype(dtype.spec)
    if order in ("<", ">"):
        np_dtype = np_dtype.newbyteorder(order)
    if type(data) is not bytes or len(data) != np_dtype.itemsize:
        raise pickle.UnpicklingError(f"numpy scalar data is not {np_dtype.itemsize} bytes")
    return np.frombuffer(data, dtype=np_dtype)[0]


def _numpy_safe_globals() -> List[Any]:
    """Our stand-ins for numpy's scalar and dtype reconstructors, under the names numpy pickles them."""
    return [
        (_DtypeSpec, "numpy.dtype"),
        (_numpy_scalar, "numpy.core.multiarray.scalar"),
        (_numpy_scalar, "numpy._core.multiarray.scalar"),
    ]


def _weights_only_takes_named_globals(torch: Any) -> bool:
    """Whether torch's weights-only loader accepts ``safe_globals([(obj, "numpy.dtype"), ...])``:
    the context manager came in torch 2.5, the ``(obj, name)`` pairs in 2.6."""
    if not hasattr(torch.serialization, "safe_globals"):
        return False
    version = torch.__version__.split("+")[0].split(".")
    try:
        return (int(version[0]), int(version[1])) >= (2, 6)
    except (IndexError, ValueError):
        return True  # a development build with a safe_globals context manager is a new one


def check_state(state: Any, source: str) -> None:
    """Refuse (UnsafeCheckpointError) anything in a loaded checkpoint but dicts with string or int
    keys, lists, tuples, strings, bytes, numbers, None, plain numpy scalars, dense tensors and
    torch.Size/dtype/device; bounded in depth and size. Nothing is used before this walk."""
    import collections

    import numpy as np
    import torch

    scalars = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
    stack = [(state, "state", 0)]
    nodes = 0
    while stack:
        value, where, depth = stack.pop()
        nodes += 1
        if nodes > MAX_STATE_NODES or depth > MAX_STATE_DEPTH:
            raise UnsafeCheckpointError(
                f"{source}: the checkpoint is nested too deep or holds too many values; "
                "not a PBT checkpoint. Delete it."
            )
        kind = type(value)
        if kind in scalars:
            continue
        if kind in (torch.Tensor, torch.nn.Parameter):
            if value.layout != torch.strided or value.is_quantized or value.is_meta or value.device.type != "cpu":
                raise UnsafeCheckpointError(
                    f"{source}: {where} is a {value.layout} tensor on {value.device}; "
                    "checkpoints hold dense CPU tensors only. Delete it."
                )
            continue
        if isinstance(value, np.generic):
            if value.dtype.fields is not None or value.dtype.hasobject or value.dtype.kind not in "biufc":
                raise UnsafeCheckpointError(f"{source}: {where} is a numpy scalar of dtype {value.dtype}; refused")
            continue
        if kind in (dict, collections.OrderedDict):
            for key, sub in value.items():
                if type(key) not in (str, int):
                    raise UnsafeCheckpointError(f"{source}: {where} has a {type(key).__name__} key; refused")
                stack.append((sub, f"{where}[{key!r:.40}]", depth + 1))
            continue
        if kind in (list, tuple):
            stack.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(value))
            continue
        raise UnsafeCheckpointError(
            f"{source}: {where} is a {kind.__module__}.{kind.__qualname__}; checkpoints hold tensors, numbers, "
            "strings, lists and dicts only. It was refused before use; delete the file."
        )


def deserialize_checkpoint(data: bytes, source: str) -> Dict[str, Any]:
    """``torch.load`` checkpoint bytes with ``weights_only=True`` onto the CPU, then check every
    value (:func:`check_state`).

    Raises UnsafeCheckpointError when the weights-only unpickler refuses the data (it would need
    to run code, or is not a torch checkpoint) or the loaded state holds anything but plain data,
    and CorruptRecordError for other defects.
    """
    import pickle

    import torch

    try:
        if _weights_only_takes_named_globals(torch):
            with torch.serialization.safe_globals(_numpy_safe_globals()):
                state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        else:  # torch < 2.6 (Isaac Gym's Python 3.8 stops at 2.4): our own allow-list unpickler
            state = restricted_torch_load(data, {name: obj for obj, name in _numpy_safe_globals()})
    except pickle.UnpicklingError as exc:
        inner = exc.__context__ if exc.__context__ is not None else exc
        reason = str(inner).strip().splitlines()[-1] if str(inner).strip() else type(inner).__name__
        raise UnsafeCheckpointError(
            f"{source}: refused to load the checkpoint: it would need to run code, or it is not a "
            f"torch checkpoint ({reason}). It was not unpickled. Delete the file; checkpoints must "
            "hold tensors, numbers, strings, lists and dicts only."
        ) from exc
    except Exception as exc:  # torch raises RuntimeError/EOFError/MemoryError/... for a broken archive
        raise CorruptRecordError(
            f"{source}: not a loadable torch checkpoint ({type(exc).__name__}: {str(exc)[:300]}). "
            "Delete the file; its member will publish a new one."
        ) from exc
    check_state(state, source)
    if not isinstance(state, dict):
        raise CorruptRecordError(f"{source}: expected a checkpoint dict, got {type(state).__name__}. Delete the file.")
    return state


MAX_STATE_FILE_BYTES = 4 * 1024**3
"""Largest checkpoint file :func:`load_state_file` reads (it is read whole into memory)."""


def load_state_file(path: PathLike, max_bytes: int = MAX_STATE_FILE_BYTES) -> Dict[str, Any]:
    """Load a checkpoint file the user named (``checkpoint=``) without executing code; a missing
    file is a clear error. A FIFO or device there is refused, never blocks; a file over
    ``max_bytes`` is refused unread."""
    import stat

    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise CorruptRecordError(f"checkpoint={path}: no such file. Pass the path of an existing .pth file.") from None
    except OSError as exc:
        raise CorruptRecordError(f"checkpoint={path}: cannot read it ({exc}).") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CorruptRecordError(f"checkpoint={path}: not a regular file. Pass the path of a .pth file.")
        if info.st_size > max_bytes:
            raise CorruptRecordError(
                f"checkpoint={path}: {info.st_size} bytes, over the {max_bytes} byte cap; "
                "not a checkpoint of this project's networks."
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    except (OSError, MemoryError) as exc:
        raise CorruptRecordError(f"checkpoint={path}: cannot read it ({exc}).") from exc
    finally:
        os.close(fd)
    return deserialize_checkpoint(data, str(path))


def model_fingerprint(model_state: Dict[str, Any]) -> str:
    """sha256 over a model state_dict's tensors (names, shapes and values), for logs and tests:
    two agents with the same fingerprint hold identical weights."""
    digest = hashlib.sha256()
    for name in sorted(model_state):
        tensor = model_state[name]
        digest.update(name.encode())
        if hasattr(tensor, "detach"):
            t = tensor.detach().cpu().contiguous()
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()
