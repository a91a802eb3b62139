"""Exact controlled rounding: a 0/1 transportation problem solved as a min-cost flow.

The rounding pass with child-total rows (controlled rounding) chooses ``z[c, j]`` in {0, 1}
for child ``c`` and cell ``j`` at cost ``C[c, j]``, with every cell's column summing to its
required ``b[j]`` and every child's row sum within ``[L[c], U[c]]``. Cells and children form a
bipartite graph, so this is a min-cost flow (totally unimodular: the LP optimum is integral).

Algorithm: successive shortest paths (Ahuja, Magnanti, Orlin 1993, ch. 9) on the children.
Start from the per-cell optimum that ignores the child rows (each cell takes its ``b[j]``
cheapest children), which leaves no negative cycle. A unit of flow from child ``a`` to child
``b`` moves one unit of some cell ``j`` from ``a`` to ``b`` (``z[a, j]: 1 -> 0``,
``z[b, j]: 0 -> 1``) at cost ``C[b, j] - C[a, j]``; the contracted graph keeps, per ordered
pair, the cheapest such cell. A source feeds children that must (``r > U``, cost ``-M``) or
may (``r > L``, cost 0) give a unit, a sink takes from children that must (``r < L``) or may
(``r < U``) receive one; ``M`` exceeds any path's cost, so the mandatory moves come first.
Each step augments one unit along a shortest source-sink path (Bellman-Ford: path costs can be
negative after earlier moves, cycles cannot) while that path costs less than zero. The result
is an optimum of the rounding LP, so it equals HiGHS's objective (tests/test_solvers_properties).

Per step the work is ``O(k^3)`` for the shortest path plus the pairs whose cheapest cell moved;
the number of steps is the number of units the child rows move, typically a few per child.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TransportInfeasible", "round_groups", "transport_round"]

_EPS = 0.5  # costs are integers after _quantise: any real improvement is at least 1
_GRID = 2.0**30  # cost resolution 2^-30 (about 1e-9)


class TransportInfeasible(Exception):
    """No 0/1 matrix meets the cell sums and the child bounds (``args[0]`` says which)."""


def transport_round(C: np.ndarray, b: np.ndarray, L: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The cheapest 0/1 matrix with column sums ``b`` and row sums in ``[L, U]``.

    Args:
        C: costs, shape (k, n); ``+inf`` where a child has no variable in a cell.
        b: required column sums (n,), integers.
        L, U: row-sum bounds (k,), integers or infinite.

    Returns:
        z (k, n), boolean.

    Raises:
        TransportInfeasible: a cell asks for more units than it has variables, or the child
            bounds cannot all hold.
    """
    k, n = C.shape
    finite = np.isfinite(C)
    size = finite.sum(axis=0)
    bad = np.flatnonzero((b < 0) | (b > size))
    if bad.size:
        j = int(bad[0])
        raise TransportInfeasible(f"cell {j} needs {b[j]:g} unit(s), outside [0, {size[j]}]")
    C = _quantise(C, finite)
    z = round_groups(C.T, b).T.astype(bool)
    r = z.sum(axis=1).astype(float)
    M = 1.0 + 4.0 * k * float(np.max(np.abs(C[finite]), initial=1.0))
    give = np.where(z, -C, np.inf)
    take = np.where(~z & finite, C, np.inf)
    W, J = _pair_costs(give, take)
    while True:
        path = _shortest_path(W, r, L, U, M)
        if path is None:
            break
        touched = []
        for a, c in path:
            j = int(J[a, c])
            z[a, j], z[c, j] = False, True
            r[a] -= 1.0
            r[c] += 1.0
            touched.append(j)
        cells = np.unique(touched)
        give[:, cells] = np.where(z[:, cells], -C[:, cells], np.inf)
        take[:, cells] = np.where(~z[:, cells] & finite[:, cells], C[:, cells], np.inf)
        _update_pairs(W, J, give, take, cells)
    bad = np.flatnonzero((r < L - 1e-9) | (r > U + 1e-9))
    if bad.size:
        c = int(bad[0])
        raise TransportInfeasible(f"child {c} sums to {r[c]:g} at best, outside [{L[c]}, {U[c]}]")
    return z


def _quantise(C: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Costs as integers on a 2^-30 grid (held in floats, exactly). Successive shortest paths
    keep "no negative cycle" only if every path found is truly shortest; with float costs,
    near-ties (L2 answers a hair from an integer, e.g. 0.99999999998) let a tolerance accept a
    path that is not, the errors add up into a negative cycle and the search fails. Integer
    sums are exact (below 2^53), so the comparisons are too; the optimum moves by at most one
    grid step per unit moved."""
    scale = _GRID
    top = float(np.max(np.abs(C[finite]), initial=1.0))
    while scale > 1.0 and top * scale * 4 * (C.shape[0] + 1) >= 2.0**52:
        scale /= 2.0  # keep path sums exact for large costs
    return np.where(finite, np.round(np.where(finite, C, 0.0) * scale), np.inf)


def round_groups(c: np.ndarray, b: np.ndarray) -> np.ndarray:
    """In each row of ``c`` (G, s) set the ``b`` cheapest entries to 1, ties to lower index."""
    order = np.argsort(c, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(c.shape[1])[None, :].repeat(c.shape[0], 0), axis=1)
    return (rank < b[:, None]).astype(float)


def _pair_costs(give: np.ndarray, take: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per ordered pair (a, b): the cheapest cell to move a unit from a to b, and its cost."""
    k = give.shape[0]
    W = np.empty((k, k))
    J = np.empty((k, k), dtype=np.int64)
    rows = np.arange(k)
    for a in range(k):
        tot = give[a][None, :] + take
        J[a] = np.argmin(tot, axis=1)
        W[a] = tot[rows, J[a]]
    return W, J


def _update_pairs(
    W: np.ndarray, J: np.ndarray, give: np.ndarray, take: np.ndarray, cells: np.ndarray
) -> None:
    """Refresh the pair costs after the cells ``cells`` changed (in place)."""
    stale = np.isin(J, cells)
    a_idx, b_idx = np.nonzero(stale)
    if a_idx.size:
        tot = give[a_idx] + take[b_idx]
        j = np.argmin(tot, axis=1)
        W[a_idx, b_idx] = tot[np.arange(a_idx.size), j]
        J[a_idx, b_idx] = j
    new = give[:, None, cells] + take[None, :, cells]
    best = np.argmin(new, axis=2)
    value = np.take_along_axis(new, best[:, :, None], axis=2)[:, :, 0]
    better = value < W
    W[better] = value[better]
    J[better] = cells[best[better]]


def _shortest_path(
    W: np.ndarray, r: np.ndarray, L: np.ndarray, U: np.ndarray, M: float
) -> list[tuple[int, int]] | None:
    """The hops (a, b) of a cheapest source-sink path costing < 0, or None.

    Each child is split into an out-node (it gives a unit: reached from the source or after
    receiving) and an in-node (it received a unit), so a path has at least one hop.
    Bellman-Ford, vectorised over the children: arc costs can be negative.
    """
    k = W.shape[0]
    source = np.where(r > U, -M, np.where(r > L, 0.0, np.inf))
    sink = np.where(r < L, -M, np.where(r < U, 0.0, np.inf))
    if not (np.isfinite(source).any() and np.isfinite(sink).any()):
        return None
    d_out = source.copy()
    via_in = np.zeros(k, dtype=bool)  # the out-node was reached through the in-node
    d_in = np.full(k, np.inf)
    pred = np.full(k, -1)
    cols = np.arange(k)
    for _ in range(2 * k + 1):
        cand = d_out[:, None] + W
        arg = np.argmin(cand, axis=0)
        value = cand[arg, cols]
        better = value < d_in - _EPS
        if not better.any():
            break
        d_in[better] = value[better]
        pred[better] = arg[better]
        relay = d_in < d_out - _EPS
        d_out[relay] = d_in[relay]
        via_in[relay] = True
    end = d_in + sink
    c = int(np.argmin(end))
    if not end[c] < -_EPS:
        return None
    hops: list[tuple[int, int]] = []
    for _ in range(k + 1):
        a = int(pred[c])
        hops.append((a, c))
        if not via_in[a]:
            return hops[::-1]
        c = a
    raise RuntimeError("transport_round: a negative cycle among the children")  # pragma: no cover
