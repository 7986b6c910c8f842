"""A multi-process PBT member (``multi_gpu=True`` under torchrun) is refused on every rank before
anything is built when it cannot be kept in step: PPO (only rank 0 runs PBT, so rl_games' collectives
pair across ranks doing different things), or TRPO with anything that rebuilds or restarts a member
(a mutated or searched key that is not in place, network mutation, exec restarts)."""
from typing import Any, Dict

import pytest

from conftest import REPO

pytest.importorskip("torch")

from pbt.errors import ConfigError  # noqa: E402
from pbt.rl_games.observer import _follower_rank  # noqa: E402

MULTI = ["train.params.config.multi_gpu=True", "pbt=pbt_default", "pbt.num_policies=2", "sim_device=cpu",
         "rl_device=cpu"]
TRPO = ["train=PendulumTRPO", "pbt/mutation=trpo"]


def compose(overrides: list) -> Dict[str, Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.resolvers import register_resolvers
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=rewrite_task_overrides(["task=Pendulum", *MULTI, *overrides]))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def network_mutation() -> Dict[str, Any]:
    from pbt.config import hydra_nodes

    return dict(hydra_nodes()["network_mutation"])  # what pbt/mutation=agilerl composes


@pytest.mark.parametrize("algo", ["a2c_continuous", "a2c_discrete"])
def test_ppo_with_multi_gpu_is_refused_under_pbt(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose([])
    cfg["train"]["params"]["algo"]["name"] = algo
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(ConfigError, match=f"{algo} does not.*multi_gpu=False"):
            _follower_rank(cfg)


@pytest.mark.parametrize("rebuild", ["search space", "network mutation", "restart_mode", "curriculum"])
def test_trpo_with_multi_gpu_is_refused_when_a_member_could_be_rebuilt(rebuild: str) -> None:
    cfg = compose(TRPO)
    assert _follower_rank(cfg) is False  # rank 0, in-place keys only: accepted
    if rebuild == "search space":
        cfg["pbt"]["search_space"] = {"train.params.config.horizon_length": {"type": "choice", "values": [16, 32]}}
        match = "train.params.config.horizon_length would rebuild or restart it"
    elif rebuild == "curriculum":
        cfg["pbt"]["curriculum"] = [{"task": {"task.env.maxTorque": 1.0}, "frames": 10}, {"task": {}}]
        match = "pbt.curriculum"
    elif rebuild == "network mutation":
        cfg["pbt"]["network_mutation"] = network_mutation()
        match = "pbt.network_mutation"
    else:
        cfg["pbt"]["restart_mode"] = "exec"
        match = "pbt.restart_mode=exec"
    with pytest.raises(ConfigError, match=match):
        _follower_rank(cfg)


def test_a_trpo_follower_rank_is_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert _follower_rank(compose(TRPO)) is True


def test_a_curriculum_without_pbt_is_refused() -> None:
    from pbt.rl_games.observer import WorkerObserver

    cfg = compose([])
    cfg["pbt"]["enabled"] = False
    cfg["pbt"]["curriculum"] = [{"task": {"task.env.maxTorque": 1.0}, "frames": 10}, {"task": {}}]
    with pytest.raises(ConfigError, match="PBT is off.*pbt=pbt_default"):
        WorkerObserver(cfg).prepare()
