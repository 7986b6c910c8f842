"""PB2: the data members publish, the GP bandit's acquisitions and the strategy's explore step."""
import math
import random
import sys
from typing import Any, Dict, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import pbt_config

from pbt.config import PbtConfig
from pbt.errors import ConfigError
from pbt.mutation.space import parse_space
from pbt.selection import REPLACE, MemberState, decide
from pbt.selection.pb2_data import (
    IntervalHistory,
    data_points,
    denormalise,
    normalise,
    params_at,
)
from pbt.storage.record import Record, parse_record, record_to_yaml

LR = "train.params.config.learning_rate"
ENT = "train.params.config.entropy_coef"
EPOCHS = "train.params.config.mini_epochs"
SPACE = {LR: {"type": "loguniform", "low": 1e-5, "high": 1e-2}, ENT: {"type": "uniform", "low": 0.0, "high": 0.02},
         EPOCHS: {"type": "int", "low": 1, "high": 8}}
DIMS = [parse_space("s", SPACE).dims[k] for k in (ENT, LR)]  # the continuous ones, by key
FRAME = 10_000_000
OPTIMUM = (0.7, 0.3)  # normalised (entropy, learning rate)


def rec(idx: int, iteration: int, objective: Optional[float], params: Dict[str, Any],
        history: Optional[Dict[int, Optional[float]]] = None,
        param_history: Optional[Dict[int, Dict[str, Any]]] = None) -> Record:
    return Record(policy_idx=idx, iteration=iteration, frame=FRAME, objective=objective, params=dict(params),
                  checkpoint=f"{iteration:06d}.pth", checksum="0" * 64, frames_since_replace=FRAME,
                  history=dict(history or {}), param_history=dict(param_history or {}))


def at(x_ent: float, x_lr: float, epochs: int = 4) -> Dict[str, Any]:
    return {ENT: denormalise(DIMS[0], x_ent), LR: denormalise(DIMS[1], x_lr), EPOCHS: epochs}


def gain(x: Any) -> float:
    return -((x[0] - OPTIMUM[0]) ** 2 + (x[1] - OPTIMUM[1]) ** 2)


# -- data ---------------------------------------------------------------------------------------


def test_each_interval_pairs_its_hyperparameters_with_its_objective_change() -> None:
    a, b = at(0.1, 0.1), at(0.9, 0.9)
    record = rec(0, 4, 7.0, b, {1: 1.0, 2: 2.0, 3: 4.0, 4: 7.0}, {1: a, 3: b})
    points = data_points([record], DIMS)
    assert [(p.time, round(p.change, 9)) for p in points] == [(2, 1.0), (3, 2.0), (4, 3.0)]
    assert [tuple(round(v, 9) for v in p.x) for p in points] == [(0.1, 0.1), (0.9, 0.9), (0.9, 0.9)]
    assert params_at(record, 2) == a and params_at(record, 3) == b and params_at(record, 5) is None


def test_an_older_record_gives_its_newest_interval_and_gaps_give_nothing() -> None:
    old = rec(1, 6, 5.0, at(0.5, 0.5), {3: 1.0, 5: 3.0, 6: 5.0})  # no param_history: written before it
    points = data_points([old], DIMS)
    assert [(p.time, p.change) for p in points] == [(6, 2.0)]  # 4 is missing: no change over 4..5
    nan = rec(2, 3, 1.0, at(0.5, 0.5), {2: float("nan"), 3: 1.0}, {2: at(0.5, 0.5)})
    assert data_points([nan], DIMS) == []


def test_normalise_maps_log_and_linear_bounds_and_back_inside() -> None:
    lr, ent = DIMS[1], DIMS[0]
    assert normalise(lr, 1e-5) == 0.0 and normalise(lr, 1e-2) == 1.0
    assert math.isclose(normalise(lr, 10 ** -3.5), 0.5)
    assert normalise(ent, 0.03) == 1.0 and normalise(ent, "x") is None and normalise(lr, 0.0) is None
    for x in (0.0, 0.123, 1.0):
        assert 1e-5 <= denormalise(lr, x) <= 1e-2 and 0.0 <= denormalise(ent, x) <= 0.02


def test_the_interval_log_keeps_change_points_and_gains_and_survives_the_record() -> None:
    log = IntervalHistory()
    a, b = at(0.1, 0.1), at(0.2, 0.2)
    objectives: Dict[int, Optional[float]] = {}
    for iteration, params, objective in ((1, a, 1.0), (2, a, 3.0), (3, b, None), (4, b, 4.0), (5, b, 6.0)):
        objectives[iteration] = objective
        log.note(iteration, params, objectives)
    assert log.params == {1: a, 3: b} and log.gains == {2: 2.0, 5: 2.0}  # none next to an unknown objective
    record = rec(0, 5, 6.0, b, {5: 6.0}, log.params)
    record = Record(**{**record.__dict__, "gains": log.gains})
    again = parse_record(record_to_yaml(record), "r")
    assert again.param_history == {1: a, 3: b} and again.gains == {2: 2.0, 5: 2.0}
    assert IntervalHistory.restored(again).gains == log.gains
    points = data_points([again], DIMS)  # gains win over history: the intervals before a replacement count
    assert [(p.time, p.change, tuple(round(v, 9) for v in p.x)) for p in points] == [(2, 2.0, (0.1, 0.1)),
                                                                                    (5, 2.0, (0.2, 0.2))]


def test_a_record_without_param_history_is_written_as_before() -> None:
    record = rec(0, 4, 1.0, at(0.1, 0.1), {4: 1.0})
    assert b"param_history" not in record_to_yaml(record) and b"gains" not in record_to_yaml(record)
    assert parse_record(record_to_yaml(record), "r").param_history == {}


# -- the bandit ---------------------------------------------------------------------------------


def test_repeated_acquisitions_reach_the_optimum_of_a_quadratic() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("threadpoolctl")
    from pbt.selection.pb2_model import acquire

    rng = random.Random(3)
    X: List[Any] = []
    y: List[float] = []
    for t in (1, 2):  # a random start, 4 members
        for _ in range(4):
            x = (rng.random(), rng.random())
            X.append(x + (float(t),))
            y.append(gain(x) + rng.gauss(0.0, 0.005))
    picks = []
    for t in range(3, 15):
        pick = acquire(X, y, [], float(t), 1.0, rng)
        picks.append(pick.x)
        X.append(pick.x + (float(t),))
        y.append(gain(pick.x) + rng.gauss(0.0, 0.005))
    distances = [math.dist(x, OPTIMUM) for x in picks]
    assert all(0.0 <= v <= 1.0 for x in picks for v in x)
    assert min(distances[-4:]) < 0.08 and max(distances[-3:]) < 0.2, distances


# -- the strategy -------------------------------------------------------------------------------


def cfg(**kwargs: Any) -> PbtConfig:
    values: Dict[str, Any] = dict(enabled=True, num_policies=4, policy_idx=0, selection="pb2", search_space=SPACE,
                                  mutation={EPOCHS: "mutate_mini_epochs"}, start_after=0, initial_delay=0,
                                  ready_after=0, significance=None)
    values.update(kwargs)
    return pbt_config(values)


def population(iteration: int = 6) -> Dict[int, Record]:
    """Four members whose records carry 5 intervals each; member 0 is the worst."""
    rng = random.Random(11)
    out = {}
    for idx in range(4):
        history: Dict[int, Optional[float]] = {}
        changes: Dict[int, Dict[str, Any]] = {}
        objective = 0.0
        for k in range(1, iteration + 1):
            x = (rng.random(), rng.random())
            changes[k] = at(*x)
            objective += gain(x) + (0.0 if idx else -1.0)
            history[k] = objective
        out[idx] = rec(idx, iteration, objective, changes[iteration], history, changes)
    return out


def test_pb2_explores_inside_the_bounds_reproducibly() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("threadpoolctl")
    members = population()
    own = MemberState(members[0], None, FRAME)
    peers = [members[i] for i in (1, 2, 3)]
    first = decide(own, peers, cfg(), random.Random(5))
    again = decide(own, peers, cfg(), random.Random(5))
    other = decide(own, peers, cfg(), random.Random(6))
    assert first.action == REPLACE and "PB2: UCB over 20 points of 4 member(s)" in first.reason, first.reason
    assert first.params_after == again.params_after and first.reason == again.reason
    assert other.params_after != first.params_after
    for decision in (first, other):
        after = decision.params_after
        assert 1e-5 <= after[LR] <= 1e-2 and 0.0 <= after[ENT] <= 0.02 and after[EPOCHS] in range(1, 9)


def test_without_enough_data_pb2_perturbs() -> None:
    members = {i: rec(i, 1, float(i), at(0.5, 0.5), {1: float(i)}) for i in range(4)}
    decision = decide(MemberState(members[0], None, FRAME), [members[i] for i in (1, 2, 3)], cfg(), random.Random(0))
    assert decision.action == REPLACE and "PB2: 0 data point(s) < 3, continuous keys perturbed" in decision.reason


def test_pb2_needs_a_continuous_search_space() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("threadpoolctl")
    with pytest.raises(ConfigError, match="no search space.*pbt/search_space=<name>"):
        cfg(search_space=None).validate_population()
    with pytest.raises(ConfigError, match="no loguniform/uniform key"):
        cfg(search_space={EPOCHS: SPACE[EPOCHS]}).validate_population()
    cfg().validate_population()


def test_pb2_without_scikit_learn_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    with pytest.raises(ConfigError, match=r'pip install "pbt-rl\[pb2\]"'):
        cfg().validate_population()


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 9))
def test_every_pb2_choice_lies_inside_the_search_space(seed: int, iteration: int) -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("threadpoolctl")
    rng = random.Random(seed)
    members = {}
    for idx in range(4):
        history = {k: rng.uniform(-10, 10) for k in range(1, iteration + 1)}
        changes = {k: at(rng.random(), rng.random(), rng.randint(1, 8)) for k in range(1, iteration + 1, 2)}
        members[idx] = rec(idx, iteration, history[iteration], changes[max(changes)], history, changes)
    members[0] = rec(0, iteration, -100.0, members[0].params, {**members[0].history, iteration: -100.0},
                     members[0].param_history)
    decision = decide(MemberState(members[0], None, FRAME), [members[i] for i in (1, 2, 3)], cfg(), random.Random(seed))
    after = decision.params_after
    assert decision.action == REPLACE and "PB2: UCB over" in decision.reason
    assert 1e-5 <= after[LR] <= 1e-2 and 0.0 <= after[ENT] <= 0.02 and after[EPOCHS] in range(1, 9)


def test_the_time_varying_kernel_decays_with_time_and_its_gradient_is_right() -> None:
    np = pytest.importorskip("numpy")
    from pbt.selection.pb2_model import kernel_class

    kernel = kernel_class()(length_scale=0.4, epsilon=0.2)
    X = np.array([[0.1, 0.2, 1.0], [0.1, 0.2, 5.0], [0.8, 0.3, 2.0]])
    K, grad = kernel(X, eval_gradient=True)
    assert np.allclose(np.diag(K), 1.0) and np.isclose(K[0, 1], 0.8 ** 2)  # (1 - eps)^(|1 - 5| / 2)
    step = 1e-6
    for i in range(len(kernel.theta)):  # d K / d log(theta), in sklearn's order
        theta = kernel.theta.copy()
        theta[i] += step
        numeric = (kernel.clone_with_theta(theta)(X) - K) / step
        assert np.allclose(grad[:, :, i], numeric, atol=1e-4)
