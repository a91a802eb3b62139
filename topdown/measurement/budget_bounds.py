"""The per-query budgets the exact samplers can take, checked before any noise is drawn.

Each query of a level spends ``level budget x share``: the discrete Laplace draws at scale
t = L1 / epsilon, the discrete Gaussian at sigma^2 = L2^2 / (2 rho) (``mechanisms.discrete``).
Both ends of the range come from what the samplers and the estimator can hold:

- Below ``MIN_QUERY_BUDGET`` = 1e-15 the noise no longer fits the int64 counts: noisy counts
  must stay within 2**62 (``mechanisms.discrete._add_noise``), and measured, the discrete
  Laplace at epsilon = 1e-20 draws samples beyond 2**63 and fails ("Python int too large to
  convert to C long"). At 1e-15 (L1 <= 2) the scale is at most 2e15 < 2**51, and a sample
  beyond 2**62 has probability below exp(-2**11).
- Above ``MAX_QUERY_BUDGET`` = 1e6 nothing is gained: the noise is already zero with
  probability 1 - 2 exp(-budget / sensitivity), which is 1.0 in floating point from about
  1,500 on, so the release is the truth. What fails up there is the float form of the
  figures the ledger states: ``float(Fraction(10**308))`` and the totals over levels overflow
  (measured: budgets of 1e308 fail with "integer division result too large for a float", or
  write ``Infinity`` into JSON). 1e6 leaves 300 orders of magnitude of headroom for totals and
  the (epsilon, delta) conversion; budgets of 1e4 (exact releases in tests) stay accepted.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mechanisms.errors import BudgetError
from topdown.strategy import Strategy

__all__ = ["MIN_QUERY_BUDGET", "MAX_QUERY_BUDGET", "budget_range_rule", "out_of_range", "check"]

MIN_QUERY_BUDGET = Fraction(1, 10**15)
MAX_QUERY_BUDGET = Fraction(10**6)


def budget_range_rule() -> str:
    """The rule, in words, for error messages."""
    return (
        f"each query's budget (level budget x query share) must be in "
        f"[{float(MIN_QUERY_BUDGET):g}, {float(MAX_QUERY_BUDGET):g}], the range the exact "
        "samplers take (below, the noise overflows 64-bit counts; above, it is zero in all but "
        "name and the ledger's float figures overflow)"
    )


def out_of_range(budget: Fraction, share: Fraction) -> bool:
    """Whether a query given ``share`` of a level's ``budget`` falls outside the range."""
    spent = budget * share
    return not MIN_QUERY_BUDGET <= spent <= MAX_QUERY_BUDGET


def shown(value: Fraction) -> str:
    """A budget for a message: ``%g`` of its float, or its order of magnitude where the float
    would overflow or vanish (a 400-digit budget), never an OverflowError."""
    if value == 0:
        return "0"
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if as_float != 0 and math.isfinite(as_float):
        return f"{as_float:g}"
    digits = len(str(abs(value.numerator))) - len(str(value.denominator))
    return f"about 1e{digits:+d}"


def check(strategy: Strategy) -> None:
    """Refuse a strategy with a query budget outside the range (``release()`` calls this).

    Raises:
        BudgetError: naming the level, the query, its budget and the range.
    """
    for number, ls in enumerate(strategy.levels):
        for q, share in ls.queries:
            if out_of_range(ls.budget, share):
                raise BudgetError(
                    f"level {number} query {q.name!r}: budget {ls.budget} x share {share} = "
                    f"{shown(ls.budget * share)}; {budget_range_rule()}"
                )
