"""Device and thread defaults for a worker."""

import os
from typing import Mapping, Optional


def resolve_device(value: str) -> str:
    """``auto`` -> ``cuda:0`` when CUDA is available, else ``cpu``; anything else unchanged."""
    if str(value).lower() != "auto":
        return str(value)
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def global_rank() -> int:
    """This process's rank in a multi-process (torchrun) run: ``RANK``, 0 when unset or empty."""
    return int(os.environ.get("RANK", "0") or 0)


def rank_device(device: str, local_rank: int) -> str:
    """A multi-process (torchrun) member's device on this rank: every rank is started with the same
    arguments, so any CUDA device (``auto`` resolved, ``cuda``, ``cuda:0``) becomes the rank's own
    GPU ``cuda:<LOCAL_RANK>`` (as rl_games pins it: every rank must see all the node's GPUs, torchrun's
    default); a CPU device stays."""
    return f"cuda:{int(local_rank)}" if str(device).startswith("cuda") else str(device)


def physical_gpu(index: int, visible: Optional[str]) -> Optional[int]:
    """The physical number of the ``index``-th GPU CUDA shows under the mask ``visible``
    (``CUDA_VISIBLE_DEVICES``; None: no mask), for what ignores the mask (Isaac Gym's Vulkan
    ``graphics_device_id``). None when the mask names GPUs by UUID or MIG instance, or is shorter."""
    if visible is None:
        return int(index)
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    if index < len(entries) and entries[index].isdigit():
        return int(entries[index])
    return None


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: Slurm and taskset restrict it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_torch_threads(
    requested: int, workers_sharing_machine: int = 1, env: Optional[Mapping[str, str]] = None
) -> int:
    """Threads for torch's intra-op pool.

    ``requested`` > 0 wins. Otherwise OMP_NUM_THREADS if set, else the available cores divided among
    the workers sharing this machine, capped at 4 (measured: more threads than cores per worker makes
    every worker crawl; one thread per worker is near the best on small MLPs, so half the cores are
    left for env stepping and the other processes).
    """
    if requested > 0:
        return int(requested)
    omp = (os.environ if env is None else env).get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return max(1, min(4, available_cores() // (2 * max(1, workers_sharing_machine))))
