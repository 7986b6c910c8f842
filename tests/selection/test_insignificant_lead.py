"""``pbt.insignificant_lead``: what an underperformer does when its donor's lead fails the
significance test: explore its own hyperparameters ("mutate", the default) or change nothing
("keep"), for every strategy that tests significance. No torch."""
import random
from typing import Any, Dict, List

import pytest

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.selection import KEEP, MUTATE, REPLACE, MemberState, decide
from pbt.storage.record import Record

LR = "train.params.config.learning_rate"
FRAME = 50_000_000


def rec(idx: int, objective: float, returns: List[float]) -> Record:
    return Record(policy_idx=idx, iteration=5, frame=FRAME, objective=objective, params={LR: 1e-3},
                  checkpoint="000005.pth", checksum="0" * 64, episode_returns=returns, frames_since_replace=FRAME)


def config(rule: str, **kw: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(num_policies=4, selection=rule, mutation={LR: "mutate_float"})
    values.update(kw)
    return pbt_config(values)


def noisy(mean: float) -> List[float]:
    """30 episodes spread +-200 around ``mean``: a lead of 20 over it is not significant at 0.05."""
    return [mean + (200.0 if i % 2 else -200.0) for i in range(30)]


def population(own_returns: List[float]) -> tuple:
    own = MemberState(rec(0, 0.0, own_returns), None, FRAME)
    peers = [rec(i, 20.0 * i, [20.0 * i + 0.1 * (j % 3) for j in range(30)]) for i in (1, 2, 3)]
    return own, peers


@pytest.mark.parametrize("rule", ["threshold", "dexpbt", "truncation", "tournament"])
def test_an_insignificant_lead_mutates_by_default_and_keeps_on_request(rule: str) -> None:
    own, peers = population(noisy(0.0))
    for seed in range(5):
        default = decide(own, peers, config(rule), random.Random(seed))
        kept = decide(own, peers, config(rule, insignificant_lead="keep"), random.Random(seed))
        if "lead not significant" not in default.reason:
            continue  # this draw (tournament) compared with nobody better
        assert default.action == MUTATE and default.params_after != default.params_before, default.reason
        assert kept.action == KEEP and kept.params_after == kept.params_before
        assert kept.reason.startswith("keep (insignificant_lead=keep), lead not significant"), kept.reason
        break
    else:
        pytest.fail(f"{rule}: no draw reached the significance test")


@pytest.mark.parametrize("rule", ["threshold", "dexpbt"])
def test_a_significant_lead_still_replaces_with_keep(rule: str) -> None:
    own, peers = population([0.1 * (j % 3) for j in range(30)])  # the same mean, no noise: 60 ahead is significant
    decision = decide(own, peers, config(rule, insignificant_lead="keep"), random.Random(0))
    assert decision.action == REPLACE, decision.reason


def test_a_misspelt_value_names_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        config("threshold", insignificant_lead="keeep")
    assert "pbt.insignificant_lead='keeep'" in str(err.value) and "Did you mean 'keep'" in str(err.value)
    assert "mutate, keep" in str(err.value)
