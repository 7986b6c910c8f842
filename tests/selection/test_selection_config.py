"""Choosing a strategy and a search space on the command line: ``pbt/selection=<name>`` (a Hydra
group choice, the documented way; ``pbt.selection=<name>`` is rewritten to it), ``pbt/search_space=<name>``,
a clear error with a did-you-mean for a wrong name, and a clear error for a key that the chosen
strategy (or mutation scheme) would ignore, naming where it belongs."""
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.groups import check_group_choices
from pbt.selection import STRATEGIES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BUILT_IN = {"pbt/selection": sorted(STRATEGIES)}


def composed(overrides: List[str]) -> Dict[str, Any]:
    """The ``pbt`` mapping as ``pbt.train`` composes it (overrides checked and rewritten first)."""
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.overrides import prepare

    argv = prepare(["pbt=pbt_default", *overrides])
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name="config", overrides=argv)
    return OmegaConf.to_container(cfg.pbt)  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_group_choice_selects_the_strategy_with_its_keys(name: str) -> None:
    mapping = composed([f"pbt/selection={name}"])
    cfg = PbtConfig.from_mapping(mapping)
    assert cfg.selection == name and cfg.strategies[name] == STRATEGIES[name].config_class()
    others = {key for other, s in STRATEGIES.items() if other != name for key in s.config_class.keys()}
    assert not others & set(mapping)  # only the chosen strategy's keys are composed


def test_the_default_is_threshold_and_the_flat_key_chooses_the_group() -> None:
    assert PbtConfig.from_mapping(composed([])).selection == "threshold"
    cfg = PbtConfig.from_mapping(composed(["pbt.selection=dexpbt", "pbt.replace_fraction_worst=0.25"]))
    assert cfg.selection == "dexpbt" and cfg.strategies["dexpbt"].replace_fraction_worst == 0.25
    cfg = PbtConfig.from_mapping(composed(["pbt/selection=tournament", "pbt.eval_loop=3"]))
    assert cfg.strategies["tournament"].eval_loop == 3


MISPLACED = [
    # (overrides, what the error must say)
    (["pbt.replace_fraction_worst=0.3", "pbt.replace_fraction_best=0.3"],
     "pbt.replace_fraction_worst is a setting of pbt/selection=dexpbt; the selection is threshold: add "
     "pbt/selection=dexpbt or remove the key."),
    (["pbt/selection=dexpbt", "pbt.threshold_std=0.2"],
     "pbt.threshold_std is a setting of pbt/selection=threshold; the selection is dexpbt"),
    (["pbt/selection=tournament", "pbt.quantile=0.5"],
     "pbt.quantile is a setting of pbt/selection=truncation; the selection is tournament"),
    (["pbt.tournament_size=3"], "pbt.tournament_size is a setting of pbt/selection=tournament"),
    (["+pbt.elitism=false"], "pbt.elitism is a setting of pbt/selection=tournament"),
    (["pbt.dbg_mode=true"], "pbt.dbg_mode is a setting of pbt/selection=dexpbt; the selection is threshold"),
    (["pbt.network_mutation.architecture=0.5"],
     "pbt.network_mutation.architecture is a setting of network mutation (pbt/mutation=agilerl)"),
]


@pytest.mark.parametrize("overrides, message", MISPLACED)
def test_a_key_the_choice_would_ignore_fails_naming_where_it_belongs(overrides: List[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        composed(overrides)
    assert message in str(info.value)


def test_a_misplaced_key_that_reaches_the_config_fails_there_too() -> None:
    """Keys that bypass the command-line check (a user's own YAML) are refused by PbtConfig itself."""
    mapping = dict(composed([]), replace_fraction_worst=0.3)
    with pytest.raises(ConfigError, match="pbt.replace_fraction_worst is a setting of pbt/selection=dexpbt"):
        PbtConfig.from_mapping(mapping)
    assert PbtConfig.from_mapping(dict(composed(["pbt/selection=dexpbt"]), dbg_mode=True)).gates.dbg_mode
    PbtConfig.from_mapping(dict(composed([]), dbg_mode=False))  # its default is no misplacement


def test_a_preset_under_another_selection_names_every_removal_at_once() -> None:
    """``pbt=evaluated_lockstep`` sets three threshold keys; under another strategy one error names
    all three, and the removals it names make the config valid."""
    mapping = composed(["pbt=evaluated_lockstep", "pbt/selection=dexpbt"])
    with pytest.raises(ConfigError) as info:
        PbtConfig.from_mapping(mapping)
    message = str(info.value)
    assert "pbt.leader_choice is a setting of pbt/selection=threshold; the selection is dexpbt" in message
    removals = message.rsplit(": ", 1)[1].split()
    assert sorted(removals) == ["~pbt.leader_choice", "~pbt.threshold_abs", "~pbt.threshold_std"]
    cfg = PbtConfig.from_mapping(composed(["pbt=evaluated_lockstep", "pbt/selection=dexpbt", *removals]))
    assert cfg.selection == "dexpbt" and cfg.synchronous and cfg.eval_episodes == 1024


def test_the_keys_each_choice_brings_are_accepted() -> None:
    cfg = PbtConfig.from_mapping(composed(["pbt/selection=dexpbt", "pbt.dbg_mode=true", "pbt.replace_fraction_best=0.5"]))
    assert cfg.gates.dbg_mode and cfg.strategies["dexpbt"].replace_fraction_best == 0.5
    mapping = composed(["pbt/mutation=agilerl", "pbt.network_mutation.max_units=128"])
    assert PbtConfig.from_mapping(mapping).explore.network_mutation.max_units == 128  # type: ignore[union-attr]


def test_the_search_space_group() -> None:
    assert not PbtConfig.from_mapping(composed([])).explore.search_space
    space = PbtConfig.from_mapping(composed(["pbt/search_space=ppo_design_doc"])).explore.search_space
    assert "train.params.config.learning_rate" in space and "train.params.config.minibatch_size" in space


@pytest.mark.parametrize("override, hint", [("pbt/selection=tournement", "Did you mean 'tournament'?"),
                                            ("+pbt/search_space=ppo_desing_doc", "Did you mean 'ppo_design_doc'?"),
                                            ("pbt/mutation=defualt", "Did you mean 'default'?")])
def test_a_wrong_group_option_names_the_nearest(override: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_group_choices(["task=Pendulum", override], CONFIGS, registered=BUILT_IN)
    assert hint in str(info.value) and "Options:" in str(info.value)
    check_group_choices(["pbt/selection=truncation", "pbt/search_space=null", "pbt.selection=anything"], CONFIGS,
                        registered=BUILT_IN)
