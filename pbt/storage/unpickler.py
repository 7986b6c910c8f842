"""A restricted unpickler for torch checkpoints, for torch builds whose weights-only loader cannot
take our numpy stand-ins under numpy's names (``torch.serialization.safe_globals`` with
``(obj, name)`` pairs needs torch >= 2.6; Isaac Gym's Python 3.8 caps torch at 2.4).

It resolves a fixed table of globals and nothing else: torch's tensor and parameter rebuilders
(guarded: no backward hooks, no metadata), ``OrderedDict``, ``torch.Size``/``device``/dtypes,
``complex``, ``_codecs.encode`` for latin-1 bytes (how pickle protocol 2 writes ``bytes``) and the
numpy scalar stand-ins of ``pbt.storage.checkpoints``. Any other global raises
``pickle.UnpicklingError`` before anything is called. torch imported inside the functions, like
``checkpoints``.
"""

import io
import pickle
import types
from typing import Any, Callable, Dict, Tuple

_BUILTIN_MODULES = ("builtins", "__builtin__")


def _encode_latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for ``bytes``: a str and latin-1, nothing else."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed for latin-1 bytes only")
    return text.encode("latin1")


def _rebuild_tensor_v2(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, backward_hooks: Any, metadata: Any = None
) -> Any:
    """torch's rebuilder for a dense tensor, refusing the hooks and metadata a checkpoint never has."""
    import torch

    if backward_hooks or metadata:
        raise pickle.UnpicklingError("a tensor with backward hooks or metadata; checkpoints hold plain tensors")
    if type(requires_grad) is not bool:
        raise pickle.UnpicklingError("a tensor's requires_grad is not a bool")
    return torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Any:
    import torch

    if backward_hooks or type(requires_grad) is not bool:
        raise pickle.UnpicklingError("a parameter with backward hooks; checkpoints hold plain tensors")
    if type(data) is not torch.Tensor:
        raise pickle.UnpicklingError("a parameter whose data is not a tensor")
    return torch.nn.Parameter(data, requires_grad)


def _allowed_globals(stand_ins: Dict[str, Any]) -> Dict[Tuple[str, str], Callable[..., Any]]:
    import collections

    import torch

    table: Dict[Tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("_codecs", "encode"): _encode_latin1,
    }
    for module in _BUILTIN_MODULES:
        table[(module, "complex")] = complex
    for dotted, obj in stand_ins.items():
        module, _, name = dotted.rpartition(".")
        table[(module, name)] = obj
    return table


class _RestrictedUnpickler(pickle.Unpickler):
    allowed: Dict[Tuple[str, str], Any] = {}

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is not None:
            return found
        if module == "torch" and type(name) is str and not name.startswith("_"):
            import torch

            dtype = getattr(torch, name, None)
            if isinstance(dtype, torch.dtype):
                return dtype
        raise pickle.UnpicklingError(f"global '{module!s:.60}.{name!s:.60}' is not allowed in a checkpoint")


def restricted_pickle_module(stand_ins: Dict[str, Any]) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.load`` whose ``Unpickler`` (and ``load``, which torch's legacy
    path would call) resolve only the table above plus ``stand_ins`` (dotted name -> object)."""
    module = types.ModuleType("pbt_restricted_pickle")
    unpickler = type("Unpickler", (_RestrictedUnpickler,), {"allowed": _allowed_globals(stand_ins)})

    def load(file: Any, **kwargs: Any) -> Any:
        return unpickler(file, **kwargs).load()

    def loads(data: bytes, **kwargs: Any) -> Any:
        return load(io.BytesIO(data), **kwargs)

    module.Unpickler = unpickler  # type: ignore[attr-defined]  # a module object built here, filled in at run time
    module.load = load  # type: ignore[attr-defined]  # a module object built here, filled in at run time
    module.loads = loads  # type: ignore[attr-defined]  # a module object built here, filled in at run time
    module.UnpicklingError = pickle.UnpicklingError  # type: ignore[attr-defined]  # a module object built here, filled in at run time
    return module


def restricted_torch_load(data: bytes, stand_ins: Dict[str, Any]) -> Any:
    """``torch.load`` of a torch zip checkpoint onto the CPU through the restricted unpickler.

    A legacy (non-zip) file or a TorchScript archive is refused with ``pickle.UnpicklingError``
    before torch reads it: with ``weights_only=False`` torch would hand the latter to ``torch.jit.load``.
    """
    import torch

    buffer = io.BytesIO(data)
    if not torch.serialization._is_zipfile(buffer):
        raise pickle.UnpicklingError("not a torch zip checkpoint (legacy torch.save format or other data)")
    buffer.seek(0)
    with torch.serialization._open_zipfile_reader(buffer) as archive:
        if torch.serialization._is_torchscript_zip(archive):
            raise pickle.UnpicklingError("a TorchScript archive, not a checkpoint")
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", pickle_module=restricted_pickle_module(stand_ins), weights_only=False)
