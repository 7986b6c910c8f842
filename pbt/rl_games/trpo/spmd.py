"""Data-parallel (SPMD) TRPO across processes started by ``torchrun``: ``multi_gpu: True``.

rl_games starts NCCL only, and pins a CUDA device in ``train``; this module starts the process group
itself (NCCL on CUDA, gloo on CPU, so the same code is tested with 2 CPU processes), then hands the
ranks to the agent. Every rank rolls out its own envs; the update averages what the ranks compute
(the surrogate's gradient, each Fisher-vector product, the line search's surrogate and KL, the value
gradients, the normalisers' statistics), so every rank takes the same step and the parameters stay
identical. Single-process agents skip all of it (every helper is a no-op for them). Every tensor sent
by a collective lives on the agent's device (NCCL sends CUDA tensors only); objects (rank 0's agent)
are pickled from CPU copies.
"""

import collections
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
import torch.distributed as dist

from pbt.devices import rank_device
from pbt.errors import PbtError

log = logging.getLogger(__name__)


@dataclass
class Distributed:
    """This process's place in the group."""

    rank: int
    local_rank: int
    world_size: int


def start(config: Dict[str, Any]) -> Optional[Distributed]:
    """With ``config['multi_gpu']``: join the process group ``torchrun`` set up (its RANK, LOCAL_RANK and
    WORLD_SIZE), pick this rank's device, and clear ``multi_gpu`` in ``config`` so rl_games' constructor
    does not start NCCL again (:func:`adopt` sets it on the agent). None for a single process."""
    if not config.get("multi_gpu", False):
        return None
    rank, local_rank = int(os.getenv("RANK", "0")), int(os.getenv("LOCAL_RANK", "0"))
    world = int(os.getenv("WORLD_SIZE", "1"))
    cuda = str(config.get("device", "cpu")).startswith("cuda")
    if cuda:
        config["device"] = config["device_name"] = rank_device(config["device"], local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    config["multi_gpu"] = False
    log.info("trpo: rank %d of %d (%s)", rank, world, dist.get_backend())
    return Distributed(rank, local_rank, world)


def leave() -> None:
    """End this rank's part in the process group after training (a no-op without one): wait for every
    rank, then destroy the group. A rank that exited with the group alive while a slower one was still
    tearing down saw its peer's sockets close under gloo's threads and aborted ("terminate called
    without an active exception", SIGABRT) on a loaded machine, failing a finished run."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def adopt(agent: Any, group: Distributed) -> None:
    """Give the constructed agent its ranks, as rl_games' own multi_gpu start would have."""
    agent.multi_gpu = True
    agent.config["multi_gpu"] = True
    agent.global_rank, agent.local_rank, agent.world_size = group.rank, group.local_rank, group.world_size
    if group.rank != 0:
        agent.print_stats = False
        agent.config["print_stats"] = False
        if agent.writer is not None:  # only rank 0 writes summaries
            agent.writer.close()
            agent.writer = None


def _active(agent: Any) -> bool:
    return bool(getattr(agent, "multi_gpu", False)) and dist.is_initialized() and int(agent.world_size) > 1


def averager(agent: Any) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """``v -> mean of v over the ranks`` for a distributed agent, else None."""
    if not _active(agent):
        return None
    world = int(agent.world_size)

    def average(vector: torch.Tensor) -> torch.Tensor:
        out = vector.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out / world

    return average


def mean_scalar(agent: Any, value: torch.Tensor) -> float:
    """``value`` (a 0-d tensor) averaged over the ranks, as a float."""
    average = averager(agent)
    tensor = value.detach().reshape(1).float()
    return float((average(tensor) if average is not None else tensor)[0])


def average_buffers(agent: Any, stats: Any) -> None:
    """Make a RunningMeanStd's statistics those of all ranks' data pooled (equal counts per rank):
    mean of means, and mean of (var + mean^2) - pooled mean^2."""
    average = averager(agent)
    if average is None:
        return
    with torch.no_grad():
        mean, var = stats.running_mean, stats.running_var
        pooled = average(mean)
        second = average(var + mean.pow(2))
        mean.copy_(pooled)
        var.copy_(torch.clamp(second - pooled.pow(2), min=0.0))


@contextlib.contextmanager
def cpu_device_guard(agent: Any) -> Iterator[None]:
    """rl_games' ``train`` calls ``torch.cuda.set_device(local_rank)`` under multi_gpu; on a CPU rank there
    is no CUDA device to pin, so that call is skipped for the duration of training."""
    if not (getattr(agent, "multi_gpu", False) and not str(agent.ppo_device).startswith("cuda")):
        yield
        return
    original = torch.cuda.set_device
    torch.cuda.set_device = lambda device: None
    try:
        yield
    finally:
        torch.cuda.set_device = original


@contextlib.contextmanager
def cpu_object_broadcasts(agent: Any) -> Iterator[None]:
    """rl_games' ``train`` starts by broadcasting rank 0's model state as a pickled object; a pickled CUDA
    tensor is unpickled onto rank 0's GPU number on every rank. For the duration of training, objects
    that rank 0 broadcasts are sent as CPU copies (:func:`cpu_copies`)."""
    if not _active(agent):
        yield
        return
    original = dist.broadcast_object_list

    def broadcast(objects: Any, src: int = 0, *args: Any, **kwargs: Any) -> Any:
        if dist.get_rank() == src:
            objects[:] = [cpu_copies(obj) for obj in objects]
        return original(objects, src, *args, **kwargs)

    dist.broadcast_object_list = broadcast  # type: ignore[assignment]  # a wrapper with the same call shape
    try:
        yield
    finally:
        dist.broadcast_object_list = original


#: Agent attributes a PBT decision may change in place (besides the weights): rank 0's reach every rank.
FOLLOWED = ("trpo", "gamma", "tau", "last_lr", "mini_epochs_num", "critic_coef", "grad_norm", "truncate_grads")


def follow_rank0(agent: Any) -> bool:
    """Before a rollout: when rank 0's agent changed since the last epoch (a PBT exploit or mutation
    carried out in place there: ``agent.generation`` moved), every rank loads rank 0's model, value
    optimizer, hyperparameters and reward scale. Only rank 0 runs PBT; this is how its decisions reach
    the other ranks. True when something was loaded."""
    if not _active(agent):
        return False
    generation = torch.tensor([float(getattr(agent, "generation", 0))], dtype=torch.float64, device=agent.ppo_device)
    dist.broadcast(generation, 0)
    # Always on the first epoch: rank 0's start-up (a PBT member's initial mutation or resume) is its own.
    first = not getattr(agent, "spmd_followed", False)
    agent.spmd_followed = True
    changed = torch.tensor(
        [1.0 if first or int(generation[0]) != int(getattr(agent, "generation", 0)) else 0.0], device=agent.ppo_device
    )
    dist.all_reduce(changed, op=dist.ReduceOp.MAX)
    if not float(changed[0]):
        return False
    payload: List[Any] = [None]
    if agent.global_rank == 0:
        # CPU copies: a pickled CUDA tensor would be unpickled onto rank 0's GPU on every rank.
        payload = [
            cpu_copies(
                {
                    "model": agent.model.state_dict(),
                    "optimizer": agent.optimizer.state_dict(),
                    "attrs": {name: getattr(agent, name) for name in FOLLOWED},
                    "reward_scale": agent.rewards_shaper.scale_value,
                    "generation": int(generation[0]),
                }
            )
        ]
    dist.broadcast_object_list(payload, 0)
    state = payload[0]
    if agent.global_rank != 0:
        agent.model.load_state_dict(state["model"])
        agent.optimizer.load_state_dict(state["optimizer"])
        for name, value in state["attrs"].items():
            setattr(agent, name, value)
        agent.rewards_shaper.scale_value = state["reward_scale"]
        for group in agent.optimizer.param_groups:
            group["lr"] = agent.last_lr
        agent.generation = state["generation"]
        log.info("trpo rank %d: took rank 0's agent (generation %d)", agent.global_rank, agent.generation)
    return True


def cpu_copies(value: Any) -> Any:
    """``value`` with every tensor (in dicts, lists, tuples) replaced by a detached CPU copy."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        out = {k: cpu_copies(v) for k, v in value.items()}
        return collections.OrderedDict(out) if isinstance(value, collections.OrderedDict) else out
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(cpu_copies(v) for v in value)
    return value


def rank0_value(agent: Any, value: float) -> float:
    """Rank 0's ``value`` on every rank (rl_games counts frames on rank 0 only, so a frame-based
    schedule is computed there)."""
    if not _active(agent):
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=agent.ppo_device)
    dist.broadcast(tensor, 0)
    return float(tensor[0])


def checksum(agent: Any) -> float:
    """A float64 fingerprint of the model's state (weights and normaliser buffers)."""
    total = torch.zeros((), dtype=torch.float64)
    for index, tensor in enumerate(agent.model.state_dict().values()):
        if tensor.is_floating_point():
            weights = torch.arange(1, tensor.numel() + 1, dtype=torch.float64, device=tensor.device)
            total += float((tensor.detach().double().reshape(-1) * weights).sum()) * (index + 1)
    return float(total)


def verify_in_step(agent: Any, data: float) -> None:
    """After an update: every rank holds the same model state, else PbtError (a rank took another step,
    e.g. its library version differs). Logs the checksum each rank agrees on, and ``data`` (a sum of
    this rank's own rollout, which differs between ranks)."""
    if not _active(agent):
        return
    mine = torch.tensor([checksum(agent)], dtype=torch.float64, device=agent.ppo_device)
    low, high = mine.clone(), mine.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    if float(low) != float(high):
        raise PbtError(
            f"trpo: the ranks' models differ after epoch {agent.epoch_num} (checksums {float(low)!r} .. "
            f"{float(high)!r}): every rank must run the same code, config and library versions."
        )
    log.info(
        "trpo rank %d epoch %d: model in step across %d ranks (checksum %r, own data %r)",
        agent.global_rank,
        agent.epoch_num,
        agent.world_size,
        float(mine[0]),
        data,
    )
