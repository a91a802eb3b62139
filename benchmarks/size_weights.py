"""Experiment: the BLUE passes' L2 with per-cell weights that depend on the cell's size.

The production L2 pass (``estimator="blue"``) weighs every cell of a child alike (the inverse
variance of the child's subtree estimate) and its total by the total's. Then the units that
consistency and non-negativity move (the clipped negative cells' mass) come out of every
positive cell of the family alike, so a child's cell of 1-5 loses as much as one of 500: the
non-negativity bias by cell size (true zeros pushed up, small cells pushed down).

Here each cell's weight is scaled by ``g = (1 + max(y, 0) / (kappa * se)) ** power`` where ``y``
is its BLUE value and ``se`` its standard error: ``power = -1`` makes large cells cheaper to
move than small ones (a Poisson-like variance, growing with the count), ``power = +1`` the
reverse (the BLUE kept where it is large against its error, small cells absorb the changes).
``power = 0`` is the production pass (checked against it in the benchmark).

Per family, on the parent's non-zero cells, it solves with CVXPY (Clarabel)

    minimize   sum_c sum_j w_c g_cj (x_cj - y_cj)^2 + v_c (sum_j x_cj - t_c)^2
    subject to sum_c x_cj = p_j,  x >= 0,

then makes the answer exactly consistent (clip, rescale per parent cell) and rounds it with the
production rounding (``topdown.estimation.batched.families.batched_round``). A benchmark tool, not
library code: CVXPY per family is far too slow at scale.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from topdown.estimation.batched.families import batched_round
from topdown.measurement.estimator_inputs import EstimatorInputs, precision
from topdown.measurement.tree import Tree


def size_weights(y: np.ndarray, se: np.ndarray, kappa: float, power: float) -> np.ndarray:
    """The per-cell factor ``g`` (children, cells) of the module docstring."""
    return (1.0 + np.maximum(y, 0.0) / (kappa * se[:, None])) ** power


def _family_l2(
    y: np.ndarray, t: np.ndarray, a: np.ndarray, v: np.ndarray, p: np.ndarray
) -> np.ndarray:
    """One family's weighted L2 answer on the parent's non-zero cells (children, cells)."""
    k, n = y.shape
    x = cp.Variable((k, n), nonneg=True)
    objective = cp.sum(cp.multiply(a, cp.square(x - y))) + cp.sum(
        cp.multiply(v, cp.square(cp.sum(x, axis=1) - t))
    )
    problem = cp.Problem(cp.Minimize(objective), [cp.sum(x, axis=0) == p])
    problem.solve(solver="CLARABEL")
    out = np.maximum(np.asarray(x.value, dtype=float), 0.0)
    sums = out.sum(axis=0)
    scale = np.divide(p, sums, out=np.ones_like(p), where=sums > 0)
    out *= scale
    empty = sums <= 0  # the solver left a positive parent cell at zero: share it equally
    out[:, empty] = p[empty] / k
    return out


def sized_counts(
    tree: Tree, inputs: EstimatorInputs, root: np.ndarray, kappa: float, power: float
) -> list[np.ndarray]:
    """Counts of every level below the given root counts, with the size-weighted L2 pass.

    ``inputs``: the BLUE's inputs of a detailed-only strategy (``blue_inputs``: per level the
    detailed cells and the node totals, with the variances of each node's subtree estimate).
    """
    counts = [np.asarray(root, dtype=np.int64)]
    for level in range(1, tree.n_levels):
        lv = tree.levels[level]
        by_name = {m.query.name: m for m in inputs.at(level)}
        detailed, total = by_name["detailed"], by_name.get("total")
        y = np.asarray(detailed.noisy, dtype=float)
        w = precision(np.asarray(detailed.variance, dtype=float))
        se = np.sqrt(np.asarray(detailed.variance, dtype=float))
        if total is not None:
            t = np.asarray(total.noisy, dtype=float)[:, 0]
            v = precision(np.asarray(total.variance, dtype=float))
        else:
            t, v = y.sum(axis=1), np.zeros(lv.size)
        g = size_weights(y, se, kappa, power)
        parent_counts = counts[-1]
        x = np.zeros(y.shape)
        for p, children in enumerate(lv.children_of(tree.levels[level - 1].size)):
            pc = parent_counts[p].astype(float)
            if len(children) == 1:
                x[children[0]] = pc
                continue
            support = np.flatnonzero(pc > 0)
            if not support.size:
                continue
            top = max(float(w[children].max()), float(v[children].max(initial=0.0)))
            a = (w[children] / top)[:, None] * g[np.ix_(children, support)]
            x[np.ix_(children, support)] = _family_l2(
                y[np.ix_(children, support)], t[children], a, v[children] / top, pc[support]
            )
        level_counts, left = batched_round(x, parent_counts, lv.parent)
        if left.size:
            raise RuntimeError(f"level {level}: the rounding left families {left.tolist()}")
        counts.append(level_counts)
    return counts
