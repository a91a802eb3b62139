"""Level-batched L2 pass: one vectorised closed form for all the families of a level.

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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.backends.closed_form import project_groups
from topdown.strategy import Query

__all__ = ["detailed_only", "batched_l2", "MAX_GROUP_VALUES"]

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
    order = np.argsort(parent, kind="stable")
    sizes = np.bincount(parent, minlength=parent_counts.shape[0])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    for k in np.unique(sizes[sizes > 0]):
        parents_k = np.flatnonzero(sizes == k)
        children_k = order[starts[parents_k][:, None] + np.arange(k)[None, :]]  # (P, k)
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
