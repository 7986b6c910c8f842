"""The pure-Python Welch t-test: Student t tails against closed forms and table values."""
import math
import random

import pytest

from pbt.selection.stats import betainc, student_t_sf, welch_greater


@pytest.mark.parametrize("t, df, expected", [(2.0, 10, 0.036694017385370), (1.0, 5, 0.181608733824562),
                                             (-1.0, 5, 0.818391266175438), (0.0, 3, 0.5)])
def test_student_t_survival_function_table_values(t, df, expected):
    assert student_t_sf(t, df) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("t", [-3.0, -0.5, 0.3, 1.7, 5.0, 40.0])
def test_student_t_survival_function_closed_forms(t):
    # df = 1 is the Cauchy distribution; df = 2 has a closed form too.
    assert student_t_sf(t, 1.0) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-9, abs=1e-12)
    assert student_t_sf(t, 2.0) == pytest.approx(0.5 * (1.0 - t / math.sqrt(t * t + 2.0)), rel=1e-9, abs=1e-12)


def test_betainc_edges_and_symmetry():
    assert betainc(2.0, 3.0, 0.0) == 0.0 and betainc(2.0, 3.0, 1.0) == 1.0
    assert betainc(2.0, 3.0, 0.3) == pytest.approx(1.0 - betainc(3.0, 2.0, 0.7), rel=1e-12)
    assert betainc(1.0, 1.0, 0.25) == pytest.approx(0.25)


def test_welch_greater_by_hand():
    # means 2.5 and 1.0, variances 5/3 and 2/3: t = 1.5 / sqrt(5/12 + 1/6), Welch-Satterthwaite df
    se2 = 5 / 12 + 2 / 12
    df = se2 ** 2 / ((5 / 12) ** 2 / 3 + (2 / 12) ** 2 / 3)
    expected = student_t_sf(1.5 / math.sqrt(se2), df)
    assert welch_greater([1, 2, 3, 4], [0, 1, 2, 1]) == pytest.approx(expected, rel=1e-12)
    assert 0.05 < expected < 0.056


def test_welch_greater_degenerate_inputs():
    assert welch_greater([1.0], [0.0, 1.0]) is None
    assert welch_greater([2.0, 2.0], [1.0, 1.0]) == 0.0
    assert welch_greater([1.0, 1.0], [1.0, 1.0]) == 1.0


def test_welch_greater_detects_a_real_difference_and_not_noise():
    rng = random.Random(0)
    base = [rng.gauss(0.0, 1.0) for _ in range(50)]
    assert welch_greater([x + 2.0 for x in base], [rng.gauss(0.0, 1.0) for _ in range(50)]) < 1e-6
    assert welch_greater([rng.gauss(0.0, 1.0) for _ in range(50)], base) > 0.01
