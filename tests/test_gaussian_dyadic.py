"""A discrete Gaussian whose sigma^2 has big integers (budgets split by exact production
shares) draws on the compiled kernel with sigma^2 rounded up to a dyadic rational: never less
noise than calibrated, never the one-draw-at-a-time big-integer path."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from mechanisms import _bigint
from mechanisms.discrete import DiscreteGaussianMechanism
from mechanisms.rng import new_release_key, rng_from_key
from mechanisms.samplers import compiled_gaussian_sigma2

# the 2020 PL94 production county detailed query: rho 293764/114921 x 447/4099 x 754/4097
PRODUCTION_RHO = Fraction(293764, 114921) * Fraction(447, 4099) * Fraction(754, 4097)


@pytest.mark.parametrize(
    "sigma2",
    [
        Fraction(2) / (2 * PRODUCTION_RHO),
        Fraction(643312550121, 33003210344),
        Fraction(113525744139, 794337856),
        Fraction(10**15 + 7, 10**15 - 11),
    ],
)
def test_rounded_up_by_less_than_1e_minus_7(sigma2: Fraction) -> None:
    rounded = compiled_gaussian_sigma2(sigma2)
    assert rounded >= sigma2
    assert (rounded - sigma2) / sigma2 < Fraction(1, 10**7)
    den = rounded.denominator
    assert den & (den - 1) == 0  # a power of two


def test_small_integers_are_kept() -> None:
    for s2 in (Fraction(1, 2), Fraction(7, 3), Fraction(100)):
        assert compiled_gaussian_sigma2(s2) == s2


def test_production_budget_takes_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> int:
        raise AssertionError("the big-integer path was taken")

    monkeypatch.setattr(_bigint, "discrete_gaussian_scalar", refuse)
    mech = DiscreteGaussianMechanism(PRODUCTION_RHO, l2_sensitivity_squared=Fraction(2))
    assert mech.noise_sigma2 >= mech.sigma2
    out = mech.release(np.zeros(200_000, dtype=np.int64), rng=rng_from_key(new_release_key(3)))
    # the variance recorded is the drawn one's; the sample agrees (z < 5 at this size)
    se = mech.variance * np.sqrt(2 / out.size)
    assert abs(out.var() - mech.variance) < 5 * se
