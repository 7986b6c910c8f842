"""``pbt.significance_samples=evaluations``: with a deterministic evaluation the significance test
counts each pooled evaluation's mean as one sample, so a lead that swings from one snapshot of the
weights to the next is not significant however many episodes each evaluation played. No torch."""
import random
from typing import Any, List

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_insignificant_lead import FRAME, config, rec

from pbt.errors import ConfigError
from pbt.selection import REPLACE, MemberState, decide
from pbt.selection.stats import group_means

RULES = ["threshold", "dexpbt", "truncation", "tournament", "pb2", "mfpbt"]
EPISODES = 16


def evaluations(*means: float) -> List[float]:
    """A pooled window, oldest evaluation first: each evaluation ``EPISODES`` episodes around its
    mean (+-0.001: the episodes of one snapshot agree closely)."""
    return [m + (0.001 if i % 2 else -0.001) for m in means for i in range(EPISODES)]


def evaluated(**kw: Any) -> Any:
    return config(
        "threshold", eval_episodes=EPISODES, eval_window=3, significance_samples="evaluations", **kw
    )


def population(own_means: List[float], lead_means: List[float]) -> tuple:
    own = MemberState(rec(0, sum(own_means) / 3, evaluations(*own_means)), None, FRAME)
    peers = [rec(i, sum(lead_means) / 3 + 0.001 * i, evaluations(*lead_means)) for i in (1, 2, 3)]
    return own, peers


def replaced(own: MemberState, peers: list, cfg: Any) -> List[bool]:
    """For 8 seeds: did member 0 take a donor's weights?"""
    return [decide(own, peers, cfg, random.Random(seed)).action == REPLACE for seed in range(8)]


def test_a_lead_that_swings_between_snapshots_is_not_significant_over_evaluations() -> None:
    # ahead by 0.01 on average, but behind at one snapshot of three: hundreds of tight episodes say
    # "significant", three snapshots do not
    own, peers = population([0.010, 0.012, 0.011], [0.040, 0.002, 0.021])
    by_episode = config("threshold", eval_episodes=EPISODES, eval_window=3)
    assert all(replaced(own, peers, by_episode))
    for seed in range(8):
        decision = decide(own, peers, evaluated(), random.Random(seed))
        assert decision.action != REPLACE, decision.reason
        assert "lead not significant" in decision.reason and "over 3 and 3 evaluations" in decision.reason


def test_a_lead_at_every_snapshot_is_significant_over_evaluations() -> None:
    own, peers = population([0.010, 0.012, 0.011], [0.050, 0.049, 0.052])
    decision = decide(own, peers, evaluated(), random.Random(0))
    assert decision.action == REPLACE and "over 3 and 3 evaluations" in decision.reason, decision.reason


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_counts_evaluations(rule: str) -> None:
    own, peers = population([0.010, 0.012, 0.011], [0.040, 0.002, 0.021])
    cfg = config(rule, eval_episodes=EPISODES, eval_window=3, significance_samples="evaluations")
    assert any(replaced(own, peers, config(rule, eval_episodes=EPISODES, eval_window=3))), rule  # episodes would
    for seed in range(8):
        decision = decide(own, peers, cfg, random.Random(seed))
        assert decision.action != REPLACE, f"{rule}: {decision.reason}"


def test_one_evaluation_is_too_few_samples() -> None:
    own = MemberState(rec(0, 0.0, evaluations(0.0)), None, FRAME)  # one evaluation only (a fresh member)
    peers = [rec(i, 0.05 * i, evaluations(0.05 * i, 0.05 * i, 0.05 * i)) for i in (1, 2, 3)]
    decision = decide(own, peers, evaluated(), random.Random(0))
    assert decision.action != REPLACE
    assert "too few evaluation samples for a significance test (3 donor, 1 own)" in decision.reason, decision.reason


@pytest.mark.parametrize(
    "kw, fix",
    [(dict(), "Set pbt.eval_episodes"), (dict(eval_episodes=16), "pbt.eval_window >= 3")],
)
def test_evaluations_without_a_pooled_window_fail_at_start_up(kw: Any, fix: str) -> None:
    with pytest.raises(ConfigError, match="significance_samples=evaluations") as err:
        config("threshold", significance_samples="evaluations", **kw)
    assert fix in str(err.value)


def test_a_misspelt_value_says_what_it_meant() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'evaluations'"):
        config("threshold", eval_episodes=16, eval_window=3, significance_samples="evaluation")


@given(st.lists(st.floats(-1e3, 1e3), max_size=60), st.integers(1, 20))
def test_group_means_are_whole_groups_from_the_newest(values: List[float], size: int) -> None:
    means = group_means(values, size)
    assert len(means) == len(values) // size
    for k, mean in enumerate(reversed(means)):  # the k-th group from the end
        group = values[len(values) - (k + 1) * size : len(values) - k * size]
        assert mean == pytest.approx(sum(group) / size, abs=1e-9)


def test_a_group_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="group size"):
        group_means([1.0], 0)


def test_training_samples_test_the_training_episodes_beside_the_evaluations() -> None:
    """Ranked by evaluation (the donor's lead: 0.04 against 0.01 at every snapshot), tested on the
    training episodes the records carry: where those overlap, the lead is not significant; where
    the donor's are clearly higher, it is."""
    import dataclasses

    own, peers = population([0.010, 0.012, 0.011], [0.040, 0.041, 0.039])
    noisy_training = [0.002 + (0.01 if i % 2 else -0.002) for i in range(100)]
    cfg = config("threshold", eval_episodes=EPISODES, eval_window=3, significance_samples="training")

    def with_training(record: Any, returns: List[float]) -> Any:
        return dataclasses.replace(record, evaluated=True, training_returns=returns)

    own = MemberState(with_training(own.record, noisy_training), None, FRAME)
    overlapping = [with_training(p, [v + 0.0005 for v in noisy_training]) for p in peers]
    for seed in range(8):
        decision = decide(own, overlapping, cfg, random.Random(seed))
        assert decision.action != REPLACE and "over 100 and 100 training episodes" in decision.reason, decision.reason
    clearly = [with_training(p, [v + 0.05 for v in noisy_training]) for p in peers]
    decision = decide(own, clearly, cfg, random.Random(0))
    assert decision.action == REPLACE and "training episodes vs significance" in decision.reason, decision.reason


def test_a_record_of_training_episodes_is_its_own_training_sample() -> None:
    """A peer ranking by training episodes (no evaluations) is tested on its episodes as they are."""
    own, peers = population([0.010, 0.012, 0.011], [0.040, 0.041, 0.039])  # records not marked evaluated
    cfg = config("threshold", eval_episodes=EPISODES, eval_window=3, significance_samples="training")
    decision = decide(own, peers, cfg, random.Random(0))
    assert decision.action == REPLACE and f"over {3 * EPISODES} and {3 * EPISODES} training" in decision.reason


def test_training_samples_without_evaluations_fail_at_start_up() -> None:
    with pytest.raises(ConfigError, match="significance_samples=training .* pbt.eval_episodes=0"):
        config("threshold", significance_samples="training")
