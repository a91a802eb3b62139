"""Level-batched passes: the L2 pass and the rounding pass of all the families of a level.

When a level measures the detailed histogram only and no child has constraints of its own
(no structural zeros, no invariants, no node rows), every family's L2 pass is separable by
cell: for each (parent, cell) group, the children's values are the projection of their noisy
answers onto ``{x >= 0, sum x = parent's value}``, weighted by the inverse of each child's
variance (the fast paths of the design note, shared/DESIGN.md beside the repository). Instead
of one small model per family, this module solves many families at once, one sort and one
threshold per group (``solvers.backends.closed_form.project_groups``). Parent cells that are
zero give zero children, as the per-family path's support does. The answer is the per-family
L2 answer, to floating-point rounding (shown by the property tests).

The root (no parent) of a detailed-only level is the non-negative clip of its noisy answers.

The rounding pass of such a level (``batched_round``) is the per-family controlled rounding
(Cox 1987) solved for many families at once: the cell-by-cell optimum over all (parent, cell)
groups, then an exact network-flow repair of the families whose child totals left their
bounds (``solvers.backends.transport.transport_repair``).

Chunks (``level_chunks``): the families of a level with two or more children and some count are
bucketed by their number of children k, sorted by their number of support cells (the parent's
non-zero cells) and cut into chunks of about ``CHUNK_VALUES`` (child, support cell) values. A chunk
holds only its families' support cells, padded at the end to the chunk's widest family
(``ChunkShape``): a block group's family touches a few dozen of the 2,016 cells, so this is the
work, not the histogram. The cut depends on the level's public structure and published parent counts
only, never on the executor or its workers; and each family's answer is the same alone as inside any
chunk, bit for bit (every reduction over cells is sequential, so trailing padding adds exact zeros;
tests/test_chunk_tasks.py), so the cut does not change the release either.
``topdown.estimation.batched.chunk_tasks`` ships chunks to the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from solvers.backends.closed_form import buckets, project_groups
from solvers.backends.transport import transport_repair
from topdown.estimation.passes import controlled_window
from topdown.strategy import Query

__all__ = [
    "CHUNK_VALUES",
    "ChunkShape",
    "LevelChunks",
    "batched_l2",
    "batched_round",
    "detailed_only",
    "level_chunks",
    "project_chunk",
    "round_chunk",
]

#: (child, support cell) values per chunk: a chunk's working arrays stay a few MB (the dual
#: Newton iteration's k x k Jacobian terms take k times that), while a level of a medium state
#: still makes dozens of chunks for the workers to share
CHUNK_VALUES = 2**16


def detailed_only(queries: Sequence[Query], first_pass: Sequence[int] = ()) -> bool:
    """True when the level's L2 pass is the separable projection: one query, the detailed
    histogram (a first pass on that same query changes nothing)."""
    return len(queries) == 1 and queries[0].attributes is None and set(first_pass) <= {0}


@dataclass(frozen=True)
class ChunkShape:
    """Q families of k children each, on their support cells (padded to width W).

    Attributes:
        parents: the families' parent indices (Q,).
        children: their children's indices (Q, k), in index order.
        cells: each family's support cells, ascending, then 0 up to the width (Q, W).
        sizes: each family's number of support cells (Q,), >= 1.
    """

    parents: np.ndarray
    children: np.ndarray
    cells: np.ndarray
    sizes: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        """(Q, W): True on a family's own support cells, False on the padding."""
        return np.arange(self.cells.shape[1])[None, :] < self.sizes[:, None]

    def gather(self, values: np.ndarray) -> np.ndarray:
        """The children's rows of a level array (children, cells) on the support: (Q, k, W),
        0 in the padding; the dtype is kept."""
        out = np.asarray(values)[self.children[:, :, None], self.cells[:, None, :]]
        out[~np.broadcast_to(self.mask[:, None, :], out.shape)] = 0
        return out

    def gather_parents(self, parent_counts: np.ndarray) -> np.ndarray:
        """The parents' counts on the support: (Q, W), 0 in the padding."""
        out = parent_counts[self.parents[:, None], self.cells]
        out[~self.mask] = 0
        return out

    def scatter(
        self, out: np.ndarray, values: np.ndarray, families: np.ndarray | None = None
    ) -> None:
        """Write (Q, k, W) values into the level array ``out`` (children, cells), in place:
        the families ``families`` (a (Q,) mask; default all), support cells only."""
        keep = np.broadcast_to(self.mask[:, None, :], values.shape)
        if families is not None:
            keep = keep & families[:, None, None]
        rows = np.broadcast_to(self.children[:, :, None], values.shape)
        cols = np.broadcast_to(self.cells[:, None, :], values.shape)
        out[rows[keep], cols[keep]] = values[keep]


@dataclass(frozen=True)
class LevelChunks:
    """The families of a level: chunks of families to solve, and the only children (each is
    its parent) as (parents, children) index arrays. Families of an all-zero parent are in
    neither: their children are zero."""

    chunks: tuple[ChunkShape, ...]
    only_parents: np.ndarray
    only_children: np.ndarray

    def copy_only_children(self, out: np.ndarray, parent_counts: np.ndarray) -> None:
        """An only child is its parent: its row of ``out`` gets the parent's counts."""
        out[self.only_children] = parent_counts[self.only_parents]


def level_chunks(
    parent: np.ndarray, parent_counts: np.ndarray, max_values: int | None = None
) -> LevelChunks:
    """Cut a level's families into chunks (see the module docstring): by number of children,
    then by number of support cells and parent index, about ``max_values`` (default
    ``CHUNK_VALUES``) (child, support cell) values per chunk (one family at least). Public
    structure and published counts only.
    """
    max_values = CHUNK_VALUES if max_values is None else max_values
    parent = np.asarray(parent, dtype=np.int64)
    chunks: list[ChunkShape] = []
    only_p: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    only_c: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for parents_k, children_k in buckets(parent, parent_counts.shape[0]):
        k = children_k.shape[1]
        if k == 0:
            continue
        if k == 1:
            only_p.append(parents_k)
            only_c.append(children_k[:, 0])
            continue
        support = parent_counts[parents_k] > 0
        n = support.sum(axis=1)
        live = np.flatnonzero(n > 0)
        if live.size == 0:
            continue
        order = live[np.lexsort((parents_k[live], n[live]))]
        sizes = n[order]
        values = k * sizes
        chunk_id = (np.cumsum(values) - values) // max(1, max_values)
        edges = np.flatnonzero(np.r_[True, chunk_id[1:] != chunk_id[:-1], True])
        fam, cell = np.nonzero(support[order])  # by family (in chunk order), then cell
        first = np.r_[0, np.cumsum(sizes)]
        pos = np.arange(fam.size) - first[fam]
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            lo, hi = first[a], first[b]
            cells = np.zeros((b - a, int(sizes[a:b].max())), dtype=np.int64)
            cells[fam[lo:hi] - a, pos[lo:hi]] = cell[lo:hi]
            chunks.append(
                ChunkShape(parents_k[order[a:b]], children_k[order[a:b]], cells, sizes[a:b])
            )
    return LevelChunks(tuple(chunks), np.concatenate(only_p), np.concatenate(only_c))


def check_level(
    values: np.ndarray, parent_counts: np.ndarray, parent: np.ndarray, name: str = "noisy"
) -> None:
    """The level-wide passes' common inputs: ``values`` (children, cells) named ``name``, the
    parents' counts (parents, cells, none negative) and one parent index per child."""
    if values.ndim != 2:
        raise ValueError(f"{name} (shape {values.shape}) must be 2-D (children, cells)")
    n_children, cells = values.shape
    if parent_counts.ndim != 2 or parent_counts.shape[1] != cells:
        raise ValueError(
            f"parent_counts (shape {parent_counts.shape}) must be (parents, {cells} cells)"
        )
    if parent.shape != (n_children,):
        raise ValueError(f"parent (shape {parent.shape}) must give one parent per child")
    if parent_counts.size and parent_counts.min() < 0:
        raise ValueError(f"parent_counts has a negative entry ({parent_counts.min()})")


def child_weights(weights: np.ndarray, n_children: int, name: str = "weights") -> np.ndarray:
    """One finite, positive weight per child, as floats."""
    w = np.asarray(weights, dtype=float)
    if w.shape != (n_children,) or not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError(f"{name} (shape {w.shape}) must be finite and > 0, one per child")
    return w


def batched_l2(
    noisy: np.ndarray,
    parent_counts: np.ndarray | None,
    parent: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    max_values: int | None = None,
) -> np.ndarray:
    """The L2 answers of every child of a detailed-only level without per-node constraints.

    Args:
        noisy: the level's noisy detailed answers, shape (children, cells).
        parent_counts: the parent level's published integer counts, (parents, cells); None
            for the root level.
        parent: each child's parent index (``Level.parent``).
        weights: each child's weight (inverse variance of its answers; finite and > 0), or
            None for equal weights. Only ratios within a family matter.
        max_values: (child, support cell) values per chunk (``level_chunks``).

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
    check_level(noisy, parent_counts, parent)
    n_children = noisy.shape[0]
    w = np.ones(n_children) if weights is None else child_weights(weights, n_children)
    out = np.zeros(noisy.shape, dtype=float)
    plan = level_chunks(parent, parent_counts, max_values)
    plan.copy_only_children(out, parent_counts)
    for chunk in plan.chunks:
        x = project_chunk(
            chunk.gather(noisy).astype(float),
            w[chunk.children],
            chunk.gather_parents(parent_counts).astype(float),
        )
        chunk.scatter(out, x)
    return out


def seq_sum(values: np.ndarray, axis: int) -> np.ndarray:
    """The sum over ``axis``, added in index order (a cumulative sum's last entry): trailing
    padding adds exact zeros, so a family's sums do not depend on its chunk's width; numpy's
    pairwise sums would. The batched iterations sum this way wherever a chunk is padded."""
    if values.shape[axis] == 0:
        return np.zeros(values.shape[:axis] + values.shape[axis + 1 :])
    return np.take(np.cumsum(values, axis=axis), -1, axis=axis)


@numba.njit(cache=True)
def _row_dots(a: Any, b: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(a.shape[0]):
        if a.shape[1] == 0:
            out[i] = 0.0
            continue
        total = a[i, 0] * b[i, 0]
        for j in range(1, a.shape[1]):
            total += a[i, j] * b[i, j]
        out[i] = total


def seq_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row of the 2-D ``a`` and ``b``, the sum of ``a * b`` added in index order:
    ``seq_sum(a * b, axis=1)`` bit for bit, in one compiled pass without the product's and the
    cumulative sum's arrays (numba, no fast-math: each product rounded, then added in order).
    On a 42-child DHC tract family the conjugate gradients' dot products by cumulative sums
    were two thirds of the marginal Newton iteration's time."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a (shape {a.shape}) and b (shape {b.shape}) must be one 2-D shape")
    out = np.empty(a.shape[0])
    _row_dots(a, b, out)
    return out


def active_shares(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weighted projection's generalised Jacobian, per (family, cell): ``a_cj = [x_cj > 0]
    / w_c`` for x (Q, k, W) and w (Q, k), and ``a / sum_c a`` (0 where no child is positive),
    the children summed in order. The dual Newton iterations build their steps from these."""
    a = (x > 0) / w[:, :, None]
    S = seq_sum(a, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return a, np.where(S[:, None, :] > 0, a / S[:, None, :], 0.0)


def project_chunk(y: np.ndarray, w: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The closed-form L2 answers of a chunk: per (family, cell) with ``p > 0`` the weighted
    projection of the children's ``y`` onto ``{x >= 0, sum x = p}``; 0 elsewhere.

    Args:
        y: (Q, k, W) the children's answers; w: (Q, k) their weights (> 0); p: (Q, W) the
            parent counts (0 in the padding).
    """
    x = np.zeros(y.shape, dtype=float)
    fam, pos = np.nonzero(p > 0)
    if fam.size:
        x[fam, :, pos] = project_groups(y[fam, :, pos], w[fam], p[fam, pos])
    return x


def batched_round(
    x: np.ndarray,
    parent_counts: np.ndarray,
    parent: np.ndarray,
    *,
    controlled: bool = True,
    max_values: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The rounding pass of every family of a level without per-node constraints, at once
    (``round_chunk`` on each chunk of ``level_chunks``).

    Args:
        x: the level's L2 answers (children, cells), >= 0, zero where the parent is zero.
        parent_counts: the parent level's integer counts (parents, cells).
        parent: each child's parent index.
        controlled: keep each child's total within a unit of its L2 total.
        max_values: (child, support cell) values per chunk.

    Returns:
        (counts, left): int64 counts (children, cells), and the parents whose families were
        not solved (their children's rows are zero), for the per-family path.
    """
    x = np.asarray(x, dtype=float)
    parent = np.asarray(parent, dtype=np.int64)
    check_level(x, parent_counts, parent, "x")
    counts = np.zeros(x.shape, dtype=np.int64)
    plan = level_chunks(parent, parent_counts, max_values)
    plan.copy_only_children(counts, parent_counts)
    left: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for chunk in plan.chunks:
        rounded, bad = round_chunk(
            chunk.gather(x), chunk.gather_parents(parent_counts), chunk.cells, controlled
        )
        chunk.scatter(counts, rounded, ~bad)
        left.append(chunk.parents[bad])
    return counts, np.sort(np.concatenate(left))


def round_chunk(
    x: np.ndarray, p: np.ndarray, cells: np.ndarray, controlled: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The rounding pass of a chunk's families, as ``estimation.family`` poses it per family:
    counts ``floor(x) + z``, ``z`` in {0, 1}, the children summing to the parent cell by cell,
    and (``controlled``) each child's total between the floor and the ceiling of its L2 total;
    the objective the L1 distance to ``x``, i.e. ``sum (1 - 2 frac) z``. Steps:

    1. Every (family, cell) group at once: in each parent cell the ``b`` children of largest
       fraction get a unit (``b`` = parent count minus the children's floors), ties shared
       round the children (child ``c`` first in cell ``j`` when ``(c + j) mod k`` is least),
       which keeps the child totals near their targets. Without the total rows this is the
       optimum.
    2. Families whose child totals leave their bounds are repaired exactly, all at once, by the
       successive shortest paths of ``solvers.backends.transport.transport_repair`` over their
       cells with a choice (0 < b < k). Step 1 is optimal for its own child totals, so the
       repair ends at an optimum of the family's rounding LP (totally unimodular, so of the
       integer problem too): the per-family solvers' objective; ties may differ.

    With ``x`` summing to the parent cell by cell (the L2 answer does), the fractional point
    ``z = frac`` meets every row, so a one-unit rounding always exists: no widening. A family
    that still fails (``x`` not consistent) is reported for the per-family path.

    Args:
        x: (Q, k, W) the L2 answers on the support cells.
        p: (Q, W) the parents' counts (0 in the padding: no group there).
        cells: (Q, W) the cell index of each position (the ties' spread reads it).
        controlled: hold the child totals.

    Returns:
        (counts (Q, k, W) int64, bad (Q,) bool): the families not solved have zero rows.
    """
    Q, k, _ = x.shape
    counts = np.zeros(x.shape, dtype=np.int64)
    fam, pos = np.nonzero(p > 0)  # the (family, cell) groups, by family then cell
    bad = np.zeros(Q, dtype=bool)
    if fam.size == 0:
        return counts, bad
    xs = np.maximum(x[fam, :, pos], 0.0)  # (G, k)
    cell = cells[fam, pos]
    floor = np.floor(xs)
    need = p[fam, pos] - floor.sum(axis=1)
    cost = 1.0 - 2.0 * (xs - floor)
    spread = (np.arange(k)[None, :] + cell[:, None]) % k
    order = np.lexsort((spread, cost), axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(k), order.shape), axis=1)
    z = rank < need[:, None]
    bad[fam[(need < 0) | (need > k)]] = True
    if controlled:
        starts = np.flatnonzero(np.r_[True, fam[1:] != fam[:-1]])
        present = fam[starts]
        total = np.zeros((Q, k))
        total[present] = np.add.reduceat(xs, starts, axis=0)
        base = np.zeros((Q, k))
        base[present] = np.add.reduceat(floor, starts, axis=0)
        below, above = controlled_window(total)
        lo, hi = below - base, above - base
        got = np.zeros((Q, k))
        got[present] = np.add.reduceat(z, starts, axis=0)
        off = np.any((got < lo) | (got > hi), axis=1) & ~bad
        if off.any():
            z, ok = _repair(z, cost, need, fam, off, got, lo, hi)
            bad |= off & ~ok
    rounded = floor.astype(np.int64) + z
    keep = ~bad[fam]
    counts[fam[keep], :, pos[keep]] = rounded[keep]
    return counts, bad


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
