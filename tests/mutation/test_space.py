"""The typed search space: parsing with clear errors, sampling, clamping and neighbour steps,
mutations and perturbations staying inside, zero values, start-up checks, and a fresh member's
initial sample (logged in its lineage, never redrawn on resume)."""
import logging
import random
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.member import PbtMember
from pbt.mutation.base import InvalidValueError
from pbt.mutation.explore import ExploreConfig
from pbt.mutation.scheme import checked_params, mutate_params, perturb, zero_valued_keys
from pbt.mutation.space import SearchSpace, parse_space, resolve_space

C = "train.params.config."
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "pbt" / "search_space"
SPACE = {
    C + "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-3},
    C + "e_clip": {"type": "uniform", "low": 0.05, "high": 0.3},
    C + "horizon_length": {"type": "int", "low": 8, "high": 64, "grow_factor": 1.5, "shrink_factor": 0.75},
    C + "mini_epochs": {"type": "choice", "values": [5, 10, 15, 20]},
    C + "entropy_coef": {"type": "loguniform", "low": 1e-4, "high": 0.05},
}


def space() -> SearchSpace:
    return parse_space("search_space", SPACE)


def test_parse_errors_name_the_key_and_say_how_to_fix() -> None:
    cases = [
        ({"k": {"type": "logunifrom", "low": 1, "high": 2}}, "Did you mean one of: 'loguniform'"),
        ({"k": {"type": "uniform", "low": 2, "high": 1}}, r"pbt.search_space\['k'\]: the range \[2, 1\] is empty"),
        ({"k": {"type": "uniform", "low": 1, "high": 1}}, "is empty"),
        ({"k": {"type": "loguniform", "low": 0, "high": 1}}, "loguniform needs low > 0"),
        ({"k": {"type": "int", "low": 1.5, "high": 4}}, "whole numbers"),
        ({"k": {"type": "int", "low": 1, "high": 4, "grow_factor": 0.9}}, "grow_factor must be > 1"),
        ({"k": {"type": "choice", "values": []}}, "non-empty list"),
        ({"k": {"type": "choice"}}, "either values"),
        ({"k": {"type": "uniform", "low": 0, "hihg": 1}}, "Did you mean 'high'"),
        ({"seed": {"type": "uniform", "low": 0, "high": 1}}, "must never change"),
        ("ppo", "must be a mapping"),
    ]
    for spec, message in cases:
        with pytest.raises(ConfigError, match=message):
            ExploreConfig.from_flat({"search_space": spec})


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31))
def test_samples_lie_inside_and_ints_stay_ints(seed: int) -> None:
    rng = random.Random(seed)
    sample = space().sample({}, rng)
    assert 1e-5 <= sample[C + "learning_rate"] <= 1e-3 and 0.05 <= sample[C + "e_clip"] <= 0.3
    assert isinstance(sample[C + "horizon_length"], int) and 8 <= sample[C + "horizon_length"] <= 64
    assert sample[C + "mini_epochs"] in (5, 10, 15, 20)
    assert all(space().dims[k].contains(v) for k, v in sample.items())
    assert sample == space().sample({}, random.Random(seed))  # reproducible


def test_clamp_and_neighbour_steps() -> None:
    dims = space().dims
    assert dims[C + "e_clip"].clamp(0.9) == 0.3 and dims[C + "e_clip"].clamp(-1) == 0.05
    assert dims[C + "horizon_length"].clamp(100.4) == 64 and isinstance(dims[C + "horizon_length"].clamp(9.6), int)
    epochs = dims[C + "mini_epochs"]
    assert epochs.step(10, up=True) == 15 and epochs.step(10, up=False) == 5
    assert epochs.step(20, up=True) == 20 and epochs.step(5, up=False) == 5  # ends stay
    assert epochs.confine(10, 11, random.Random(0)) == 15 and epochs.confine(10, 8, random.Random(0)) == 5
    horizon = dims[C + "horizon_length"]
    assert horizon.step(16, up=True) == 24 and horizon.step(16, up=False) == 12  # AgileRL's grow/shrink
    assert horizon.step(63, up=True) == 64 and horizon.step(8, up=False) == 8
    assert horizon.scale(16, 1.2, random.Random(0)) == 24  # discrete: a step in the factor's direction


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.0, 1.0), st.floats(0.01, 1.0))
def test_mutations_and_perturbations_stay_inside(seed: int, resample: float, probability: float) -> None:
    explore = ExploreConfig.from_flat({"search_space": SPACE, "mutation_rate": 1.0,
                                       "mutation": {C + "learning_rate": "mutate_float",
                                                    C + "mini_epochs": "mutate_mini_epochs",
                                                    C + "gamma": "mutate_discount"}})
    rng = random.Random(seed)
    params: Dict[str, Any] = dict(explore.search_space.sample({C + "gamma": 0.99}, rng))
    for _ in range(20):
        params = mutate_params(params, explore, rng)
        params = perturb(params, explore, rng, (0.8, 1.2), resample, probability)
        inside, problems = checked_params(params, params, explore.mutation, explore.bounds, explore.search_space)
        assert not problems and inside == params
        assert isinstance(params[C + "horizon_length"], int) and isinstance(params[C + "mini_epochs"], int)
        assert 0.0 < params[C + "gamma"] < 1.0


def test_perturb_probability_leaves_undrawn_keys_unchanged() -> None:
    explore = ExploreConfig.from_flat({"search_space": SPACE, "mutation": {C + "gamma": "mutate_discount"}})
    start: Dict[str, Any] = dict(explore.search_space.sample({C + "gamma": 0.99}, random.Random(1)))
    moved = {key: 0 for key in start}
    for seed in range(300):
        out = perturb(start, explore, random.Random(seed), (0.8, 1.2), 0.0, 0.5)
        for key in start:
            moved[key] += out[key] != start[key]
    # each key changes in about half the draws (a value at a clamp may not move: then fewer)
    assert all(60 <= count <= 190 for count in moved.values()), moved
    everything = perturb(start, explore, random.Random(0), (0.8, 1.2), 0.0, 1.0)
    assert everything == perturb(start, explore, random.Random(0), (0.8, 1.2), 0.0)  # 1: the old stream
    assert all(everything[key] != start[key] for key in start if key != C + "mini_epochs")


def test_a_value_of_zero_is_resampled_in_the_space_and_warned_about_without() -> None:
    explore = ExploreConfig.from_flat({"search_space": {C + "entropy_coef": SPACE[C + "entropy_coef"]},
                                       "mutation": {C + "entropy_coef": "mutate_float"}, "mutation_rate": 1.0})
    moved = mutate_params({C + "entropy_coef": 0.0}, explore, random.Random(0))[C + "entropy_coef"]
    assert 1e-4 <= moved <= 0.05
    plain = ExploreConfig.from_flat({"mutation": {C + "entropy_coef": "mutate_float", C + "gamma": "mutate_discount"}})
    assert zero_valued_keys({C + "entropy_coef": 0.0, C + "gamma": 0.99}, plain) == [C + "entropy_coef"]
    assert zero_valued_keys({C + "entropy_coef": 0.0}, explore) == []
    linear = ExploreConfig.from_flat({"mutation": {C + "entropy_coef": "mutate_float"},
                                      "bounds": {C + "entropy_coef": {"min": 0, "max": 0.01, "scale": "linear"}}})
    assert zero_valued_keys({C + "entropy_coef": 0.0}, linear) == []


def test_donor_values_are_checked_against_the_space() -> None:
    s = space()
    assert s.dims[C + "mini_epochs"].check(15.0) == 15.0
    with pytest.raises(InvalidValueError, match=r"outside the search space \(choice of \[5, 10, 15, 20\]\)"):
        s.dims[C + "mini_epochs"].check(7)
    explore = ExploreConfig.from_flat({"search_space": SPACE})
    _, problems = checked_params({C + "mini_epochs": 15, C + "e_clip": 0.5}, [C + "mini_epochs", C + "e_clip"],
                                 explore.mutation, explore.bounds, explore.search_space)
    assert len(problems) == 1 and "e_clip" in problems[0]


def resolved_config(**config: Any) -> Dict[str, Any]:
    values = {"learning_rate": 3e-4, "e_clip": 0.2, "horizon_length": 32, "mini_epochs": 5, "entropy_coef": 0.0,
              "num_actors": 512, "minibatch_size": "auto", "gamma": 0.99, "tau": 0.95, "grad_norm": 1.0,
              "critic_coef": 2.0, "bounds_loss_coef": 1e-4, "kl_threshold": 0.008}
    values.update(config)
    return {"seed": 3, "checkpoint": "", "experiment": "exp", "train": {"params": {"config": values}}}


def test_start_up_checks_name_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_space(parse_space("s", {C + "learnig_rate": SPACE[C + "learning_rate"],
                                        C + "mini_epochs": SPACE[C + "mini_epochs"]}), resolved_config(mini_epochs=4))
    message = str(info.value)
    assert "learnig_rate" in message and "learning_rate" in message  # the nearest existing key
    assert f"'{C}mini_epochs': the configured value 4 is not in its choice list [5, 10, 15, 20]" in message
    assert "a list of several values does not say which one to take" in message


def test_a_fixed_key_may_differ_from_the_configured_value() -> None:
    for spec in ({"type": "choice", "values": [0.99]}, {"fixed": 0.99}, {"fixed": "0.99"}):
        resolved = resolve_space(parse_space("s", {C + "gamma": spec}), resolved_config(gamma=0.95))
        assert resolved.dims[C + "gamma"].fixed and resolved.dims[C + "gamma"].values == (0.99,)
    with pytest.raises(ConfigError, match="fixed takes no other field"):
        parse_space("s", {C + "gamma": {"fixed": 0.99, "type": "choice"}})
    with pytest.raises(ConfigError, match="must be a single value"):
        parse_space("s", {C + "gamma": {"fixed": [0.9, 0.99]}})


def test_a_fixed_key_binds_fresh_members_only_and_still_checks_recorded_values() -> None:
    explore = ExploreConfig.from_flat({"search_space": {C + "gamma": {"fixed": 0.99}}})
    keys = [C + "gamma"]
    assert checked_params({C + "gamma": 0.97}, keys, explore.mutation, explore.bounds, explore.search_space) == \
        ({C + "gamma": 0.97}, [])  # recorded before the key was fixed: kept
    _, problems = checked_params({C + "gamma": 5.0}, keys, explore.mutation, explore.bounds, explore.search_space)
    assert len(problems) == 1 and "gamma" in problems[0]  # still inside mutate_discount's own range


def test_divisors_of_the_batch() -> None:
    spec = {C + "minibatch_size": {"type": "choice", "divisors_of": [C + "horizon_length", C + "num_actors"],
                                   "low": 512, "high": 8192}}
    resolved = resolve_space(parse_space("s", spec), resolved_config())
    assert resolved.dims[C + "minibatch_size"].values == (512, 1024, 2048, 4096, 8192)
    with pytest.raises(ConfigError, match="no divisor of 96"):
        resolve_space(parse_space("s", spec), resolved_config(horizon_length=3, num_actors=32))
    with pytest.raises(ConfigError, match="whole number >= 1"):
        resolve_space(parse_space("s", spec), resolved_config(num_actors="many"))


def test_the_shipped_design_doc_space() -> None:
    text = (CONFIGS / "ppo_design_doc.yaml").read_text()
    assert text.splitlines()[0] == "# @package pbt.search_space"
    shipped = resolve_space(parse_space("search_space", yaml.safe_load(text)), resolved_config())
    dims = shipped.dims
    assert (dims[C + "learning_rate"].type, dims[C + "learning_rate"].low, dims[C + "learning_rate"].high) == \
        ("loguniform", 1e-5, 1e-3)
    assert dims[C + "mini_epochs"].values == (5, 10, 15, 20)
    assert (dims[C + "e_clip"].low, dims[C + "e_clip"].high) == (0.05, 0.3)
    assert (dims[C + "entropy_coef"].type, dims[C + "entropy_coef"].low, dims[C + "entropy_coef"].high) == \
        ("loguniform", 1e-4, 0.05)
    assert dims[C + "gamma"].values == (0.99,) and dims[C + "tau"].values == (0.95,)
    assert all(16384 % v == 0 for v in dims[C + "minibatch_size"].values)
    assert PbtConfig.from_mapping({"search_space": yaml.safe_load(text)}).explore.search_space


def test_the_shipped_reacher_wide_space_is_the_ablation_spread() -> None:
    """benchmarks/ablation.py's hand-written sampler's ranges, typed, so PB2 can model them."""
    text = (CONFIGS / "reacher_wide.yaml").read_text()
    assert text.splitlines()[0] == "# @package pbt.search_space"
    dims = resolve_space(parse_space("search_space", yaml.safe_load(text)), resolved_config()).dims
    assert {k: (d.type, d.low, d.high) for k, d in dims.items()} == {
        C + "learning_rate": ("loguniform", 1e-4, 3.16e-3), C + "entropy_coef": ("loguniform", 1e-4, 3.16e-2),
        C + "gamma": ("uniform", 0.95, 0.995), C + "tau": ("uniform", 0.9, 0.98), C + "mini_epochs": ("int", 2, 8),
        C + "e_clip": ("uniform", 0.1, 0.3)}
    sample = PbtConfig.from_mapping({"search_space": yaml.safe_load(text)}).explore.search_space.sample(
        {}, random.Random(0))
    assert 2 <= sample[C + "mini_epochs"] <= 8 and 1e-4 <= sample[C + "learning_rate"] <= 3.16e-3


def test_the_shipped_reacher_kl_space_searches_the_kl_target_not_the_learning_rate() -> None:
    """Under the adaptive schedule the learning rate follows the KL target: reacher_kl searches that."""
    text = (CONFIGS / "reacher_kl.yaml").read_text()
    dims = resolve_space(parse_space("search_space", yaml.safe_load(text)), resolved_config()).dims
    assert (dims[C + "kl_threshold"].type, dims[C + "kl_threshold"].low, dims[C + "kl_threshold"].high) == \
        ("loguniform", 2e-3, 3.2e-2)
    assert C + "learning_rate" not in dims
    assert set(dims) - {C + "kl_threshold"} == set(yaml.safe_load((CONFIGS / "reacher_wide.yaml").read_text())) - {
        C + "learning_rate"}


def member_cfg(ws: Path, idx: int, **pbt: Any) -> Dict[str, Any]:
    cfg = resolved_config()
    block = {"enabled": True, "policy_idx": idx, "num_policies": 4, "workspace": str(ws), "interval_steps": 1000,
             "search_space": yaml.safe_load((CONFIGS / "ppo_design_doc.yaml").read_text())}
    block.update(pbt)
    cfg["pbt"] = block
    return cfg


def test_fresh_members_draw_distinct_samples_inside_and_log_them(tmp_path: Path) -> None:
    samples = []
    for idx in range(4):
        member = PbtMember(member_cfg(tmp_path / "ws", idx), tmp_path / f"run{idx}", [])
        config = member.startup()["train"]["params"]["config"]
        member.close()
        samples.append(config)
        entry = member.workspace.read_lineage(idx)[0]
        assert entry.reason == "initial sample of the search space" and entry.mode == "startup"
        assert entry.params_after[C + "minibatch_size"] == config["minibatch_size"]
        assert 1e-5 <= config["learning_rate"] <= 1e-3 and config["mini_epochs"] in (5, 10, 15, 20)
        assert config["minibatch_size"] in (512, 1024, 2048, 4096, 8192)
        assert 0.05 <= config["e_clip"] <= 0.3 and 1e-4 <= config["entropy_coef"] <= 0.05
        assert (config["gamma"], config["tau"]) == (0.99, 0.95)
    assert len({s["learning_rate"] for s in samples}) == 4 and len({s["e_clip"] for s in samples}) == 4
    again = PbtMember(member_cfg(tmp_path / "ws2", 0), tmp_path / "again", []).startup()
    assert again["train"]["params"]["config"] == samples[0]  # seeded by the run seed and policy_idx


def test_a_resumed_member_never_redraws(tmp_path: Path) -> None:
    member = PbtMember(member_cfg(tmp_path / "ws", 1), tmp_path / "run", [])
    first = dict(member.startup()["train"]["params"]["config"])
    member.workspace.publish(1, 1000, 1.0, member.params, b"bytes")
    member.close()
    resumed = PbtMember(member_cfg(tmp_path / "ws", 1, seed=99), tmp_path / "run", []).startup()
    assert resumed["train"]["params"]["config"] == first


def test_a_fixed_key_never_mutates_or_perturbs() -> None:
    explore = ExploreConfig.from_flat({"search_space": {C + "gamma": {"fixed": 0.99}, **SPACE}, "mutation_rate": 1.0,
                                       "mutation": {C + "gamma": "mutate_discount"}})
    params = {C + "gamma": 0.97, C + "learning_rate": 3e-4, C + "e_clip": 0.2, C + "horizon_length": 32,
              C + "mini_epochs": 10, C + "entropy_coef": 0.01}
    for seed in range(20):
        assert mutate_params(params, explore, random.Random(seed))[C + "gamma"] == 0.97
        assert perturb(params, explore, random.Random(seed), [0.8, 1.2], 1.0)[C + "gamma"] == 0.97


def test_fresh_members_take_the_fixed_values_over_the_tasks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Pendulum's train config has gamma 0.95; the design document fixes 0.99."""
    for name, pbt in (("sampled", {}), ("unsampled", {"initial_mutation": False})):
        cfg = member_cfg(tmp_path / name, 0, **pbt)
        cfg["train"]["params"]["config"]["gamma"] = 0.95
        with caplog.at_level(logging.INFO, logger="pbt.mutation.space"):
            member = PbtMember(cfg, tmp_path / f"run_{name}", [])
            config = member.startup()["train"]["params"]["config"]
        member.close()
        assert (config["gamma"], config["tau"]) == (0.99, 0.95)
        assert any(f"fixes {C}gamma=0.99 for a fresh member, overriding the task's configured value 0.95"
                   in r.getMessage() for r in caplog.records)
        assert not any(f"fixes {C}tau" in r.getMessage() for r in caplog.records)  # 0.95 already
        entry = member.workspace.read_lineage(0)[0]
        assert entry.params_before[C + "gamma"] == 0.95 and entry.params_after[C + "gamma"] == 0.99
        caplog.clear()
    assert entry.reason == "fixed values of the search space" and entry.params_after[C + "mini_epochs"] == 5
    cfg = member_cfg(tmp_path / "from_checkpoint", 0)
    cfg["train"]["params"]["config"]["gamma"] = 0.95
    cfg["checkpoint"] = str(tmp_path / "some.pth")  # starts from weights: no sample, the fixed value still applies
    member = PbtMember(cfg, tmp_path / "run_checkpoint", [])
    assert member.startup()["train"]["params"]["config"]["gamma"] == 0.99
    member.close()


def test_a_resumed_member_keeps_its_recorded_value_of_a_fixed_key(tmp_path: Path) -> None:
    cfg = member_cfg(tmp_path / "ws", 1, search_space={})  # started before the space fixed gamma
    member = PbtMember(cfg, tmp_path / "run", [])
    member.startup()
    member.params[C + "gamma"] = 0.97
    member.workspace.publish(1, 1000, 1.0, member.params, b"bytes")
    member.close()
    resumed = PbtMember(member_cfg(tmp_path / "ws", 1), tmp_path / "run", []).startup()
    assert resumed["train"]["params"]["config"]["gamma"] == 0.97


def test_start_up_warns_about_a_zero_that_never_moves(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = member_cfg(tmp_path / "ws", 0, search_space={},
                     mutation={C + "entropy_coef": "mutate_float", C + "learning_rate": "mutate_float"})
    with caplog.at_level(logging.WARNING):
        PbtMember(cfg, tmp_path / "run", [])
    assert any(C + "entropy_coef is 0" in r.getMessage() for r in caplog.records)
    assert not any("learning_rate is 0" in r.getMessage() for r in caplog.records)


def test_every_key_of_the_space_is_explored_whatever_the_scheme_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A scheme that leaves a space key out does not stop it mutating (the space says what is
    searched); start-up names every explored key and where it comes from, and not the fixed ones."""
    cfg = member_cfg(tmp_path / "ws", 0, mutation={C + "grad_norm": "mutate_float"}, mutation_rate=1.0)
    with caplog.at_level(logging.INFO, logger="pbt.mutation.scheme"):
        member = PbtMember(cfg, tmp_path / "run", [])
    lines = [r.getMessage() for r in caplog.records if "explores" in r.getMessage()]
    assert len(lines) == 1 and "explores 6 key(s)" in lines[0], lines
    assert f"{C}learning_rate (search space)" in lines[0] and f"{C}grad_norm (pbt.mutation)" in lines[0]
    assert f"{C}gamma" not in lines[0] and f"{C}tau" not in lines[0]  # fixed by the space
    mutated = mutate_params(member.params, member.pbt.explore, random.Random(0))
    assert mutated[C + "learning_rate"] != member.params[C + "learning_rate"]
    assert mutated[C + "gamma"] == member.params[C + "gamma"]
