"""The per-family path's matrix-free L2 pass: the Newton iterations on one family's task.

A family reaches the per-family path (``topdown.estimation.family``) when its level is not
batched, or the level-batched iteration did not settle it in its steps. Its L2 pass with
marginal queries was then a general QP for CVXPY over (children x support cells) variables:
at the DHC persons histogram (1,227,744 cells a node, tens of thousands of support cells a
family) Clarabel ran out of its time limit. Most such families have exactly the structure the
batched iterations solve, so this module gives them the same machinery, one family at a time:

- a family with a parent: the marginal Newton iteration of
  ``topdown.estimation.batched.marginals`` (``MARGINAL_NEWTON``), as a chunk of one family,
  with more steps (``MAX_STEPS``) than a batch allows itself;
- the root: the Newton iteration of ``topdown.estimation.root_marginals`` (``ROOT_NEWTON``).

It applies when the task's L2 pass is that problem: one pass (no multipass first pass), no
constraint rows and no structural zeros, the detailed query once with one positive weight per
child, and every other query a partition of the support cells (marginals, recoded marginals,
the total: each cell in exactly one answer, ``Query.groups``) with one weight per child. Any
other task, or one the iteration does not settle, returns None and goes to the general
solvers, as before; which one solved is recorded in the solver statistics.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from topdown.estimation.batched.marginals import (
    MARGINAL_NEWTON,
    Marginal,
    marginal_newton_chunk,
)
from topdown.estimation.multipass_newton import (
    MARGINAL_TWO_PASS,
    ROOT_TWO_PASS,
    chunk_two_passes,
    root_two_passes,
)
from topdown.estimation.root_marginals import ROOT_NEWTON, RootMarginal, root_marginal_l2

__all__ = ["MAX_STEPS", "newton_l2"]

log = logging.getLogger(__name__)

#: a partition query of the task: (its index in the measurements, each cell's answer,
#: answers (k, G), weights (k,))
_Partition = tuple[int, np.ndarray, np.ndarray, np.ndarray]

#: Newton steps a family may take here (a batch gives up after 60 and leaves it to this path)
MAX_STEPS = 200


def newton_l2(
    parent: np.ndarray | None,
    measurements: tuple[tuple[sp.csr_matrix, np.ndarray, np.ndarray], ...],
    k: int,
    n: int,
    first_pass: tuple[int, ...] = (),
    tolerance: float = 1e-6,
    held: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, str] | None:
    """The family's L2 answer (k x n) and the solver's name, or None when the task is not of
    the Newton iterations' form or the iteration does not settle (module docstring).

    The caller checks that the task has no rows or structural zeros.

    Args:
        parent: the parent's counts on the support (n,), or None at the root (k = 1).
        measurements: per query (Q on the support, Y (k x answers), W (k x answers)).
        k: children; n: support cells.
        first_pass: the measurements a multipass first pass fits: marginals only, each with
            positive weights (``topdown.estimation.multipass_newton``), else None.
        tolerance: how far pass 2 may move pass 1's answers (the multipass tolerance).
        held: the measurements of ``first_pass`` whose answers pass 2 holds (None: all).
    """
    split = _split(measurements, k, n)
    if split is None:
        return None
    y, w, marginals = split
    if not marginals:
        return None  # the detailed query alone: the closed form's, through the solvers
    if first_pass:
        held = first_pass if held is None else held
        return _two_passes(parent, y, w, marginals, first_pass, tolerance, held)
    if parent is None:
        if k != 1:
            return None
        x = root_marginal_l2(
            y[0],
            float(w[0]),
            [RootMarginal(g, a[0], float(v[0])) for _, g, a, v in marginals if v[0] > 0],
        )
        return None if x is None else (x[None, :], ROOT_NEWTON)
    chunk = tuple(_chunk_marginal(g, a, v) for _, g, a, v in marginals)
    x, settled = marginal_newton_chunk(
        y[None], np.asarray(parent, dtype=float)[None], w[None], chunk, max_iter=MAX_STEPS
    )
    if not settled[0]:
        log.info("marginal Newton did not settle a family of %d x %d in %d steps", k, n, MAX_STEPS)
        return None
    return x[0], MARGINAL_NEWTON


def _split(
    measurements: tuple[tuple[sp.csr_matrix, np.ndarray, np.ndarray], ...], k: int, n: int
) -> tuple[np.ndarray, np.ndarray, list[_Partition]] | None:
    """(y (k, n), w (k,), [(index, groups (n,), answers (k, G), weights (k,))]) when the
    queries are one detailed query and partitions with a weight per child; else None."""
    y = w = None
    marginals: list[_Partition] = []
    for index, (Q, Y, W) in enumerate(measurements):
        W = np.asarray(W, dtype=float)
        if W.shape[1] == 0 or not np.all(W[:, :1] == W) or not np.all(np.isfinite(W)):
            return None
        weight = W[:, 0].copy()
        groups = _partition(Q, n)
        if groups is None:
            return None
        if Q.shape[0] == n and np.array_equal(groups, np.arange(n)):
            if y is not None or not np.all(weight > 0):
                return None
            y, w = np.asarray(Y, dtype=float), weight
        elif np.all(weight >= 0):
            marginals.append((index, groups, np.asarray(Y, dtype=float), weight))
        else:
            return None
    if y is None or w is None or y.shape != (k, n):
        return None
    return y, w, marginals


def _two_passes(
    parent: np.ndarray | None,
    y: np.ndarray,
    w: np.ndarray,
    marginals: list[_Partition],
    first_pass: tuple[int, ...],
    tolerance: float,
    held: tuple[int, ...],
) -> tuple[np.ndarray, str] | None:
    """Multipass with a first pass of marginals (``topdown.estimation.multipass_newton``):
    None when the detailed query is in the first pass, a first-pass weight is 0 (pass 1
    would not fix that child's answers, and which ones the general path holds is its
    solver's choice) or the passes do not settle."""
    first = [i for i, m in enumerate(marginals) if m[0] in first_pass]
    if len(first) != len(first_pass):
        return None
    # positions in ``first`` (pass 1's order) of the answers pass 2 holds
    hold = [j for j, i in enumerate(first) if marginals[i][0] in held]
    if parent is None:
        if y.shape[0] != 1:
            return None
        root = [RootMarginal(g, a[0], float(v[0])) for _, g, a, v in marginals]
        x = root_two_passes(y[0], float(w[0]), root, first, tolerance=tolerance, held=hold)
        return None if x is None else (x[None, :], ROOT_TWO_PASS)
    chunk = [_chunk_marginal(g, a, v) for _, g, a, v in marginals]
    xs, settled = chunk_two_passes(
        y[None],
        np.asarray(parent, dtype=float)[None],
        w[None],
        chunk,
        first,
        tolerance=tolerance,
        max_iter=MAX_STEPS,
        held=hold,
    )
    if not settled[0]:
        log.info("the multipass Newton passes did not settle a family of %d x %d", *y.shape)
        return None
    return xs[0], MARGINAL_TWO_PASS


def _partition(Q: sp.csr_matrix, n: int) -> np.ndarray | None:
    """Each support cell's answer when ``Q`` (answers x n) has exactly one 1 per column."""
    csc = sp.csc_matrix(Q)
    csc.sum_duplicates()
    if csc.shape[1] != n or csc.nnz != n:
        return None
    if not np.array_equal(csc.indptr, np.arange(n + 1)) or not np.all(csc.data == 1):
        return None
    return csc.indices.astype(np.int64)


def _chunk_marginal(groups: np.ndarray, answers: np.ndarray, weights: np.ndarray) -> Marginal:
    """One family's marginal as a chunk of one: its non-empty groups only, in group order
    (a group with no support cell only adds a constant to the objective)."""
    used, local = np.unique(groups, return_inverse=True)
    return Marginal(local[None, :].astype(np.int64), answers[:, used][None], weights[None])
