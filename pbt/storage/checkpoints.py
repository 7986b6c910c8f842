"""Checkpoints as bytes: serialized with ``torch.save`` and loaded with ``torch.load(weights_only=True)``
only, so a planted pickle cannot run code. torch is imported inside the functions: the storage
package itself stays importable without it.
"""
import hashlib
import io
import os
from typing import Any, Dict, List, Mapping, Union

from pbt.errors import CorruptRecordError, UnsafeCheckpointError, WorkspaceError
from pbt.storage.record import numpy_kind

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


def load_state_file(path: PathLike) -> Dict[str, Any]:
    """Load a checkpoint file without executing code; a missing file is a clear error."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorruptRecordError(f"checkpoint={path}: no such file. Pass the path of an existing .pth file.") from None
    except OSError as exc:
        raise CorruptRecordError(f"checkpoint={path}: cannot read it ({exc}).") from exc
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
