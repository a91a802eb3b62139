"""The root's L2 pass with marginal queries: semismooth Newton on the dual, matrix-free.

The root has no parent. When it measures the detailed histogram (weight ``w``) and marginals
``m`` (each a partition of the cells into groups, ``A_m`` its 0/1 membership matrix, answers
``z_m``, weight ``v_m``; the total is the marginal of one group), and nothing binds it but
bounds on its total, its L2 pass is

    minimise   w/2 ||x - y||^2 + sum_m v_m/2 ||A_m x - z_m||^2
    subject to x >= 0,  lo <= sum x <= hi.

A general QP over the domain for CVXPY, which does not scale: at the 2020 DHC persons
histogram (1.2 million cells) Clarabel ran out of its time limit. With one multiplier per
(marginal, group), ``mu``, and ``s = sum_m A_m' mu_m`` (a gather per cell), the minimiser over
``x`` for fixed ``mu`` is the projection of ``y - s / w`` onto ``{x >= 0, lo <= sum x <= hi}``
(a clip, or a clip at a common threshold when a bound binds), and the concave dual's
gradient is

    g_m(mu) = A_m x(mu) - z_m - mu_m / v_m          (a sum per group: ``np.bincount``).

``g`` is piecewise linear; its generalised Jacobian is ``-H``, ``H = A J A' / w + diag(1/v)``,
``J = diag(a)`` (``a`` the cells with ``x > 0``), less ``a a' / sum(a)`` while a bound binds.
Each Newton step solves ``H d = g`` on the groups the positive cells touch (elsewhere ``H``
is its diagonal, ``d = v g``): with ``H`` built when the groups are few, by a sparse
factorisation of ``B' B / w + diag(1 / v)`` (``B`` the positive cells' incidence to their
groups) when the touched groups are few enough and ``H`` sparse, else by conjugate gradients
preconditioned by ``H``'s diagonal, each product a gather and a sum over the positive cells;
never a matrix over the cells. Then a backtracking (Armijo) line search on the dual's value,
which is strongly concave through ``-mu^2 / v``, so the iteration converges from any start.
Work per step: O(cells x marginals) for the dual's value and gradient, the step itself
O(positive cells x marginals) a product. The answer is sparse: at the DHC preset's root with
20,000 persons, 14,113 of 1,227,744 cells are positive, and the steps over the domain's cells
were most of the preset's CPU time (docs/benchmarks.md, the DHC preset's section).

The same structure as the level-batched families' iteration (``batched.marginals``), with the
projection onto the orthant instead of onto each cell's children summing to their parent.
Equal to the general solvers' answers to their tolerance (tests/test_root_marginals.py, each
route of the step forced in turn).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["ROOT_NEWTON", "RootMarginal", "root_marginal_dual", "root_marginal_l2"]

log = logging.getLogger(__name__)

#: the solver's name in the statistics
ROOT_NEWTON = "root_newton"

TOLERANCE = 1e-10  # max |g|, relative to the size of the answers it compares
MAX_NEWTON = 100
CG_ITERATIONS = 500
ARMIJO = 1e-4
SLOPE = 1e-3  # the full step stands while the slope there is above -SLOPE times the first
BACKTRACKS = 40
#: the Newton step is solved with H built (``_dense_step``) up to this many groups in all
DENSE_GROUPS = 2000
#: ... and while (groups)^3 is at most this many times the cells: the factorisation's cost
#: against the conjugate gradients' products over the cells (at a PL94 root, 2,016 cells and
#: 261 groups, the built step took 0.7 s where the products take milliseconds)
DENSE_PER_CELL = 100
#: otherwise the step is factorised (sparse) while the groups the positive cells touch are at
#: most this many, and solved by conjugate gradients above: the factorisation's time grows
#: faster than the groups (the DHC root's nine marginals on random positive cells, CPU s per
#: factorisation: 27,077 touched groups 0.6, 71,873 2.7, 157,815 16, 268,192 53)
SPARSE_GROUPS = 60_000
#: ... and while ``H`` has at most this many nonzeros a row on average (the DHC preset's root:
#: 16; a root whose marginals are all coarse has dense rows and is left to the gradients)
SPARSE_DENSITY = 40
#: ... and while the positive cells times the marginals squared (the entries ``B' B`` is
#: summed from) are at most this many: few groups can have many positive cells
SPARSE_PAIRS = 8_000_000


def _dense(groups: int, cells: int) -> bool:
    """Whether the Newton step is solved with H built (cheaper than products over cells)."""
    return groups <= DENSE_GROUPS and groups**3 <= DENSE_PER_CELL * cells


@dataclass(frozen=True)
class RootMarginal:
    """One marginal of the root: each cell's group, the group answers, their weight.

    Attributes:
        groups: (cells,) the answer each cell counts in (0 .. len(answers) - 1).
        answers: (groups,) the noisy (or estimated) answers.
        weight: the answers' weight, > 0 (the inverse variance, scaled as the detailed one's).
    """

    groups: np.ndarray
    answers: np.ndarray
    weight: float


@dataclass
class _State:
    """The primal point of a dual point ``mu`` and what the Newton step needs of it."""

    mu: list[np.ndarray]
    x: np.ndarray
    active: np.ndarray
    bound: bool  # a bound on the total binds (the common threshold is not zero)
    value: float  # the dual function at mu
    grad: list[np.ndarray]


def root_marginal_l2(
    y: np.ndarray,
    w: float,
    marginals: Sequence[RootMarginal],
    lo: float = -np.inf,
    hi: float = np.inf,
    *,
    tolerance: float = TOLERANCE,
) -> np.ndarray | None:
    """The root's L2 answer (module docstring), or None when ``[lo, hi]`` admits no
    non-negative total or the iteration does not reach ``tolerance`` (the general path then
    solves or reports it).

    Example (two cells measured at 3 and 5, their total at 10, all with weight 1: the
    normal equations give ``x_i = y_i + (10 - S)`` with ``S = 8 + 2 (10 - S)``, so each cell
    moves up by 2/3):

        >>> m = RootMarginal(np.zeros(2, dtype=np.int64), np.array([10.0]), 1.0)
        >>> root_marginal_l2(np.array([3.0, 5.0]), 1.0, [m]).round(6)
        array([3.666667, 5.666667])
    """
    solved = root_marginal_dual(y, w, marginals, lo, hi, tolerance=tolerance)
    return None if solved is None else solved[0]


def root_marginal_dual(
    y: np.ndarray,
    w: float,
    marginals: Sequence[RootMarginal],
    lo: float = -np.inf,
    hi: float = np.inf,
    *,
    tolerance: float = TOLERANCE,
    start: Sequence[np.ndarray] | None = None,
) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """``root_marginal_l2``'s answer and its multipliers (one array per marginal), from the
    multipliers ``start`` (zero when None): a sequence of close problems
    (``topdown.estimation.multipass_newton``) starts each from the last one's."""
    y = np.asarray(y, dtype=float)
    if hi < 0 or lo > hi:
        return None
    groups = [np.asarray(m.groups, dtype=np.int64) for m in marginals]
    answers = [np.asarray(m.answers, dtype=float) for m in marginals]
    weights = np.array([float(m.weight) for m in marginals])
    sizes = [a.size for a in answers]
    scale = max(1.0, float(np.abs(y).max(initial=0.0)), *(float(np.abs(a).max()) for a in answers))

    def state(mu: list[np.ndarray]) -> _State:
        s = np.zeros_like(y)
        for g, m in zip(groups, mu, strict=True):
            s += m[g]
        t = y - s / w
        x, bound = _project(t, lo, hi)
        grad = []
        value = 0.5 * w * float(((x - y) ** 2).sum()) + float(s @ x)
        for g, z, v, m, n in zip(groups, answers, weights, mu, sizes, strict=True):
            ax = np.bincount(g, weights=x, minlength=n)
            grad.append(ax - z - m / v)
            value -= float(m @ z) + float(m @ m) / (2 * v)
        return _State(mu, x, x > 0, bound, value, grad)

    st = state(
        [np.zeros(n) for n in sizes]
        if start is None
        else [np.asarray(m, dtype=float).copy() for m in start]
    )
    for steps in range(MAX_NEWTON):
        residual = max((float(np.abs(g).max(initial=0.0)) for g in st.grad), default=0.0)
        if residual <= tolerance * scale:
            log.debug(
                "root Newton: %d step(s) from %s", steps, "zero" if start is None else "a start"
            )
            return st.x, st.mu
        if _dense(sum(sizes), y.size):
            d = _dense_step(groups, sizes, weights, w, st)
        else:
            d = _ActiveStep.of(groups, weights, w, st).solve(
                st.grad, 0.1 * min(1.0, residual / scale)
            )
        slope = sum(float(g @ dd) for g, dd in zip(st.grad, d, strict=True))
        step = 1.0
        for _ in range(BACKTRACKS):
            trial = state([m + step * dd for m, dd in zip(st.mu, d, strict=True)])
            if trial.value >= st.value + ARMIJO * step * slope:
                break
            # near the answer rounding hides the dual's last increase: the full step stands
            # when the slope there has not turned down (the active sets are right)
            there = sum(float(g @ dd) for g, dd in zip(trial.grad, d, strict=True))
            if step == 1.0 and there >= -SLOPE * slope:
                break
            step /= 2
        else:
            log.debug("root Newton: the line search failed after %d step(s)", steps)
            return None
        st = trial
    log.debug("root Newton: %d steps did not settle (|g| %.3g)", MAX_NEWTON, residual)
    return None


@dataclass(frozen=True)
class _ActiveStep:
    """The Newton step ``H d = g`` by conjugate gradients on the groups the positive cells
    touch, each product a gather and a sum over the positive cells only.

    ``A J A'`` (and the correction while a bound binds) is zero on a group with no positive
    cell, so that group's row of ``H`` is its diagonal ``1 / v``: ``d = v g`` there, exactly.
    The other groups couple only through the positive cells. The L2 answer is sparse (at most
    the noise's positive part outside the population's cells, which the marginals pull to
    zero), so at the DHC persons root (1,227,744 cells) a product over the positive cells is
    a small part of one over the domain, and the step's cost no longer grows with the cells.

    Attributes:
        touched: per marginal, the groups with a positive cell (sorted).
        local: per marginal, each positive cell's group as an index into ``touched``.
        weights: the marginals' weights; w: the detailed weight.
        bound: a bound on the total binds (``H`` less ``A a a' A' / (w sum(a))``).
        diagonal: per marginal, ``H``'s diagonal on ``touched`` (the preconditioner).
    """

    touched: list[np.ndarray]
    local: list[np.ndarray]
    weights: np.ndarray
    w: float
    bound: bool
    diagonal: list[np.ndarray]

    @classmethod
    def of(
        cls,
        groups: list[np.ndarray],
        weights: np.ndarray,
        w: float,
        st: _State,
    ) -> _ActiveStep:
        """The step's operator at the dual point ``st``."""
        active = np.flatnonzero(st.active)
        touched, local = [], []
        for g in groups:
            t, inverse = np.unique(g[active], return_inverse=True)
            touched.append(t)
            local.append(inverse.reshape(-1).astype(np.int64))
        diagonal = [
            np.bincount(loc, minlength=t.size) / w + 1.0 / v
            for loc, t, v in zip(local, touched, weights, strict=True)
        ]
        return cls(touched, local, weights, w, st.bound and active.size > 0, diagonal)

    def times(self, d: list[np.ndarray]) -> list[np.ndarray]:
        """``H d`` on the touched groups."""
        q = np.zeros(self.local[0].size if self.local else 0)
        for loc, dm in zip(self.local, d, strict=True):
            q += dm[loc]
        if self.bound:
            q -= q.mean()
        return [
            np.bincount(loc, weights=q, minlength=t.size) / self.w + dm / v
            for loc, t, dm, v in zip(self.local, self.touched, d, self.weights, strict=True)
        ]

    def solve(self, grad: list[np.ndarray], relative: float) -> list[np.ndarray]:
        """``d`` with ``H d = grad``: exact off the touched groups; on them a sparse
        factorisation while they are few (``SPARSE_GROUPS``), else conjugate gradients to a
        residual of ``relative`` times the touched part of ``grad``."""
        d = [v * g for g, v in zip(grad, self.weights, strict=True)]
        if not self.local or self.local[0].size == 0:
            return d
        b = [g[t] for g, t in zip(grad, self.touched, strict=True)]
        on = None
        if sum(t.size for t in self.touched) <= SPARSE_GROUPS:
            on = self._factorised(b)
        if on is None:
            on = _cg(self.times, b, self.diagonal, relative)
        for dm, t, x in zip(d, self.touched, on, strict=True):
            dm[t] = x
        return d

    def _factorised(self, b: list[np.ndarray]) -> list[np.ndarray] | None:
        """``H d = b`` on the touched groups by a sparse LU factorisation of
        ``B' B / w + diag(1 / v)`` (``B``: positive cells x touched groups, one 1 per
        marginal a row), the bound's rank-one correction by Sherman and Morrison; None when
        ``H`` is too dense (``SPARSE_DENSITY``) or the factorisation fails (the conjugate
        gradients then solve).

        Near the answer the positive cells hardly change and the conjugate gradients needed
        hundreds of products a step to the tightening residual; the factorisation solves the
        step exactly. A minimum-degree ordering of ``H`` keeps the fill near ``H``'s own
        nonzeros: at the DHC preset's root (14,113 positive cells, 22,791 touched groups,
        nine marginals) 0.3 s a factorisation with 0.39 million nonzeros in its factors, where
        SuperLU's default column ordering took 4.5 s and 14.6 million."""
        sizes = [t.size for t in self.touched]
        offsets = np.r_[0, np.cumsum(sizes)]
        rows = self.local[0].size
        if rows * len(sizes) ** 2 > SPARSE_PAIRS:
            return None  # B'B's products alone would hold this many entries
        columns = np.stack([loc + o for loc, o in zip(self.local, offsets, strict=False)], axis=1)
        B = sp.csr_matrix(
            (
                np.ones(columns.size),
                columns.reshape(-1),
                np.arange(0, columns.size + 1, columns.shape[1]),
            ),
            shape=(rows, int(offsets[-1])),
        )
        H = (B.T @ B) / self.w + sp.diags(np.repeat(1.0 / self.weights, sizes))
        if H.nnz > SPARSE_DENSITY * H.shape[0]:
            return None  # coarse groups over many cells: dense rows, a costly factorisation
        try:
            lu = spla.splu(sp.csc_matrix(H), permc_spec="MMD_AT_PLUS_A")
        except (RuntimeError, MemoryError) as err:  # singular or too large: leave it to CG
            log.debug("root Newton step: the sparse factorisation failed (%s)", err)
            return None
        rhs = np.concatenate(b)
        d = lu.solve(rhs)
        if self.bound:
            c = np.asarray(B.sum(axis=0)).reshape(-1)
            hc = lu.solve(c)
            d += hc * (float(c @ d) / (self.w * rows - float(c @ hc)))
        return [d[offsets[m] : offsets[m + 1]] for m in range(len(sizes))]


def _dense_step(
    groups: list[np.ndarray], sizes: list[int], weights: np.ndarray, w: float, st: _State
) -> list[np.ndarray]:
    """The Newton step ``H d = g`` solved exactly, with ``H`` built: its blocks
    ``A_m J A_m'`` count the positive cells of each pair of groups (one ``np.bincount`` per
    pair of marginals over the positive cells), so ``H`` is as large as the groups, not the
    cells. At the DHC persons root (1,227,744 cells; the total, SEX x AGE and HISPANIC x
    CENRACE: 359 groups) one step costs about as much as two of the conjugate gradients'
    products, where they took about ten per step."""
    active = np.flatnonzero(st.active)
    local = [g[active] for g in groups]
    offsets = np.r_[0, np.cumsum(sizes)]
    H = np.zeros((offsets[-1], offsets[-1]))
    for i, (gi, ni) in enumerate(zip(local, sizes, strict=True)):
        for j in range(i, len(local)):
            nj = sizes[j]
            block = np.bincount(gi * nj + local[j], minlength=ni * nj).reshape(ni, nj) / w
            H[offsets[i] : offsets[i + 1], offsets[j] : offsets[j + 1]] = block
            H[offsets[j] : offsets[j + 1], offsets[i] : offsets[i + 1]] = block.T
    if st.bound and active.size:
        c = np.concatenate([np.bincount(g, minlength=n) for g, n in zip(local, sizes, strict=True)])
        H -= np.outer(c, c) / (w * active.size)
    H[np.diag_indices_from(H)] += np.repeat(1.0 / weights, sizes)
    d = np.linalg.solve(H, np.concatenate(st.grad))
    return [d[offsets[m] : offsets[m + 1]] for m in range(len(sizes))]


def _project(t: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, bool]:
    """``t`` projected onto ``{x >= 0, lo <= sum x <= hi}``, and whether a bound binds."""
    x = np.maximum(t, 0.0)
    total = float(x.sum())
    if lo <= total <= hi:
        return x, False
    target = hi if total > hi else lo
    if target <= 0:
        return np.zeros_like(t), True
    return np.maximum(t - _threshold(t, target), 0.0), True


def _threshold(t: np.ndarray, target: float) -> float:
    """``theta`` with ``sum max(0, t - theta) = target > 0`` (Michelot, 1986).

    Starting from every cell, ``theta`` is the one that would hold the sum on the current
    set; the cells at or below it leave. ``theta`` only rises and the set only shrinks, so the
    loop ends, exactly, after a few passes over the cells: no sort of a million values (the
    sort made the projection 0.8 s a call at the DHC histogram's size).
    """
    active = t
    theta = (float(active.sum()) - target) / active.size
    while True:
        kept = active[active > theta]
        if kept.size == active.size:
            return theta
        active = kept
        theta = (float(active.sum()) - target) / active.size


def _cg(
    apply: Callable[[list[np.ndarray]], list[np.ndarray]],
    b: list[np.ndarray],
    diag: list[np.ndarray],
    relative: float,
) -> list[np.ndarray]:
    """Preconditioned conjugate gradients for ``H d = b`` over the blocks of ``mu``."""

    def dot(u: list[np.ndarray], v: list[np.ndarray]) -> float:
        return sum(float(a @ c) for a, c in zip(u, v, strict=True))

    x = [np.zeros_like(v) for v in b]
    r = [v.copy() for v in b]
    z = [v / dg for v, dg in zip(r, diag, strict=True)]
    p = [v.copy() for v in z]
    rz = dot(r, z)
    stop = relative * np.sqrt(dot(b, b))
    for _ in range(CG_ITERATIONS):
        if np.sqrt(dot(r, r)) <= stop:
            break
        hp = apply(p)
        alpha = rz / dot(p, hp)
        x = [a + alpha * c for a, c in zip(x, p, strict=True)]
        r = [a - alpha * c for a, c in zip(r, hp, strict=True)]
        z = [v / dg for v, dg in zip(r, diag, strict=True)]
        rz_new = dot(r, z)
        p = [a + (rz_new / rz) * c for a, c in zip(z, p, strict=True)]
        rz = rz_new
    return x
