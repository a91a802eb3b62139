"""Exact integer noise mechanisms for count vectors: discrete Laplace and discrete Gaussian.

A mechanism is a frozen value object holding its privacy parameter and sensitivity as exact
Fractions. It knows its privacy cost (``budget``), the variance of its noise (the weight the
estimator gives to its measurements) and how to release a noisy copy of an integer vector.
Noise is drawn by the exact samplers of :mod:`mechanisms.samplers` (Canonne, Kamath, Steinke
2020), so no floating-point value decides an output.

Calibration:

- discrete Laplace, epsilon-DP: scale t = L1 / epsilon, P(x) proportional to exp(-|x| / t);
- discrete Gaussian, rho-zCDP: sigma^2 = L2^2 / (2 rho), P(x) proportional to
  exp(-x^2 / (2 sigma^2)) (CKS20, Theorem 4).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from mechanisms.accounting import ZCDP, Budget, PureDP
from mechanisms.errors import BudgetError, MechanismError
from mechanisms.exact import as_fraction
from mechanisms.samplers import (
    compiled_gaussian_sigma2,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)

__all__ = [
    "NoiseMechanism",
    "DiscreteLaplaceMechanism",
    "DiscreteGaussianMechanism",
    "geometric_mechanism",
    "make_mechanism",
    "MECHANISMS",
    "NEIGHBOURING",
    "sensitivity",
    "as_integer_array",
]

logger = logging.getLogger(__name__)

# Above this sigma^2 the discrete Gaussian's variance equals sigma^2 to float precision: by
# Poisson summation the gap is about 8 pi^2 sigma^4 exp(-2 pi^2 sigma^2), < 1e-400 here.
_VARIANCE_SUM_LIMIT = Fraction(10**6)


@runtime_checkable
class NoiseMechanism(Protocol):
    """What the measure step needs from a noise mechanism."""

    name: ClassVar[str]

    @property
    def budget(self) -> Budget: ...

    @property
    def variance(self) -> float: ...

    def release(self, values: Any, rng: np.random.Generator | None = None) -> np.ndarray: ...


def as_integer_array(values: Any, name: str = "values") -> np.ndarray:
    """Return ``values`` as an int64 array, refusing anything not integer-valued.

    Why strict: a fractional count means the caller passed the wrong thing (weights,
    proportions); rounding it silently would change the sensitivity the noise assumed.

    Raises:
        MechanismError: naming ``name`` and showing an offending entry.
    """
    array = np.asarray(values)
    if array.dtype == np.bool_:
        raise MechanismError(f"{name} must be integer-valued, got a boolean array")
    if array.dtype.kind in "iu":
        if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
            raise MechanismError(f"{name} has an entry ({array.max()}) beyond int64")
        return array.astype(np.int64, copy=False)
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array) | (np.floor(array) != array) | (np.abs(array) >= 2.0**63)
        if bad.any():
            offending = array[np.unravel_index(int(np.argmax(bad)), array.shape)].item()
            raise MechanismError(f"{name} must be integer-valued, got entry {offending!r}")
        return array.astype(np.int64)
    if array.dtype.kind == "O":
        out = np.empty(array.shape, dtype=np.int64)
        for index, item in np.ndenumerate(array):
            ok = not isinstance(item, bool) and isinstance(item, (int, float, Fraction, np.number))
            if ok:
                try:
                    ok = Fraction(item).denominator == 1 and abs(int(item)) < 2**63
                except (ValueError, OverflowError, TypeError):
                    ok = False
            if not ok:
                raise MechanismError(f"{name} must be integer-valued, got entry {item!r}")
            out[index] = int(item)
        return out
    raise MechanismError(f"{name} must be integer-valued, got dtype {array.dtype} ({values!r:.80})")


def _add_noise(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Add noise to counts, refusing int64 overflow rather than wrapping around."""
    noise = np.asarray(noise, dtype=np.int64).reshape(values.shape)
    limit = np.iinfo(np.int64).max // 2
    if values.size and (np.abs(values).max() > limit or np.abs(noise).max() > limit):
        raise MechanismError("values plus noise would overflow int64")
    return values + noise


@dataclass(frozen=True)
class DiscreteLaplaceMechanism:
    """epsilon-DP discrete Laplace noise, scale t = l1_sensitivity / epsilon.

    Args:
        epsilon: privacy parameter (> 0, exact).
        l1_sensitivity: L1 sensitivity of the query vector (> 0, exact; 1 for a histogram
            under add/remove neighbours).
    """

    epsilon: Fraction
    l1_sensitivity: Fraction = Fraction(1)
    name: ClassVar[str] = "discrete_laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", as_fraction(self.epsilon, "epsilon", error=BudgetError))
        object.__setattr__(
            self, "l1_sensitivity", as_fraction(self.l1_sensitivity, "l1_sensitivity")
        )

    @property
    def scale(self) -> Fraction:
        """The noise scale t = L1 / epsilon (exact)."""
        return self.l1_sensitivity / self.epsilon

    @property
    def budget(self) -> PureDP:
        """The privacy cost of one release."""
        return PureDP(self.epsilon)

    @property
    def variance(self) -> float:
        """Var = 2 e^{-1/t} / (1 - e^{-1/t})^2 (closed form), for weighting estimates."""
        inv_t = float(1 / self.scale)
        q = math.exp(-inv_t)
        one_minus_q = -math.expm1(-inv_t)
        return 2.0 * q / (one_minus_q * one_minus_q)

    def release(self, values: Any, rng: np.random.Generator | None = None) -> np.ndarray:
        """Return ``values`` (integer-valued) plus independent discrete Laplace noise."""
        counts = as_integer_array(values)
        noise = sample_discrete_laplace(self.scale, counts.size, rng=rng)
        return _add_noise(counts, noise)


@dataclass(frozen=True)
class DiscreteGaussianMechanism:
    """rho-zCDP discrete Gaussian noise, sigma^2 = L2^2 / (2 rho) (CKS20, Theorem 4).

    Give the L2 sensitivity either directly (``l2_sensitivity``) or as its square
    (``l2_sensitivity_squared``): the square stays exact when the sensitivity is irrational,
    e.g. sqrt(2) for a histogram under replace-one neighbours. Default: L2 = 1.

    Attributes:
        l2_sensitivity: the exact L2 sensitivity, or None when it is irrational.
        l2_sensitivity_squared: always set, exact.
    """

    rho: Fraction
    l2_sensitivity: Fraction | None = None
    l2_sensitivity_squared: Fraction | None = field(default=None, kw_only=True)
    name: ClassVar[str] = "discrete_gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", as_fraction(self.rho, "rho", error=BudgetError))
        l2 = self.l2_sensitivity
        l2_sq = self.l2_sensitivity_squared
        if l2 is not None:
            l2 = as_fraction(l2, "l2_sensitivity")
        if l2_sq is not None:
            l2_sq = as_fraction(l2_sq, "l2_sensitivity_squared")
        if l2_sq is None:
            l2 = Fraction(1) if l2 is None else l2
            l2_sq = l2 * l2
        elif l2 is None:
            l2 = _exact_sqrt(l2_sq)
        elif l2 * l2 != l2_sq:
            raise MechanismError(
                f"l2_sensitivity ({l2}) squared must equal l2_sensitivity_squared ({l2_sq})"
            )
        object.__setattr__(self, "l2_sensitivity", l2)
        object.__setattr__(self, "l2_sensitivity_squared", l2_sq)

    @property
    def sigma2(self) -> Fraction:
        """The discrete Gaussian's parameter sigma^2 = L2^2 / (2 rho) (exact)."""
        l2_sq = self.l2_sensitivity_squared
        assert l2_sq is not None  # __post_init__ always sets it
        return l2_sq / (2 * self.rho)

    @property
    def noise_sigma2(self) -> Fraction:
        """The sigma^2 the noise is drawn with: ``sigma2``, or the nearest dyadic rational
        above it that the compiled sampler takes (``samplers.compiled_gaussian_sigma2``: a
        relative increase below 1e-7). Never less noise than calibrated, so the loss is at most
        ``rho``, which the ledger records."""
        return compiled_gaussian_sigma2(self.sigma2)

    @property
    def budget(self) -> ZCDP:
        """The privacy cost of one release."""
        return ZCDP(self.rho)

    @property
    def variance(self) -> float:
        """The exact variance of the discrete Gaussian (slightly below sigma^2), by summation.

        Why not sigma^2: when the budget per query is large, sigma^2 is small and the two
        differ enough to skew inverse-variance weights: at sigma^2 = 1/4 the variance is
        about 0.2150, not 0.25 (at sigma^2 = 1 they agree to 2e-7).
        """
        return discrete_gaussian_variance(self.noise_sigma2)

    def release(self, values: Any, rng: np.random.Generator | None = None) -> np.ndarray:
        """Return ``values`` (integer-valued) plus independent discrete Gaussian noise."""
        counts = as_integer_array(values)
        noise = sample_discrete_gaussian(self.noise_sigma2, counts.size, rng=rng)
        return _add_noise(counts, noise)


def _exact_sqrt(value: Fraction) -> Fraction | None:
    """The rational square root of ``value`` if it has one, else None."""
    num, den = math.isqrt(value.numerator), math.isqrt(value.denominator)
    if num * num == value.numerator and den * den == value.denominator:
        return Fraction(num, den)
    return None


def discrete_gaussian_variance(sigma2: object) -> float:
    """Variance of the discrete Gaussian N_Z(0, sigma^2): sum x^2 w(x) / sum w(x).

    Summed over |x| <= 14 sigma + 2 (the tail beyond is below 1e-40 of the mass); above
    sigma^2 = 1e6 the variance equals sigma^2 to float precision and is returned directly.
    """
    s2 = as_fraction(sigma2, "sigma2")
    if s2 > _VARIANCE_SUM_LIMIT:
        return float(s2)
    s2_f = float(s2)
    top = int(14 * math.sqrt(s2_f)) + 2
    x = np.arange(1, top + 1, dtype=np.float64)
    weights = np.exp(-(x * x) / (2.0 * s2_f))
    return float(2.0 * np.sum(x * x * weights) / (1.0 + 2.0 * np.sum(weights)))


def geometric_mechanism(
    values: Any, epsilon: object, sensitivity: object = 1, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The "geometric mechanism": values plus the difference of two geometric draws.

    With success probability p = 1 - exp(-epsilon / S), two independent geometric variables
    G1, G2 on {0, 1, ...} (P(G = k) = p (1-p)^k) have a difference with
    P(G1 - G2 = k) = (1 - q) / (1 + q) q^|k|, q = exp(-epsilon / S): exactly the discrete
    Laplace with scale S / epsilon. So this draws that discrete Laplace exactly with
    :func:`mechanisms.samplers.sample_discrete_laplace` instead of two float geometrics.
    """
    mechanism = DiscreteLaplaceMechanism(
        as_fraction(epsilon, "epsilon", error=BudgetError),
        as_fraction(sensitivity, "l1_sensitivity"),
    )
    return mechanism.release(values, rng)


MECHANISMS: tuple[str, ...] = (DiscreteLaplaceMechanism.name, DiscreteGaussianMechanism.name)


def make_mechanism(
    name: str,
    budget: Budget,
    sensitivity: object = 1,
    *,
    l2_sensitivity_squared: object = None,
) -> DiscreteLaplaceMechanism | DiscreteGaussianMechanism:
    """Build a mechanism by name from a budget.

    Args:
        name: one of :data:`MECHANISMS`.
        budget: ``PureDP`` for ``"discrete_laplace"``, ``ZCDP`` for ``"discrete_gaussian"``.
        sensitivity: L1 sensitivity (Laplace) or L2 sensitivity (Gaussian).
        l2_sensitivity_squared: for the Gaussian, the squared L2 sensitivity instead of
            ``sensitivity`` (exact for sqrt(2)).

    Raises:
        MechanismError: unknown name (the message lists the known ones).
        BudgetError: the budget is not of the kind the mechanism spends.
    """
    if name == DiscreteLaplaceMechanism.name:
        if not isinstance(budget, PureDP):
            raise BudgetError(f"budget ({budget}) must be PureDP for mechanism {name!r}")
        return DiscreteLaplaceMechanism(budget.epsilon, as_fraction(sensitivity, "l1_sensitivity"))
    if name == DiscreteGaussianMechanism.name:
        if not isinstance(budget, ZCDP):
            raise BudgetError(f"budget ({budget}) must be ZCDP for mechanism {name!r}")
        if l2_sensitivity_squared is not None:
            l2_sq = as_fraction(l2_sensitivity_squared, "l2_sensitivity_squared")
            return DiscreteGaussianMechanism(budget.rho, l2_sensitivity_squared=l2_sq)
        return DiscreteGaussianMechanism(budget.rho, as_fraction(sensitivity, "l2_sensitivity"))
    raise MechanismError(
        f"mechanism ({name!r}) is unknown; known mechanisms: {', '.join(MECHANISMS)}"
    )


NEIGHBOURING: dict[str, tuple[int, int]] = {"add_remove": (1, 1), "replace_one": (2, 2)}


def sensitivity(neighbouring: str, *, whole_total: bool = False) -> tuple[int, int]:
    """(L1, L2 squared) sensitivity of a marginal or count query under a neighbouring notion.

    Why: adding or removing one person changes one cell by 1 (L1 = L2 = 1); replacing one
    person moves a unit between two cells (L1 = 2, L2 = sqrt(2), so L2^2 = 2).

    ``whole_total``: the query is the number of all the records (the root's total). Adding or
    removing a person changes it by 1; replacing one never changes it, so under replace-one
    its sensitivity is 0 (the total is public under that notion: a measurement of it costs
    nothing, and a marginal's 2 only bounds it). A total below the root is not whole: a
    replaced person may move between two units, changing each unit's total by 1.

    Raises:
        MechanismError: unknown neighbouring (the message lists the known ones).
    """
    if neighbouring not in NEIGHBOURING:
        raise MechanismError(
            f"neighbouring ({neighbouring!r}) must be one of {', '.join(NEIGHBOURING)}"
        )
    if whole_total:
        return (0, 0) if neighbouring == "replace_one" else (1, 1)
    return NEIGHBOURING[neighbouring]
