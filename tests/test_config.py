"""Tests of pbt.config: PbtConfig defaults, validation, dotted-key helpers and the YAML group files."""
import shutil
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from pbt.config import (
    DEFAULT_MUTATION,
    PbtConfig,
    field_names,
    flatten,
    get_by_key,
    has_key,
    set_by_key,
)
from pbt.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_defaults_are_dexpbt_upstream() -> None:
    cfg = PbtConfig()
    assert cfg.enabled is False
    assert (cfg.policy_idx, cfg.num_policies, cfg.workspace) == (0, 8, "pbt_workspace")
    assert (cfg.interval_steps, cfg.start_after, cfg.initial_delay) == (10**7, 10**7, 2 * 10**7)
    assert (cfg.replace_fraction_worst, cfg.replace_fraction_best) == (0.125, 0.3)
    assert (cfg.replace_threshold_frac_std, cfg.replace_threshold_frac_absolute) == (0.5, 0.05)
    assert (cfg.mutation_rate, cfg.change_min, cfg.change_max) == (0.15, 1.1, 1.5)
    assert cfg.dbg_mode is False and cfg.restarted is False and cfg.seed is None
    assert (cfg.objective, cfg.selection) == ("true_objective", "dexpbt")
    assert (cfg.threshold_std, cfg.threshold_abs) == (0.1, 0.025)
    assert cfg.mutation == DEFAULT_MUTATION
    assert cfg.mutation is not DEFAULT_MUTATION  # each config owns its scheme


def test_from_mapping_round_trip() -> None:
    cfg = PbtConfig(enabled=True, policy_idx=3, num_policies=4, seed=7, selection="threshold")
    assert PbtConfig.from_mapping(cfg.to_dict()) == cfg


def test_from_mapping_coerces_cli_numbers() -> None:
    # Hydra parses `pbt.interval_steps=1e6` as a float; PyYAML reads `1e7` as a string.
    cfg = PbtConfig.from_mapping({"interval_steps": 1e6, "start_after": "1e7", "change_max": 2, "seed": 3.0})
    assert cfg.interval_steps == 1_000_000 and isinstance(cfg.interval_steps, int)
    assert cfg.start_after == 10_000_000 and isinstance(cfg.start_after, int)
    assert cfg.change_max == 2.0 and isinstance(cfg.change_max, float)
    assert cfg.seed == 3 and isinstance(cfg.seed, int)


def test_unknown_key_names_it_with_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        PbtConfig.from_mapping({"interval_step": 100})
    message = str(info.value)
    assert "pbt.interval_step'" in message
    assert "Did you mean 'interval_steps'?" in message


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    with pytest.raises(ConfigError, match="Valid keys: enabled, policy_idx"):
        PbtConfig.from_mapping({"zzz": 1})


@pytest.mark.parametrize(
    "key, value",
    [
        ("enabled", "yes"),
        ("enabled", 1),
        ("num_policies", "eight"),
        ("num_policies", True),
        ("interval_steps", 1.5),
        ("interval_steps", float("inf")),
        ("mutation_rate", "high"),
        ("mutation_rate", None),
        ("workspace", 3),
        ("mutation", ["train.params.config.gamma"]),
        ("seed", "abc"),
    ],
)
def test_wrong_type_raises(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"pbt.{key} must be"):
        PbtConfig.from_mapping({key: value})


@pytest.mark.parametrize(
    "key, value",
    [
        ("replace_fraction_worst", 0.0),
        ("replace_fraction_worst", 1.01),
        ("replace_fraction_best", -0.3),
        ("mutation_rate", 1.2),
        ("mutation_rate", -0.1),
        ("change_min", 0.9),
        ("interval_steps", 0),
        ("start_after", -1),
        ("initial_delay", -5),
        ("replace_threshold_frac_std", -0.5),
        ("threshold_abs", float("nan")),
        ("num_policies", 0),
        ("workspace", ""),
    ],
)
def test_out_of_range_raises(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"pbt.{key}=.* is out of range"):
        PbtConfig.from_mapping({key: value})


def test_fraction_of_one_and_rate_bounds_are_allowed() -> None:
    cfg = PbtConfig.from_mapping({"replace_fraction_best": 1.0, "mutation_rate": 0.0, "change_min": 1.0,
                                  "change_max": 1.0})
    assert cfg.replace_fraction_best == 1.0 and cfg.mutation_rate == 0.0


def test_change_max_below_change_min_raises() -> None:
    with pytest.raises(ConfigError, match=r"pbt.change_max=1.2 .*>= pbt.change_min \(1.3\)"):
        PbtConfig.from_mapping({"change_min": 1.3, "change_max": 1.2})


def test_unknown_selection_rule_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        PbtConfig.from_mapping({"selection": "dexbpt"})
    assert "Did you mean 'dexpbt'?" in str(info.value)
    assert "threshold" in str(info.value)


def test_unknown_mutation_function_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        PbtConfig.from_mapping({"mutation": {"train.params.config.gamma": "mutate_discont"}})
    message = str(info.value)
    assert "train.params.config.gamma" in message
    assert "Did you mean 'mutate_discount'?" in message
    assert "mutate_eps_clip" in message and "mutate_float_min_1" in message


def test_null_mutation_is_an_empty_scheme() -> None:
    assert PbtConfig.from_mapping({"mutation": None}).mutation == {}


def test_non_mapping_rejected() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        PbtConfig.from_mapping(["enabled"])  # type: ignore[arg-type]


def test_validate_population_needs_two_policies() -> None:
    with pytest.raises(ConfigError) as info:
        PbtConfig(enabled=True, num_policies=1).validate_population()
    message = str(info.value)
    assert "at least 2 policies" in message
    assert "pbt.num_policies=N>=2" in message and "pbt=no_pbt" in message


@pytest.mark.parametrize("idx", [-1, 4, 5])
def test_validate_population_policy_idx_range(idx: int) -> None:
    with pytest.raises(ConfigError, match=r"pbt.policy_idx=.* Valid range: 0\.\.3"):
        PbtConfig(enabled=True, num_policies=4, policy_idx=idx).validate_population()


def test_validate_population_accepts_valid() -> None:
    PbtConfig(enabled=True, num_policies=2, policy_idx=1).validate_population()


# -- dotted keys ----------------------------------------------------------------------------------

NESTED: Dict[str, Any] = {
    "train": {"params": {"config": {"gamma": 0.99, "mini_epochs": 4, "units": [64, 64], "empty": {}}}},
    "pbt": {"mutation": {"train.params.config.gamma": "mutate_discount"}},
    "seed": 1,
}


def test_flatten() -> None:
    assert flatten(NESTED) == {
        "train.params.config.gamma": 0.99,
        "train.params.config.mini_epochs": 4,
        "train.params.config.units": [64, 64],
        "train.params.config.empty": {},
        "pbt.mutation.train.params.config.gamma": "mutate_discount",
        "seed": 1,
    }
    assert flatten({"a": {"b": 1}}, prefix="root") == {"root.a.b": 1}


def test_get_by_key_handles_keys_with_dots() -> None:
    assert get_by_key(NESTED, "train.params.config.gamma") == 0.99
    assert get_by_key(NESTED, "pbt.mutation.train.params.config.gamma") == "mutate_discount"
    assert get_by_key(NESTED, "seed") == 1
    assert has_key(NESTED, "train.params") and not has_key(NESTED, "train.params.config.tau")


def test_get_by_key_missing_suggests_nearest() -> None:
    with pytest.raises(ConfigError) as info:
        get_by_key(NESTED, "train.params.config.gama")
    assert "Did you mean 'train.params.config.gamma'?" in str(info.value)


def test_set_by_key() -> None:
    cfg = {"train": {"params": {"config": {"gamma": 0.99}}}, "x": 1, "a.b": 2}
    set_by_key(cfg, "train.params.config.gamma", 0.9)
    set_by_key(cfg, "x", 5)
    set_by_key(cfg, "a.b", 3)
    assert cfg == {"train": {"params": {"config": {"gamma": 0.9}}}, "x": 5, "a.b": 3}
    with pytest.raises(ConfigError, match="does not exist"):
        set_by_key(cfg, "train.params.config.tau", 0.9)


# -- YAML group files -----------------------------------------------------------------------------


def _load(name: str) -> Dict[str, Any]:
    with open(CONFIGS / "pbt" / name) as f:
        data = yaml.safe_load(f)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name, enabled", [("pbt_default.yaml", True), ("no_pbt.yaml", False)])
def test_group_files_carry_every_key_with_defaults(name: str, enabled: bool) -> None:
    data = _load(name)
    assert data.pop("defaults") == [{"mutation": "default"}, "_self_"]
    assert sorted(data) == sorted(n for n in field_names() if n != "mutation")
    cfg = PbtConfig.from_mapping(dict(data, mutation=_load("mutation/default.yaml")))
    assert cfg == PbtConfig(enabled=enabled)


def test_default_mutation_scheme_file() -> None:
    path = CONFIGS / "pbt" / "mutation" / "default.yaml"
    assert path.read_text().splitlines()[0] == "# @package pbt.mutation"
    assert _load("mutation/default.yaml") == DEFAULT_MUTATION


def test_hydra_composition(tmp_path: Path) -> None:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    shutil.copytree(CONFIGS / "pbt", tmp_path / "pbt")
    (tmp_path / "config.yaml").write_text("defaults:\n  - pbt: pbt_default\n  - _self_\n")
    (tmp_path / "pbt" / "mutation" / "tiny.yaml").write_text(
        "# @package pbt.mutation\ntrain.params.config.gamma: mutate_discount\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        default = compose(config_name="config", overrides=["pbt.policy_idx=3", "pbt.interval_steps=1e6"])
        tiny = compose(config_name="config", overrides=["pbt/mutation=tiny", "pbt=no_pbt"])
    cfg = PbtConfig.from_mapping(OmegaConf.to_container(default.pbt, resolve=True))  # type: ignore[arg-type]
    assert cfg == PbtConfig(enabled=True, policy_idx=3, interval_steps=1_000_000)
    cfg = PbtConfig.from_mapping(OmegaConf.to_container(tiny.pbt, resolve=True))  # type: ignore[arg-type]
    assert cfg.enabled is False
    assert cfg.mutation == {"train.params.config.gamma": "mutate_discount"}


def test_default_scheme_matches_the_shipped_train_config() -> None:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pbt.mutation import current_params

    if not (CONFIGS / "config.yaml").exists():
        pytest.skip("no root config.yaml")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name="config", overrides=["pbt=pbt_default"])
    pbt_cfg = PbtConfig.from_mapping(OmegaConf.to_container(cfg.pbt, resolve=True))  # type: ignore[arg-type]
    params = current_params(OmegaConf.to_container(cfg, resolve=False), pbt_cfg.mutation)  # type: ignore[arg-type]
    assert sorted(params) == sorted(DEFAULT_MUTATION)
    assert isinstance(params["train.params.config.mini_epochs"], int)
