"""Tests for k-ary randomized response and its unbiased frequency estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from mechanisms.errors import BudgetError, MechanismError
from mechanisms.randomized_response import (
    estimate_frequencies,
    randomized_response,
    rr_probabilities,
    transition_matrix,
)
from mechanisms.rng import make_rng

ALPHA = 1e-6
LN2 = math.log(2)  # e^eps = 2 (to float precision)


def test_probabilities_by_hand():
    # k = 3, e^eps = 2: p = 2 / (2 + 2) = 1/2, q = 1 / 4.
    p, q = rr_probabilities(3, LN2)
    assert (p, q) == pytest.approx((0.5, 0.25))
    assert transition_matrix(3, LN2) == pytest.approx(
        np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
    )
    # k = 2, eps = ln 3: p = 3/4.
    assert rr_probabilities(2, math.log(3)) == pytest.approx((0.75, 0.25))
    assert rr_probabilities(1, 1) == (1.0, 0.0)
    # large epsilon does not overflow
    assert rr_probabilities(5, 10_000) == (1.0, 0.0)
    with pytest.raises(MechanismError, match=r"domain_size \(0\) must be an integer >= 1"):
        rr_probabilities(0, 1)


@pytest.mark.parametrize("true_index", [0, 2])
def test_empirical_transition_row_k3(true_index):
    domain = ["a", "b", "c"]
    values = [domain[true_index]] * 6000
    reports = randomized_response(values, domain, LN2, rng=make_rng(100 + true_index))
    counts = np.array([np.sum(reports == v) for v in domain])
    expected = transition_matrix(3, LN2)[true_index] * len(values)
    assert chisquare(counts, expected).pvalue > ALPHA


def test_power_wrong_epsilon_is_rejected():
    domain = [0, 1, 2]
    reports = randomized_response(np.zeros(6000, dtype=int), domain, LN2, rng=make_rng(5))
    counts = np.bincount(reports, minlength=3)
    wrong = transition_matrix(3, math.log(3))[0] * 6000  # p = 3/5 instead of 1/2
    assert chisquare(counts, wrong).pvalue < ALPHA


def test_shape_dtype_and_reproducibility():
    values = np.array([[1, 2], [3, 1]])
    a = randomized_response(values, [1, 2, 3], 1, rng=make_rng(1))
    b = randomized_response(values, [1, 2, 3], 1, rng=make_rng(1))
    assert a.shape == (2, 2)
    assert np.array_equal(a, b)
    assert set(a.ravel().tolist()) <= {1, 2, 3}


def test_single_value_domain_returns_values():
    out = randomized_response(["x", "x"], ["x"], 1)
    assert out.tolist() == ["x", "x"]
    assert estimate_frequencies(["x", "x"], ["x"], 1).tolist() == [2.0]


def test_errors():
    with pytest.raises(MechanismError, match=r"values has the value 'd', which is not in"):
        randomized_response(["a", "d"], ["a", "b"], 1)
    with pytest.raises(MechanismError, match=r"domain \(\[\]\) must not be empty"):
        randomized_response([], [], 1)
    with pytest.raises(MechanismError, match=r"domain has the value 'a' more than once"):
        randomized_response(["a"], ["a", "a"], 1)
    with pytest.raises(BudgetError, match=r"epsilon \(0\) must be > 0"):
        randomized_response(["a"], ["a", "b"], 0)
    with pytest.raises(MechanismError, match=r"reports has the value 7, which is not in"):
        estimate_frequencies([7], [1, 2], 1)


def test_estimator_inverts_expected_counts_by_hand():
    # n_true = (8, 4, 0), p = 1/2, q = 1/4: E[c] = (8/2 + 4/4, 4/2 + 8/4, 12/4) = (5, 4, 3).
    reports = ["a"] * 5 + ["b"] * 4 + ["c"] * 3
    assert estimate_frequencies(reports, ["a", "b", "c"], LN2) == pytest.approx([8, 4, 0], abs=1e-9)


def test_estimator_is_unbiased():
    domain = [0, 1, 2, 3]
    truth = np.array([3000, 1000, 500, 0])
    values = np.repeat(np.arange(4), truth)
    n, runs, eps = truth.sum(), 30, 1
    rng = make_rng(77)
    estimates = np.array(
        [
            estimate_frequencies(randomized_response(values, domain, eps, rng=rng), domain, eps)
            for _ in range(runs)
        ]
    )
    p, q = rr_probabilities(4, eps)
    variance = (truth * p * (1 - p) + (n - truth) * q * (1 - q)) / (p - q) ** 2
    tolerance = 6 * np.sqrt(variance / runs)
    assert np.all(np.abs(estimates.mean(axis=0) - truth) < tolerance)
    # and the spread matches the stated variance (within a generous factor)
    assert np.all(estimates.var(axis=0, ddof=1) < 3 * variance)
