"""Loading checkpoints without executing code: ``torch.load(weights_only=True)`` only.

rl_games' own checkpoints carry numpy scalars (``last_mean_rewards``); the numpy reconstructors
for scalars and dtypes are allow-listed (they rebuild numbers from bytes and run no user code).
Anything else a pickle asks for is refused with :class:`UnsafeCheckpointError`.
"""
import io
import os
from typing import Any, Dict, Union

from pbt.errors import CorruptRecordError, UnsafeCheckpointError

PathLike = Union[str, "os.PathLike[str]"]


def _numpy_safe_globals() -> list:
    import numpy as np

    allowed: list = [np.dtype]
    core = getattr(np, "_core", None) or getattr(np, "core")
    allowed.append(core.multiarray.scalar)
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed.extend(getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType"))
    return allowed


def load_state_bytes(data: bytes, source: str) -> Dict[str, Any]:
    """Deserialize a checkpoint's bytes with weights_only=True; name ``source`` in any error."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_safe_globals()):
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise UnsafeCheckpointError(
                f"{source}: refused to load a checkpoint that would execute code ({str(exc).splitlines()[0]}). "
                "Only tensors and plain data are loaded from checkpoints; regenerate it with this tool."
            ) from exc
        raise CorruptRecordError(f"{source}: not a readable checkpoint ({exc})") from exc
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        raise CorruptRecordError(f"{source}: not a readable checkpoint ({exc})") from exc
    if not isinstance(state, dict):
        raise CorruptRecordError(f"{source}: expected a checkpoint dict, got {type(state).__name__}")
    return state


def load_state_file(path: PathLike) -> Dict[str, Any]:
    """Load a checkpoint file safely; a missing file is a clear error."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorruptRecordError(f"checkpoint={path}: no such file. Pass the path of an existing .pth file.") from None
    return load_state_bytes(data, str(path))


def model_fingerprint(model_state: Dict[str, Any]) -> str:
    """sha256 over a model state_dict's tensors (names, shapes and values), for logs and tests:
    two agents with the same fingerprint hold identical weights."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(model_state):
        tensor = model_state[name]
        digest.update(name.encode())
        if hasattr(tensor, "detach"):
            t = tensor.detach().cpu().contiguous()
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()
