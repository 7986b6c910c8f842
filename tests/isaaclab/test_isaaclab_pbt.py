"""Isaac Lab's PBT spelling (``agent.pbt.*`` and the agent YAML's ``pbt:`` block) mapped onto ours.
Pure: runs without Isaac Lab; the mapped overrides are composed by Hydra for real."""
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, worker_env
from pbt.errors import ConfigError
from pbt.tasks.isaaclab_pbt import pbt_overrides, split_agent_pbt

#: The pbt block of Isaac Lab 3.0's shadow-hand reorient agent YAML (rl_games_ppo_cfg.yaml).
SHADOW_HAND = {
    "enabled": False, "policy_idx": 0, "num_policies": 8, "directory": ".", "workspace": "pbt_workspace",
    "objective": "episode.consecutive_successes", "interval_steps": 50000000, "threshold_std": 0.1,
    "threshold_abs": 0.025, "mutation_rate": 0.25, "change_range": [1.1, 2.0],
    "mutation": {"agent.params.config.learning_rate": "mutate_float", "agent.params.config.gamma": "mutate_discount"},
}


def test_disabled_block_maps_to_nothing() -> None:
    assert pbt_overrides(SHADOW_HAND, {}) == []


@pytest.mark.training
def test_command_line_enables_and_overrides_the_block() -> None:
    cli, rest = split_agent_pbt(["num_envs=8", "agent.pbt.enabled=true", "agent.pbt.policy_idx=3",
                                 "agent.pbt.directory=/runs", "agent.pbt.change_range=[1.2,1.8]"])
    assert rest == ["num_envs=8"]
    out = pbt_overrides(SHADOW_HAND, cli)
    for expected in ("pbt=pbt_default", "pbt.selection=threshold", "pbt.threshold_abs_relative=false",
                     "pbt.initial_mutation=false",
                     "pbt.policy_idx=3", "pbt.num_policies=8", "pbt.objective=episode.consecutive_successes",
                     "pbt.interval_steps=50000000", "pbt.threshold_std=0.1", "pbt.threshold_abs=0.025",
                     "pbt.mutation_rate=0.25", "pbt.workspace=/runs/pbt_workspace", "pbt.change_min=1.2",
                     "pbt.change_max=1.8"):
        assert expected in out, (expected, out)
    # Compose it with Hydra: the mutation scheme is exactly Isaac Lab's, with train. for agent.
    proc = subprocess.run([sys.executable, "-m", "pbt.train", *out, "--cfg", "job"], cwd=str(REPO),
                          env=worker_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["pbt"]["mutation"] == {"train.params.config.learning_rate": "mutate_float",
                                      "train.params.config.gamma": "mutate_discount"}
    assert cfg["pbt"]["enabled"] is True and cfg["pbt"]["selection"] == "threshold"
    assert (cfg["pbt"]["policy_idx"], cfg["pbt"]["threshold_abs"], cfg["pbt"]["change_max"]) == (3, 0.025, 1.8)


def test_unknown_setting_says_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="agent.pbt.treshold_std.*threshold_std"):
        pbt_overrides({}, {"treshold_std": "0.2"})
