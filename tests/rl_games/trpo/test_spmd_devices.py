"""TRPO under torchrun on a GPU node, checked without GPUs: every rank's task and agent go to its own
GPU (``cuda:<LOCAL_RANK>``, Isaac Gym's Vulkan device the physical one behind a numeric mask), its envs
get their own seed (offset by ``RANK``), and rank 0's agent reaches the others as CPU copies (a pickled
CUDA tensor is unpickled onto rank 0's GPU on every rank). Devices are named, never used, so no CUDA is
needed; torch.distributed is replaced by a recorder for the broadcast. Rank 0, the only rank running PBT,
takes its actions (hyperparameters, a donor's weights, a restore) without a collective: checked with a
torch.distributed whose collectives fail."""
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

from pbt.devices import physical_gpu, rank_device  # noqa: E402
from pbt.rl_games.runner import prepare_config  # noqa: E402
from pbt.rl_games.trpo import spmd  # noqa: E402


def compose(overrides: List[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        return hydra_compose(config_name="config", overrides=rewrite_task_overrides(
            ["task=Pendulum", "train=PendulumTRPO", "seed=42", *overrides]))


@pytest.mark.parametrize("mask, graphics", [(None, 1), ("4,5", 5), ("GPU-1a2b,GPU-3c4d", 0), ("MIG-0f1e,MIG-2d3c", 0)])
@pytest.mark.parametrize("device", ["cuda:0", "cuda"])
def test_each_rank_builds_on_its_own_gpu_with_its_own_seed(monkeypatch: pytest.MonkeyPatch, mask: Optional[str],
                                                           graphics: int, device: str) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")  # the second GPU of the second node of two
    if mask is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    plain = prepare_config(compose(["train.params.config.multi_gpu=True", f"sim_device={device}",
                                    f"rl_device={device}"]))
    assert (plain["sim_device"], plain["rl_device"]) == ("cuda:1", "cuda:1")
    assert plain["train"]["params"]["config"]["device"] == "cuda:1"
    assert plain["graphics_device_id"] == graphics  # UUID/MIG masks: left as configured (0)
    assert plain["task"]["seed"] == 45


def test_a_single_process_run_keeps_its_device_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")
    plain = prepare_config(compose(["sim_device=cuda:0", "rl_device=cuda:0"]))
    assert (plain["sim_device"], plain["task"]["seed"], plain["graphics_device_id"]) == ("cuda:0", 42, 0)


def test_rank_device_and_physical_gpu() -> None:
    assert rank_device("cpu", 3) == "cpu" and rank_device("cuda:0", 3) == "cuda:3"
    assert physical_gpu(1, None) == 1 and physical_gpu(1, "2, 7") == 7 and physical_gpu(2, "2,7") is None
    assert physical_gpu(0, "GPU-8c3e") is None and physical_gpu(0, "MIG-GPU-8c3e/1/0") is None


class Recorder:
    """torch.distributed for rank 0 of 2: collectives return at once; broadcast_object_list records."""

    def __init__(self) -> None:
        self.sent: List[Any] = []

    def is_initialized(self) -> bool:
        return True

    def broadcast(self, tensor: Any, src: int) -> None:
        pass

    def all_reduce(self, tensor: Any, op: Any = None) -> None:
        pass

    def broadcast_object_list(self, objects: List[Any], src: int) -> None:
        self.sent.append(objects[0])

    ReduceOp = torch.distributed.ReduceOp


def tensors(value: Any) -> List[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def test_rank_0_sends_its_agent_as_cpu_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(spmd, "dist", recorder)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    attrs: Dict[str, Any] = {name: 0.5 for name in spmd.FOLLOWED}
    agent = SimpleNamespace(multi_gpu=True, world_size=2, global_rank=0, generation=1, ppo_device="cpu", model=model,
                            optimizer=optimizer, rewards_shaper=SimpleNamespace(scale_value=0.1), **attrs)
    assert spmd.follow_rank0(agent)
    sent = recorder.sent[0]
    live = {t.data_ptr() for t in [*model.state_dict().values(), *tensors(optimizer.state_dict())]}
    assert tensors(sent["model"]) and tensors(sent["optimizer"])
    for tensor in tensors(sent):
        assert tensor.device.type == "cpu" and not tensor.requires_grad
        assert tensor.data_ptr() not in live  # a copy (on a GPU, the one .to("cpu") makes), never the live tensor


def test_rl_games_start_of_training_broadcast_is_sent_as_cpu_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """rl_games' ``train`` broadcasts ``[model.state_dict()]`` through ``torch.distributed`` itself."""
    from rl_games.common import a2c_common

    assert a2c_common.dist is torch.distributed  # the module whose function the guard replaces
    recorder = Recorder()
    recorder.get_rank = lambda: 0  # type: ignore[attr-defined]
    monkeypatch.setattr(spmd, "dist", recorder)
    model = torch.nn.Linear(3, 2)
    agent = SimpleNamespace(multi_gpu=True, world_size=2)
    with spmd.cpu_object_broadcasts(agent):
        spmd.dist.broadcast_object_list([model.state_dict()], 0)  # what rl_games' train() does
    assert recorder.broadcast_object_list.__func__ is Recorder.broadcast_object_list  # put back
    live = {t.data_ptr() for t in model.state_dict().values()}
    sent = tensors(recorder.sent[0])
    assert sent and all(t.device.type == "cpu" and t.data_ptr() not in live for t in sent)


class Lonely:
    """torch.distributed for rank 0 of 2 whose rank 1 is elsewhere (training, or waiting in its own
    collective): a collective run by rank 0 alone would hang there (or pair with another one), so here
    each raises, and is recorded in case something catches it."""

    ReduceOp = torch.distributed.ReduceOp

    def __init__(self) -> None:
        self.alone: List[str] = []

    def is_initialized(self) -> bool:
        return True

    def get_backend(self) -> str:
        return "gloo"

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def _alone(self, name: str) -> None:
        self.alone.append(name)
        raise AssertionError(f"rank 0 ran torch.distributed.{name} alone")

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        self._alone("broadcast")

    def all_reduce(self, *args: Any, **kwargs: Any) -> None:
        self._alone("all_reduce")

    def broadcast_object_list(self, *args: Any, **kwargs: Any) -> None:
        self._alone("broadcast_object_list")

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        self._alone("barrier")


def test_rank_0_takes_pbt_actions_alone_without_a_collective(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Only rank 0 runs PBT: changing hyperparameters, loading a donor's weights and restoring a
    checkpoint must not run a collective there (rl_games' ``update_lr`` broadcasts), else rank 0 hangs
    until the NCCL timeout. The other ranks take the change at the next rollout (``follow_rank0``)."""
    import copy

    from rl_games.common import a2c_common

    from pbt.rl_games import make_adapter
    from pbt.rl_games.agent import CONFIG
    from pbt.rl_games.runner import build_runner, create_agent
    from pbt.storage.checkpoints import model_fingerprint

    lonely = Lonely()
    monkeypatch.setattr(spmd, "dist", lonely)
    monkeypatch.setattr(a2c_common, "dist", lonely)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = compose(["train.params.config.multi_gpu=True", "sim_device=cpu", "rl_device=cpu", "num_envs=8",
                   "torch_threads=1", "train.params.config.horizon_length=16", "train.params.network.mlp.units=[16,16]",
                   f"train_dir={tmp_path / 'runs'}", "experiment=rank0"])
    runner = build_runner(cfg)
    algo = create_agent(runner, "rank0")
    assert (algo.multi_gpu, algo.world_size, algo.global_rank) == (True, 2, 0)
    assert spmd._active(algo)  # the collectives would run for this agent
    adapter = make_adapter(algo, runner.algo_name)
    own = copy.deepcopy(adapter.full_state())

    adapter.set_hyperparameters({CONFIG + "value_learning_rate": 1e-3, CONFIG + "max_kl_divergence": 0.005,
                                 CONFIG + "gamma": 0.97})
    assert algo.last_lr == 1e-3 and algo.optimizer.param_groups[0]["lr"] == 1e-3
    assert algo.trpo.max_kl_divergence == 0.005 and algo.gamma == 0.97

    donor = copy.deepcopy(own)
    donor["model"] = {k: v + 0.5 if v.is_floating_point() else v for k, v in donor["model"].items()}
    adapter.load_weights(donor)
    assert adapter.fingerprint() == model_fingerprint(donor["model"]) != model_fingerprint(own["model"])
    assert algo.optimizer.param_groups[0]["lr"] == 1e-3  # the member's own lr, not the donor's

    adapter.restore(own, {"value_learning_rate": 2e-4})
    assert adapter.fingerprint() == model_fingerprint(own["model"])
    assert algo.last_lr == 2e-4 and algo.optimizer.param_groups[0]["lr"] == 2e-4
    assert algo.generation == 3  # each action is sent to the other ranks before the next rollout
    assert lonely.alone == []
