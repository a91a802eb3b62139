"""Privacy budgets, their composition, and conversions between privacy notions.

Two kinds of budget are used by the engine: pure differential privacy (``PureDP``, an
epsilon, spent by the discrete Laplace mechanism) and zero-concentrated DP (``ZCDP``, a rho,
spent by the discrete Gaussian mechanism). Both hold their parameter as an exact
``Fraction`` so that splitting a budget into shares and adding the shares back gives exactly
the budget that was declared: a total that drifts by one unit in the last place is a privacy
claim nobody can check.

Floats appear only where a figure is reported (the (epsilon, delta) of a zCDP total); they
are rounded up so that a reported privacy loss is never smaller than the true bound.

The measurement ledger lives in :mod:`mechanisms.ledger` and is re-exported from here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from mechanisms.errors import BudgetError
from mechanisms.exact import as_fraction

__all__ = [
    "Budget",
    "PureDP",
    "ZCDP",
    "make_budget",
    "parallel",
    "sequential",
    "pure_to_zcdp",
    "split",
    "scale",
    "float_up",
    "zcdp_to_approx_dp",
    "zcdp_to_approx_dp_simple",
]

logger = logging.getLogger(__name__)

# Relative margin added to a float privacy figure to absorb the rounding error of the few
# floating-point operations that computed it (each is correct to half an ulp).
_FLOAT_MARGIN = 1e-12


def float_up(value: Fraction | float) -> float:
    """Return the smallest float that is >= ``value``.

    Why: ``float(Fraction)`` rounds to nearest, which may be below the exact value; a privacy
    parameter reported as a float must never understate the exact one.
    """
    as_float = float(value)
    if Fraction(as_float) < Fraction(value):
        as_float = math.nextafter(as_float, math.inf)
    return as_float


def _float_up_margin(value: float) -> float:
    """Round a computed float privacy figure up by a relative margin and one ulp."""
    return math.nextafter(value + abs(value) * _FLOAT_MARGIN, math.inf)


class _Budget:
    """What both budget kinds share: exact validation of their one parameter, ``value``,
    sequential composition (same kind adds; mixed kinds add as zCDP) and ``sum`` support.

    Subclasses are frozen dataclasses with one Fraction field named by ``_param``.
    """

    _param: ClassVar[str]
    kind: ClassVar[str]

    def __post_init__(self) -> None:
        value = as_fraction(getattr(self, self._param), self._param, error=BudgetError)
        object.__setattr__(self, self._param, value)

    @property
    def value(self) -> Fraction:
        """The budget's parameter (epsilon or rho), whatever the kind; used by generic code."""
        return getattr(self, self._param)

    def to_zcdp(self) -> ZCDP:
        raise NotImplementedError

    def __add__(self, other: object) -> PureDP | ZCDP:
        """Sequential composition: epsilons add (pure DP), rhos add (zCDP, Bun & Steinke
        2016, Lemma 2.3); a pure budget meets a zCDP one as zCDP."""
        if not isinstance(other, _Budget):
            return NotImplemented
        if type(other) is type(self):
            return _BUDGET_KINDS[self.kind](self.value + other.value)
        return ZCDP(self.to_zcdp().rho + other.to_zcdp().rho)

    def __radd__(self, other: object) -> PureDP | ZCDP:
        """Let ``sum(budgets)`` start from 0."""
        zero = isinstance(other, int) and not isinstance(other, bool) and other == 0
        if zero and isinstance(self, (PureDP, ZCDP)):
            return self
        return NotImplemented

    def __str__(self) -> str:
        return f"{type(self).__name__}({self._param}={self.value})"


@dataclass(frozen=True)
class PureDP(_Budget):
    """An epsilon-differential-privacy budget (exact).

    Args:
        epsilon: int, Fraction, float (converted exactly) or decimal string; must be > 0.

    Raises:
        BudgetError: epsilon is zero, negative, NaN, infinite, a bool or not a number.
    """

    epsilon: Fraction
    kind: ClassVar[str] = "pure"
    _param: ClassVar[str] = "epsilon"

    def to_zcdp(self) -> ZCDP:
        """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Proposition 1.4)."""
        return ZCDP(self.epsilon**2 / 2)


@dataclass(frozen=True)
class ZCDP(_Budget):
    """A rho-zero-concentrated-DP budget (exact).

    Args:
        rho: int, Fraction, float (converted exactly) or decimal string; must be > 0.

    Raises:
        BudgetError: rho is zero, negative, NaN, infinite, a bool or not a number.
    """

    rho: Fraction
    kind: ClassVar[str] = "zcdp"
    _param: ClassVar[str] = "rho"

    def to_zcdp(self) -> ZCDP:
        """Already zCDP: returns itself, so mixed code can call ``to_zcdp`` on any budget."""
        return self


Budget = PureDP | ZCDP
_BUDGET_KINDS: dict[str, type[PureDP] | type[ZCDP]] = {"pure": PureDP, "zcdp": ZCDP}


def _check_budget(budget: object, name: str = "budget") -> Budget:
    if not isinstance(budget, (PureDP, ZCDP)):
        raise BudgetError(f"{name} ({budget!r}) must be a PureDP or ZCDP budget")
    return budget


def make_budget(kind: str, value: object) -> Budget:
    """Build a budget from its kind name (``"pure"`` or ``"zcdp"``) and parameter."""
    if kind not in _BUDGET_KINDS:
        raise BudgetError(f"kind ({kind!r}) must be one of {sorted(_BUDGET_KINDS)}")
    cls = _BUDGET_KINDS[kind]
    return cls(as_fraction(value, cls._param, error=BudgetError))


def pure_to_zcdp(epsilon: object) -> ZCDP:
    """The zCDP budget implied by epsilon-DP: rho = epsilon^2 / 2 (exact)."""
    if isinstance(epsilon, PureDP):
        return epsilon.to_zcdp()
    return PureDP(as_fraction(epsilon, "epsilon", error=BudgetError)).to_zcdp()


def parallel(*budgets: Budget) -> Budget:
    """Parallel composition over disjoint data: the largest budget.

    Why: a person contributes to one part only, so only the largest part's loss applies.
    Budgets of mixed kinds are compared as zCDP.

    Raises:
        BudgetError: no budgets, or an argument that is not a budget.
    """
    if not budgets:
        raise BudgetError("parallel() needs at least one budget")
    for index, budget in enumerate(budgets):
        _check_budget(budget, f"budgets[{index}]")
    kinds = {type(b) for b in budgets}
    if len(kinds) > 1:
        return max((b.to_zcdp() for b in budgets), key=lambda b: b.rho)
    return max(budgets, key=lambda b: b.value)


def scale(budget: Budget, fraction: object) -> Budget:
    """Multiply a budget's parameter by a positive exact ``fraction`` (same kind)."""
    _check_budget(budget)
    factor = as_fraction(fraction, "fraction", error=BudgetError)
    return type(budget)(budget.value * factor)


def split(budget: Budget, shares: Sequence[object]) -> tuple[Budget, ...]:
    """Split a budget into shares that compose sequentially back to exactly the budget.

    Why exact: shares such as 1/3 in floats do not sum to 1, and the ledger total would then
    differ from the declared budget.

    Args:
        budget: the budget to split.
        shares: positive exact numbers (Fractions, ints, decimal strings, floats) summing to
            exactly 1.

    Returns:
        One budget per share, of the same kind as ``budget``.

    Raises:
        BudgetError: a share <= 0 or not a number, no shares, or shares not summing to 1.

    Example:
        >>> split(ZCDP(1), ["1/3", "2/3"])
        (ZCDP(rho=Fraction(1, 3)), ZCDP(rho=Fraction(2, 3)))
        >>> sum(split(PureDP("1/2"), [Fraction(1, 3)] * 3)) == PureDP("1/2")  # exactly
        True
    """
    _check_budget(budget)
    fractions_ = [as_fraction(s, f"shares[{i}]", error=BudgetError) for i, s in enumerate(shares)]
    if not fractions_:
        raise BudgetError("shares ([]) must not be empty")
    total = sum(fractions_, Fraction(0))
    if total != 1:
        raise BudgetError(f"shares must sum to exactly 1, got sum {total} ({float(total)!r})")
    return tuple(type(budget)(budget.value * s) for s in fractions_)


def _rho_delta(rho: object, delta: float) -> tuple[float, float]:
    """Validate (rho, delta) and return rho rounded up to a float, and delta."""
    rho_exact = rho.rho if isinstance(rho, ZCDP) else as_fraction(rho, "rho", error=BudgetError)
    if isinstance(delta, bool) or not isinstance(delta, (int, float, Fraction)):
        raise BudgetError(f"delta ({delta!r}) must be a number in (0, 1)")
    delta_f = float(delta)
    if not 0.0 < delta_f < 1.0:
        raise BudgetError(f"delta ({delta!r}) must be in (0, 1)")
    return float_up(rho_exact), delta_f


def zcdp_to_approx_dp_simple(rho: object, delta: float) -> float:
    """The simple conversion eps = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016,
    Proposition 1.3), rounded up. Looser than :func:`zcdp_to_approx_dp`; kept for comparison
    with published figures that used it.
    """
    rho_f, delta_f = _rho_delta(rho, delta)
    return _float_up_margin(rho_f + 2.0 * math.sqrt(rho_f * math.log(1.0 / delta_f)))


def _cks_epsilon(alpha: float, rho: float, log_inv_delta: float) -> float:
    """CKS20 Corollary 13 solved for epsilon at one Renyi order alpha > 1."""
    am1 = alpha - 1.0
    return alpha * rho + (log_inv_delta + am1 * math.log1p(-1.0 / alpha) - math.log(alpha)) / am1


def zcdp_to_approx_dp(rho: object, delta: float) -> float:
    """The epsilon such that rho-zCDP implies (epsilon, delta)-DP, by the tight conversion.

    Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020,
    arXiv:2004.00010), Section 2.3, Corollary 13: rho-zCDP implies (epsilon, delta)-DP with
    delta = exp((alpha-1)(alpha rho - epsilon)) / (alpha-1) * (1 - 1/alpha)^alpha for every
    alpha > 1. Solved for epsilon:

        epsilon = min_{alpha > 1} alpha rho
                  + (log(1/delta) + (alpha-1) log(1 - 1/alpha) - log(alpha)) / (alpha - 1).

    Why the result is safe although the minimum is found numerically: every alpha > 1 gives
    a valid bound, so a minimiser that stops short only over-states epsilon. The value at the
    chosen alpha is rounded up by a relative 1e-12 and one ulp, to cover the float error in
    evaluating it; the result is also never above the simple bound, which is valid too.

    Args:
        rho: a ``ZCDP`` budget or a positive number.
        delta: in (0, 1).

    Returns:
        epsilon >= 0 as a float, rounded up.

    Raises:
        BudgetError: rho not > 0, or delta not in (0, 1).
    """
    rho_f, delta_f = _rho_delta(rho, delta)
    log_inv_delta = math.log(1.0 / delta_f)
    # The optimum is near alpha = 1 + sqrt(log(1/delta) / rho); bracket well beyond it.
    upper = 2.0 + 4.0 * math.sqrt(log_inv_delta / rho_f) + log_inv_delta
    from scipy.optimize import minimize_scalar  # here: scipy.optimize costs 0.3 s to import

    result = minimize_scalar(
        _cks_epsilon,
        bounds=(1.0 + 1e-9, upper),
        args=(rho_f, log_inv_delta),
        method="bounded",
        options={"xatol": 1e-10},
    )
    alpha = float(result.x)
    epsilon = _float_up_margin(_cks_epsilon(alpha, rho_f, log_inv_delta))
    simple = zcdp_to_approx_dp_simple(rho_f, delta_f)
    logger.debug("zCDP rho=%r delta=%r -> epsilon=%r at alpha=%r", rho_f, delta_f, epsilon, alpha)
    return max(0.0, min(epsilon, simple))


def sequential(budgets: Iterable[Budget]) -> Budget:
    """Sequential composition of many budgets (mixed kinds compose as zCDP).

    Raises:
        BudgetError: no budgets, or an element that is not a budget.
    """
    items = [_check_budget(b, f"budgets[{i}]") for i, b in enumerate(budgets)]
    if not items:
        raise BudgetError("sequential() needs at least one budget")
    total: Budget = items[0]
    for item in items[1:]:
        total = total + item
    return total
