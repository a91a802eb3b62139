"""Level-batched passes: the L2 pass and the rounding pass of all the families of a level.

When a level measures the detailed histogram only and no child has constraints of its own
(no structural zeros, no invariants, no node rows), every family's L2 pass is separable by
cell: for each (parent, cell) group, the children's values are the projection of their noisy
answers onto ``{x >= 0, sum x = parent's value}``, weighted by the inverse of each child's
variance (the fast paths of the design note, shared/DESIGN.md beside the repository). Instead
of one small model per family, this module solves every group of the level at once: parents
are bucketed by their number of children k, each bucket is a (groups x k) array, and each
array is one sort and one threshold (``solvers.backends.closed_form.project_groups``). Parent
cells that are zero give zero children, as the per-family path's support does. The answer is
the per-family L2 answer, to floating-point rounding (shown by the property tests).

The root (no parent) of a detailed-only level is the non-negative clip of its noisy answers.

The rounding pass of such a level (``batched_round``) is the per-family controlled rounding
(Cox 1987) solved for every family at once: the cell-by-cell optimum over all (parent, cell)
groups, then an exact network-flow repair of the families whose child totals left their
bounds (``solvers.backends.transport.transport_repair``). Each family's answer depends on that
family alone, so neither the chunking nor the executor changes the release.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from solvers.backends.closed_form import buckets, project_groups
from solvers.backends.transport import transport_repair
from topdown.strategy import Query

__all__ = ["detailed_only", "batched_l2", "batched_round", "family_chunks", "MAX_GROUP_VALUES"]

MAX_GROUP_VALUES = 2**22  # values projected per vectorised call (bounds the working arrays)


def detailed_only(queries: Sequence[Query], first_pass: Sequence[int] = ()) -> bool:
    """True when the level's L2 pass is the separable projection: one query, the detailed
    histogram (a first pass on that same query changes nothing)."""
    return len(queries) == 1 and queries[0].attributes is None and set(first_pass) <= {0}


def batched_l2(
    noisy: np.ndarray,
    parent_counts: np.ndarray | None,
    parent: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    max_values: int = MAX_GROUP_VALUES,
) -> np.ndarray:
    """The L2 answers of every child of a detailed-only level without per-node constraints.

    Args:
        noisy: the level's noisy detailed answers, shape (children, cells).
        parent_counts: the parent level's published integer counts, (parents, cells); None
            for the root level.
        parent: each child's parent index (``Level.parent``).
        weights: each child's weight (inverse variance of its answers; finite and > 0), or
            None for equal weights. Only ratios within a family matter.
        max_values: at most this many values go through one vectorised projection.

    Returns:
        float array (children, cells): per (parent, cell), the projection of the children's
        noisy values onto ``{x >= 0, sum x = parent value}``; zero where the parent is zero.

    Raises:
        ValueError: shapes that disagree, or a negative parent count.
    """
    noisy = np.asarray(noisy)
    if noisy.ndim != 2:
        raise ValueError(f"noisy (shape {noisy.shape}) must be 2-D (children, cells)")
    if parent_counts is None:
        return np.maximum(noisy.astype(float), 0.0)
    parent = np.asarray(parent, dtype=np.int64)
    n_children, cells = noisy.shape
    if parent_counts.ndim != 2 or parent_counts.shape[1] != cells:
        raise ValueError(
            f"parent_counts (shape {parent_counts.shape}) must be (parents, {cells} cells)"
        )
    if parent.shape != (n_children,):
        raise ValueError(f"parent (shape {parent.shape}) must give one parent per child")
    if parent_counts.size and parent_counts.min() < 0:
        raise ValueError(f"parent_counts has a negative entry ({parent_counts.min()})")
    w = np.ones(n_children) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (n_children,) or not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError(f"weights (shape {w.shape}) must be finite and > 0, one per child")
    out = np.zeros((n_children, cells), dtype=float)
    for parents_k, children_k in buckets(parent, parent_counts.shape[0]):
        k = children_k.shape[1]
        if k == 0:
            continue
        if k == 1:
            # an only child is its parent (no arithmetic, so no rounding)
            out[children_k[:, 0]] = parent_counts[parents_k]
            continue
        step = max(1, max_values // (k * cells))
        for first in range(0, parents_k.size, step):
            _project_bucket(
                noisy,
                w,
                parent_counts,
                parents_k[first : first + step],
                children_k[first : first + step],
                out,
            )
    return out


def _project_bucket(
    noisy: np.ndarray,
    weights: np.ndarray,
    parent_counts: np.ndarray,
    parents: np.ndarray,
    children: np.ndarray,
    out: np.ndarray,
) -> None:
    """Project the (parent, cell) groups of parents with the same number k of children."""
    p, k = children.shape
    cells = noisy.shape[1]
    y = noisy[children].astype(float).transpose(0, 2, 1).reshape(p * cells, k)
    b = parent_counts[parents].astype(float).reshape(-1)
    x = np.zeros_like(y)
    live = b > 0
    if live.any():
        w = np.broadcast_to(weights[children][:, None, :], (p, cells, k)).reshape(p * cells, k)
        x[live] = project_groups(y[live], w[live], b[live])
    out[children] = x.reshape(p, cells, k).transpose(0, 2, 1)


def batched_round(
    x: np.ndarray,
    parent_counts: np.ndarray,
    parent: np.ndarray,
    *,
    controlled: bool = True,
    max_values: int = MAX_GROUP_VALUES,
) -> tuple[np.ndarray, np.ndarray]:
    """The rounding pass of every family of a level without per-node constraints, at once.

    Per family it solves the problem ``topdown.family`` builds for the rounding pass: counts
    ``floor(x) + z``, ``z`` in {0, 1}, the children summing to the parent cell by cell, and
    (``controlled``) each child's total between the floor and the ceiling of its L2 total; the
    objective the L1 distance to ``x``, i.e. ``sum (1 - 2 frac) z``. Steps:

    1. Every (parent, cell) group of the level at once: in each parent cell the ``b`` children
       of largest fraction get a unit (``b`` = parent count minus the children's floors), ties
       shared round the children (child ``c`` first in cell ``j`` when ``(c + j) mod k`` is
       least), which keeps the child totals near their targets. Without the total rows this is
       the optimum.
    2. Families whose child totals leave their bounds are repaired exactly, all at once, by the
       successive shortest paths of ``solvers.backends.transport.transport_repair`` over their
       cells with a choice (0 < b < k). Step 1 is optimal for its own child totals, so the
       repair ends at an optimum of the family's rounding LP (totally unimodular, so of the
       integer problem too): the per-family solvers' objective; ties may differ.

    With ``x`` summing to the parent cell by cell (the L2 answer does), the fractional point
    ``z = frac`` meets every row, so a one-unit rounding always exists: no widening. A family
    that still fails (``x`` not consistent) is returned for the per-family path.

    Args:
        x: the level's L2 answers (children, cells), >= 0, zero where the parent is zero.
        parent_counts: the parent level's integer counts (parents, cells).
        parent: each child's parent index.
        controlled: keep each child's total within a unit of its L2 total.
        max_values: at most about this many (child, cell) values per vectorised step.

    Returns:
        (counts, left): int64 counts (children, cells), and the parents whose families were
        not solved (their children's rows are zero), for the per-family path.
    """
    x = np.asarray(x, dtype=float)
    parent = np.asarray(parent, dtype=np.int64)
    if x.ndim != 2 or parent.shape != (x.shape[0],):
        raise ValueError(f"x (shape {x.shape}) must be (children, cells), one row per parent entry")
    if parent_counts.ndim != 2 or parent_counts.shape[1] != x.shape[1]:
        raise ValueError(
            f"parent_counts (shape {parent_counts.shape}) must be (parents, {x.shape[1]} cells)"
        )
    counts = np.zeros(x.shape, dtype=np.int64)
    left: list[np.ndarray] = []
    for parents, children in family_chunks(parent, parent_counts, counts, max_values):
        left.append(_round_families(x, parent_counts, parents, children, counts, controlled))
    unsolved = np.concatenate(left) if left else np.zeros(0, dtype=np.int64)
    return counts, np.sort(unsolved)


def family_chunks(
    parent: np.ndarray, parent_counts: np.ndarray, out: np.ndarray, max_values: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The families of a level with two or more children, by number of children k (one
    bucket per k), cut into chunks of about ``max_values`` (child, cell) values: yields
    (parents (P,), children (P, k)). An only child is its parent: its row of ``out`` gets the
    parent's counts here. The one family loop of the batched passes (``batched_round`` and
    ``topdown.batched_total``); chunks follow the public structure only."""
    cells = out.shape[1]
    for parents_k, children_k in buckets(parent, parent_counts.shape[0]):
        k = children_k.shape[1]
        if k == 0:
            continue
        if k == 1:
            out[children_k[:, 0]] = parent_counts[parents_k]
            continue
        step = max(1, max_values // (k * cells))
        for first in range(0, parents_k.size, step):
            yield parents_k[first : first + step], children_k[first : first + step]


def _round_families(
    x: np.ndarray,
    parent_counts: np.ndarray,
    parents: np.ndarray,
    children: np.ndarray,
    counts: np.ndarray,
    controlled: bool,
) -> np.ndarray:
    """Round the families of parents with k children each (rows of ``counts``, in place);
    return the parents left unsolved."""
    P, k = children.shape
    pc = parent_counts[parents]
    fam, cell = np.nonzero(pc > 0)  # the (parent, cell) groups, by family then cell
    if fam.size == 0:
        return np.zeros(0, dtype=np.int64)
    kids = children[fam]  # (G, k)
    xs = np.maximum(x[kids, cell[:, None]], 0.0)
    floor = np.floor(xs)
    need = pc[fam, cell] - floor.sum(axis=1)
    cost = 1.0 - 2.0 * (xs - floor)
    spread = (np.arange(k)[None, :] + cell[:, None]) % k
    order = np.lexsort((spread, cost), axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(k), order.shape), axis=1)
    z = rank < need[:, None]
    bad = np.zeros(P, dtype=bool)
    bad[fam[(need < 0) | (need > k)]] = True
    if controlled:
        starts = np.flatnonzero(np.r_[True, fam[1:] != fam[:-1]])
        present = fam[starts]
        total = np.zeros((P, k))
        total[present] = np.add.reduceat(xs, starts, axis=0)
        base = np.zeros((P, k))
        base[present] = np.add.reduceat(floor, starts, axis=0)
        lo = np.floor(total + 1e-9) - base
        hi = np.ceil(total - 1e-9) - base
        got = np.zeros((P, k))
        got[present] = np.add.reduceat(z, starts, axis=0)
        off = np.any((got < lo) | (got > hi), axis=1) & ~bad
        if off.any():
            z, ok = _repair(z, cost, need, fam, off, got, lo, hi)
            bad |= off & ~ok
    rounded = floor.astype(np.int64) + z
    keep = ~bad[fam]
    counts[kids[keep], cell[keep, None]] = rounded[keep]
    return parents[bad]


def _repair(
    z: np.ndarray,
    cost: np.ndarray,
    need: np.ndarray,
    fam: np.ndarray,
    off: np.ndarray,
    got: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Repair the families ``off`` (child totals out of bounds) over their cells with a
    choice, padded to one (families, k, cells) array; return the new z and per family (all
    P) whether it now holds."""
    k = z.shape[1]
    which = np.flatnonzero(off)
    slot = np.full(off.size, -1)
    slot[which] = np.arange(which.size)
    g = np.flatnonzero(off[fam] & (need > 0) & (need < k))  # groups that can move
    f = slot[fam[g]]
    first = np.searchsorted(f, np.arange(which.size))
    pos = np.arange(g.size) - first[f]
    width = int(pos.max(initial=-1)) + 1
    C = np.full((which.size, k, width), np.inf)
    start = np.zeros((which.size, k, width), dtype=bool)
    C[f, :, pos] = cost[g]
    start[f, :, pos] = z[g]
    fixed = got[which] - start.sum(axis=2)
    done, ok_some = transport_repair(C, start, lo[which] - fixed, hi[which] - fixed)
    z = z.copy()
    z[g] = done[f, :, pos]
    ok = np.ones(off.size, dtype=bool)
    ok[which] = ok_some
    return z, ok
