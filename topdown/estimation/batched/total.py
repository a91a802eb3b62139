"""Level-batched L2 pass of families fitted to their detailed cells and their node totals.

Under ``estimator="blue"`` a detailed-only strategy feeds each level two queries: the BLUE of
the detailed cells (weight ``w_c`` per child) and of the node total (weight ``v_c``). Per
family, on the parent's non-zero cells ``j`` (a zero parent cell gives zero children),

    minimize   sum_c w_c sum_j (x_cj - y_cj)^2 + v_c (sum_j x_cj - t_c)^2
    subject to sum_c x_cj = p_j,  x >= 0,

the problem ``solvers.builders.children_l2_problem`` builds from these two queries. The total rows
couple the cells, so the problem is not the cell-by-cell projection of
``topdown.estimation.batched.families.batched_l2``; but with one multiplier ``mu_c`` per child for
its total it is. For fixed ``mu`` the minimiser over ``x`` is, cell by cell, the weighted projection
of ``y_c - mu_c / w_c`` onto ``{x >= 0, sum_c x = p_j}``, and the optimum is the ``mu`` with

    G_c(mu) = v_c (T_c(mu) - t_c) - mu_c = 0        (T_c: child c's total of x(mu)),

the gradient (times ``v_c``) of the concave dual. ``G`` is piecewise linear; it is solved by
semismooth Newton, the generalised Jacobian from each cell's set of positive children (k x k
per family, one batched ``np.linalg.solve``), with an exact line search along the Newton
direction (``_line_search``) so every step ascends. Once the active sets are right the Newton
step is exact, so the answer is the QP's optimum to rounding. A zero total weight
(``v_c = 0``) fixes ``mu_c = 0``.

Families that do not reach the tolerance within ``max_iter`` steps are reported, and the caller
(``topdown.estimation.batched.chunk_tasks``) leaves them to the per-family path.

The iteration runs on the chunks of ``topdown.estimation.batched.families.level_chunks`` (support
cells only, padded at the end). Every sum over cells here is sequential (a cumulative sum's last
entry), never pairwise or BLAS-blocked, so padding adds exact zeros and a family's iterates are the
same, bit for bit, alone or inside any chunk; every other step is per family.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topdown.estimation.batched.families import (
    active_shares,
    check_level,
    child_weights,
    level_chunks,
    project_chunk,
    seq_sum,
)

__all__ = ["batched_l2_total", "newton_chunk", "DUAL_NEWTON"]

#: the solver's name in the statistics (not "closed_form": an iteration, and the closed_form
#: backend declines problems with a total row)
DUAL_NEWTON = "dual_newton"

TOLERANCE = 1e-10  # the KKT residual |G_c|, relative to the size of its terms


def batched_l2_total(
    noisy: np.ndarray,
    totals: np.ndarray,
    parent_counts: np.ndarray,
    parent: np.ndarray,
    *,
    weights: np.ndarray,
    total_weights: np.ndarray,
    max_iter: int = 100,
    max_values: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The L2 answers of every child of a level fitted to detailed cells and node totals.

    Args:
        noisy: the children's detailed answers (children, cells).
        totals: the children's total answers (children,).
        parent_counts: the parent level's integer counts (parents, cells), >= 0.
        parent: each child's parent index.
        weights: each child's detailed weight, finite and > 0 (inverse variance).
        total_weights: each child's total weight, finite and >= 0 (0: no total term).
        max_iter: Newton steps per family before it is given up.
        max_values: (child, support cell) values per chunk (``level_chunks``).

    Returns:
        (x, failed): float (children, cells), zero where the parent is zero, and the parents
        whose families did not converge (their rows are not meaningful).

    Raises:
        ValueError: shapes that disagree, weights out of range, a negative parent count.
    """
    noisy = np.asarray(noisy, dtype=float)
    totals = np.asarray(totals, dtype=float).reshape(-1)
    parent = np.asarray(parent, dtype=np.int64)
    v = np.asarray(total_weights, dtype=float)
    check_level(noisy, parent_counts, parent)
    n_children, cells = noisy.shape
    if totals.shape != (n_children,):
        raise ValueError(f"totals (shape {totals.shape}) must give one total per child")
    w = child_weights(weights, n_children)
    if v.shape != (n_children,) or not np.all(np.isfinite(v) & (v >= 0)):
        raise ValueError(f"total_weights (shape {v.shape}) must be finite and >= 0, one per child")
    out = np.zeros((n_children, cells), dtype=float)
    plan = level_chunks(parent, parent_counts, max_values)
    plan.copy_only_children(out, parent_counts)
    failed: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for chunk in plan.chunks:
        kids = chunk.children
        x, ok = newton_chunk(
            chunk.gather(noisy),
            totals[kids],
            chunk.gather_parents(parent_counts).astype(float),
            w[kids],
            v[kids],
            max_iter,
        )
        chunk.scatter(out, x)
        failed.append(chunk.parents[~ok])
    return out, np.sort(np.concatenate(failed))


def _totals(x: np.ndarray) -> np.ndarray:
    """Each child's total over the cells (Q, k, W) -> (Q, k), summed in cell order."""
    return seq_sum(x, axis=2)


def _project(y: np.ndarray, w: np.ndarray, mu: np.ndarray, p: np.ndarray) -> np.ndarray:
    """x(mu): per (family, cell) with p > 0, the weighted projection of ``y - mu / w``
    (shapes: y (Q, k, W), w and mu (Q, k), p (Q, W))."""
    return project_chunk(y - (mu / w)[:, :, None], w, p)


def _settled(G: np.ndarray, v: np.ndarray, size: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Per family: every child's residual ``G_c = v_c (T_c - t_c) - mu_c`` is within
    ``TOLERANCE`` of the size of its terms (rounding leaves about 1e-16 of it)."""
    return np.all(np.abs(G) <= TOLERANCE * (v * size + np.abs(mu)) + 1e-300, axis=1)


@dataclass(frozen=True)
class _Dual:
    """The data of a chunk's dual problem, for the families being iterated: y (Q, k, W) the
    detailed answers, t (Q, k) the totals, p (Q, W) the parents' counts, w and v (Q, k) the
    detailed and total weights."""

    y: np.ndarray
    t: np.ndarray
    p: np.ndarray
    w: np.ndarray
    v: np.ndarray

    def rows(self, i: np.ndarray) -> _Dual:
        """The same for the families ``i`` only."""
        return _Dual(self.y[i], self.t[i], self.p[i], self.w[i], self.v[i])

    def slope(self, mu: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Half the dual's directional derivative along d at mu, per family:
        sum_c d_c G_c / v_c (``d_c = 0`` where ``v_c = 0``), and x(mu) it was computed from."""
        x = _project(self.y, self.w, mu, self.p)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(self.v > 0, (_totals(x) - self.t) - mu / self.v, 0.0)
        return (g * d).sum(axis=1), x


def _line_search(
    dual: _Dual, mu: np.ndarray, d: np.ndarray, f0: np.ndarray, rounds: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    """The exact line search of the concave dual along the ascent direction d: the step where
    its slope (piecewise linear and decreasing in the step) vanishes, found by the Illinois
    variant of regula falsi (exact once the bracket lies in one linear piece). The full Newton
    step is taken when the slope there vanishes to rounding (the usual case once the active
    sets are right). ``f0``: the slope at step 0 (> 0).

    Returns the step per family and x at the full step (``mu + d``), which the caller keeps
    where the step is exactly 1 instead of projecting again."""
    n = mu.shape[0]
    lo, hi = np.zeros(n), np.ones(n)
    f_lo = f0.copy()
    f_hi, x_full = dual.slope(mu + d, d)
    f_hi[np.abs(f_hi) <= 1e-12 * np.abs(f_lo)] = 0.0  # the Newton step is exact: take it
    # widen the bracket while the slope at the far end is still positive
    for _ in range(30):
        up = np.flatnonzero(f_hi > 0)
        if up.size == 0:
            break
        lo[up], f_lo[up] = hi[up], f_hi[up]
        hi[up] *= 2.0
        f_hi[up] = dual.rows(up).slope(mu[up] + hi[up, None] * d[up], d[up])[0]
    step = np.where(f_hi >= 0, hi, lo)
    todo = np.flatnonzero((f_lo > 0) & (f_hi < 0))
    side = np.zeros(n, dtype=np.int8)
    for _ in range(rounds):
        if todo.size == 0:
            break
        a = lo[todo] - f_lo[todo] * (hi[todo] - lo[todo]) / (f_hi[todo] - f_lo[todo])
        a = np.clip(a, lo[todo], hi[todo])
        fa = dual.rows(todo).slope(mu[todo] + a[:, None] * d[todo], d[todo])[0]
        scale = np.maximum(np.abs(f_lo[todo]), np.abs(f_hi[todo]))
        done = (np.abs(fa) <= 1e-13 * scale) | (hi[todo] - lo[todo] <= 1e-15 * hi[todo])
        step[todo] = a
        pos = fa > 0
        i_pos, i_neg = todo[pos], todo[~pos]
        lo[i_pos], f_lo[i_pos] = a[pos], fa[pos]
        hi[i_neg], f_hi[i_neg] = a[~pos], fa[~pos]
        # Illinois: halve the stale end's value when the same end moves twice
        same_pos = i_pos[side[i_pos] == 1]
        f_hi[same_pos] *= 0.5
        same_neg = i_neg[side[i_neg] == -1]
        f_lo[same_neg] *= 0.5
        side[i_pos], side[i_neg] = 1, -1
        todo = todo[~done]
    return step, x_full


def newton_chunk(
    y: np.ndarray,
    t: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
    v: np.ndarray,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """Semismooth Newton on G(mu) = 0 for the Q families of a chunk (k children each).

    Args:
        y: (Q, k, W) the children's detailed answers on the support cells (any real dtype).
        t: (Q, k) their total answers.
        p: (Q, W) the parents' counts (0 in the padding).
        w: (Q, k) detailed weights (> 0).
        v: (Q, k) total weights (>= 0).
        max_iter: Newton steps before a family is given up.

    Returns:
        x (Q, k, W) and per family whether it converged.
    """
    y = np.asarray(y, dtype=float)
    t = np.asarray(t, dtype=float)
    Q, k, _ = y.shape
    dual = _Dual(y, t, p, w, v)
    size = p.sum(axis=1)[:, None] + np.abs(t)  # bounds |T_c - t_c| from above
    mu = np.zeros((Q, k))
    x = _project(y, w, mu, p)
    G = v * (_totals(x) - t) - mu
    ok = np.zeros(Q, dtype=bool)
    eye = np.eye(k)
    for _ in range(max_iter):
        ok = _settled(G, v, size, mu)
        todo = np.flatnonzero(~ok)
        if todo.size == 0:
            break
        # the generalised Jacobian of T: a_cj = [x_cj > 0] / w_c,
        # dT/dmu = -diag(sum_j a_cj) + sum_j a_j a_j' / sum_c a_cj
        x_todo = x[todo]
        active = x_todo > 0
        a, aS = active_shares(x_todo, w[todo])  # (Q', k, W)
        outer = a[:, :, None, :] * aS[:, None, :, :]  # (Q', k, k, W)
        np.cumsum(outer, axis=3, out=outer)  # sequential over cells (see _totals)
        diagonal = active.sum(axis=2) / w[todo]  # an exact count over w
        JT = outer[:, :, :, -1] - diagonal[:, :, None] * eye
        J = v[todo][:, :, None] * JT - eye
        d = np.linalg.solve(J, -G[todo][:, :, None])[:, :, 0]
        d[v[todo] == 0] = 0.0  # exactly: mu_c stays 0 (the solve leaves ~1e-25 there)
        with np.errstate(divide="ignore", invalid="ignore"):
            f0 = (np.where(v[todo] > 0, G[todo] / v[todo], 0.0) * d).sum(axis=1)
        step, x_new = _line_search(dual.rows(todo), mu[todo], d, f0)
        mu[todo] += step[:, None] * d
        # a full step lands where the line search already projected (mu + 1.0 d is mu + d)
        again = todo[step != 1.0]
        if again.size:
            x_new[step != 1.0] = _project(y[again], w[again], mu[again], p[again])
        x[todo] = x_new
        G[todo] = v[todo] * (_totals(x[todo]) - t[todo]) - mu[todo]
    else:
        ok = _settled(G, v, size, mu)
    return x, ok
