"""GPUs of the processes backend: which GPUs this launcher was given, how members are spread over them,
and which GPUs members of the same run started by another launcher hold (``--add``).

- The GPUs are those of an inherited ``CUDA_VISIBLE_DEVICES`` mask (indices, ``GPU-<uuid>``,
  ``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<gi>/<ci>`` entries, as Slurm, Kubernetes or a user set it), in
  its order, or ``0 .. num_gpus-1`` without a mask. A member gets one entry as its own mask, never a
  bare index into the launcher's (index 1 under ``4,5`` would be physical GPU 1).
- Members go to the least-loaded GPU (ties: first in the list), at most ``experiments_per_gpu`` each;
  with ``-1`` and more than one GPU they are spread without a limit (all of them on the first GPU was
  the old behaviour); with ``-1`` and one GPU (or none) the variable is left alone.
- Each running member's GPU is claimed in ``<experiment_dir>/gpus/<member>`` (host, pid and start
  time of the member, and the entry); a launcher counts the live claims of the experiments it runs
  members of before it places its own, so ``--add`` does not pile new members onto a GPU already
  full. Claims of dead processes or other hosts are ignored.
- Isaac Gym renders through Vulkan, which ignores the mask: a member on a GPU given by index gets
  ``graphics_device_id=<that index>`` (unless its command sets it). A UUID or MIG entry has no index
  to give; those members keep the configured ``graphics_device_id``.

Standard library only (Python 3.8).
"""

import logging
import os
import socket
from typing import Dict, Iterable, List, Mapping, Optional

from pbt.errors import ConfigError
from pbt.procfs import is_alive, process_start_time
from pbt.storage.local import remove_quietly

log = logging.getLogger("launcher")

MASK = "CUDA_VISIBLE_DEVICES"
CLAIMS_DIR = "gpus"
GRAPHICS_KEY = "graphics_device_id"


def mask_entries(mask: str) -> List[str]:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value, in order (empty: no GPU)."""
    return [entry.strip() for entry in mask.split(",") if entry.strip()]


def visible_gpus(num_gpus: Optional[int], environ: Mapping[str, str]) -> List[str]:
    """The GPUs this launcher hands out: the inherited mask's entries (the first ``num_gpus`` of them
    when given), else ``0 .. num_gpus-1`` (one GPU when ``num_gpus`` is None)."""
    mask = environ.get(MASK)
    if mask is None:
        return [str(i) for i in range(1 if num_gpus is None else num_gpus)]
    entries = mask_entries(mask)
    if num_gpus is not None and num_gpus > len(entries):
        raise ConfigError(
            f"--num_gpus={num_gpus}, but this launcher was given {len(entries)} GPU(s) "
            f"({MASK}={mask!r}): members must stay on the GPUs the job was given. Leave --num_gpus out "
            "to use all of them, or give a number up to that."
        )
    return entries if num_gpus is None else entries[:num_gpus]


def graphics_device(entry: str) -> Optional[int]:
    """Vulkan's number of the GPU a member was given (its physical index), None for a UUID or MIG entry."""
    return int(entry) if entry.isdigit() else None


class GpuAllocator:
    """Hands out GPUs: least-loaded first, ties to the first in the list, at most ``per_gpu`` members
    each (``-1``: no limit, and no management at all with a single GPU). ``acquire`` returns an index
    into :attr:`devices`."""

    def __init__(
        self, num_gpus: int, per_gpu: int, devices: Optional[List[str]] = None, held: Optional[Mapping[str, int]] = None
    ) -> None:
        self.devices = list(devices) if devices is not None else [str(i) for i in range(num_gpus)]
        count = len(self.devices)
        self.managed = count > 0 and (per_gpu > 0 or count > 1)
        self.per_gpu = per_gpu if per_gpu > 0 else None
        self.load: List[int] = [int((held or {}).get(d, 0)) for d in self.devices] if self.managed else []

    @property
    def capacity(self) -> Optional[int]:
        """Members that can run at once (None: no limit)."""
        return None if not self.managed or self.per_gpu is None else self.per_gpu * len(self.devices)

    def has_capacity(self) -> bool:
        return not self.managed or self.per_gpu is None or min(self.load) < self.per_gpu

    def acquire(self) -> Optional[int]:
        """A GPU index for a new member (None when GPUs are not managed)."""
        if not self.managed:
            return None
        gpu = min(range(len(self.load)), key=lambda i: (self.load[i], i))
        if self.per_gpu is not None and self.load[gpu] >= self.per_gpu:
            raise RuntimeError("GpuAllocator.acquire() called without capacity")
        self.load[gpu] += 1
        return gpu

    def release(self, gpu: Optional[int]) -> None:
        if gpu is not None:
            self.load[gpu] -= 1


def member_argv(argv: List[str], entry: Optional[str]) -> List[str]:
    """``argv`` with ``graphics_device_id=<the member's physical GPU>`` added (see the module docstring)."""
    index = graphics_device(entry) if entry is not None else None
    if index is None or any(a.lstrip("+~").startswith(GRAPHICS_KEY + "=") for a in argv[1:]):
        return list(argv)
    return [*argv, f"{GRAPHICS_KEY}={index}"]


def _claim_path(experiment_dir: str, name: str) -> str:
    return os.path.join(experiment_dir, CLAIMS_DIR, name)


def claim(experiment_dir: str, name: str, pid: int, entry: str) -> None:
    """Record that member ``name`` (process ``pid``) runs on GPU ``entry`` (atomically replaced)."""
    path = _claim_path(experiment_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{socket.gethostname()} {pid} {process_start_time(pid) or ''}".rstrip() + f"\n{entry}\n")
    os.replace(tmp, path)


def unclaim(experiment_dir: str, name: str) -> None:
    remove_quietly(_claim_path(experiment_dir, name))


def held_gpus(experiment_dirs: Iterable[str]) -> Dict[str, int]:
    """Members per GPU entry that live processes on this host claim in ``experiment_dirs``."""
    host = socket.gethostname()
    held: Dict[str, int] = {}
    for directory in sorted(set(experiment_dirs)):
        claims = os.path.join(directory, CLAIMS_DIR)
        try:
            names = sorted(os.listdir(claims))
        except OSError:
            continue
        for name in names:
            if ".tmp" in name:
                continue
            try:
                with open(os.path.join(claims, name)) as f:
                    owner, entry = (f.read(4096).splitlines() + ["", ""])[:2]
            except (OSError, UnicodeDecodeError):
                continue
            parts = owner.split()
            if len(parts) < 2 or parts[0] != host or not parts[1].isdigit() or not entry.strip():
                continue
            if is_alive(int(parts[1]), parts[2] if len(parts) > 2 else None):
                held[entry.strip()] = held.get(entry.strip(), 0) + 1
    if held:
        log.info(
            "GPUs already held by running members of this run: %s",
            ", ".join(f"{entry} ({count})" for entry, count in sorted(held.items())),
        )
    return held
