"""Tests for private selection: hand-worked probabilities and seeded frequency checks.

The frequency checks use a chi-square test at alpha = 1e-6 (false-alarm rate 1e-6 per test);
they are seeded, so a failure is deterministic and means the sampler changed.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

from mechanisms.errors import BudgetError, MechanismError
from mechanisms.rng import make_rng
from mechanisms.selection import (
    exponential_mechanism,
    exponential_probabilities,
    permute_and_flip,
    permute_and_flip_probabilities,
    report_noisy_max,
    selection_factor,
)

ALPHA = 1e-6


def _frequencies(draw, k: int, n: int) -> np.ndarray:
    return np.bincount([draw() for _ in range(n)], minlength=k)


def _assert_matches(
    counts: np.ndarray, probs: np.ndarray, wrong: tuple[np.ndarray, ...] = ()
) -> None:
    """Chi-square at ALPHA against ``probs``; power: each plausible bug in ``wrong`` (another
    mechanism's distribution, the other sensitivity factor) must be rejected by the same test."""
    assert chisquare(counts, probs * counts.sum()).pvalue > ALPHA
    for alternative in wrong:
        assert chisquare(counts, np.asarray(alternative) * counts.sum()).pvalue < ALPHA


# --- factors and probabilities by hand ----------------------------------------------------


def test_selection_factor():
    assert selection_factor(1) == Fraction(1, 2)
    assert selection_factor(1, monotonic=True) == 1
    assert selection_factor("0.5", 2) == Fraction(1, 8)
    with pytest.raises(BudgetError, match=r"epsilon \(0\) must be > 0"):
        selection_factor(0)
    with pytest.raises(MechanismError, match=r"sensitivity \(-1\) must be > 0"):
        selection_factor(1, -1)


def test_two_candidates_by_hand():
    # eps = 2, Delta = 1: factor 1, weights e^0 and e^1.
    e = math.e
    assert exponential_probabilities([0, 1], 2) == pytest.approx([1 / (1 + e), e / (1 + e)])
    # monotonic: factor 2, weights e^0 and e^2.
    assert exponential_probabilities([0, 1], 2, monotonic=True) == pytest.approx(
        [1 / (1 + e**2), e**2 / (1 + e**2)]
    )


def test_three_candidates_by_hand():
    # eps = 2, Delta = 2: factor 1/2; scores 0, 2, 4 -> weights 1, e, e^2.
    e = math.e
    z = 1 + e + e**2
    assert exponential_probabilities([0, 2, 4], 2, 2) == pytest.approx([1 / z, e / z, e**2 / z])


def test_large_scores_are_stable():
    big = 10**300
    assert exponential_probabilities([big, big + 1], 2) == pytest.approx(
        exponential_probabilities([0, 1], 2)
    )
    probs = exponential_probabilities([1000.0, 1001.0, -1e308], 2)
    assert np.all(np.isfinite(probs))
    assert probs[2] == 0.0
    assert probs[:2] == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)])
    # sampling with huge integer scores: index 1 with probability e / (1 + e) = 0.731; 1000
    # draws put the frequency within 6 standard deviations (0.084) of it, while the factor
    # bug (eps / Delta instead of eps / (2 Delta)) would give 0.881
    rng = make_rng(1)
    share = np.mean([exponential_mechanism([big, big + 1], 2, rng=rng) for _ in range(1000)])
    assert abs(share - math.e / (1 + math.e)) < 0.084


def test_float_scores_are_converted_exactly():
    assert exponential_probabilities([0.1, 0.2], 1) == pytest.approx(
        exponential_probabilities([Fraction(0.1), Fraction(0.2)], 1)
    )


def test_permute_and_flip_probabilities_two_candidates():
    # scores [0, 1], eps 2: p_0 = e^-1; P(0) = p_0 / 2, P(1) = 1 - p_0 / 2.
    p0 = math.exp(-1)
    assert permute_and_flip_probabilities([0, 1], 2) == pytest.approx([p0 / 2, 1 - p0 / 2])


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ([], "scores must not be empty"),
        ([1.0, float("nan")], r"scores\[1\] \(nan\) must be a finite number"),
        ([1, float("inf")], r"scores\[1\] \(inf\) must be a finite number"),
        ([True, 1], r"scores\[0\] \(True\) must be a finite number, not a bool"),
        (["a"], r"scores\[0\] \('a'\) must be a finite number"),
        ([[1, 2]], r"scores must be one-dimensional, got shape \(1, 2\)"),
    ],
)
def test_bad_scores_refused(scores, message):
    for function in (
        exponential_probabilities,
        exponential_mechanism,
        permute_and_flip,
        report_noisy_max,
    ):
        with pytest.raises(MechanismError, match=message):
            function(scores, 1)


def test_report_noisy_max_refuses_unknown_noise():
    with pytest.raises(MechanismError, match=r"noise \('laplace'\) must be 'gumbel' or"):
        report_noisy_max([1, 2], 1, noise="laplace")


def test_single_candidate_and_reproducibility():
    assert exponential_mechanism([5], 1) == 0
    assert permute_and_flip([5], 1) == 0
    scores = [3, 1, 4, 1, 5]
    assert exponential_mechanism(scores, 1, rng=make_rng(9)) == exponential_mechanism(
        scores, 1, rng=make_rng(9)
    )


# --- frequencies of the samplers ----------------------------------------------------------


def test_exponential_mechanism_frequencies():
    scores = [0, 1, 2, Fraction(7, 2)]
    rng = make_rng(2024)
    counts = _frequencies(lambda: exponential_mechanism(scores, 1, rng=rng), 4, 6000)
    _assert_matches(
        counts,
        exponential_probabilities(scores, 1),
        wrong=(exponential_probabilities(scores, 1, monotonic=True),),
    )


def test_exponential_mechanism_monotonic_frequencies():
    scores = [0, 1, 2]
    rng = make_rng(7)
    counts = _frequencies(
        lambda: exponential_mechanism(scores, 1, monotonic=True, rng=rng), 3, 6000
    )
    probs = exponential_probabilities(scores, 1, monotonic=True)
    _assert_matches(counts, probs)
    # power: the general factor (eps / 2) would give a clearly different distribution.
    wrong = exponential_probabilities(scores, 1)
    assert chisquare(counts, wrong * counts.sum()).pvalue < ALPHA


def test_permute_and_flip_two_candidates_frequencies():
    rng = make_rng(31)
    counts = _frequencies(lambda: permute_and_flip([0, 1], 2, rng=rng), 2, 6000)
    p0 = math.exp(-1)
    _assert_matches(
        counts, np.array([p0 / 2, 1 - p0 / 2]), wrong=(exponential_probabilities([0, 1], 2),)
    )


def test_permute_and_flip_three_candidates_frequencies():
    scores = [0, 1, 3]
    rng = make_rng(32)
    counts = _frequencies(lambda: permute_and_flip(scores, 1, rng=rng), 3, 6000)
    _assert_matches(
        counts,
        permute_and_flip_probabilities(scores, 1),
        wrong=(exponential_probabilities(scores, 1), permute_and_flip_probabilities(scores, 2)),
    )


def test_report_noisy_max_distributions():
    scores = [0, 1, 2]
    rng = make_rng(33)
    gumbel = _frequencies(lambda: report_noisy_max(scores, 2, rng=rng), 3, 6000)
    _assert_matches(
        gumbel,
        exponential_probabilities(scores, 2),
        wrong=(permute_and_flip_probabilities(scores, 2),),
    )
    expo = _frequencies(lambda: report_noisy_max(scores, 2, noise="exponential", rng=rng), 3, 6000)
    _assert_matches(
        expo,
        permute_and_flip_probabilities(scores, 2),
        wrong=(exponential_probabilities(scores, 2),),
    )
