"""What a member may train with: the check of a hyperparameter value against its mutation's
declarations (value type, finite, the function's own range narrowed by pbt.bounds), keys that must
never mutate, the range rule for mutated values, and clamp's refusal of NaN. No torch."""
import math
import random
from typing import Any, Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.errors import ConfigError
from pbt.mutation import (
    DEFAULT_MUTATION,
    FROZEN_KEYS,
    MUTATIONS,
    ExploreConfig,
    HyperparameterMutation,
    InvalidValueError,
    check_value,
    checked_params,
    clamp,
    mutate,
    validate_scheme,
)

SETTINGS = settings(max_examples=150, deadline=None)
P = "train.params.config."
SCHEME = dict(DEFAULT_MUTATION)
GOOD = {P + "learning_rate": 3e-4, P + "grad_norm": 1.0, P + "entropy_coef": 0.0, P + "critic_coef": 2.0,
        P + "bounds_loss_coef": 1e-4, P + "kl_threshold": 0.016, P + "e_clip": 0.2, P + "mini_epochs": 5,
        P + "gamma": 0.99, P + "tau": 0.95}


@pytest.mark.parametrize("key, value, message", [
    (P + "learning_rate", "abc", r"'abc' \(str\) is not a number"),
    (P + "learning_rate", "1e-4", "is not a number"),  # a peer's record holds numbers, never spellings
    (P + "learning_rate", True, "is not a number"),
    (P + "learning_rate", None, "is not a number"),
    (P + "learning_rate", [1.0], "is not a number"),
    (P + "learning_rate", math.nan, "is not finite"),
    (P + "learning_rate", -math.inf, "is not finite"),
    (P + "mini_epochs", 1e9, r"outside \[1, 8\]"),
    (P + "mini_epochs", 4.5, "not a whole number"),
    (P + "mini_epochs", 0, r"outside \[1, 8\]"),
    (P + "gamma", math.nan, "is not finite"),
    (P + "gamma", 5.0, r"outside \[0, 1\]"),
    (P + "gamma", -0.1, r"outside \[0, 1\]"),
    (P + "e_clip", 0.5, r"outside \[0.01, 0.3\]"),
])
def test_a_value_no_member_may_train_with_is_refused_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message) as info:
        check_value(key, value, SCHEME)
    assert str(info.value).startswith(f"'{key}': ")
    assert isinstance(info.value, ConfigError)


def test_valid_values_pass_in_the_type_their_mutation_keeps() -> None:
    assert check_value(P + "mini_epochs", 4.0, SCHEME) == 4 and isinstance(check_value(P + "mini_epochs", 4.0, SCHEME), int)
    assert check_value(P + "gamma", 1.0, SCHEME) == 1.0
    assert check_value(P + "e_clip", 0.3, SCHEME) == 0.3
    assert check_value("not.in.scheme", -7.5, SCHEME) == -7.5  # outside the scheme: any finite number
    with pytest.raises(InvalidValueError):
        check_value("not.in.scheme", "x", SCHEME)


def test_bounds_narrow_the_functions_own_range() -> None:
    bounds = {P + "learning_rate": {"min": 1e-5, "max": 1e-3, "scale": "log"},
              P + "e_clip": {"min": 0.1, "max": 0.9, "scale": "log"}}
    assert check_value(P + "learning_rate", 5e-4, SCHEME, bounds) == 5e-4
    with pytest.raises(InvalidValueError, match=r"outside \[1e-05, 0.001\]"):
        check_value(P + "learning_rate", 2e-3, SCHEME, bounds)
    with pytest.raises(InvalidValueError, match=r"outside \[0.1, 0.3\]"):  # the function's max wins
        check_value(P + "e_clip", 0.5, SCHEME, bounds)


junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=5), st.lists(st.floats(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                                          st.integers(), max_size=2))


@SETTINGS
@given(st.one_of(junk, st.dictionaries(st.sampled_from(sorted(GOOD) + ["other"]), junk, max_size=12)))
def test_checked_params_never_raises_and_keeps_only_valid_values(params: Any) -> None:
    clean, problems = checked_params(params, GOOD, SCHEME)
    for key, value in clean.items():
        assert check_value(key, value, SCHEME) == value
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not isinstance(params, dict):
        assert problems and not clean
    else:
        assert len(clean) + len(problems) == len([k for k in GOOD if k in params])


# -- the range rule for mutated values ---------------------------------------------------------------


def test_mutate_float_min_1_honours_its_own_min_under_linear_bounds() -> None:
    bounds = {"x": {"min": 0.5, "max": 3.0, "scale": "linear"}}
    values = [mutate({"x": 1.1}, {"x": "mutate_float_min_1"}, 1.0, 1.4, 1.5, random.Random(seed), bounds=bounds)["x"]
              for seed in range(100)]
    assert min(values) == 1.0 and max(values) > 1.1  # it stepped both ways; never below its own min
    assert all(1.0 <= v <= 3.0 for v in values)


@SETTINGS
@given(st.sampled_from(sorted(GOOD)), st.integers(0, 2**32 - 1), st.floats(0.5, 2.0))
def test_every_mutated_value_passes_the_check(key: str, seed: int, scale: float) -> None:
    bounds = {key: {"min": None, "max": None, "scale": "log"}} if seed % 2 else {}
    out = mutate(GOOD, SCHEME, 1.0, 1.1, 1.0 + scale, random.Random(seed), min_mutations=3, bounds=bounds)
    for name, value in out.items():
        assert check_value(name, value, SCHEME, bounds) == value


def test_a_mutation_that_overflows_keeps_the_value() -> None:
    out = mutate({"x": 1.7e308}, {"x": "mutate_float"}, 1.0, 2.0, 2.0, random.Random(0))
    assert out["x"] in (1.7e308, 0.85e308)  # x*2 = inf is not published; x/2 is fine
    outs = {mutate({"x": 1.7e308}, {"x": "mutate_float"}, 1.0, 2.0, 2.0, random.Random(s))["x"] for s in range(20)}
    assert all(math.isfinite(v) for v in outs) and 1.7e308 in outs


def test_clamp_refuses_nan_and_keeps_ints_inside_the_range() -> None:
    with pytest.raises(InvalidValueError, match="NaN"):
        clamp(math.nan, 0.0, 1.0)
    with pytest.raises(InvalidValueError):
        clamp("abc", 0.0, 1.0)  # type: ignore[arg-type]
    assert clamp(math.inf, 0.0, 1.0) == 1.0 and clamp(-math.inf, None, None) == -math.inf
    assert clamp(2, 2.5, 7.5) == 3 and clamp(9, 2.5, 7.5) == 7 and isinstance(clamp(9, 2.5, 7.5), int)
    assert clamp(0.5, 1.0, None) == 1.0 and isinstance(clamp(1, 0.0, 2.0), int)


def test_every_registered_hyperparameter_mutation_declares_its_range() -> None:
    ranges = {m.name: m.value_range for m in MUTATIONS.values() if isinstance(m, HyperparameterMutation)}
    assert ranges == {"mutate_float": (-math.inf, math.inf), "mutate_float_min_1": (1.0, math.inf),
                      "mutate_eps_clip": (0.01, 0.3), "mutate_mini_epochs": (1, 8), "mutate_discount": (0.0, 1.0)}


# -- start-up refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["pbt.policy_idx", "pbt.num_policies", "pbt.heartbeat_timeout", "pbt.anything",
                                 "seed", "max_frames", "experiment", "train_dir", "checkpoint", "task",
                                 "train.params.config.max_frames", "train.params.seed", "hydra.run.dir",
                                 "train.params.algo.name", "train.params.config.full_experiment_name"])
def test_keys_that_must_never_mutate_are_refused_at_startup(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"pbt.mutation\['{key}'\]: this key must never mutate .*Remove it"):
        ExploreConfig(mutation={key: "mutate_float"})


def test_ordinary_keys_and_task_parameters_may_mutate() -> None:
    ExploreConfig(mutation={"task.env.upWeight": "mutate_float", P + "horizon_length": "mutate_float",
                            "seed_like_name": "mutate_float", "pbtx": "mutate_float"})
    assert "seed" in FROZEN_KEYS and "max_frames" in FROZEN_KEYS


def test_bounds_outside_the_functions_range_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"does not overlap mutate_eps_clip's own range \[0.01, 0.3\]"):
        ExploreConfig(mutation={P + "e_clip": "mutate_eps_clip"}, bounds={P + "e_clip": {"min": 0.5, "max": 0.9}})
    ExploreConfig(mutation={P + "e_clip": "mutate_eps_clip"}, bounds={P + "e_clip": {"min": 0.2, "max": 0.9}})


def test_a_starting_value_peers_would_refuse_is_refused_at_startup() -> None:
    config: Dict[str, Any] = {"train": {"params": {"config": {"e_clip": 0.5, "mini_epochs": 12, "gamma": 0.99}}}}
    scheme = {P + "e_clip": "mutate_eps_clip", P + "mini_epochs": "mutate_mini_epochs", P + "gamma": "mutate_discount"}
    with pytest.raises(ConfigError) as info:
        validate_scheme(scheme, config)
    text = str(info.value)
    assert "e_clip': 0.5 is outside [0.01, 0.3]" in text and "mini_epochs': 12 is outside [1, 8]" in text
    assert "gamma" not in text and "Start it inside that range" in text
    config["train"]["params"]["config"].update(e_clip=0.2, mini_epochs=4)
    validate_scheme(scheme, config)
    with pytest.raises(ConfigError, match=r"gamma': 0.99 is outside \[0, 0.98\]"):
        validate_scheme(scheme, config, {P + "gamma": {"min": None, "max": 0.98, "scale": "log"}})
