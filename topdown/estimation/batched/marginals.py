"""Level-batched L2 pass of families fitted to their detailed cells and marginal queries.

A production-shaped strategy measures, per level, the detailed histogram and marginals (for
example ``VOTING_AGE x HISPANIC x RACE``, ``HHGQ`` and the total). Each marginal ``m`` is a
partition of the cells into groups (its answers), so per family, on the parent's non-zero
cells ``j`` (children ``c``, ``A_m`` the 0/1 group-membership matrix of ``m`` on them),

    minimize   sum_c w_c ||x_c - y_c||^2 + sum_c sum_m v_cm ||A_m x_c - z_cm||^2
    subject to sum_c x_cj = p_j,  x >= 0,

the problem ``solvers.builders.children_l2_problem`` builds from the level's queries (a group
with no support cell only adds a constant). With one multiplier ``mu_cmg`` per (child,
marginal, non-empty group) for the rows ``u_cmg = (A_m x_c)_g`` (``u`` penalised), the
minimiser over ``x`` for fixed ``mu`` is, cell by cell, the weighted projection of
``y_c - s_c / w_c`` onto ``{x >= 0, sum_c x = p_j}`` with ``s_cj = sum_m mu_{c,m,g_m(j)}``
(``topdown.estimation.batched.families.project_chunk``), and the concave dual's gradient (halved) is

    g_cmg(mu) = (A_m x(mu))_cg - z_cmg - mu_cmg / v_cm.

``g`` is piecewise linear; its generalised Jacobian is ``-H``, ``H = E' K E + diag(1/v)``,
``E`` the map from ``mu`` to ``s`` and ``K`` per cell ``diag(a) - a a' / sum(a)`` with
``a_c = [x_cj > 0] / w_c``. The iteration is semismooth Newton on ``g = 0``: each step solves
``H d = g`` by conjugate gradients with the diagonal of ``H`` as preconditioner, matrix-free
(a product is a gather over cells, the per-cell ``K`` and a sum per group), to a relative
residual that shrinks with ``g`` (inexact Newton, superlinear near the answer), then a line
search along ``d`` (``_line_search``: the full step, or Armijo backtracking on the dual's
value; the dual is strongly concave, through ``-mu^2 / v``). A zero weight ``v_cm`` fixes its
multipliers at 0 (the marginal does not count for that child). A hard answer
(``Marginal.hard``: ``A_m x_c = z_cm`` held exactly, the multipass second pass's totals) has a
free multiplier without the ``-mu^2 / v`` term. A family stops on its own KKT
residual; families that do not reach it within ``max_iter`` steps are reported, and the
caller (``topdown.estimation.batched.chunk_tasks``) leaves them to the per-family path.

Bit for bit, alone or inside any chunk: every sum over cells, groups or multipliers is
sequential (a cumulative sum's last entry, a loop over the children, or a sparse matrix's
row, whose products add in index order: cells in cell order, a cell's groups in marginal
order; padding cells sit past a family's own and point at its dummy slot) and per family
(the one numpy sum, of a family's parent counts, adds integers: exact in any order), so
padding (cells and group slots, exact zeros) does not change a family's iterates; conjugate
gradients and Newton stop per family, converged families frozen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from topdown.estimation.batched.families import (
    ChunkShape,
    active_shares,
    project_chunk,
    seq_dot,
)

__all__ = [
    "MARGINAL_NEWTON",
    "LevelMarginal",
    "Marginal",
    "marginal_newton_chunk",
    "marginal_newton_dual",
]

log = logging.getLogger(__name__)

#: the solver's name in the statistics
MARGINAL_NEWTON = "marginal_newton"

TOLERANCE = 1e-10  # the KKT residual |g|, relative to the size of its terms
CG_ITERATIONS = 300  # conjugate-gradient steps per Newton step at most
ARMIJO = 1e-4  # the line search's sufficient ascent, a share of the slope
SLOPE = 1e-3  # the full step is taken while the slope there is above -SLOPE times the first
BACKTRACKS = 40
STALLED = 1e-6  # a step this short from a given start: the start is given up
RIDGE_CAP = 1.0  # the hard slots' ridge, as a share of their free curvature, at most (_Hessian)


@dataclass(frozen=True)
class LevelMarginal:
    """One marginal query of a level, as the batched pass fits it.

    Attributes:
        groups: (cells,) each cell's group (the index of the query answer it counts in).
        answers: (children, groups) the children's answers (raw measurements or estimates).
        weights: (children,) their weights, finite and >= 0 (0: the marginal does not count).
    """

    groups: np.ndarray
    answers: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        groups, answers = np.asarray(self.groups), np.asarray(self.answers)
        weights = np.asarray(self.weights, dtype=float)
        if answers.ndim != 2:
            raise ValueError(f"answers (shape {answers.shape}) must be 2-D (children, groups)")
        if groups.ndim != 1 or groups.dtype.kind not in "iu" or groups.size == 0:
            raise ValueError(f"groups (shape {groups.shape}) must be one integer per cell")
        if groups.min() < 0 or groups.max() >= answers.shape[1]:
            raise ValueError(
                f"groups (from {groups.min()} to {groups.max()}) must index the "
                f"{answers.shape[1]} answers"
            )
        if weights.shape != (answers.shape[0],) or not np.all(
            np.isfinite(weights) & (weights >= 0)
        ):
            raise ValueError(
                f"weights (shape {weights.shape}) must be finite and >= 0, one per child"
            )

    def of_chunk(self, chunk: ChunkShape) -> Marginal:
        """The marginal on a chunk's families: their non-empty groups only, in group order."""
        n_groups = self.answers.shape[1]
        Q, W = chunk.cells.shape
        mask = chunk.mask
        g = self.groups[chunk.cells]
        mark = np.zeros((Q, n_groups), dtype=bool)
        fam_of = np.broadcast_to(np.arange(Q)[:, None], (Q, W))
        mark[fam_of[mask], g[mask]] = True
        rank = np.cumsum(mark, axis=1) - 1
        width = int(mark.sum(axis=1).max(initial=0))
        local = rank[fam_of, g]
        local[~mask] = width  # padding cells: past the last group (the solver's dummy slot)
        fam, glob = np.nonzero(mark)
        targets = np.zeros((Q, chunk.children.shape[1], width))
        targets[fam, :, rank[fam, glob]] = self.answers[chunk.children[fam], glob[:, None]]
        return Marginal(local, targets, np.asarray(self.weights, dtype=float)[chunk.children])


@dataclass(frozen=True)
class Marginal:
    """One marginal query on a chunk's Q families (k children, W support positions).

    Attributes:
        groups: (Q, W) each support position's group among the family's non-empty groups
            (0 .. G_q - 1, in group order); padding positions hold G (the width).
        targets: (Q, k, G) the children's answers of those groups (0 past G_q).
        weights: (Q, k) their weights, >= 0.
        hard: (Q, k) children whose answers are held exactly (constraints, not fitted: a
            multiplier with no penalty, its weight ignored), or None for none. The multipass
            second pass holds the first pass's totals this way (``batched.multipass``), and
            each group's answers of its finest marginal (``topdown.estimation.nested_passes``).
    """

    groups: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    hard: np.ndarray | None = None


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per family (rows), the sum of a * b in slot order, sequential (padding adds zeros)."""
    return seq_dot(a, b)


class _Dual:
    """A chunk's dual problem for the families being iterated (see the module docstring).

    Multipliers are laid out per family as (k, Gt) flattened: child-major, the marginals'
    groups side by side, then one dummy slot (where padding cells point); ``free`` marks
    the slots that are a family's non-empty group with a positive weight."""

    def __init__(
        self,
        y: np.ndarray,
        p: np.ndarray,
        w: np.ndarray,
        slots: np.ndarray,
        z: np.ndarray,
        inv_v: np.ndarray,
        free: np.ndarray,
    ) -> None:
        self.y, self.p, self.w, self.slots = y, p, w, slots  # slots: (M, Q, W) into (Gt,)
        self.z, self.inv_v, self.free = z, inv_v, free  # (Q, k * Gt)
        M, Q, W = slots.shape
        self.gt = z.shape[1] // max(y.shape[1], 1)
        # E: (Q W, Q Gt), one row per (family, cell) with its M groups' slots, in marginal
        # order; E' (its transpose, made row by row, so each slot's cells stay in cell order)
        slot = (np.arange(Q) * self.gt)[None, :, None] + slots
        self.E = sp.csr_matrix(
            (
                np.ones(M * Q * W),
                slot.transpose(1, 2, 0).reshape(-1),
                np.arange(0, M * Q * W + 1, M),
            ),
            shape=(Q * W, Q * self.gt),
        )
        self.Et = self.E.T.tocsr()

    @classmethod
    def of(
        cls, y: np.ndarray, p: np.ndarray, w: np.ndarray, marginals: tuple[Marginal, ...]
    ) -> _Dual:
        Q, k, W = y.shape
        widths = [m.targets.shape[2] for m in marginals]
        offsets = np.r_[0, np.cumsum(widths)].astype(np.int64)
        gt = int(offsets[-1]) + 1
        slots = np.empty((len(marginals), Q, W), dtype=np.int64)
        z = np.zeros((Q, k, gt))
        inv_v = np.zeros((Q, k, gt))
        used = np.zeros((Q, gt), dtype=bool)
        hard = np.zeros((Q, k, gt), dtype=bool)
        for i, m in enumerate(marginals):
            a, b = int(offsets[i]), int(offsets[i + 1])
            s = np.where(m.groups < widths[i], a + m.groups, gt - 1)
            s[p <= 0] = gt - 1  # a zero parent cell (padding) counts in no group
            slots[i] = s
            z[:, :, a:b] = m.targets
            with np.errstate(divide="ignore"):
                inv_v[:, :, a:b] = np.where(m.weights > 0, 1.0 / m.weights, 0.0)[:, :, None]
            if m.hard is not None:
                hard[:, :, a:b] = m.hard[:, :, None]
                inv_v[:, :, a:b] = np.where(hard[:, :, a:b], 0.0, inv_v[:, :, a:b])
            np.put_along_axis(used, s, True, axis=1)
        used[:, gt - 1] = False
        free = used[:, None, :] & ((inv_v > 0) | hard)
        inv_v[~free] = 0.0
        z[~free] = 0.0
        return cls(y, p, w, slots, z.reshape(Q, -1), inv_v.reshape(Q, -1), free.reshape(Q, -1))

    def rows(self, i: np.ndarray) -> _Dual:
        """The same for the families ``i`` only."""
        return _Dual(
            self.y[i],
            self.p[i],
            self.w[i],
            self.slots[:, i],
            self.z[i],
            self.inv_v[i],
            self.free[i],
        )

    def columns(self, mu: np.ndarray) -> np.ndarray:
        """E mu in the cell-major layout: (Q, k * Gt) -> (Q W, k), each (family, cell) row
        its children's sums of their groups' multipliers (marginal by marginal, in order: a
        sparse row's products add in index order)."""
        Q, k, _ = self.y.shape
        return self.E @ mu.reshape(Q, k, self.gt).transpose(0, 2, 1).reshape(Q * self.gt, k)

    def gather_columns(self, r: np.ndarray) -> np.ndarray:
        """E' r from the cell-major layout: (Q W, k) -> (Q, k * Gt), each group's sum over
        its cells (in cell order)."""
        Q, k, _ = self.y.shape
        sums = self.Et @ r
        return sums.reshape(Q, self.gt, k).transpose(0, 2, 1).reshape(Q, k * self.gt)

    def spread(self, mu: np.ndarray) -> np.ndarray:
        """s = E mu: (Q, k * Gt) -> (Q, k, W)."""
        Q, k, W = self.y.shape
        return self.columns(mu).reshape(Q, W, k).transpose(0, 2, 1)

    def gather(self, r: np.ndarray) -> np.ndarray:
        """E' r: (Q, k, W) -> (Q, k * Gt).

        Both products are sparse matrices times the k children's columns (a sum per row in
        C, over each row's entries in order): a gather by fancy indexing and a
        ``np.bincount`` per child took about twice as long on a 42-child family of 19,320
        cells."""
        Q, k, W = r.shape
        return self.gather_columns(r.transpose(0, 2, 1).reshape(Q * W, k))

    def project(self, mu: np.ndarray) -> np.ndarray:
        """x(mu)."""
        return project_chunk(self.y - self.spread(mu) / self.w[:, :, None], self.w, self.p)

    def state(self, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x(mu), the gradient g(mu) and the dual's value at mu (per family):
        ``sum_c w_c ||x_c - y_c||^2 + 2 mu . (A x - z) - mu^2 / v``, whose gradient is 2 g."""
        x = self.project(mu)
        Q = x.shape[0]
        sums = self.gather(x)
        g = np.where(self.free, sums - self.z - mu * self.inv_v, 0.0)
        r = x - self.y
        fit = _dot((self.w[:, :, None] * r).reshape(Q, -1), r.reshape(Q, -1))
        value = fit + 2.0 * _dot(mu, sums - self.z) - _dot(mu * mu, self.inv_v)
        return x, g, value


class _Hessian:
    """H = E' K E + diag(1/v) at x, restricted to the free slots (the others map to 0)."""

    def __init__(self, dual: _Dual, x: np.ndarray, residual: np.ndarray | None = None) -> None:
        self.dual = dual
        a, a_over_s = active_shares(x, dual.w)
        diagonal = dual.gather(a - a * a_over_s) + dual.inv_v
        # a soft slot's diagonal is at least 1 / v > 0. A hard slot (no penalty) has no such
        # floor: its curvature is 0 where no cell of its group lets its child move (the dual
        # is linear there, and the slot never moved: a hold whose child had no positive cell
        # in a group stalled), and the hard slots of a group are dependent where the one child
        # left free there (the consistency's) has no positive cell: ``H d = g`` then has no
        # solution and the conjugate gradients' step grew without bound (|d| about 1e17 on a
        # DHC tract family held to its finest marginal's answers,
        # ``topdown.estimation.nested_passes``). So, when ``residual`` is given
        # (``marginal_newton_dual(ridge=True)``), the hard slots get a ridge (Levenberg-
        # Marquardt; the regularised semismooth Newton of Li, Sun and Toh, SIAM J. Optim. 28,
        # 2018): ``residual`` (the family's largest |g|, in persons, at most RIDGE_CAP) times
        # the curvature the slot would have were its cells free (sum 1 / w_c over them). It
        # vanishes with g, so the steps near the answer are Newton's, and a flat slot's step is
        # about ``1 / residual`` times that of a free one (long, as the line search needs to
        # reach the cells' kinks); the line search checks every step.
        free_curvature = dual.gather(np.broadcast_to(1.0 / dual.w[:, :, None], x.shape))
        hard = dual.free & (dual.inv_v == 0)
        share = np.zeros(x.shape[0]) if residual is None else np.minimum(residual, RIDGE_CAP)
        self.ridge = np.where(hard, free_curvature * share[:, None], 0.0)
        diagonal = diagonal + self.ridge
        scaled = dual.free & (diagonal > 0)
        self.inv_diagonal = np.where(scaled, 1.0 / np.where(scaled, diagonal, 1.0), 0.0)
        # the products work in the cell-major layout of ``_Dual.columns`` (no transposes)
        Q, k, W = x.shape
        self.a = np.ascontiguousarray(a.transpose(0, 2, 1)).reshape(Q * W, k)
        self.a_over_s = np.ascontiguousarray(a_over_s.transpose(0, 2, 1)).reshape(Q * W, k)

    def __call__(self, d: np.ndarray) -> np.ndarray:
        r = self.a * self.dual.columns(d)
        r -= self.a_over_s * _children_sum(r)[:, None]
        d_term = (self.dual.inv_v + self.ridge) * d
        return np.where(self.dual.free, self.dual.gather_columns(r) + d_term, 0.0)


def _children_sum(values: np.ndarray) -> np.ndarray:
    """(N, k) -> (N,): each row's sum, added in child order (as ``seq_sum``, without its
    cumulative-sum array: the children are few, the rows many)."""
    total = values[:, 0].copy()
    for c in range(1, values.shape[1]):
        total += values[:, c]
    return total


def _conjugate_gradients(H: _Hessian, g: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """Per family, d with ``||H d - g|| <= eta ||g||`` (preconditioned by H's diagonal); each
    family stops on its own residual and is frozen after."""
    d = np.zeros_like(g)
    r = g.copy()
    zv = r * H.inv_diagonal
    p = zv.copy()
    rz = _dot(r, zv)
    goal = eta**2 * _dot(g, g)
    active = rz > 0
    for _ in range(CG_ITERATIONS):
        if not active.any():
            break
        Hp = H(p)
        pHp = _dot(p, Hp)
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(active & (pHp > 0), rz / pHp, 0.0)
        d += alpha[:, None] * p
        r -= alpha[:, None] * Hp
        active &= (pHp > 0) & (_dot(r, r) > goal)
        zv = r * H.inv_diagonal
        rz_new = _dot(r, zv)
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(active & (rz > 0), rz_new / rz, 0.0)
        p = np.where(active[:, None], zv + beta[:, None] * p, p)
        rz = np.where(active, rz_new, rz)
    return d


def _line_search(
    dual: _Dual, mu: np.ndarray, d: np.ndarray, f0: np.ndarray, q0: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A step along the ascent direction d (``f0 = g . d > 0``): the full Newton step when
    the dual's slope there is not below ``-SLOPE f0`` (the usual case: once the active sets
    are right the slope there is the conjugate gradients' residual) or it ascends enough
    (Armijo: ``q(t) >= q0 + 2 ARMIJO t f0``); else backtracking by safeguarded quadratic
    interpolation until Armijo's condition holds. The slope test accepts the full step where
    rounding would hide the dual's last increase.

    Returns the step per family and x, g and the dual value at ``mu + step d``."""
    step = np.ones(mu.shape[0])
    x, g, q = dual.state(mu + d)
    accept = (_dot(g, d) >= -SLOPE * f0) | (q >= q0 + 2.0 * ARMIJO * f0)
    todo = np.flatnonzero(~accept)
    for _ in range(BACKTRACKS):
        if todo.size == 0:
            break
        t, s0 = step[todo], 2.0 * f0[todo]
        drop = 2.0 * (q[todo] - q0[todo] - s0 * t)  # < 0: the quadratic through q0, s0, q(t)
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = np.where(drop < 0, -s0 * t * t / drop, 0.5 * t)
        t = np.clip(guess, 0.1 * t, 0.5 * t)
        step[todo] = t
        xs, gs, qs = dual.rows(todo).state(mu[todo] + t[:, None] * d[todo])
        x[todo], g[todo], q[todo] = xs, gs, qs
        todo = todo[qs < q0[todo] + 2.0 * ARMIJO * t * f0[todo]]
    return step, x, g, q


def _settled(
    dual: _Dual, g: np.ndarray, mu: np.ndarray, size: np.ndarray, tolerance: float = TOLERANCE
) -> np.ndarray:
    """Per family: every free slot's residual within ``tolerance`` of the size of its terms
    (the family's parent total, the answer, mu / v)."""
    scale = size[:, None] + np.abs(dual.z) + np.abs(mu) * dual.inv_v
    return np.all(np.abs(g) <= tolerance * scale + 1e-300, axis=1)


def marginal_newton_chunk(
    y: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
    marginals: tuple[Marginal, ...],
    max_iter: int = 60,
    *,
    tolerance: float = TOLERANCE,
) -> tuple[np.ndarray, np.ndarray]:
    """Semismooth Newton on g(mu) = 0 for the Q families of a chunk (k children each).

    Args:
        y: (Q, k, W) the children's detailed answers on the support cells (any real dtype).
        p: (Q, W) the parents' counts (0 in the padding).
        w: (Q, k) detailed weights (> 0).
        marginals: the marginal queries on the chunk (``LevelMarginal.of_chunk``).
        max_iter: Newton steps before a family is given up.
        tolerance: the KKT residual a family stops at, relative to the size of its terms
            (``topdown.estimation.multipass_newton`` asks for a tighter one).

    Returns:
        x (Q, k, W) and per family whether it converged.
    """
    x, ok, _ = marginal_newton_dual(y, p, w, marginals, max_iter, tolerance=tolerance)
    return x, ok


def marginal_newton_dual(
    y: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
    marginals: tuple[Marginal, ...],
    max_iter: int = 60,
    *,
    tolerance: float = TOLERANCE,
    start: np.ndarray | None = None,
    ridge: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``marginal_newton_chunk``'s answer, per family whether it converged, and the
    multipliers (Q, k * Gt), from the multipliers ``start`` (zero when None; a family's row
    that is not finite starts at zero): a sequence of close problems on the same marginals
    (``topdown.estimation.multipass_newton``) starts each from the last one's. ``ridge``:
    the hard slots' steps regularised (``_Hessian``), for holds whose children may have no
    positive cell in a group (``topdown.estimation.nested_passes``). Off for the totals' hold
    of ``batched.multipass``, which settles without it: with it, one of its tests' families
    (``tests/test_multipass_batched.py``, seed 5) did not settle in 60 steps."""
    y = np.asarray(y, dtype=float)
    p = np.asarray(p, dtype=float)
    dual = _Dual.of(y, p, np.asarray(w, dtype=float), marginals)
    Q = y.shape[0]
    size = p.sum(axis=1)
    # start at mu = 0, the detailed-only answer. Not at ``v (A x0 - z)``, the multipliers
    # that would hold if x did not move: x does move, by s / w in each of a group's n cells,
    # so the optimum's multipliers are about 1 + n v / w times smaller (exactly so without
    # bounds); on a DHC-shaped tract family (11 children, 8,307 cells, the total and two
    # marginals) that start put |g| at 16,782 and 60 steps did not settle it, where from 0
    # nine steps do (and the PL94-shaped families take 16% fewer steps)
    mu = np.zeros(dual.z.shape)
    if start is not None:
        finite = np.all(np.isfinite(start), axis=1)
        mu[finite] = np.where(dual.free[finite], start[finite], 0.0)
    x, g, q = dual.state(mu)
    g0 = np.sqrt(_dot(g, g))
    ok = np.zeros(Q, dtype=bool)
    stalled = np.zeros(Q, dtype=bool)
    steps = 0
    for steps in range(max_iter):  # noqa: B007 (the count is logged)
        ok = _settled(dual, g, mu, size, tolerance)
        todo = np.flatnonzero(~ok & ~stalled)
        if todo.size == 0:
            break
        sub = dual.rows(todo)
        gt = g[todo]
        # the forcing term: loose far from the answer, shrinking with g (superlinear near it);
        # a cap of 0.5 took 15% fewer Hessian products than 0.1 on the 100k PL94 state
        with np.errstate(divide="ignore", invalid="ignore"):
            eta = np.clip(np.sqrt(_dot(gt, gt)) / g0[todo], 1e-8, 0.5)
        residual = np.abs(gt).max(axis=1, initial=0.0) if ridge else None
        d = _conjugate_gradients(_Hessian(sub, x[todo], residual), gt, eta)
        step, x[todo], g[todo], q[todo] = _line_search(sub, mu[todo], d, _dot(gt, d), q[todo])
        mu[todo] = mu[todo] + step[:, None] * d  # the point the line search evaluated
        if start is not None:
            # from a given start a family whose line search no longer moves is given up at
            # once (the caller starts it again from zero): near a start that is almost the
            # answer, rounding can hide the dual's increase from the backtracking, and the
            # steps then shrink to nothing for the rest of ``max_iter``
            stalled[todo] = step < STALLED
    else:
        steps = max_iter
        ok = _settled(dual, g, mu, size, tolerance)
    log.debug(
        "marginal Newton: %d step(s) from %s, %d of %d famil(ies) settled, %d stalled, "
        "largest |g| %.3g",
        steps,
        "zero" if start is None else "a start",
        int(np.count_nonzero(ok & ~stalled)),
        Q,
        int(np.count_nonzero(stalled)),
        float(np.abs(g).max(initial=0.0)),
    )
    return x, ok & ~stalled, mu
