"""A donor's hyperparameters are checked against the scheme before anything of it is taken: a peer
publishing junk ("abc", 1e9 mini_epochs, NaN or 5.0 gamma) stays ranked but is never a donor, the
refusal is reported, another valid donor is picked, and decide() never raises for it nor returns a
value a member may not train with. No torch."""
import math
import random
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import pbt_config
from pbt.config import PbtConfig
from pbt.mutation import checked_params
from pbt.selection import REPLACE, MemberState, decide, refused_for_params, population_view
from pbt.storage.record import Record

P = "train.params.config."
SCHEME = {P + "learning_rate": "mutate_float", P + "mini_epochs": "mutate_mini_epochs", P + "gamma": "mutate_discount"}
OWN = {P + "learning_rate": 3e-4, P + "mini_epochs": 4, P + "gamma": 0.99}
FRAME = 50_000_000


def rec(idx: int, objective: Optional[float], params: Any = None) -> Record:
    return Record(policy_idx=idx, iteration=5, frame=FRAME, objective=objective,
                  params=dict(OWN) if params is None else params, checkpoint="000005.pth", checksum="0" * 64,
                  episode_returns=[objective or 0.0] * 20, frames_since_replace=FRAME)


def cfg(rule: str = "dexpbt", n: int = 4, **kw: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(num_policies=n, selection=rule, mutation=SCHEME, start_after=0, initial_delay=0,
                                  ready_after=0, significance=None, mutation_rate=0.5, replace_fraction_best=0.5,
                                  replace_threshold_frac_std=0.0, replace_threshold_frac_absolute=0.0,
                                  threshold_std=0.0, threshold_abs=0.0, dbg_mode=True)
    values.update(kw)
    return pbt_config(values)


def own() -> MemberState:
    return MemberState(rec(0, 1.0), 1.0, FRAME)


JUNK = [{P + "learning_rate": "abc"}, {P + "mini_epochs": 1e9}, {P + "gamma": math.nan}, {P + "gamma": 5.0},
        [(P + "gamma", 0.9)], {P + "learning_rate": True}, {P + "mini_epochs": 2.5}]


@pytest.mark.parametrize("rule", ["dexpbt", "threshold"])
@pytest.mark.parametrize("junk", JUNK, ids=[str(j) for j in JUNK])
def test_a_top_ranked_peer_with_junk_hyperparameters_is_never_a_donor(rule: str, junk: Any) -> None:
    params = {**OWN, **junk} if isinstance(junk, dict) else junk
    peers = [rec(1, 100.0, params), rec(2, 50.0, {**OWN, P + "gamma": 0.9, P + "mini_epochs": 6.0}), rec(3, 0.5)]
    refused: List[Tuple[int, str]] = []
    donors = set()
    for seed in range(30):
        decision = decide(own(), peers, cfg(rule), random.Random(seed))
        refused.extend(decision.refused.items())
        donors.add(decision.donor_idx)
        clean, problems = checked_params(decision.params_after, OWN, SCHEME)
        assert not problems and clean == decision.params_after
    assert 1 not in donors and 2 in donors  # the next valid leader is taken instead
    assert {i for i, _ in refused} == {1}
    why = refused[0][1]
    assert ("not a mapping" in why) if not isinstance(junk, dict) else why.startswith(f"'{next(iter(junk))}'")


def test_a_donors_whole_float_for_an_int_key_arrives_as_an_int() -> None:
    peers = [rec(1, 100.0, {**OWN, P + "mini_epochs": 6.0}), rec(2, 0.5), rec(3, 0.6)]
    for seed in range(20):
        decision = decide(own(), peers, cfg(mutation_rate=0.0, min_mutations=0), random.Random(seed))
        if decision.action == REPLACE and decision.params_after[P + "mini_epochs"] == 6:
            assert isinstance(decision.params_after[P + "mini_epochs"], int)
            return
    pytest.fail("never took the donor's hyperparameters")


def test_refusals_are_named_in_the_decision() -> None:
    peers = [rec(1, 100.0, {**OWN, P + "learning_rate": "abc"}), rec(2, 0.5), rec(3, 0.6)]
    decision = decide(own(), peers, cfg(), random.Random(0))
    assert decision.refused == {1: "'train.params.config.learning_rate': 'abc' (str) is not a number"}


def test_refused_for_params_reads_the_record_each_member_is_compared_by() -> None:
    newer_junk = Record(policy_idx=1, iteration=9, frame=FRAME, objective=5.0, params={P + "gamma": "x"},
                        checkpoint="000009.pth", checksum="1" * 64)
    view = population_view(rec(0, 1.0), [rec(1, 2.0), newer_junk], 2)  # own iteration 5: member 1's 5 counts
    assert refused_for_params(view, 0, lambda p: checked_params(p, OWN, SCHEME)[1]) == {}
    view = population_view(Record(0, 9, FRAME, 1.0, dict(OWN), "000009.pth", "0" * 64), [rec(1, 2.0), newer_junk], 2)
    assert list(refused_for_params(view, 0, lambda p: checked_params(p, OWN, SCHEME)[1])) == [1]


values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.text(max_size=4),
                   st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=2))
param_dicts = st.one_of(values, st.dictionaries(st.sampled_from(sorted(OWN) + ["x", ""]), values, max_size=5),
                        st.fixed_dictionaries({k: values for k in OWN}))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-100, 100), param_dicts), min_size=1, max_size=5),
       st.sampled_from(["dexpbt", "threshold"]), st.integers(0, 2**31))
def test_decide_never_raises_for_junk_donor_params_nor_returns_an_invalid_value(
        peers: List[Tuple[float, Any]], rule: str, seed: int) -> None:
    records = [rec(i + 1, objective, params) for i, (objective, params) in enumerate(peers)]
    config = cfg(rule, n=len(records) + 1)
    decision = decide(own(), records, config, random.Random(seed))  # no error at all for a peer's junk
    clean, problems = checked_params(decision.params_after, OWN, SCHEME)
    assert not problems and clean == decision.params_after
    if decision.donor is not None:
        assert not checked_params(decision.donor.params, OWN, SCHEME)[1]
