"""Start-up of a real member (the observer's prepare, before any env is built) with a scheme that
mutates Reacher's task.env.actionCost: refused while ranking by the shaped return, accepted otherwise."""
import logging
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import REPO

pytest.importorskip("torch")  # the observer and the Reacher task it prepares
pytest.importorskip("hydra")

from pbt.errors import PbtError

SCHEME = ["task=Reacher", "pbt=pbt_default", "pbt/mutation=reacher_shaping", "pbt.num_policies=2",
          "sim_device=cpu", "rl_device=cpu"]


def prepare(overrides: List[str], tmp_path: Path) -> Dict[str, Any]:
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers
    from pbt.rl_games.observer import WorkerObserver
    from pbt.rl_games.runner import prepare_config
    from pbt.tasks.registry import rewrite_task_overrides

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=rewrite_task_overrides(
            [*overrides, f"pbt.workspace={tmp_path / 'ws'}", f"train_dir={tmp_path / 'runs'}", "experiment=guard"]))
    observer = WorkerObserver(prepare_config(cfg))
    try:
        return observer.prepare()
    finally:
        if observer.member is not None:
            observer.member.close()


def test_the_reacher_action_cost_scheme_is_refused_under_episode_return(tmp_path: Path) -> None:
    with pytest.raises(PbtError, match="reward-shaping key.s. task.env.actionCost of task Reacher") as info:
        prepare([*SCHEME, "pbt.objective=episode_return"], tmp_path)
    assert "pbt.allow_reward_shaping_mutation=true" in str(info.value)
    assert not (tmp_path / "ws").exists()  # refused before the member touched the workspace


def test_it_starts_under_the_true_objective_or_with_the_risk_accepted(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    cfg = prepare(SCHEME, tmp_path / "true_objective")
    assert cfg["pbt"]["objective"] == "true_objective"
    with caplog.at_level(logging.WARNING, logger="pbt.mutation.shaping"):
        prepare([*SCHEME, "pbt.objective=episode_return", "pbt.allow_reward_shaping_mutation=true"], tmp_path / "risk")
    assert any("reward-shaping key(s) task.env.actionCost while pbt.objective=episode_return" in r.getMessage()
               for r in caplog.records)
