"""Tests of pbt.config: PbtConfig defaults, sections, validation, dotted-key helpers (pbt.keys) and the
YAML group files."""
import dataclasses
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.config import (
    EVALUATION_NEEDS,
    LivenessConfig,
    PbtConfig,
    evaluation_free_settings,
    flat_keys,
    hydra_nodes,
    key_sections,
    section_classes,
    strategy_of,
)
from pbt.errors import ConfigError
from pbt.keys import flatten, get_by_key, has_key, set_by_key
from pbt.mutation import DEFAULT_MUTATION, ExploreConfig
from pbt.sections import Section, section_keys
from pbt.selection import STRATEGIES, DexPbtConfig, SelectionGates, ThresholdConfig

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_defaults_are_dexpbt_upstream_with_the_threshold_strategy() -> None:
    cfg = PbtConfig()
    dex, thr = cfg.strategies["dexpbt"], cfg.strategies["threshold"]
    assert cfg.enabled is False
    assert (cfg.policy_idx, cfg.num_policies, cfg.workspace) == (0, 8, "pbt_workspace")
    assert (cfg.interval_steps, cfg.gates.start_after, cfg.gates.initial_delay) == (10**7, 10**7, 2 * 10**7)
    assert (dex.replace_fraction_worst, dex.replace_fraction_best) == (0.125, 0.3)
    assert (dex.replace_threshold_frac_std, dex.replace_threshold_frac_absolute) == (0.5, 0.05)
    assert (cfg.explore.mutation_rate, cfg.explore.change_min, cfg.explore.change_max) == (0.15, 1.1, 1.5)
    assert cfg.gates.dbg_mode is False and cfg.seed is None
    assert (cfg.objective, cfg.selection) == ("true_objective", "threshold")  # docs/benchmarks/selection-strategies.md
    assert cfg.gates.equal_experience is True and not cfg.explore.search_space
    assert (thr.threshold_std, thr.threshold_abs) == (0.1, 0.025)
    assert cfg.explore.mutation == DEFAULT_MUTATION
    assert cfg.explore.mutation is not DEFAULT_MUTATION  # each config owns its scheme


def test_from_mapping_round_trip() -> None:
    cfg = PbtConfig(enabled=True, policy_idx=3, num_policies=4, seed=7, selection="threshold")
    assert PbtConfig.from_mapping(cfg.to_dict()) == cfg
    assert cfg.to_dict() is not cfg.to_dict() and cfg.to_dict()["mutation"] is not cfg.explore.mutation


def test_from_mapping_coerces_cli_numbers() -> None:
    # Hydra parses `pbt.interval_steps=1e6` as a float; PyYAML reads `1e7` as a string.
    cfg = PbtConfig.from_mapping({"interval_steps": 1e6, "start_after": "1e7", "change_max": 2, "seed": 3.0})
    assert cfg.interval_steps == 1_000_000 and isinstance(cfg.interval_steps, int)
    assert cfg.gates.start_after == 10_000_000 and isinstance(cfg.gates.start_after, int)
    assert cfg.explore.change_max == 2.0 and isinstance(cfg.explore.change_max, float)
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
        PbtConfig.from_mapping({key: value, "selection": strategy_of(key) or "threshold"})


def test_fraction_of_one_and_rate_bounds_are_allowed() -> None:
    cfg = PbtConfig.from_mapping({"replace_fraction_best": 1.0, "mutation_rate": 0.0, "change_min": 1.0,
                                  "change_max": 1.0, "selection": "dexpbt"})
    assert cfg.strategies["dexpbt"].replace_fraction_best == 1.0 and cfg.explore.mutation_rate == 0.0


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
    assert PbtConfig.from_mapping({"mutation": None}).explore.mutation == {}


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


# -- sections -------------------------------------------------------------------------------------

#: The flat keys of the pbt group before it was split into sections: users' configs keep working.
FLAT_KEYS = [
    "enabled", "policy_idx", "num_policies", "workspace", "interval_steps", "start_after", "initial_delay",
    "replace_fraction_worst", "replace_fraction_best", "replace_threshold_frac_std",
    "replace_threshold_frac_absolute", "mutation_rate", "change_min", "change_max", "dbg_mode", "objective",
    "selection", "threshold_std", "threshold_abs", "threshold_abs_relative", "leader_choice", "ready_after", "significance",
    "insignificant_lead",
    "min_mutations", "discount_change_min", "discount_change_max", "bounds", "mutation", "initial_mutation",
    "seed", "restart_mode", "heartbeat_interval", "heartbeat_timeout", "on_write_error",
    "overwrite", "resume", "network_mutation", "equal_experience", "search_space", "quantile",
    "resample_probability", "perturbation_factors", "tournament_size", "elitism", "eval_loop", "elastic_window", "join",
    "allow_reward_shaping_mutation",
    "pb2_quantile", "pb2_kappa", "pb2_max_data", "mfpbt_frequencies", "mfpbt_sizes",
    "max_lead", "synchronous", "max_donor_lag", "perturb_probability", "mutate_winners", "curriculum", "curriculum_mode", "wait_for_effect",
    "eval_episodes",
    "eval_window", "significance_for", "significance_samples",
]


def test_flat_keys_are_unchanged_and_each_in_one_section() -> None:
    assert sorted(flat_keys()) == sorted(FLAT_KEYS) and len(flat_keys()) == len(FLAT_KEYS)
    owner = key_sections()
    assert owner["enabled"] == "" and owner["seed"] == "" and owner["selection"] == ""
    assert owner["ready_after"] == "gates" and owner["dbg_mode"] == "gates"
    assert owner["replace_fraction_worst"] == "strategies.dexpbt"
    assert owner["threshold_abs_relative"] == "strategies.threshold"
    assert owner["quantile"] == "strategies.truncation" and owner["eval_loop"] == "strategies.tournament"
    assert owner["equal_experience"] == "gates" and owner["search_space"] == "explore"
    assert owner["mutation"] == "explore" and owner["initial_mutation"] == "explore"
    assert owner["heartbeat_timeout"] == "liveness"
    others = {k for name, s in STRATEGIES.items() if name != "threshold" for k in s.config_class.keys()}
    assert sorted(PbtConfig().to_dict()) == sorted(set(FLAT_KEYS) - others)  # the selected strategy's keys


def test_from_mapping_routes_each_key_to_its_section() -> None:
    cfg = PbtConfig.from_mapping({"threshold_std": 0.3, "ready_after": 7,
                                  "mutation_rate": 0.4, "heartbeat_timeout": 90, "selection": "threshold"})
    assert cfg.strategies["threshold"].threshold_std == 0.3
    assert cfg.strategies["dexpbt"] == DexPbtConfig()  # not selected: at its defaults
    assert cfg.gates.ready_after == 7 and cfg.explore.mutation_rate == 0.4
    assert cfg.liveness.heartbeat_timeout == 90.0 and isinstance(cfg.liveness.heartbeat_timeout, float)
    assert cfg.selection == "threshold"


def test_sections_match_their_classes() -> None:
    cfg = PbtConfig()
    assert isinstance(cfg.gates, SelectionGates) and isinstance(cfg.explore, ExploreConfig)
    assert isinstance(cfg.liveness, LivenessConfig)
    assert sorted(cfg.strategies) == sorted(STRATEGIES)
    for name, strategy in STRATEGIES.items():
        assert type(cfg.strategies[name]) is strategy.config_class
    assert section_classes()["strategies.dexpbt"] is DexPbtConfig
    assert section_classes()["strategies.threshold"] is ThresholdConfig


@pytest.mark.parametrize("build, message", [
    (lambda: SelectionGates(ready_after=-1), r"pbt.ready_after=-1 is out of range"),
    (lambda: SelectionGates(significance=1.0), r"pbt.significance=1.0 is out of range"),
    (lambda: DexPbtConfig(replace_fraction_worst=0.0), r"pbt.replace_fraction_worst=0.0 is out of range"),
    (lambda: ThresholdConfig(threshold_std=-1.0), r"pbt.threshold_std=-1.0 is out of range"),
    (lambda: ExploreConfig(change_min=1.3, change_max=1.2), r"pbt.change_max=1.2 .*>= pbt.change_min \(1.3\)"),
    (lambda: ExploreConfig(mutation={"x": "mutate_flot"}), r"pbt.mutation\['x'\]: .*Did you mean 'mutate_float'"),
    (lambda: LivenessConfig(heartbeat_interval=10.0, heartbeat_timeout=15.0),
     r"pbt.heartbeat_timeout=15.0 .*at least twice pbt.heartbeat_interval \(10 s\)"),
])
def test_each_section_validates_itself(build: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_root_choices_and_overwrite_rule() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'exec'.* Valid modes: inplace, exec"):
        PbtConfig.from_mapping({"restart_mode": "exe"})
    with pytest.raises(ConfigError, match="Valid values: retry, fail"):
        PbtConfig.from_mapping({"on_write_error": "ignore"})
    with pytest.raises(ConfigError, match="pbt.overwrite=true only applies with pbt.resume=false"):
        PbtConfig.from_mapping({"overwrite": True})
    assert PbtConfig.from_mapping({"overwrite": True, "resume": False}).overwrite is True


def test_two_sections_declaring_one_key_is_an_error() -> None:
    @dataclasses.dataclass
    class A(Section):
        x: int = 0

    @dataclasses.dataclass
    class B(Section):
        x: float = 0.0

    with pytest.raises(ConfigError, match="pbt.x is declared by both a and b"):
        section_keys({"a": A, "b": B})
    assert section_keys({"a": A}) == {"x": "a"}


flat_values = st.fixed_dictionaries({}, optional={
    "enabled": st.booleans(),
    "num_policies": st.integers(8, 64),
    "policy_idx": st.integers(0, 7),
    "interval_steps": st.integers(1, 10**9),
    "seed": st.one_of(st.none(), st.integers(0, 2**31)),
    "selection": st.sampled_from(sorted(STRATEGIES)),
    "start_after": st.integers(0, 10**9),
    "ready_after": st.one_of(st.none(), st.integers(0, 10**9)),
    "significance": st.one_of(st.none(), st.floats(0.001, 0.999)),
    "dbg_mode": st.booleans(),
    "replace_fraction_worst": st.floats(0.01, 1.0),
    "replace_threshold_frac_std": st.floats(0.0, 5.0),
    "threshold_abs": st.floats(0.0, 10.0),
    "threshold_abs_relative": st.booleans(),
    "mutation_rate": st.floats(0.0, 1.0),
    "change_min": st.floats(1.0, 1.2),
    "min_mutations": st.integers(0, 5),
    "bounds": st.just({"x": {"min": 0.0, "max": 1.0, "scale": "linear"}}),
    "mutation": st.just({"x": "mutate_float", "y": "mutate_discount"}),
    "initial_mutation": st.booleans(),
    "heartbeat_interval": st.floats(1.0, 60.0),
    "restart_mode": st.sampled_from(["inplace", "exec"]),
    "resume": st.just(True),
})


@settings(max_examples=60, deadline=None)
@given(flat_values)
def test_flat_mapping_round_trips_unchanged(values: Dict[str, Any]) -> None:
    selection = values.get("selection", "threshold")  # keep only keys the selection reads
    values = {k: v for k, v in values.items() if strategy_of(k) in (None, selection)}
    if selection != "dexpbt":
        values.pop("dbg_mode", None)
    cfg = PbtConfig.from_mapping(values)
    flat = cfg.to_dict()
    expected = dict(PbtConfig(selection=selection).to_dict(), **values)
    if values.get("ready_after") is None:  # derived: null or absent means "same as start_after"
        expected["ready_after"] = expected["start_after"]
    assert flat == expected
    assert PbtConfig.from_mapping(flat) == cfg and PbtConfig.from_mapping(flat).to_dict() == flat


# -- dotted keys (pbt.keys) -------------------------------------------------------------------------------

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


def _config(config_dir: Path, overrides: List[str]) -> Any:
    """The whole config as Hydra composes it from ``config_dir`` (an OmegaConf DictConfig)."""
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir

    from pbt.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="config", overrides=overrides)


def _composed(config_dir: Path, overrides: List[str]) -> Dict[str, Any]:
    cfg = _config(config_dir, overrides)  # first: it skips the test where Hydra is not installed
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.pbt, resolve=True)  # type: ignore[return-value]


def test_the_generated_nodes_hold_every_key_at_its_dataclass_default() -> None:
    nodes = hydra_nodes()
    keys = nodes["keys"]
    group_keys = {"selection", "mutation", "network_mutation"}  # set by group files
    assert sorted(keys) == sorted(k for k in flat_keys() if k not in group_keys and strategy_of(k) is None)
    assert keys["ready_after"] is None  # declared default: follows start_after (derived, not copied)
    for name, strategy in STRATEGIES.items():
        node = dict(nodes[f"selection/{name}"])
        assert node.pop("selection") == name
        assert sorted(node) == sorted(strategy.config_class.keys())
        assert strategy.config_class.from_flat(node) == strategy.config_class()
    flat = dict(keys, mutation=DEFAULT_MUTATION, **nodes["selection/threshold"])
    assert PbtConfig.from_mapping(flat) == PbtConfig()


def test_the_group_files_hold_no_defaults_of_their_own() -> None:
    """pbt_default.yaml chooses the nodes and switches PBT on; no_pbt.yaml is pbt_default switched off."""
    default = _load("pbt_default.yaml")
    assert default.pop("defaults") == ["/pbt_keys", {"mutation": "default"}, {"selection": "threshold"},
                                       {"search_space": None}, {"curriculum": None}, "_self_"]
    assert default == {"enabled": True}
    no_pbt = _load("no_pbt.yaml")
    assert no_pbt == {"defaults": ["pbt_default", "_self_"], "enabled": False}
    assert not (CONFIGS / "pbt" / "selection").exists()  # each strategy's node is generated


@pytest.mark.parametrize("name, enabled", [("pbt_default", True), ("no_pbt", False)])
def test_the_composed_group_is_the_dataclass_default(name: str, enabled: bool) -> None:
    mapping = _composed(CONFIGS, [f"pbt={name}"])
    assert PbtConfig.from_mapping(mapping) == PbtConfig(enabled=enabled)
    assert mapping["ready_after"] is None


def test_the_evaluated_lockstep_preset_is_pbt_default_plus_its_seven_keys() -> None:
    """``pbt=evaluated_lockstep`` is the outcome benchmark's best-measured arm in one word: lockstep,
    a 1,024-episode evaluation, the best leader and cuts at the mean; every other key at its
    default, and each of its keys still overridable."""
    recipe = dict(synchronous=True, eval_episodes=1024, significance_for="last_of_family",
                  significance_samples="training", leader_choice="best", threshold_std=0.0, threshold_abs=0.0)
    mapping = _composed(CONFIGS, ["pbt=evaluated_lockstep"])
    default = _composed(CONFIGS, ["pbt=pbt_default"])
    assert {key for key in mapping if mapping[key] != default[key]} == set(recipe)
    assert PbtConfig.from_mapping(mapping) == PbtConfig.from_mapping(dict(default, **recipe))
    cfg = PbtConfig.from_mapping(_composed(CONFIGS, ["pbt=evaluated_lockstep", "pbt.eval_episodes=256"]))
    assert cfg.eval_episodes == 256 and cfg.synchronous and cfg.enabled


def test_default_mutation_scheme_file() -> None:
    path = CONFIGS / "pbt" / "mutation" / "default.yaml"
    assert path.read_text().splitlines()[0] == "# @package pbt.mutation"
    assert _load("mutation/default.yaml") == DEFAULT_MUTATION


def test_hydra_composition(tmp_path: Path) -> None:
    shutil.copytree(CONFIGS / "pbt", tmp_path / "pbt")
    (tmp_path / "config.yaml").write_text("defaults:\n  - pbt: pbt_default\n  - _self_\n")
    (tmp_path / "pbt" / "mutation" / "tiny.yaml").write_text(
        "# @package pbt.mutation\ntrain.params.config.gamma: mutate_discount\n"
    )
    cfg = PbtConfig.from_mapping(_composed(tmp_path, ["pbt.policy_idx=3", "pbt.interval_steps=1e6"]))
    assert cfg == PbtConfig(enabled=True, policy_idx=3, interval_steps=1_000_000)
    assert cfg.to_dict() == dict(PbtConfig(enabled=True).to_dict(), policy_idx=3, interval_steps=1_000_000)
    cfg = PbtConfig.from_mapping(_composed(tmp_path, ["pbt/selection=dexpbt", "pbt.replace_fraction_best=0.5"]))
    assert cfg.selection == "dexpbt" and cfg.strategies["dexpbt"].replace_fraction_best == 0.5
    cfg = PbtConfig.from_mapping(_composed(tmp_path, ["pbt/mutation=tiny", "pbt=no_pbt"]))
    assert cfg.enabled is False
    assert cfg.explore.mutation == {"train.params.config.gamma": "mutate_discount"}


def test_default_scheme_matches_the_shipped_train_config() -> None:
    cfg = _config(CONFIGS, ["pbt=pbt_default"])
    from omegaconf import OmegaConf

    from pbt.mutation import current_params

    pbt_cfg = PbtConfig.from_mapping(OmegaConf.to_container(cfg.pbt, resolve=True))  # type: ignore[arg-type]
    params = current_params(OmegaConf.to_container(cfg, resolve=False), pbt_cfg.explore.mutation)  # type: ignore[arg-type]
    assert sorted(params) == sorted(DEFAULT_MUTATION)
    assert isinstance(params["train.params.config.mini_epochs"], int)


def test_reachers_focused_scheme_validates_against_the_reacher_config() -> None:
    """``pbt/mutation=reacher_focus`` (the outcome benchmark's focused arm) names Reacher's keys and
    functions that can take their values: the start-up check passes."""
    cfg = _config(CONFIGS, ["task=Reacher", "pbt=pbt_default", "pbt/mutation=reacher_focus"])
    from omegaconf import OmegaConf

    from pbt.mutation.scheme import validate_scheme

    pbt_cfg = PbtConfig.from_mapping(OmegaConf.to_container(cfg.pbt, resolve=True))  # type: ignore[arg-type]
    scheme = pbt_cfg.explore.mutation
    assert "train.params.config.kl_threshold" in scheme and "train.params.config.learning_rate" not in scheme
    validate_scheme(scheme, OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]


# -- derived defaults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("given, start_after, ready_after", [
    ({}, 10_000_000, 10_000_000),
    ({"start_after": 0, "initial_delay": 0}, 0, 0),
    ({"start_after": 200_000}, 200_000, 200_000),
    ({"start_after": 200_000, "ready_after": None}, 200_000, 200_000),
    ({"start_after": 200_000, "ready_after": 50_000}, 200_000, 50_000),
    ({"ready_after": 0}, 10_000_000, 0),
])
def test_ready_after_follows_start_after_unless_set(given: Dict[str, Any], start_after: int, ready_after: int) -> None:
    gates = PbtConfig.from_mapping(given).gates
    assert (gates.start_after, gates.ready_after) == (start_after, ready_after)


def test_shipped_pbt_configs_leave_ready_after_to_start_after() -> None:
    flat = dict(hydra_nodes()["keys"])
    assert flat["ready_after"] is None
    gates = PbtConfig.from_mapping(flat).gates
    assert gates.ready_after == gates.start_after == flat["start_after"]
    assert PbtConfig.from_mapping(dict(flat, start_after=0, initial_delay=0)).gates.ready_after == 0


# -- keys that need the evaluation -------------------------------------------------------------------

NEEDING_VALUES = {"eval_window": [2, 3], "significance_samples": ["evaluations", "training"]}
"""Every value of a key in EVALUATION_NEEDS that needs the evaluation: the table must cover each."""


def _settings(overrides: List[str]) -> Dict[str, Any]:
    return {key.split("=")[0][len("pbt."):]: yaml.safe_load(key.split("=", 1)[1]) for key in overrides}


@pytest.mark.parametrize("key, value", [(k, v) for k, values in NEEDING_VALUES.items() for v in values])
def test_a_value_needing_the_evaluation_is_refused_without_it_and_its_settings_undo_it(key: str, value: Any) -> None:
    """One table (EVALUATION_NEEDS) drives the start-up check and the settings an Isaac task's error
    names, so they cannot disagree: each needing value is refused with eval_episodes=0, accepted
    with an evaluation, and the named settings appended leave a valid config."""
    assert set(EVALUATION_NEEDS) == set(NEEDING_VALUES)
    given_ = {"enabled": True, key: value}
    with pytest.raises(ConfigError, match=rf"pbt\.{key}={value}.*pbt\.eval_episodes=0"):
        PbtConfig.from_mapping(given_)
    PbtConfig.from_mapping(dict(given_, eval_episodes=16, eval_window=3) if key != "eval_window" else
                           dict(given_, eval_episodes=16))
    evaluated = dict(given_, eval_episodes=16)
    fixed = PbtConfig.from_mapping(dict(evaluated, **_settings(evaluation_free_settings(evaluated))))
    assert fixed.eval_episodes == 0


def test_only_the_evaluation_is_turned_off_when_nothing_else_needs_it() -> None:
    assert evaluation_free_settings({"eval_episodes": 16, "eval_window": 1, "significance_samples": "episodes"}) == [
        "pbt.eval_episodes=0"
    ]
    assert evaluation_free_settings({"eval_window": 3, "significance_samples": "training"}) == [
        "pbt.eval_episodes=0", "pbt.eval_window=1", "pbt.significance_samples=episodes"
    ]


def test_flat_value_reads_every_key_where_its_section_holds_it() -> None:
    cfg = PbtConfig.from_mapping({"enabled": True, "eval_window": 2, "eval_episodes": 4, "significance_samples": "training"})
    flat = cfg.to_dict()
    values = {key: cfg.flat_value(key) for key in flat}  # every key is found
    scalars = {key: value for key, value in flat.items() if not isinstance(value, (list, dict))}
    assert {key: values[key] for key in scalars} == scalars  # to_dict writes containers as plain data
    assert (values["eval_window"], values["significance_samples"]) == (2, "training")
    with pytest.raises(KeyError, match="pbt.gates"):
        cfg.flat_value("gates")  # a section, not a key
