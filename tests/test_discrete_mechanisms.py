"""Tests for the integer noise mechanisms: calibration, variance, release and the registry."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.accounting import ZCDP, PureDP
from mechanisms.discrete import (
    MECHANISMS,
    DiscreteGaussianMechanism,
    DiscreteLaplaceMechanism,
    NoiseMechanism,
    as_integer_array,
    discrete_gaussian_variance,
    geometric_mechanism,
    make_mechanism,
    sensitivity,
)
from mechanisms.errors import BudgetError, MechanismError
from mechanisms.rng import make_rng
from mechanisms.samplers import discrete_laplace_pmf

# --- discrete Laplace ---------------------------------------------------------------------


def test_laplace_scale_and_budget_by_hand():
    mech = DiscreteLaplaceMechanism("1/2")
    assert mech.scale == Fraction(2)
    assert mech.budget == PureDP("1/2")
    assert DiscreteLaplaceMechanism(1, 2).scale == 2
    assert DiscreteLaplaceMechanism(Fraction(3, 4), Fraction(3, 2)).scale == 2
    assert mech.name == "discrete_laplace"
    assert isinstance(mech, NoiseMechanism)


def test_laplace_variance_closed_form_and_by_summation():
    # scale 1: Var = 2 e^-1 / (1 - e^-1)^2 = 1.84135...
    q = math.exp(-1)
    assert DiscreteLaplaceMechanism(1).variance == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-14)
    assert DiscreteLaplaceMechanism(1).variance == pytest.approx(1.8413472, abs=1e-6)
    # scale 3 by direct summation of x^2 P(x), P(x) = (1-q)/(1+q) q^|x|.
    q = math.exp(-1 / 3)
    total = sum(x * x * (1 - q) / (1 + q) * q ** abs(x) for x in range(-400, 401))
    assert DiscreteLaplaceMechanism("1/3").variance == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "x"])
def test_laplace_refuses_bad_epsilon(bad):
    with pytest.raises(BudgetError, match=r"epsilon \("):
        DiscreteLaplaceMechanism(bad)


def test_laplace_refuses_bad_sensitivity():
    with pytest.raises(MechanismError, match=r"l1_sensitivity \(0\) must be > 0"):
        DiscreteLaplaceMechanism(1, 0)


def test_laplace_release_shape_dtype_reproducible():
    values = np.array([[3, 0], [7, 1]])
    mech = DiscreteLaplaceMechanism(1)
    out = mech.release(values, rng=make_rng(5))
    assert out.dtype == np.int64
    assert out.shape == (2, 2)
    assert np.array_equal(out, mech.release(values, rng=make_rng(5)))


def test_laplace_release_noise_moments():
    mech = DiscreteLaplaceMechanism("1/2")  # scale 2
    noise = mech.release(np.zeros(40_000, dtype=np.int64), rng=make_rng(11))
    # mean 0 and the exact variance, within 6 standard errors.
    var = mech.variance
    assert abs(noise.mean()) < 6 * math.sqrt(var / noise.size)
    assert noise.var() == pytest.approx(var, rel=0.06)


# --- integer validation -------------------------------------------------------------------


def test_as_integer_array_accepts_integer_values():
    assert as_integer_array([1, 2]).dtype == np.int64
    assert np.array_equal(as_integer_array(np.array([1.0, -2.0])), [1, -2])
    assert np.array_equal(as_integer_array(np.array([1, Fraction(4, 2)], dtype=object)), [1, 2])
    assert np.array_equal(as_integer_array(np.array([3], dtype=np.uint8)), [3])


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        (np.array([1.0, 1.5]), "1.5"),
        (np.array([1.0, np.nan]), "nan"),
        (np.array([2, Fraction(1, 2)], dtype=object), "Fraction\\(1, 2\\)"),
        (np.array([1, "a"], dtype=object), "'a'"),
    ],
)
def test_release_refuses_non_integer_values(values, shown):
    with pytest.raises(MechanismError, match=rf"values must be integer-valued, got entry {shown}"):
        DiscreteLaplaceMechanism(1).release(values, rng=make_rng(1))


def test_release_refuses_strings_and_bools():
    with pytest.raises(MechanismError, match="values must be integer-valued, got dtype <U1"):
        as_integer_array(["a"])
    with pytest.raises(MechanismError, match="boolean array"):
        as_integer_array(np.array([True]))


# --- discrete Gaussian --------------------------------------------------------------------


def test_gaussian_sigma2_and_budget_by_hand():
    mech = DiscreteGaussianMechanism("1/2")
    assert mech.sigma2 == 1  # 1 / (2 * 1/2)
    assert mech.budget == ZCDP("1/2")
    assert DiscreteGaussianMechanism(1).sigma2 == Fraction(1, 2)
    assert DiscreteGaussianMechanism(1, 2).sigma2 == 2  # 4 / 2
    assert DiscreteGaussianMechanism("1/8", 3).sigma2 == 36  # 9 / (1/4)
    assert DiscreteGaussianMechanism(1).name == "discrete_gaussian"


def test_gaussian_squared_sensitivity_stays_exact():
    # replace-one: L2 = sqrt(2), given as its square 2.
    mech = DiscreteGaussianMechanism(1, l2_sensitivity_squared=2)
    assert mech.sigma2 == 1
    assert mech.l2_sensitivity is None
    same = DiscreteGaussianMechanism(1, l2_sensitivity_squared=4)
    assert same.l2_sensitivity == 2
    assert same == DiscreteGaussianMechanism(1, 2)
    with pytest.raises(MechanismError, match=r"l2_sensitivity \(2\) squared must equal"):
        DiscreteGaussianMechanism(1, 2, l2_sensitivity_squared=2)


@pytest.mark.parametrize("bad", [0, -0.1, float("inf"), None])
def test_gaussian_refuses_bad_rho(bad):
    with pytest.raises(BudgetError, match=r"rho \("):
        DiscreteGaussianMechanism(bad)


def test_gaussian_variance_by_hand():
    # sigma^2 = 1/4: sum x^2 e^{-2x^2} / sum e^{-2x^2} = 0.2150127 (below 0.25)
    num = sum(x * x * math.exp(-2 * x * x) for x in range(-20, 21))
    den = sum(math.exp(-2 * x * x) for x in range(-20, 21))
    mech = DiscreteGaussianMechanism(2)  # sigma^2 = 1/4
    assert mech.variance == pytest.approx(num / den, rel=1e-12)
    assert mech.variance == pytest.approx(0.2150127, abs=1e-7)
    assert DiscreteGaussianMechanism("1/2").variance < 1
    assert DiscreteGaussianMechanism("1/2").variance == pytest.approx(1, abs=1e-6)
    assert discrete_gaussian_variance(10**7) == 1e7


def test_gaussian_release_noise_moments():
    mech = DiscreteGaussianMechanism("1/8")  # sigma^2 = 4
    noise = mech.release(np.zeros(40_000, dtype=np.int64), rng=make_rng(12))
    assert abs(noise.mean()) < 6 * math.sqrt(mech.variance / noise.size)
    assert noise.var() == pytest.approx(mech.variance, rel=0.06)
    assert noise.dtype == np.int64


# --- geometric mechanism ------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "sens"), [(1, 1), (Fraction(1, 2), 2), (3, 1)])
def test_difference_of_geometrics_is_discrete_laplace(epsilon, sens):
    # P(G = k) = p (1-p)^k on k >= 0, p = 1 - exp(-eps/S); convolve numerically.
    p = -math.expm1(-float(epsilon) / sens)
    ks = np.arange(0, 3000)
    geom = p * (1 - p) ** ks
    scale = Fraction(sens) / Fraction(epsilon)
    for k in range(-6, 7):
        # P(G1 - G2 = k) = sum_j P(G1 = j + k) P(G2 = j)
        j = ks[(ks + k >= 0) & (ks + k < ks.size)]
        diff = float(np.sum(geom[j + k] * geom[j]))
        assert diff == pytest.approx(float(discrete_laplace_pmf(k, scale)), rel=1e-9)


def test_geometric_mechanism_is_the_discrete_laplace_release():
    values = np.arange(10)
    a = geometric_mechanism(values, "1/2", 2, rng=make_rng(3))
    b = DiscreteLaplaceMechanism("1/2", 2).release(values, rng=make_rng(3))
    assert np.array_equal(a, b)


# --- registry and sensitivity -------------------------------------------------------------


def test_make_mechanism_by_name():
    assert MECHANISMS == ("discrete_laplace", "discrete_gaussian")
    lap = make_mechanism("discrete_laplace", PureDP(2), 2)
    assert lap == DiscreteLaplaceMechanism(2, 2)
    gauss = make_mechanism("discrete_gaussian", ZCDP("1/2"))
    assert gauss.sigma2 == 1
    sq = make_mechanism("discrete_gaussian", ZCDP(1), l2_sensitivity_squared=2)
    assert sq.sigma2 == 1


def test_make_mechanism_errors():
    with pytest.raises(
        MechanismError,
        match=r"mechanism \('laplace'\) is unknown; known "
        r"mechanisms: discrete_laplace, discrete_gaussian",
    ):
        make_mechanism("laplace", PureDP(1))
    with pytest.raises(BudgetError, match=r"must be PureDP for mechanism 'discrete_laplace'"):
        make_mechanism("discrete_laplace", ZCDP(1))
    with pytest.raises(BudgetError, match=r"must be ZCDP for mechanism 'discrete_gaussian'"):
        make_mechanism("discrete_gaussian", PureDP(1))


def test_sensitivity_by_neighbouring():
    assert sensitivity("add_remove") == (1, 1)
    assert sensitivity("replace_one") == (2, 2)
    with pytest.raises(
        MechanismError,
        match=r"neighbouring \('bounded'\) must be one of "
        r"add_remove, replace_one",
    ):
        sensitivity("bounded")
