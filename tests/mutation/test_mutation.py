"""Tests of pbt.mutation: the mutation functions, the registry (each mutation declares its properties
and the generic code reads them, naming none), mutate() and scheme validation."""
import inspect
import math
import random
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pbt.mutation.scheme
from pbt.errors import ConfigError
from pbt.mutation import (
    DEFAULT_MUTATION,
    DISCOUNT_RANGE,
    GENERAL_RANGE,
    HYPERPARAMETER,
    MUTATION_FUNCS,
    MUTATIONS,
    TARGETS,
    ExploreConfig,
    HyperparameterMutation,
    Mutation,
    current_params,
    get_mutation,
    get_mutation_func,
    mutate,
    mutate_discount,
    mutate_eps_clip,
    mutate_float,
    mutate_float_min_1,
    mutate_mini_epochs,
    mutate_params,
    registry,
    validate_scheme,
)

SETTINGS = settings(max_examples=60, deadline=None)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
ranges = st.tuples(st.floats(1.0, 3.0), st.floats(0.0, 2.0)).map(lambda t: (t[0], t[0] + t[1]))


class ScriptedRng(random.Random):
    """A Random whose uniform()/random() return scripted values and record their arguments."""

    def __init__(self, uniform: float = 1.3, coins: Tuple[float, ...] = (0.2,)) -> None:
        super().__init__(0)
        self._uniform = uniform
        self._coins = list(coins)
        self.uniform_calls: List[Tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.uniform_calls.append((a, b))
        return self._uniform

    def random(self) -> float:
        return self._coins.pop(0)


def test_registry_names() -> None:
    assert sorted(MUTATION_FUNCS) == [
        "mutate_discount", "mutate_eps_clip", "mutate_float", "mutate_float_min_1", "mutate_mini_epochs",
    ]
    assert get_mutation_func("mutate_float") is mutate_float


def test_mutate_float_divides_or_multiplies() -> None:
    rng = ScriptedRng(uniform=1.25, coins=(0.2,))
    assert mutate_float(2.0, rng, 1.1, 1.5) == pytest.approx(2.0 / 1.25)
    assert rng.uniform_calls == [(1.1, 1.5)]
    assert mutate_float(2.0, ScriptedRng(uniform=1.25, coins=(0.7,)), 1.1, 1.5) == pytest.approx(2.5)
    assert mutate_float("1e-4", ScriptedRng(uniform=2.0, coins=(0.9,)), 1.1, 2.5) == pytest.approx(2e-4)


def test_mutate_float_min_1() -> None:
    assert mutate_float_min_1(1.2, ScriptedRng(uniform=1.5, coins=(0.1,)), 1.1, 1.5) == 1.0
    assert mutate_float_min_1(2.0, ScriptedRng(uniform=1.5, coins=(0.9,)), 1.1, 1.5) == pytest.approx(3.0)


def test_mutate_eps_clip_clamps() -> None:
    assert mutate_eps_clip(0.25, ScriptedRng(uniform=1.5, coins=(0.9,)), 1.1, 1.5) == 0.3
    assert mutate_eps_clip(0.012, ScriptedRng(uniform=1.5, coins=(0.1,)), 1.1, 1.5) == 0.01
    assert mutate_eps_clip(0.2, ScriptedRng(uniform=1.25, coins=(0.1,)), 1.1, 1.5) == pytest.approx(0.16)


def test_mutate_mini_epochs_steps_and_clamps() -> None:
    assert mutate_mini_epochs(4, ScriptedRng(coins=(0.1,)), 1.1, 1.5) == 5
    assert mutate_mini_epochs(4, ScriptedRng(coins=(0.9,)), 1.1, 1.5) == 3
    assert mutate_mini_epochs(8, ScriptedRng(coins=(0.1,)), 1.1, 1.5) == 8
    assert mutate_mini_epochs(1, ScriptedRng(coins=(0.9,)), 1.1, 1.5) == 1
    result = mutate_mini_epochs(4.0, ScriptedRng(coins=(0.1,)), 1.1, 1.5)
    assert result == 5 and isinstance(result, int)
    with pytest.raises(ConfigError, match="whole number"):
        mutate_mini_epochs(4.5, ScriptedRng(coins=(0.1,)), 1.1, 1.5)


def test_mutate_discount_uses_the_range_it_is_given() -> None:
    rng = ScriptedRng(uniform=1.2, coins=(0.9,))
    # 1 - (1 - 0.99) * 1.2 = 0.988
    assert mutate_discount(0.99, rng, 1.1, 1.2) == pytest.approx(0.988)
    assert rng.uniform_calls == [(1.1, 1.2)]
    assert mutate_discount(0.99, ScriptedRng(uniform=1.25, coins=(0.1,)), 2.0, 3.0) == pytest.approx(0.992)


def test_mutate_passes_the_discount_range_not_the_float_range() -> None:
    rng = ScriptedRng(uniform=1.2, coins=(0.0, 0.9))  # mutate (coin < rate), then grow 1 - x
    out = mutate({"g": 0.99}, {"g": "mutate_discount"}, 1.0, 2.0, 3.0, rng, discount_range=(1.15, 1.25))
    assert rng.uniform_calls == [(1.15, 1.25)]
    assert out["g"] == pytest.approx(0.988)


def test_mutate_discount_never_leaves_unit_interval() -> None:
    # growing 1 - 0.1 = 0.9 by 1.2 would give -0.08; the change goes toward 1 instead.
    assert mutate_discount(0.1, ScriptedRng(uniform=1.2, coins=(0.9,)), 1.1, 1.5) == pytest.approx(0.25)


@pytest.mark.parametrize("value", [True, "abc", None, [1.0]])
def test_non_numbers_rejected(value: Any) -> None:
    with pytest.raises(ConfigError, match="Cannot mutate"):
        mutate_float(value, random.Random(0), 1.1, 1.5)


@SETTINGS
@given(st.floats(-1e6, 1e6), seeds, ranges)
def test_eps_clip_in_bounds(value: float, seed: int, change: Tuple[float, float]) -> None:
    assert 0.01 <= mutate_eps_clip(value, random.Random(seed), *change) <= 0.3


@SETTINGS
@given(st.integers(-20, 20), seeds)
def test_mini_epochs_in_bounds_and_int(value: int, seed: int) -> None:
    result = mutate_mini_epochs(value, random.Random(seed), 1.1, 1.5)
    assert isinstance(result, int) and 1 <= result <= 8
    if 2 <= value <= 7:
        assert abs(result - value) == 1


@SETTINGS
@given(st.floats(-1e6, 1e6), seeds, ranges)
def test_min_1_at_least_one(value: float, seed: int, change: Tuple[float, float]) -> None:
    assert mutate_float_min_1(value, random.Random(seed), *change) >= 1.0


@SETTINGS
@given(st.floats(0.0, 1.0, exclude_min=True, exclude_max=True), seeds)
def test_discount_stays_in_unit_interval(value: float, seed: int) -> None:
    assert 0.0 < mutate_discount(value, random.Random(seed), 1.1, 1.5) < 1.0


@SETTINGS
@given(st.floats(1e-6, 1e6), seeds, ranges)
def test_float_change_within_range(value: float, seed: int, change: Tuple[float, float]) -> None:
    low, high = change
    ratio = mutate_float(value, random.Random(seed), low, high) / value
    assert (low - 1e-9 <= ratio <= high + 1e-9) or (1 / high - 1e-9 <= ratio <= 1 / low + 1e-9)


# -- mutate() -------------------------------------------------------------------------------------

PARAMS: Dict[str, Any] = {
    "train.params.config.learning_rate": 3e-4,
    "train.params.config.grad_norm": 1.0,
    "train.params.config.entropy_coef": 0.01,
    "train.params.config.critic_coef": 2.0,
    "train.params.config.bounds_loss_coef": 1e-4,
    "train.params.config.kl_threshold": 0.008,
    "train.params.config.e_clip": 0.2,
    "train.params.config.mini_epochs": 4,
    "train.params.config.gamma": 0.99,
    "train.params.config.tau": 0.95,
}


def test_mutate_rate_zero_is_identity_copy() -> None:
    result = mutate(PARAMS, DEFAULT_MUTATION, 0.0, 1.1, 1.5, random.Random(0))
    assert result == PARAMS and result is not PARAMS


def test_mutate_rate_one_changes_every_key_and_not_the_input() -> None:
    before = dict(PARAMS)
    result = mutate(PARAMS, DEFAULT_MUTATION, 1.0, 1.1, 1.5, random.Random(0))
    assert PARAMS == before
    assert all(result[key] != PARAMS[key] for key in PARAMS)
    assert isinstance(result["train.params.config.mini_epochs"], int)


def test_mutate_leaves_keys_outside_scheme() -> None:
    params = dict(PARAMS, other=5.0)
    result = mutate(params, {"train.params.config.gamma": "mutate_discount"}, 1.0, 1.1, 1.5, random.Random(1))
    assert result["other"] == 5.0 and result["train.params.config.grad_norm"] == 1.0
    assert result["train.params.config.gamma"] != 0.99


def test_mutate_deterministic_and_order_independent() -> None:
    reversed_params = dict(reversed(list(PARAMS.items())))
    first = mutate(PARAMS, DEFAULT_MUTATION, 0.5, 1.1, 1.5, random.Random(42))
    second = mutate(reversed_params, DEFAULT_MUTATION, 0.5, 1.1, 1.5, random.Random(42))
    assert first == second
    assert first != mutate(PARAMS, DEFAULT_MUTATION, 0.5, 1.1, 1.5, random.Random(43))


def test_mutate_rate_is_per_key_probability() -> None:
    rng = random.Random(3)
    scheme = {"x": "mutate_float"}
    changed = sum(mutate({"x": 1.0}, scheme, 0.15, 1.1, 1.5, rng)["x"] != 1.0 for _ in range(2000))
    assert 0.11 < changed / 2000 < 0.19


def test_mutate_names_key_on_bad_value() -> None:
    with pytest.raises(ConfigError, match="Mutating 'x' failed"):
        mutate({"x": "fast"}, {"x": "mutate_float"}, 1.0, 1.1, 1.5, random.Random(0))


# -- registry and scheme validation ---------------------------------------------------------------


def test_unknown_function_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_mutation_func("mutate_flot")
    message = str(info.value)
    assert "Unknown mutation function 'mutate_flot'" in message
    assert "Did you mean 'mutate_float'?" in message
    assert "Valid names: mutate_discount, mutate_eps_clip, mutate_float, mutate_float_min_1, " \
           "mutate_mini_epochs" in message


def test_get_mutation_func_rejects_eval_bait() -> None:
    with pytest.raises(ConfigError):
        get_mutation_func("__import__('os').getcwd")


RESOLVED: Dict[str, Any] = {
    "train": {"params": {"config": {
        "learning_rate": "1e-4", "gamma": 0.99, "tau": 0.95, "mini_epochs": 5, "e_clip": 0.2,
        "name": "Pendulum", "grad_norm": 1.0,
    }}},
    "task": {"env": {"numEnvs": 512}},
}


def test_validate_scheme_accepts_valid() -> None:
    validate_scheme({"train.params.config.gamma": "mutate_discount",
                     "train.params.config.learning_rate": "mutate_float",
                     "train.params.config.mini_epochs": "mutate_mini_epochs"}, RESOLVED)


def test_validate_scheme_missing_key_names_nearest() -> None:
    with pytest.raises(ConfigError) as info:
        validate_scheme({"train.params.config.gama": "mutate_discount"}, RESOLVED)
    message = str(info.value)
    assert "'train.params.config.gama' does not exist" in message
    assert "Did you mean 'train.params.config.gamma'?" in message


def test_validate_scheme_missing_key_without_close_match_lists_siblings() -> None:
    with pytest.raises(ConfigError) as info:
        validate_scheme({"task.env.xyzzy_scale": "mutate_float"}, RESOLVED)
    assert "Keys next to it: 'task.env.numEnvs'" in str(info.value)


def test_validate_scheme_reports_all_problems() -> None:
    scheme = {
        "train.params.config.gamma": "mutate_discont",
        "train.params.config.name": "mutate_float",
        "train.params.config.tau2": "mutate_discount",
        "train.params.config.e_clip": "mutate_mini_epochs",
    }
    with pytest.raises(ConfigError) as info:
        validate_scheme(scheme, RESOLVED)
    message = str(info.value)
    assert "Did you mean 'mutate_discount'?" in message
    assert "'train.params.config.name'" in message and "'Pendulum'" in message
    assert "'train.params.config.tau2' does not exist" in message
    assert "'train.params.config.e_clip'" in message and "whole number" in message


def test_current_params_reads_and_parses_numbers() -> None:
    scheme = {"train.params.config.learning_rate": "mutate_float",
              "train.params.config.mini_epochs": "mutate_mini_epochs"}
    params = current_params(RESOLVED, scheme)
    assert params == {"train.params.config.learning_rate": 1e-4, "train.params.config.mini_epochs": 5}
    assert isinstance(params["train.params.config.learning_rate"], float)


def test_current_params_missing_key_raises() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        current_params(RESOLVED, {"train.params.config.kl_threshold": "mutate_float"})


def _mutated_keys(seed: int) -> List[str]:
    result = mutate(PARAMS, DEFAULT_MUTATION, 0.5, 1.1, 1.5, random.Random(seed))
    return [key for key in PARAMS if result[key] != PARAMS[key]]


def test_mutation_choices_vary_with_seed() -> None:
    assert len({tuple(_mutated_keys(seed)) for seed in range(20)}) > 5
    assert not math.isnan(mutate_float(1.0, random.Random(0), 1.1, 1.5))


def test_min_mutations_forces_a_change_when_the_coins_changed_nothing() -> None:
    scheme = {"a": "mutate_float", "b": "mutate_float", "c": "mutate_mini_epochs"}
    params = {"a": 1.0, "b": 2.0, "c": 4}
    for seed in range(50):
        out = mutate(params, scheme, 0.0, 1.1, 1.5, random.Random(seed), min_mutations=1)
        assert sum(out[k] != params[k] for k in params) == 1
        assert mutate(params, scheme, 0.0, 1.1, 1.5, random.Random(seed)) == params


def test_bounds_clamp_every_mutated_value_and_keep_ints() -> None:
    scheme = {"lr": "mutate_float", "epochs": "mutate_mini_epochs"}
    bounds = {"lr": {"min": 1e-4, "max": 2e-4, "scale": "log"}, "epochs": {"min": 3, "max": 4, "scale": "log"}}
    for seed in range(100):
        out = mutate({"lr": 1.5e-4, "epochs": 4}, scheme, 1.0, 1.1, 3.0, random.Random(seed), bounds=bounds)
        assert 1e-4 <= out["lr"] <= 2e-4
        assert out["epochs"] in (3, 4) and isinstance(out["epochs"], int)


def test_linear_scale_steps_additively_within_the_range() -> None:
    bounds = {"x": {"min": 0.0, "max": 10.0, "scale": "linear"}}
    steps = set()
    for seed in range(100):
        out = mutate({"x": 5.0}, {"x": "mutate_float"}, 1.0, 1.1, 1.2, random.Random(seed), bounds=bounds)
        step = out["x"] - 5.0
        assert 1.0 - 1e-9 <= abs(step) <= 2.0 + 1e-9  # (k - 1) * (max - min), k in [1.1, 1.2]
        steps.add(step > 0)
    assert steps == {True, False}


def test_min_mutations_skips_keys_that_cannot_move() -> None:
    # entropy 0 stays 0 under mutate_float and mini_epochs at a clamp may not move: another key changes.
    scheme = {"entropy": "mutate_float", "lr": "mutate_float"}
    for seed in range(50):
        out = mutate({"entropy": 0.0, "lr": 1e-3}, scheme, 0.0, 1.1, 1.5, random.Random(seed), min_mutations=1)
        assert out["entropy"] == 0.0 and out["lr"] != 1e-3


# -- declared properties --------------------------------------------------------------------------


def test_declared_properties() -> None:
    assert sorted(MUTATIONS) == sorted(MUTATION_FUNCS)
    for name, mutation in MUTATIONS.items():
        assert isinstance(mutation, Mutation) and mutation.name == name
        assert mutation.target in TARGETS
    assert all(m.target == HYPERPARAMETER and m.needs_rebuild is False for m in MUTATIONS.values())
    assert {n for n, m in MUTATIONS.items() if m.change_range == DISCOUNT_RANGE} == {"mutate_discount"}
    assert {n for n, m in MUTATIONS.items() if m.change_range == GENERAL_RANGE} == {
        "mutate_float", "mutate_float_min_1", "mutate_eps_clip", "mutate_mini_epochs"}
    linear = {n for n, m in MUTATIONS.items() if isinstance(m, HyperparameterMutation) and m.linear_bounds}
    assert linear == {"mutate_float", "mutate_float_min_1"}
    ints = {n for n, m in MUTATIONS.items() if isinstance(m, HyperparameterMutation) and m.value_type is int}
    assert ints == {"mutate_mini_epochs"}


def test_unknown_mutation_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'mutate_eps_clip'.*Valid names: mutate_discount"):
        get_mutation("mutate_eps_clp")
    with pytest.raises(ConfigError, match="Valid names"):
        get_mutation(3)  # type: ignore[arg-type]


def test_generic_code_names_no_mutation() -> None:
    source = inspect.getsource(pbt.mutation.scheme)
    assert "mutate_discount" not in source and "mutate_mini_epochs" not in source
    assert "\"mutate_float\"" not in source


def _register(monkeypatch: pytest.MonkeyPatch, mutation: HyperparameterMutation) -> None:
    monkeypatch.setitem(registry.MUTATIONS, mutation.name, mutation)


def test_a_new_mutation_gets_the_range_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, HyperparameterMutation("scale_like_gamma", mutate_float, change_range=DISCOUNT_RANGE))
    rng = ScriptedRng(uniform=1.2, coins=(0.0, 0.9))
    out = mutate({"x": 2.0}, {"x": "scale_like_gamma"}, 1.0, 2.0, 3.0, rng, discount_range=(1.15, 1.25))
    assert rng.uniform_calls == [(1.15, 1.25)] and out["x"] == pytest.approx(2.4)


def test_a_new_mutation_with_linear_bounds_steps_additively(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = {"x": {"min": 0.0, "max": 10.0, "scale": "linear"}}
    _register(monkeypatch, HyperparameterMutation("linear_too", mutate_float, linear_bounds=True))
    _register(monkeypatch, HyperparameterMutation("log_only", mutate_float))
    out = mutate({"x": 5.0}, {"x": "linear_too"}, 1.0, 1.1, 1.2, ScriptedRng(1.2, (0.0, 0.9)), bounds=bounds)
    assert out["x"] == pytest.approx(3.0)  # 5 - (1.2 - 1) * 10 (coin 0.9: the step goes down)
    out = mutate({"x": 5.0}, {"x": "log_only"}, 1.0, 1.1, 1.2, ScriptedRng(1.2, (0.0, 0.9)), bounds=bounds)
    assert out["x"] == pytest.approx(6.0)  # 5 * 1.2


def test_a_new_integer_mutation_is_validated_as_a_whole_number(monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, HyperparameterMutation("step_int", mutate_float, value_type=int))
    with pytest.raises(ConfigError, match="'n': Cannot mutate 2.5 with step_int: it needs a whole number"):
        validate_scheme({"n": "step_int"}, {"n": 2.5})
    validate_scheme({"n": "step_int"}, {"n": 2})
    validate_scheme({"n": "mutate_float"}, {"n": 2.5})


def test_mutate_params_reads_the_explore_section() -> None:
    explore = ExploreConfig(mutation={"x": "mutate_float", "g": "mutate_discount"}, mutation_rate=1.0,
                            change_min=1.3, change_max=1.4, discount_change_min=1.05, discount_change_max=1.06,
                            min_mutations=0, bounds={"x": {"max": 1.2}})
    params = {"x": 1.0, "g": 0.99, "other": 3}
    expected = mutate(params, explore.mutation, 1.0, 1.3, 1.4, random.Random(5), bounds=explore.bounds,
                      discount_range=(1.05, 1.06))
    assert mutate_params(params, explore, random.Random(5)) == expected
    assert expected["x"] <= 1.2 and expected["g"] != 0.99 and expected["other"] == 3
