"""Builders of the two TopDown estimation problems as :class:`~solvers.problem.Problem`.

``children_l2_problem`` is the L2 pass of one parent (weighted non-negative least squares of
its k children, jointly, with cell-by-cell consistency with the parent) and
``rounding_problem`` the L1 rounding pass. Both use the child-major layout
``x[c * n + j] = child c, cell j``. With consistency alone (and detailed-only queries for the
L2 pass) they produce exactly the partition structures the ``closed_form`` backend detects,
so no redundant row is ever added here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from solvers.problem import Problem, SparseMatrix

__all__ = ["children_l2_problem", "is_identity", "rounding_problem", "rounding_solution"]

_NEG_TOL = 1e-6
_DENSE_WARN = 20_000_000

logger = logging.getLogger(__name__)


def _consistency_rows(k: int, n: int) -> sp.csr_matrix:
    """Row j sums cell j over the children: ``kron(ones(1, k), I_n)``."""
    return sp.csr_matrix(sp.kron(np.ones((1, k)), sp.identity(n, format="csr"), format="csr"))


def _bounds(value: object, m: int, default: float, field: str, name: str) -> np.ndarray:
    if value is None:
        return np.full(m, default)
    arr = np.asarray(value, dtype=float).reshape(-1)
    if arr.shape != (m,):
        raise ValueError(f"problem {name!r}: {field} has shape {arr.shape}, expected ({m},)")
    return arr


def _stack_rows(
    blocks: Sequence[tuple[SparseMatrix, np.ndarray, np.ndarray]], ncols: int
) -> tuple[sp.csr_matrix | None, np.ndarray | None, np.ndarray | None]:
    if not blocks:
        return None, None, None
    A = sp.vstack([sp.csr_matrix(b[0]) for b in blocks], format="csr")
    if A.shape[1] != ncols:
        raise ValueError(f"constraint rows have {A.shape[1]} columns, expected {ncols}")
    return A, np.concatenate([b[1] for b in blocks]), np.concatenate([b[2] for b in blocks])


def children_l2_problem(
    parent: np.ndarray | None,
    measurements: Sequence[tuple[SparseMatrix, np.ndarray, np.ndarray]],
    *,
    k: int,
    n: int,
    extra_A: SparseMatrix | None = None,
    extra_lb=None,
    extra_ub=None,
    ub: np.ndarray | None = None,
    name: str = "",
    lifted: bool = False,
) -> Problem:
    """Joint weighted NNLS of k children over n cells (the support cells of the parent).

    The objective is ``sum_q sum_c sum_i W_q[c, i] (Q_q x_c - Y_q[c])_i^2``, expanded as
    ``1/2 x'Px + c'x + offset`` with ``P = 2 blockdiag_c(sum_q Q_q' diag(W_q[c]) Q_q)``,
    ``c = -2 sum_q (I_k kron Q_q)' (W_q * Y_q)`` and ``offset = sum W Y^2``, so the reported
    objective is the weighted sum of squares itself.

    Args:
        parent: the parent's values on the n cells (None at the root: no consistency rows).
        measurements: per query q, ``(Q_q (m_q x n), Y_q (k x m_q), W_q (k x m_q) or (k,))``;
            ``W`` are inverse variances and may differ per child.
        k: number of children; n: number of cells.
        extra_A: extra rows over the joint vector (k*n columns), appended after the n
            consistency rows, with bounds ``extra_lb`` / ``extra_ub`` (default -inf / +inf).
        ub: optional upper bounds, shape (k*n,) or (k, n); lower bounds are 0.
        name: problem name (node and pass) for error messages.
        lifted: add one variable per query answer, ``t = (I_k kron Q_q) x`` (equality rows
            appended last), and put the diagonal weights on ``t``. ``Q'WQ`` of a total or
            low-order marginal is a dense block (``(n/|a|)^2`` entries per child for a
            one-attribute marginal), so the unlifted Hessian does not fit in memory past a
            few thousand cells; the lifted form stays as sparse as the queries. The first
            ``k*n`` entries of the solution are still ``x``. Default False (exact layout).

    Returns:
        The QP; the consistency rows are rows 0..n-1.
    """
    if lifted:
        return _lifted_children(
            parent,
            measurements,
            k=k,
            n=n,
            extra_A=extra_A,
            extra_lb=extra_lb,
            extra_ub=extra_ub,
            ub=ub,
            name=name,
        )
    N = k * n
    dense_nnz = k * sum(int(np.sum(np.diff(sp.csr_matrix(m[0]).indptr) ** 2)) for m in measurements)
    if dense_nnz > _DENSE_WARN:
        logger.warning(
            "problem %r: the Hessian will hold about %.2g entries (marginals over many cells); "
            "pass lifted=True to keep it sparse",
            name,
            dense_nnz,
        )
    P = sp.csr_matrix((N, N))
    c = np.zeros(N)
    offset = 0.0
    eye_k = sp.identity(k, format="csr")
    for qi, (Q, Y, W) in enumerate(measurements):
        Q = sp.csr_matrix(Q)
        mq = Q.shape[0]
        if Q.shape[1] != n:
            raise ValueError(
                f"problem {name!r}: query {qi} has {Q.shape[1]} columns, expected n={n}"
            )
        Y = np.asarray(Y, dtype=float).reshape(k, mq)
        W = np.asarray(W, dtype=float)
        W = np.broadcast_to(W.reshape(k, 1), (k, mq)) if W.shape == (k,) else W.reshape(k, mq)
        if np.any(W < 0) or not np.isfinite(W).all():
            raise ValueError(f"problem {name!r}: weights of query {qi} must be finite and >= 0")
        Qbig = sp.kron(eye_k, Q, format="csr")
        w = W.reshape(-1)
        P = P + 2.0 * (Qbig.T @ sp.diags(w) @ Qbig)
        c -= 2.0 * (Qbig.T @ (w * Y.reshape(-1)))
        offset += float(np.sum(w * Y.reshape(-1) ** 2))
    blocks: list[tuple[SparseMatrix, np.ndarray, np.ndarray]] = []
    if parent is not None:
        parent = np.asarray(parent, dtype=float).reshape(-1)
        if parent.shape != (n,):
            raise ValueError(f"problem {name!r}: parent has shape {parent.shape}, expected ({n},)")
        blocks.append((_consistency_rows(k, n), parent, parent))
    if extra_A is not None:
        me = extra_A.shape[0]
        blocks.append(
            (
                extra_A,
                _bounds(extra_lb, me, -np.inf, "extra_lb", name),
                _bounds(extra_ub, me, np.inf, "extra_ub", name),
            )
        )
    A, row_lb, row_ub = _stack_rows(blocks, N)
    upper = np.full(N, np.inf) if ub is None else np.asarray(ub, dtype=float).reshape(-1)
    return Problem(
        c=c,
        lb=np.zeros(N),
        ub=upper,
        P=sp.csc_matrix(P),
        A=A,
        row_lb=row_lb,
        row_ub=row_ub,
        offset=offset,
        name=name,
    )


def is_identity(Q: SparseMatrix) -> bool:
    """True for the n x n identity (the detailed query): one 1 per row, on the diagonal."""
    n = Q.shape[1]
    if Q.shape[0] != n:
        return False
    Q = sp.csr_matrix(Q, copy=True)
    Q.sum_duplicates()
    Q.eliminate_zeros()
    return (
        Q.nnz == n
        and bool(np.array_equal(Q.indptr, np.arange(n + 1)))
        and bool(np.array_equal(Q.indices, np.arange(n)))
        and bool(np.all(Q.data == 1))
    )


def _lifted_children(
    parent, measurements, *, k, n, extra_A, extra_lb, extra_ub, ub, name
) -> Problem:
    """The lifted form of :func:`children_l2_problem` (see its ``lifted`` argument)."""
    N = k * n
    eye_k = sp.identity(k, format="csr")
    lifts, weights, targets = [], [], []
    # identity queries (the detailed histogram) act on x directly: lifting them would only
    # double the variables; every other query gets one variable per answer
    diag_x, lin_x, offset_x = np.zeros(N), np.zeros(N), 0.0
    for qi, (Q, Y, W) in enumerate(measurements):
        Q = sp.csr_matrix(Q)
        mq = Q.shape[0]
        if Q.shape[1] != n:
            raise ValueError(
                f"problem {name!r}: query {qi} has {Q.shape[1]} columns, expected n={n}"
            )
        W = np.asarray(W, dtype=float)
        W = np.broadcast_to(W.reshape(k, 1), (k, mq)) if W.shape == (k,) else W.reshape(k, mq)
        if np.any(W < 0) or not np.isfinite(W).all():
            raise ValueError(f"problem {name!r}: weights of query {qi} must be finite and >= 0")
        if is_identity(Q):
            diag_x += 2.0 * W.reshape(-1)
            Yf = np.asarray(Y, dtype=float).reshape(-1)
            lin_x -= 2.0 * W.reshape(-1) * Yf
            offset_x += float(np.sum(W.reshape(-1) * Yf**2))
            continue
        lifts.append(sp.kron(eye_k, Q, format="csr"))
        weights.append(W.reshape(-1))
        targets.append(np.asarray(Y, dtype=float).reshape(-1))
    w = np.concatenate(weights) if weights else np.zeros(0)
    y = np.concatenate(targets) if targets else np.zeros(0)
    T = w.size
    P = sp.diags(np.concatenate([diag_x, 2.0 * w]), format="csc")
    c = np.concatenate([lin_x, -2.0 * w * y])
    blocks: list[tuple[SparseMatrix, np.ndarray, np.ndarray]] = []
    if parent is not None:
        parent = np.asarray(parent, dtype=float).reshape(-1)
        if parent.shape != (n,):
            raise ValueError(f"problem {name!r}: parent has shape {parent.shape}, expected ({n},)")
        blocks.append((sp.hstack([_consistency_rows(k, n), sp.csr_matrix((n, T))]), parent, parent))
    if extra_A is not None:
        me = extra_A.shape[0]
        blocks.append(
            (
                sp.hstack([sp.csr_matrix(extra_A), sp.csr_matrix((me, T))]),
                _bounds(extra_lb, me, -np.inf, "extra_lb", name),
                _bounds(extra_ub, me, np.inf, "extra_ub", name),
            )
        )
    if T:
        lift = sp.hstack([sp.vstack(lifts), -sp.identity(T)])
        blocks.append((lift, np.zeros(T), np.zeros(T)))
    A, row_lb, row_ub = _stack_rows(blocks, N + T)
    upper = np.full(N, np.inf) if ub is None else np.asarray(ub, dtype=float).reshape(-1)
    return Problem(
        c=c,
        lb=np.concatenate([np.zeros(N), np.full(T, -np.inf)]),
        ub=np.concatenate([upper, np.full(T, np.inf)]),
        P=P,
        A=A,
        row_lb=row_lb,
        row_ub=row_ub,
        offset=float(np.sum(w * y**2)) + offset_x,
        name=name,
    )


def rounding_problem(
    x_tilde: np.ndarray,
    parent: np.ndarray | None,
    *,
    extra_A=None,
    extra_lb=None,
    extra_ub=None,
    width: int = 1,
    name: str = "",
) -> tuple[Problem, np.ndarray]:
    """Integer rounding with minimal L1 distance to ``x_tilde`` (shape (k, n), child-major).

    ``x = floor(x_tilde) + z`` with integer ``z``. For ``width == 1``, ``z`` is in {0, 1}
    and the L1 distance is exactly ``sum frac + sum (1 - 2 frac) z`` (the constant is the
    problem's offset, so the objective is the distance itself). For ``width > 1`` (needed
    when constraints push values further), ``z = u1 + u2 - v`` with ``u1`` in [0, 1] at cost
    ``1 - 2 frac``, ``u2`` in [0, width - 1] and ``v`` in [0, width - 1] at cost 1 each: a
    convex piecewise-linear cost equal to ``|floor + z - x_tilde|`` at the optimum. Use
    :func:`rounding_solution` to map a solution of either form back to counts.

    Args:
        x_tilde: the L2 estimate, shape (k, n) (or (n,) for a single node); entries above
            ``-1e-6`` are clipped to 0 first, more negative ones are an error.
        parent: integer-valued parent counts (n,) or None (no consistency rows).
        extra_A: extra rows over the k*n counts with bounds ``extra_lb``/``extra_ub``; they
            are shifted by ``extra_A @ floor`` so they constrain the final counts.
        width: rounding window (see above).
        name: problem name for error messages.

    Returns:
        ``(problem, floor)``: ``x = floor + solution`` for width 1 (flattened child-major).
    """
    xt = np.atleast_2d(np.asarray(x_tilde, dtype=float))
    if np.isnan(xt).any() or xt.min(initial=0.0) < -_NEG_TOL:
        raise ValueError(
            f"problem {name!r}: x_tilde must be >= 0 and not NaN (min {np.nanmin(xt):g})"
        )
    if width < 1:
        raise ValueError(f"problem {name!r}: width ({width}) must be >= 1")
    k, n = xt.shape
    N = k * n
    xt = np.maximum(xt, 0.0).reshape(-1)
    floor = np.floor(xt)
    frac = xt - floor
    if width == 1:
        cost, lo, hi = 1.0 - 2.0 * frac, np.zeros(N), np.ones(N)
        expand = sp.identity(N, format="csr")
    else:
        cost = np.concatenate([1.0 - 2.0 * frac, np.ones(N), np.ones(N)])
        lo = np.zeros(3 * N)
        # v (rounding down further) may not take a count below zero.
        hi = np.concatenate([np.ones(N), np.full(N, width - 1.0), np.minimum(width - 1.0, floor)])
        eye = sp.identity(N, format="csr")
        expand = sp.hstack([eye, eye, -eye], format="csr")
    blocks: list[tuple[SparseMatrix, np.ndarray, np.ndarray]] = []
    if parent is not None:
        parent = np.asarray(parent, dtype=float).reshape(-1)
        if parent.shape != (n,):
            raise ValueError(f"problem {name!r}: parent has shape {parent.shape}, expected ({n},)")
        if np.max(np.abs(parent - np.round(parent)), initial=0.0) > 1e-9:
            raise ValueError(f"problem {name!r}: parent must be integer-valued for rounding")
        need = np.round(parent) - floor.reshape(k, n).sum(axis=0)
        blocks.append((_consistency_rows(k, n) @ expand, need, need))
    if extra_A is not None:
        E = sp.csr_matrix(extra_A)
        me = E.shape[0]
        shift = E @ floor
        blocks.append(
            (
                E @ expand,
                _bounds(extra_lb, me, -np.inf, "extra_lb", name) - shift,
                _bounds(extra_ub, me, np.inf, "extra_ub", name) - shift,
            )
        )
    A, row_lb, row_ub = _stack_rows(blocks, cost.size)
    problem = Problem(
        c=cost,
        lb=lo,
        ub=hi,
        A=A,
        row_lb=row_lb,
        row_ub=row_ub,
        integrality=np.ones(cost.size, dtype=bool),
        offset=float(frac.sum()),
        name=name,
    )
    return problem, floor


def rounding_solution(solution: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Counts ``floor + z`` from a rounding solution of width 1 or wider (3-block) form."""
    s = np.asarray(solution, dtype=float)
    N = floor.size
    z = s if s.size == N else s[:N] + s[N : 2 * N] - s[2 * N :]
    return np.round(floor + z).astype(np.int64)
