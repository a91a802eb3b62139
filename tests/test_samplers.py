"""Fast, seeded unit tests of the exact samplers: shapes, logic, big-integer path, errors."""

from __future__ import annotations

import logging
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from mechanisms import _bigint, _oracle, samplers
from mechanisms.errors import MechanismError
from mechanisms.rng import make_rng
from mechanisms.samplers import (
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    sample_bernoulli_exp,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)

SAMPLERS = [
    (sample_discrete_laplace, 3, np.int64),
    (sample_discrete_gaussian, 4, np.int64),
    (sample_bernoulli_exp, Fraction(1, 3), np.bool_),
]


class ScriptedRng:
    """Stands in for a Generator: returns scripted integers and records each (high, size)."""

    def __init__(self, values: list[list[int]]) -> None:
        self.values = list(values)
        self.calls: list[tuple[int, int]] = []

    def integers(self, low: int, high: int, size: int, dtype: object = np.int64) -> np.ndarray:
        self.calls.append((high, size))
        batch = np.array(self.values.pop(0), dtype=np.int64)
        assert batch.size == size and low == 0 and (batch < high).all()
        return batch


@pytest.mark.parametrize(("sampler", "param", "dtype"), SAMPLERS)
@pytest.mark.parametrize("size", [0, 1, 7, (2, 3), (0, 4), (3, 1, 2)])
def test_shape_and_dtype(sampler, param, dtype, size) -> None:
    out = sampler(param, size, make_rng(1))
    expected = size if isinstance(size, tuple) else (size,)
    assert out.shape == expected
    assert out.dtype == dtype


@pytest.mark.parametrize(("sampler", "param", "dtype"), SAMPLERS)
def test_seeded_reproducible(sampler, param, dtype) -> None:
    first = sampler(param, 1000, make_rng(42))
    assert np.array_equal(first, sampler(param, 1000, make_rng(42)))
    assert not np.array_equal(first, sampler(param, 1000, make_rng(43)))


@pytest.mark.parametrize(("sampler", "param", "dtype"), SAMPLERS)
def test_default_rng_is_used(sampler, param, dtype, monkeypatch) -> None:
    """rng=None draws from a fresh secure source (make_rng() with no seed)."""
    from mechanisms import samplers

    calls = []
    real = samplers.make_rng
    monkeypatch.setattr(samplers, "make_rng", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    assert sampler(param, 10).shape == (10,)
    assert calls == [((), {})]


def test_bernoulli_gamma_zero_always_true() -> None:
    assert sample_bernoulli_exp(0, 10_000, make_rng(1)).all()
    assert sample_bernoulli_exp("0", 5, make_rng(1)).all()


def test_bernoulli_float_equals_its_exact_fraction() -> None:
    from_float = sample_bernoulli_exp(0.1, 5000, make_rng(9))
    from_fraction = sample_bernoulli_exp(Fraction(0.1), 5000, make_rng(9))
    assert Fraction(0.1).denominator == 2**55
    assert np.array_equal(from_float, from_fraction)
    assert np.array_equal(
        sample_bernoulli_exp("1/10", 5000, make_rng(9)),
        sample_bernoulli_exp(Fraction(1, 10), 5000, make_rng(9)),
    )


@pytest.mark.parametrize("gamma", [Fraction(1, 3), 1, Fraction(7, 2), Fraction(0.1)])
def test_bernoulli_mean(gamma) -> None:
    n = 40_000
    p = math.exp(-float(gamma))
    mean = sample_bernoulli_exp(gamma, n, make_rng(3)).mean()
    assert abs(mean - p) < 6 * math.sqrt(p * (1 - p) / n)


def test_oracle_bern_exp_frac_hand_worked() -> None:
    """The numpy oracle: gamma = 1/3 on three lanes, rounds in lockstep: U_1 in [0,3), U_2 in [0,6), U_3 in [0,9).

    Lane 0: U_1 = 2 (not < 1)      -> K = 1, odd  -> True.
    Lane 1: U_1 = 0, U_2 = 5        -> K = 2, even -> False.
    Lane 2: U_1 = 0, U_2 = 0, U_3 = 4 -> K = 3, odd -> True.
    """
    rng = ScriptedRng([[2, 0, 0], [5, 0], [4]])
    rem = np.array([1, 1, 1], dtype=np.int64)
    out = _oracle._bern_exp_frac(rem, 3, rng)
    assert out.tolist() == [True, False, True]
    assert rng.calls == [(3, 3), (6, 2), (9, 1)]


def test_oracle_bern_exp_lanes_whole_part() -> None:
    """The numpy oracle: gamma = 2 (whole=2, rem=0): True only if two Bernoulli(exp(-1)) draws both succeed.

    Bernoulli(exp(-1)) starts at k = 2: U in [0,2) == 0 continues, else stops with K = 2
    (even -> False). Lane 0: first unit U=1 -> False. Lane 1: units ok (K=3 twice) -> True.
    """
    rng = ScriptedRng(
        [
            [0, 0],  # fractional part rem=0: U in [0,1) is never < 0 -> K=1 -> True
            [1, 0],  # unit 1, k=2: lane0 stops (K=2 -> False), lane1 continues
            [1],  # unit 1, k=3: lane1 U=1 != 0 -> K=3 -> True
            [0],  # unit 2, k=2: lane1 continues
            [2],  # unit 2, k=3: stops, K=3 -> True
        ]
    )
    whole = np.array([2, 2], dtype=np.int64)
    rem = np.array([0, 0], dtype=np.int64)
    out = _oracle._bern_exp_lanes(whole, rem, 1, rng)
    assert out.tolist() == [False, True]


def test_laplace_symmetric_and_variance() -> None:
    scale = Fraction(7, 3)
    x = sample_discrete_laplace(scale, 100_000, make_rng(5))
    q = math.exp(-1 / float(scale))
    var = 2 * q / (1 - q) ** 2
    assert abs(x.mean()) < 6 * math.sqrt(var / x.size)
    assert abs(x.var() / var - 1) < 0.05
    assert abs((x > 0).mean() - (x < 0).mean()) < 0.01


def test_gaussian_symmetric_and_variance() -> None:
    x = sample_discrete_gaussian(Fraction(5, 2), 100_000, make_rng(6))
    assert abs(x.mean()) < 6 * math.sqrt(2.5 / x.size)
    assert abs(x.var() / 2.5 - 1) < 0.05
    assert abs((x > 0).mean() - (x < 0).mean()) < 0.01


def _big_path_logged(caplog) -> bool:
    return any("big-integer" in r.getMessage() for r in caplog.records)


def test_big_path_laplace(caplog) -> None:
    scale = Fraction(10**20 + 1, 3)
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        x = sample_discrete_laplace(scale, 3000, make_rng(7))
    assert _big_path_logged(caplog)
    assert x.shape == (3000,)
    values = np.array([int(v) for v in x], dtype=object)
    std = math.sqrt(2) * float(scale)
    assert abs(float(values.mean())) < 6 * std / math.sqrt(3000)
    sample_var = float(sum(int(v) ** 2 for v in values)) / 3000
    assert 0.7 < sample_var / std**2 < 1.3
    # values past int64 force an object array of Python ints, never a wrapped int64
    assert x.dtype == object and max(abs(int(v)) for v in x) > 2**63


def test_big_path_gaussian(caplog) -> None:
    sigma2 = Fraction(2**70, 3)
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        x = sample_discrete_gaussian(sigma2, 3000, make_rng(8))
    assert _big_path_logged(caplog)
    assert x.dtype == np.int64 and x.shape == (3000,)
    s2 = float(sigma2)
    assert abs(x.astype(float).mean()) < 6 * math.sqrt(s2 / 3000)
    assert 0.85 < (x.astype(float) ** 2).mean() / s2 < 1.15


def test_big_path_bernoulli(caplog) -> None:
    gamma = Fraction(2**70 + 1, 2**69)  # just over 2: exp(-2) ~ 0.135
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        out = sample_bernoulli_exp(gamma, 4000, make_rng(9))
    assert _big_path_logged(caplog)
    p = math.exp(-float(gamma))
    assert out.dtype == np.bool_ and abs(out.mean() - p) < 6 * math.sqrt(p * (1 - p) / 4000)


def test_laplace_overflow_candidates_finished_with_python_ints(caplog) -> None:
    """t = 2**60: U + tV may pass int64 for V >= 7; those candidates are finished in Python."""
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        x = sample_discrete_laplace(2**60, 20_000, make_rng(10))
    assert any("Python ints" in r.getMessage() for r in caplog.records)
    assert x.shape == (20_000,)
    values = [int(v) for v in x]
    assert abs(sum(values) / len(values)) < 6 * math.sqrt(2) * 2**60 / math.sqrt(len(values))


def test_gaussian_overflow_acceptance_finished_with_python_ints(caplog) -> None:
    """sigma2 = 2**-31: |Y| b t - a passes the int64 square bound for |Y| >= 2 (about one
    candidate in ten): those acceptances run on Python ints, on the same bit stream."""
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        x = sample_discrete_gaussian(Fraction(1, 2**31), 20_000, make_rng(11))
    assert any("acceptance beyond int64" in r.getMessage() for r in caplog.records)
    # P(|X| >= 1) is about 2 exp(-2**30): every sample is 0
    assert x.dtype == np.int64 and not x.any()


def test_python_continuation_matches_the_kernel_distribution() -> None:
    """WordStream.bern_exp (the Python-int continuation) against exp(-gamma) on one stream."""
    from mechanisms._words import WordStream

    stream = WordStream(make_rng(13), 16)
    for num, den in [(1, 3), (7, 2), (5, 5), (0, 1)]:
        draws = [stream.bern_exp(num, den) for _ in range(20_000)]
        p = math.exp(-num / den)
        assert abs(sum(draws) / len(draws) - p) <= 6 * math.sqrt(p * (1 - p) / len(draws))


@pytest.mark.parametrize(
    "sampler, param, base",
    [
        (sample_discrete_laplace, Fraction(7, 3), "_WORDS_LAPLACE_BASE"),
        (sample_discrete_gaussian, Fraction(5, 2), "_WORDS_GAUSSIAN_BASE"),
        (sample_discrete_laplace, Fraction(5000), "_WORDS_LAPLACE_BASE"),  # CKS20 kernel
        (sample_discrete_gaussian, Fraction(3000**2), "_WORDS_GAUSSIAN_BASE"),  # CKS20 kernel
        (sample_bernoulli_exp, Fraction(1, 3), "_WORDS_BERNOULLI"),
    ],
)
def test_noise_does_not_depend_on_block_sizes(sampler, param, base, monkeypatch) -> None:
    """A first block of 8 words (hundreds of refills, candidates cut mid-way and redrawn)
    gives exactly the samples of the default block: the noise is a function of the stream."""
    expected = sampler(param, 5000, make_rng(14))
    for name in (base, "_WORDS_PER_BIT", "_WORDS_LAPLACE_TABLE", "_WORDS_GAUSSIAN_TABLE"):
        monkeypatch.setattr(samplers, name, 0.0)
    assert np.array_equal(sampler(param, 5000, make_rng(14)), expected)


def test_compiled_path_uses_the_raw_words_of_the_generator() -> None:
    """The kernels read BitGenerator.random_raw words: same key, same words, same noise."""
    a = sample_discrete_laplace(3, 1000, make_rng(15))
    rng = make_rng(15)
    rng.bit_generator.random_raw(1)  # one word later in the same stream
    assert not np.array_equal(sample_discrete_laplace(3, 1000, rng), a)


def test_scalar_reference_agrees_in_distribution() -> None:
    rng = make_rng(12)
    lap = np.array([_bigint.discrete_laplace_scalar(7, 3, rng) for _ in range(20_000)])
    q = math.exp(-3 / 7)
    assert abs(lap.var() / (2 * q / (1 - q) ** 2) - 1) < 0.06
    gau = np.array([_bigint.discrete_gaussian_scalar(5, 2, rng) for _ in range(20_000)])
    assert abs(gau.var() / 2.5 - 1) < 0.06


def test_uniform_below_big() -> None:
    rng = make_rng(13)
    m = 3 * 2**70 + 1
    draws = [_bigint.uniform_below(m, rng) for _ in range(2000)]
    assert all(0 <= d < m for d in draws)
    assert 0.4 < sum(draws) / len(draws) / m < 0.6


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), float("inf"), "abc", None, True, [1]])
@pytest.mark.parametrize(
    ("sampler", "name"),
    [(sample_discrete_laplace, "scale"), (sample_discrete_gaussian, "sigma2")],
)
def test_bad_scale_message(sampler, name, bad) -> None:
    with pytest.raises(MechanismError, match="^" + re.escape(f"{name} ({bad!r})")):
        sampler(bad, 3, make_rng(1))


@pytest.mark.parametrize("bad", [-1, Fraction(-1, 2), float("nan"), "x"])
def test_bad_gamma_message(bad) -> None:
    with pytest.raises(MechanismError, match=r"^gamma \("):
        sample_bernoulli_exp(bad, 3, make_rng(1))


@pytest.mark.parametrize("size", [-1, 1.5, (2, -1), "3", True])
def test_bad_size_message(size) -> None:
    with pytest.raises(MechanismError, match=r"^size \("):
        sample_discrete_laplace(1, size, make_rng(1))


def test_bad_rng_message() -> None:
    with pytest.raises(MechanismError, match=r"^rng \(.*must be a numpy.random.Generator"):
        sample_discrete_laplace(1, 3, rng=42)


def test_pmfs() -> None:
    k = np.arange(-200, 201)
    assert abs(discrete_laplace_pmf(k, Fraction(7, 3)).sum() - 1) < 1e-12
    assert abs(discrete_gaussian_pmf(k, 10).sum() - 1) < 1e-12
    assert discrete_gaussian_pmf(3, 2) == pytest.approx(
        math.exp(-9 / 4) / sum(math.exp(-j * j / 4) for j in range(-60, 61))
    )
    q = math.exp(-1 / 2)
    assert discrete_laplace_pmf(-2, 2) == pytest.approx((1 - q) / (1 + q) * q**2)
    assert isinstance(discrete_gaussian_pmf(0, 1e12), float)
