"""Checkpoints outside the workspace (``checkpoint=<path>``), loaded as safely as workspace ones:
``torch.load(weights_only=True)`` only (see :func:`pbt.workspace.deserialize_checkpoint`)."""
import hashlib
import os
from typing import Any, Dict, Union

from pbt.errors import CorruptRecordError
from pbt.workspace import deserialize_checkpoint

PathLike = Union[str, "os.PathLike[str]"]


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
