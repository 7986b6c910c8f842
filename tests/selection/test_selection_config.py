"""Choosing a strategy and a search space on the command line: ``pbt/selection=<name>`` (a Hydra
group choice, the documented way), ``pbt.selection=<name>`` (still works: every strategy's keys
are loaded), ``pbt/search_space=<name>``, and a clear error with a did-you-mean for a wrong name."""
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.groups import check_group_choices
from pbt.selection import STRATEGIES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def composed(overrides: List[str]) -> Dict[str, Any]:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name="config", overrides=["pbt=pbt_default", *overrides])
    return OmegaConf.to_container(cfg.pbt)  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_group_choice_selects_the_strategy_with_its_keys(name: str) -> None:
    cfg = PbtConfig.from_mapping(composed([f"pbt/selection={name}"]))
    assert cfg.selection == name and cfg.strategies[name] == STRATEGIES[name].config_class()


def test_the_default_is_threshold_and_the_flat_key_still_works() -> None:
    assert PbtConfig.from_mapping(composed([])).selection == "threshold"
    cfg = PbtConfig.from_mapping(composed(["pbt.selection=dexpbt", "pbt.replace_fraction_worst=0.25"]))
    assert cfg.selection == "dexpbt" and cfg.strategies["dexpbt"].replace_fraction_worst == 0.25
    # another strategy's keys stay overridable whichever strategy is chosen
    cfg = PbtConfig.from_mapping(composed(["pbt/selection=tournament", "pbt.quantile=0.5", "pbt.eval_loop=3"]))
    assert cfg.strategies["truncation"].quantile == 0.5 and cfg.strategies["tournament"].eval_loop == 3


def test_the_search_space_group() -> None:
    assert not PbtConfig.from_mapping(composed([])).explore.search_space
    space = PbtConfig.from_mapping(composed(["pbt/search_space=ppo_design_doc"])).explore.search_space
    assert "train.params.config.learning_rate" in space and "train.params.config.minibatch_size" in space


@pytest.mark.parametrize("override, hint", [("pbt/selection=tournement", "Did you mean 'tournament'?"),
                                            ("+pbt/search_space=ppo_desing_doc", "Did you mean 'ppo_design_doc'?"),
                                            ("pbt/mutation=defualt", "Did you mean 'default'?")])
def test_a_wrong_group_option_names_the_nearest(override: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_group_choices(["task=Pendulum", override], CONFIGS)
    assert hint in str(info.value) and "Options:" in str(info.value)
    check_group_choices(["pbt/selection=truncation", "pbt/search_space=null", "pbt.selection=anything"], CONFIGS)
