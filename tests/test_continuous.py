"""Tests for the float (compatibility-only) Laplace and Gaussian mechanisms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms import continuous
from mechanisms.continuous import gaussian_mechanism, laplace_mechanism
from mechanisms.errors import BudgetError, MechanismError
from mechanisms.rng import make_rng


def test_docstrings_warn_not_floating_point_safe():
    for item in (continuous, laplace_mechanism, gaussian_mechanism):
        assert "NOT floating-point safe" in item.__doc__
        assert "Mironov" in item.__doc__


def test_laplace_scale():
    # scale = sensitivity / epsilon = 2 / 0.5 = 4 -> variance 2 * 16 = 32
    out = laplace_mechanism(np.zeros(40_000), "0.5", 2, rng=make_rng(1))
    assert out.dtype == np.float64
    assert out.var() == pytest.approx(32, rel=0.06)
    assert abs(out.mean()) < 6 * math.sqrt(32 / out.size)


def test_gaussian_sigma_from_rho():
    # sigma = 1 / sqrt(2 * 1/8) = 2 -> variance 4
    out = gaussian_mechanism(np.zeros(40_000), rho="1/8", rng=make_rng(2))
    assert out.var() == pytest.approx(4, rel=0.05)
    given = gaussian_mechanism(np.zeros(40_000), sigma=3, rng=make_rng(3))
    assert given.var() == pytest.approx(9, rel=0.05)


def test_shape_and_reproducibility():
    values = np.arange(6.0).reshape(2, 3)
    a = laplace_mechanism(values, 1, rng=make_rng(4))
    assert a.shape == (2, 3)
    assert np.array_equal(a, laplace_mechanism(values, 1, rng=make_rng(4)))


def test_errors():
    with pytest.raises(BudgetError, match=r"epsilon \(0\) must be > 0"):
        laplace_mechanism([1.0], 0)
    with pytest.raises(
        MechanismError, match=r"give exactly one of rho \(None\) and sigma \(None\)"
    ):
        gaussian_mechanism([1.0])
    with pytest.raises(MechanismError, match=r"give exactly one of rho \(1\) and sigma \(1\)"):
        gaussian_mechanism([1.0], rho=1, sigma=1)
    with pytest.raises(BudgetError, match=r"rho \(-1\) must be > 0"):
        gaussian_mechanism([1.0], rho=-1)
    with pytest.raises(MechanismError, match=r"sigma \(0\) must be > 0"):
        gaussian_mechanism([1.0], sigma=0)
    with pytest.raises(MechanismError, match=r"values must be finite, got entry nan"):
        laplace_mechanism([1.0, float("nan")], 1)
    with pytest.raises(MechanismError, match=r"values \('a'\) must be numeric"):
        laplace_mechanism("a", 1)
