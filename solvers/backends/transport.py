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

:func:`transport_repair` runs these steps on many independent families at once (one augmenting path
per family per round, arrays (families, k, cells) padded with ``inf``): the level-batched rounding
of ``topdown.estimation.batched.families`` calls it for a chunk of families, :func:`transport_round`
for one family. It starts from any per-cell optimum (no cycle of moves lowers such a start's cost,
which is all the successive shortest paths need), so a caller may share ties round the children and
leave fewer units to move.

Before the paths, :func:`transport_repair` moves the start itself nearer the child bounds by
per-child prices (``_priced_start``): the per-cell optimum of the costs ``C[c, j] - lam[c]`` is
optimal for its own row sums under ``C`` too (the shift adds ``sum_c lam[c] r[c]``, fixed by the
row sums), so it is as good a start; a few rounds set each child's price to drop (or take) the
units it is over (or under) its bounds, cell by cell at the cheapest margins. Each augmenting
path costs ``O(k^3 + stale pairs x cells)``, a round ``O(k n log n)``: on a 42-child family the
paths, one unit each, were the cost (issue 31: 12,386 of them, about 1 ms each).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TransportInfeasible",
    "pair_costs",
    "round_groups",
    "transport_repair",
    "transport_round",
]

#: At most this many (pair, cell) sums are formed at once when the cheapest moves between
#: children are (re)computed: bounds the working arrays (32 MiB of floats).
MAX_PAIR_SUMS = 2**22

_EPS = 0.5  # costs are integers after _quantise: any real improvement is at least 1
#: At most this many rounds of price shifts before the augmenting paths (``_priced_start``).
PRICE_ROUNDS = 4
_GRID = 2.0**30  # cost resolution 2^-30 (about 1e-9)


class TransportInfeasible(Exception):
    """No 0/1 matrix meets the cell sums and the child bounds (``args[0]`` says which)."""


def transport_round(C: np.ndarray, b: np.ndarray, L: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The cheapest 0/1 matrix with column sums ``b`` and row sums in ``[L, U]``.

    Args:
        C: costs, shape (k, n); ``+inf`` where a child has no variable in a cell.
        b: required column sums (n,), integers.
        L: row-sum lower bounds (k,), integers or infinite.
        U: row-sum upper bounds (k,), integers or infinite.

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
    z, ok = transport_repair(C[None], round_groups(C.T, b).T[None], L[None], U[None])
    z = z[0]
    if not ok[0]:
        r = z.sum(axis=1)
        c = int(np.flatnonzero((r < L - 1e-9) | (r > U + 1e-9))[0])
        raise TransportInfeasible(f"child {c} sums to {r[c]:g} at best, outside [{L[c]}, {U[c]}]")
    return z


def transport_repair(
    C: np.ndarray, z: np.ndarray, L: np.ndarray, U: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Many independent transportation problems at once, from a per-cell optimum each.

    Every family ``p`` is repaired as :func:`transport_round` repairs one (the same shortest
    paths, one unit per family per round), so a family's answer does not depend on the others
    in the batch nor on padding: pad children with all-``inf`` rows and ``L = U = 0``, pad cells
    with all-``inf`` columns.

    Args:
        C: costs, shape (P, k, n); ``+inf`` where a child has no variable in a cell.
        z: a start, (P, k, n) boolean: in every column, ones on entries no dearer than the
            column's zeros (for instance the ``b`` cheapest, or the cheapest for costs shifted
            by a per-child constant). Any such start is optimal for its own row sums, so no
            cycle of moves can lower its cost, which the successive shortest paths need.
        L: row-sum lower bounds (P, k).
        U: row-sum upper bounds (P, k).

    Returns:
        (z, ok): the repaired matrices, and per family whether its row sums meet the bounds
        (a family that cannot is left at its cheapest reachable point, ``ok`` False).
    """
    P, k, n = C.shape
    finite = np.isfinite(C)
    C = _quantise(C, finite)  # monotone: a per-cell optimum of C stays one of the grid costs
    z = z.astype(bool, copy=True)
    for f in np.flatnonzero(_off_bounds(z, L, U) > 0):  # one family at a time: its temporaries
        one = slice(f, f + 1)  # are a few (k, n) arrays, not (P, k, n)
        z[one] = _priced_start(C[one], finite[one], z[one], L[one], U[one])
    r = z.sum(axis=2).astype(float)
    M = _big(C, finite)
    give = np.where(z, -C, np.inf)
    take = np.where(~z & finite, C, np.inf)
    W, J = pair_costs(give, take)
    live = np.arange(P)
    while live.size:
        found, src, dst, length = _shortest_paths(W[live], r[live], L[live], U[live], M[live])
        live, src, dst, length = live[found], src[found], dst[found], length[found]
        touched = np.full((live.size, k + 1), -1)  # the cells each path moved, in path order
        for step in range(int(length.max(initial=0))):
            on = length > step
            fam, a, c = live[on], src[on, step], dst[on, step]
            j = J[fam, a, c]
            z[fam, a, j] = False
            z[fam, c, j] = True
            r[fam, a] -= 1.0
            r[fam, c] += 1.0
            touched[on, step] = j
        _refresh(C, finite, z, give, take, W, J, live, touched)
    ok = np.all((r >= L - 1e-9) & (r <= U + 1e-9), axis=1)
    return z, ok


def _priced_start(
    C: np.ndarray,
    finite: np.ndarray,
    z: np.ndarray,
    L: np.ndarray,
    U: np.ndarray,
    rounds: int = PRICE_ROUNDS,
) -> np.ndarray:
    """A per-cell optimum of ``C - lam`` (per-child prices ``lam``) whose row sums are nearer
    ``[L, U]`` than ``z``'s, per family the best of the rounds (``z`` itself if none is better).

    ``C`` is on ``_quantise``'s integer grid and every price an integer, so the comparisons
    that make the start per-cell optimal are exact (an inexact one could leave a negative cycle
    for the paths). A child over its bound by ``e`` units lowers its price just past the
    ``e``-th smallest margin of its units (how much dearer its unit of a cell is than the
    cell's cheapest non-holder), one under by ``e`` raises it past the ``e``-th smallest margin
    of the cells it could enter; all children at once, so a round can overshoot, hence the
    best-of-rounds and the paths after it, which end at the optimum from any such start.
    """
    P, k, n = C.shape
    need = z.sum(axis=1)  # (P, n): units per cell, fixed
    lam = np.zeros((P, k))
    best, best_off = z, _off_bounds(z, L, U)
    for _ in range(rounds):
        r = z.sum(axis=2)
        excess, deficit = np.maximum(r - U, 0.0), np.maximum(L - r, 0.0)
        if not (excess.any() or deficit.any()):
            break
        shifted = C - lam[:, :, None]  # inf stays inf
        t_out = np.where(z | ~finite, np.inf, shifted).min(axis=1)  # cheapest non-holder
        t_in = np.where(z, shifted, -np.inf).max(axis=1)  # dearest holder
        with np.errstate(invalid="ignore"):  # inf - inf off the variables: not selected
            give_margin = np.where(z, t_out[:, None, :] - shifted, np.inf)
            take_margin = np.where(~z & finite, shifted - t_in[:, None, :], np.inf)
        drop, take = _kth_smallest(give_margin, excess), _kth_smallest(take_margin, deficit)
        lam = lam - np.where(np.isfinite(drop), drop + 1.0, 0.0)
        lam = lam + np.where(np.isfinite(take), take + 1.0, 0.0)
        z = _cheapest(C - lam[:, :, None], need)
        off = _off_bounds(z, L, U)
        better = off < best_off
        best = np.where(better[:, None, None], z, best)
        best_off = np.minimum(off, best_off)
    return best


def _off_bounds(z: np.ndarray, L: np.ndarray, U: np.ndarray) -> np.ndarray:
    """Per family, the units its row sums are outside ``[L, U]`` in all (P,)."""
    r = z.sum(axis=2)
    return (np.maximum(r - U, 0.0) + np.maximum(L - r, 0.0)).sum(axis=1)


def _kth_smallest(values: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per (family, child), the ``count``-th smallest of ``values`` (P, k, n) over the cells;
    ``inf`` where ``count`` is 0 or more than the cells (a selection per child: O(n))."""
    n = values.shape[2]
    want = count.astype(np.int64)
    out = np.full(want.shape, np.inf)
    for f, c in zip(*np.nonzero((want > 0) & (want <= n)), strict=True):
        out[f, c] = np.partition(values[f, c], want[f, c] - 1)[want[f, c] - 1]
    return out


def _cheapest(S: np.ndarray, need: np.ndarray) -> np.ndarray:
    """In every cell (P, :, j) the ``need[:, j]`` children of least ``S``, ties to the lower
    index: ones on entries no dearer than the cell's zeros. Sorted cell-major (each cell's
    children contiguous), which is several times faster than along the strided axis."""
    k = S.shape[1]
    order = np.argsort(np.ascontiguousarray(S.transpose(0, 2, 1)), axis=2, kind="stable")
    z = np.empty(order.shape, dtype=bool)
    np.put_along_axis(z, order, np.arange(k)[None, None, :] < need[:, :, None], axis=2)
    return z.transpose(0, 2, 1)


def round_groups(c: np.ndarray, b: np.ndarray) -> np.ndarray:
    """In each row of ``c`` (G, s) set the ``b`` cheapest entries to 1, ties to lower index."""
    order = np.argsort(c, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(c.shape[1])[None, :].repeat(c.shape[0], 0), axis=1)
    return (rank < b[:, None]).astype(float)


def pair_costs(
    give: np.ndarray, take: np.ndarray, max_values: int = MAX_PAIR_SUMS
) -> tuple[np.ndarray, np.ndarray]:
    """Per family and ordered pair (a, b): the cheapest cell to move a unit from a to b, and
    its cost.

    Args:
        give: (P, k, n): ``-C`` where the child holds a unit of the cell, else ``inf``.
        take: (P, k, n): ``C`` where it may receive one, else ``inf``.
        max_values: at most this many sums are formed at once (bounds the working array).

    Returns:
        W (P, k, k) costs (``inf`` where no cell moves) and J (P, k, k) the cells.
    """
    P, k, n = give.shape
    W = np.full((P, k, k), np.inf)
    J = np.zeros((P, k, k), dtype=np.int64)
    if n == 0:
        return W, J
    step = max(1, max_values // (k * n))  # families summed at once
    for first in range(0, P, step):
        fams = slice(first, first + step)
        for a in range(k):
            tot = give[fams, a, None, :] + take[fams]
            J[fams, a] = tot.argmin(axis=2)
            W[fams, a] = tot.min(axis=2)
    return W, J


def _quantise(C: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Costs (P, k, n) as integers on a 2^-30 grid (held in floats, exactly).

    Successive shortest paths keep "no negative cycle" only if every path found is truly
    shortest; with float costs, near-ties (L2 answers a hair from an integer, e.g.
    0.99999999998) let a tolerance accept a path that is not, the errors add up into a negative
    cycle and the search fails (tests/test_transport_near_ties.py). Integer sums are exact below
    2^53, so the comparisons are too; the optimum moves by at most one grid step per unit moved.
    The grid is chosen per family (a power of two small enough for exact path sums), so a
    family's answer does not depend on the others in a batch.
    """
    k = C.shape[1]
    top = np.max(np.abs(np.where(finite, C, 0.0)), axis=(1, 2), initial=1.0)
    limit = 2.0**52 / (4.0 * (k + 1) * np.maximum(top, 1.0))
    scale = np.minimum(_GRID, 2.0 ** (np.floor(np.log2(limit)) - 1.0))[:, None, None]
    return np.where(finite, np.round(np.where(finite, C, 0.0) * scale), np.inf)


def _big(C: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Per family, a cost ``M`` above any path's: mandatory moves come first."""
    k = finite.any(axis=2).sum(axis=1)
    top = np.max(np.abs(np.where(finite, C, 0.0)), axis=(1, 2), initial=1.0)
    return 1.0 + 4.0 * np.maximum(k, 1) * top


def _refresh(
    C: np.ndarray,
    finite: np.ndarray,
    z: np.ndarray,
    give: np.ndarray,
    take: np.ndarray,
    W: np.ndarray,
    J: np.ndarray,
    live: np.ndarray,
    touched: np.ndarray,
) -> None:
    """Bring the pair costs up to date after the families ``live`` moved units in the cells
    ``touched`` (live x steps, -1 padded), in place: a pair whose cheapest cell was touched is
    recomputed over every cell; any other pair can only get cheaper through a touched cell."""
    row, step = np.nonzero(touched >= 0)
    fam, cells = live[row], touched[row, step]
    held = z[fam, :, cells]
    give[fam, :, cells] = np.where(held, -C[fam, :, cells], np.inf)
    take[fam, :, cells] = np.where(~held & finite[fam, :, cells], C[fam, :, cells], np.inf)
    moved = np.zeros((live.size, give.shape[2]), dtype=bool)
    moved[row, cells] = True
    stale = moved[np.arange(live.size)[:, None, None], J[live]]
    s_row, s_a, s_b = np.nonzero(stale)
    s_fam = live[s_row]
    chunk = max(1, MAX_PAIR_SUMS // max(1, give.shape[2]))
    for first in range(0, s_fam.size, chunk):
        f, a, b = (v[first : first + chunk] for v in (s_fam, s_a, s_b))
        tot = give[f, a] + take[f, b]
        J[f, a, b] = tot.argmin(axis=1)
        W[f, a, b] = tot.min(axis=1)
    for layer in range(touched.shape[1]):  # one touched cell per family at a time
        on = touched[:, layer] >= 0
        if not on.any():
            break
        f, j = live[on], touched[on, layer]
        value = give[f, :, j][:, :, None] + take[f, :, j][:, None, :]
        better = value < W[f]
        W[f] = np.where(better, value, W[f])
        J[f] = np.where(better, j[:, None, None], J[f])


def _shortest_paths(
    W: np.ndarray, r: np.ndarray, L: np.ndarray, U: np.ndarray, M: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per family, the hops of a cheapest source-sink path costing < 0.

    Each child is split into an out-node (it gives a unit: reached from the source or after
    receiving) and an in-node (it received a unit), so a path has at least one hop.
    Bellman-Ford, vectorised over the families and the children: arc costs can be negative.
    A family's path depends on its own arrays only.

    Returns:
        found (P,), and the hops as giver ``src`` and receiver ``dst`` (P, k + 1) with the
        path's ``length`` (P,) (hops from the sink back to the source; order is irrelevant:
        the hops move distinct (child, cell) entries).
    """
    P, k, _ = W.shape
    big = M[:, None]
    source = np.where(r > U, -big, np.where(r > L, 0.0, np.inf))
    sink = np.where(r < L, -big, np.where(r < U, 0.0, np.inf))
    d_out = source.copy()
    via_in = np.zeros((P, k), dtype=bool)  # the out-node was reached through the in-node
    d_in = np.full((P, k), np.inf)
    pred = np.zeros((P, k), dtype=np.int64)
    rows, cols = np.arange(P)[:, None], np.arange(k)[None, :]
    for _ in range(2 * k + 1):
        cand = d_out[:, :, None] + W
        arg = cand.argmin(axis=1)
        value = cand[rows, arg, cols]
        better = value < d_in - _EPS
        if not better.any():
            break
        np.copyto(d_in, value, where=better)
        np.copyto(pred, arg, where=better)
        relay = d_in < d_out - _EPS
        np.copyto(d_out, d_in, where=relay)
        via_in |= relay
    end = d_in + sink
    fam = np.arange(P)
    cur = np.argmin(end, axis=1)
    found = end[fam, cur] < -_EPS
    src = np.zeros((P, k + 1), dtype=np.int64)
    dst = np.zeros((P, k + 1), dtype=np.int64)
    length = np.zeros(P, dtype=np.int64)
    walking = found.copy()
    for step in range(k + 1):
        if not walking.any():
            return found, src, dst, length
        giver = pred[fam, cur]
        src[walking, step] = giver[walking]
        dst[walking, step] = cur[walking]
        length[walking] += 1
        walking &= via_in[fam, giver]
        cur = np.where(walking, giver, cur)
    if walking.any():
        raise RuntimeError("transport: a negative cycle among the children")  # pragma: no cover
    return found, src, dst, length
