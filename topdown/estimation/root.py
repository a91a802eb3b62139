"""The root's two passes in closed form, when only its detailed cells and total are fitted.

The root has no parent. When it measures the detailed histogram (weight ``w``) and, under
``estimator="blue"``, its total (weight ``v``), and nothing constrains it but bounds on its
total (no structural zeros; an invariant total is one), its L2 pass

    minimise  w ||x - y||^2 + v (sum x - t)^2   subject to  x >= 0,  lo <= sum x <= hi

is a one-dimensional search. Without the bounds, the KKT conditions give
``x_i = max(0, y_i - theta)`` with ``theta = (v / w) (s - t)`` and ``s = sum x``; so ``theta``
solves ``g(theta) = sum_i max(0, y_i - theta) - t - (w / v) theta = 0``, where ``g`` is
continuous, piecewise linear and strictly decreasing: sorting ``y`` finds the piece, and
``theta`` on it exactly. With ``v = 0`` (no total information) it is the clip
``max(0, y)``. The objective restricted to ``sum x = s`` is convex in ``s`` (the projection's
distance plus the total term), so with the bounds the total is the unbounded optimum's clamped
to ``[lo, hi]``, and ``x`` then the projection of ``y`` onto ``{x >= 0, sum x = s}``.

The rounding pass of the root (``topdown.estimation.family``'s problem with no parent): counts
``floor(x) + z`` minimising ``sum (1 - 2 frac) z`` with the total within the controlled window
``[floor(T), ceil(T)]`` of the L2 total ``T`` and the bounds. Cells are tied only through the
total, so the optimum takes the ``m`` cheapest cells, ``m`` the number of negative costs
clamped to the window. When the root is fitted with marginals (the Newton iteration of
``topdown.estimation.root_marginals``), the batched root can round instead along the longest
chain of its nested marginals (``topdown.estimation.nested_rounding``, off by default:
``EstimateOptions.nested_root_rounding``): every cell still within a unit of ``x`` and the
total in the same window, and each answer of those marginals within a unit of its L2 answer;
its cells' L1 distance is then not the least.

The L2 answer and the cell rounding equal the general solvers' answers (tests/test_root.py);
the general path stays for anything else (rows over part of the cells, structural zeros, other
queries, a capture), and rounds along the same chain where the root has the batched root's form
(``topdown.estimation.family``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.backends.closed_form import project_groups
from topdown.estimation.nested_rounding import nested_round
from topdown.estimation.passes import controlled_window

__all__ = ["root_l2", "root_round"]


def root_l2(
    y: np.ndarray,
    w: float,
    t: float = 0.0,
    v: float = 0.0,
    lo: float = -np.inf,
    hi: float = np.inf,
) -> np.ndarray | None:
    """The root's L2 answer (see the module docstring), or None when ``[lo, hi]`` admits no
    non-negative total (the general path reports it).

    Args:
        y: the detailed answers (cells,).
        w: their weight (> 0).
        t: the total's answer.
        v: its weight (>= 0; 0 when the total is not fitted).
        lo: the lower bound on the total.
        hi: the upper bound on the total.
    """
    y = np.asarray(y, dtype=float)
    if hi < 0 or lo > hi:
        return None
    if v > 0 and y.size:
        ys = -np.sort(-y)  # descending
        above = np.cumsum(ys)  # sum of the j + 1 largest
        j = np.arange(ys.size)
        r = w / v
        # g at each breakpoint theta = ys[j] (the j larger values active there): it rises
        # with j as theta falls, so the root's active values are the prefix where g <= 0
        g = (above - ys) - j * ys - t - r * ys
        m = int(np.argmax(g > 0)) if np.any(g > 0) else ys.size
        theta = ((above[m - 1] if m else 0.0) - t) / (m + r)
        x = np.maximum(y - theta, 0.0)
    else:
        x = np.maximum(y, 0.0)
    s = float(x.sum())
    if lo <= s <= hi:
        return x
    total = min(max(s, lo, 0.0), hi)
    return project_groups(y[None, :], np.ones((1, y.size)), np.array([total]))[0]


def root_round(
    x: np.ndarray,
    lo: float = -np.inf,
    hi: float = np.inf,
    *,
    controlled: bool = True,
    chain: Sequence[np.ndarray] = (),
) -> np.ndarray | None:
    """The root's rounding (see the module docstring): int64 counts, or None when no count
    within a unit of ``x`` per cell meets the total's window (the general path widens).

    With a ``chain`` of nested marginals (``topdown.estimation.nested_rounding``), the counts
    also keep each of their answers within a unit of its L2 answer, the total at the integer
    nearest the L2 total within the window (and the bounds): ``nested_round``. Without one, or
    when that integer is not within a unit of the L2 total (bounds far from it), each cell is
    rounded on its own, as above.

    Args:
        x: the L2 answer (cells,), >= 0.
        lo: the lower bound on the total (an invariant's).
        hi: the upper bound on the total; ``controlled`` adds the window
            ``[floor(T), ceil(T)]`` around the L2 total ``T``.
        chain: partitions of the cells (each cell's answer), coarse first, each refining the
            one before (``nested_rounding.refinement_chain``).
    """
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    floor = np.floor(x)
    cost = 1.0 - 2.0 * (x - floor)
    low, high = np.ceil(lo - 1e-9), np.floor(hi + 1e-9)
    total = float(x.sum())
    if controlled:
        below, above = controlled_window(total)
        low, high = max(low, below), min(high, above)
    if chain and low <= high:
        target = min(max(float(np.rint(total)), low), high)
        if np.floor(total + 1e-9) <= target <= np.ceil(total - 1e-9):
            return nested_round(x, chain, int(target))
    base = float(floor.sum())
    m = min(max(int(np.count_nonzero(cost < 0)), low - base), high - base)
    if not 0 <= m <= x.size or low > high:
        return None
    z = np.zeros(x.size, dtype=np.int64)
    z[np.argsort(cost, kind="stable")[: int(m)]] = 1
    return floor.astype(np.int64) + z
