"""Exact fast paths for the separable TopDown problems, detected from the matrices.

Three structures are recognised without any hint from the caller:

(a) Partition projection (QP). ``P`` diagonal and positive, every column of ``A`` holds at
    most one nonzero and it is 1 (the rows partition the variables into groups), every row is
    an equality, variables in a row have ``lb = 0, ub = +inf``. Each group is then an
    independent weighted projection onto a scaled simplex,
    ``min sum_i P_ii/2 (x_i - y_i)^2, y = -c/P, x >= 0, sum_G x = b``, whose solution is
    ``x_i = max(y_i - lam/P_ii, 0)`` for the threshold ``lam`` found by sorting the
    breakpoints ``P_ii y_i``. This is TopDown's detailed-only children problem: one group per
    parent cell, one variable per child. Variables in no row are clipped to their bounds.

(b) Partition rounding (LP/MILP). No ``P``, the same partition structure, integer equality
    right-hand sides ``b``, variables in a row bounded by ``[0, 1]``. The constraint matrix is
    totally unimodular, so the LP is integral and the optimum takes the ``b`` cheapest
    variables of each group (ties to the lower index, so the result is deterministic).
    Variables in no row go to the bound their cost points to.

(c) Controlled rounding (LP/MILP). No ``P``, variables in ``[0, 1]``, every variable in exactly
    two rows with coefficient 1, one "cell" row (integer equalities) and one "child" row
    (integer bounds): a bipartite transportation problem, solved exactly as a min-cost flow by
    :func:`solvers.backends.transport.transport_round`.

(a) and (b) are vectorised: groups are bucketed by size and each bucket is one 2-D numpy array, so
the equal-size TopDown case (k children in every cell) is a single sort.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.backends.base import Backend, failed_result, solved_result
from solvers.backends.transport import TransportInfeasible, round_groups, transport_round
from solvers.problem import Problem
from solvers.status import SolverError, SolveResult, SolveStatus, error_for_status

__all__ = ["ClosedFormBackend", "buckets", "project_groups", "round_groups"]

_INT_TOL = 1e-9

#: Form (c) is taken when children^2 <= ratio * cells: the measured crossover with HiGHS's LP
#: (benchmarks/solvers, "round controlled"): the flow's work grows with k^3 per moved unit,
#: HiGHS's with the number of variables, so HiGHS wins on many children over few cells.
TRANSPORT_MAX_RATIO = 4.0


@dataclass(frozen=True)
class _Partition:
    """Which row each variable belongs to (-1 for none) and the rows' right-hand sides."""

    group: np.ndarray
    rhs: np.ndarray


def _partition(problem: Problem) -> _Partition | str:
    """Detect the partition structure of the rows, or return why it is absent."""
    if problem.A is None or problem.m == 0:
        return _Partition(group=np.full(problem.n, -1, dtype=np.int64), rhs=np.zeros(0))
    assert problem.row_lb is not None and problem.row_ub is not None
    if not np.array_equal(problem.row_lb, problem.row_ub):
        return "closed_form needs every row to be an equality"
    if not np.isfinite(problem.row_lb).all():
        return "closed_form needs finite row right-hand sides"
    A = sp.csc_matrix(problem.A)
    A.eliminate_zeros()
    counts = np.diff(A.indptr)
    if counts.size and counts.max() > 1:
        return "closed_form needs each variable in at most one row (coupled rows found)"
    if A.nnz and not np.all(A.data == 1.0):
        return "closed_form needs row coefficients equal to 1"
    group = np.full(problem.n, -1, dtype=np.int64)
    group[counts == 1] = A.indices
    return _Partition(group=group, rhs=np.asarray(problem.row_lb, dtype=float))


@dataclass(frozen=True)
class _Bipartite:
    """Controlled rounding: each variable is (child, cell); cell sums and child bounds."""

    child: np.ndarray
    cell: np.ndarray
    b: np.ndarray
    L: np.ndarray
    U: np.ndarray


def _bipartite(problem: Problem) -> _Bipartite | None:
    """Detect structure (c): the rows of each variable's two nonzeros, the lower-numbered one
    a cell row (every one an integer equality), the other a child row (integer bounds)."""
    if problem.P is not None or problem.A is None or problem.m == 0:
        return None
    if not (np.all(problem.lb == 0) and np.all(problem.ub == 1)):
        return None
    assert problem.row_lb is not None and problem.row_ub is not None
    A = sp.csr_matrix(problem.A)
    if A.nnz != 2 * problem.n or not np.all(A.data == 1.0):
        return None
    rows = np.repeat(np.arange(problem.m), np.diff(A.indptr))
    order = np.lexsort((rows, A.indices))
    if not np.all(np.bincount(A.indices, minlength=problem.n) == 2):
        return None
    first, second = rows[order[0::2]], rows[order[1::2]]
    cells, children = np.unique(first), np.unique(second)
    if np.intersect1d(cells, children).size or cells.size + children.size != problem.m:
        return None
    lo, hi = problem.row_lb, problem.row_ub
    rhs = lo[cells]
    if not (np.array_equal(rhs, hi[cells]) and np.all(np.isfinite(rhs))):
        return None
    L, U = lo[children], hi[children]
    for bound in (rhs, L[np.isfinite(L)], U[np.isfinite(U)]):
        if np.max(np.abs(bound - np.round(bound)), initial=0.0) > _INT_TOL:
            return None
    cell = np.searchsorted(cells, first)
    child = np.searchsorted(children, second)
    if np.unique(child * cells.size + cell).size != child.size:
        return None  # two variables for one (child, cell) pair
    return _Bipartite(child, cell, np.round(rhs), np.round(L), np.round(U))


_Structure = _Partition | _Bipartite


def _analyse(
    problem: Problem, transport_ratio: float = TRANSPORT_MAX_RATIO
) -> tuple[str, _Structure] | str:
    """Return ("projection" | "rounding" | "transport", structure) or a reason for declining."""
    part = _partition(problem)
    if isinstance(part, str):
        flow = _bipartite(problem)
        if flow is None:
            return part
        k, n = flow.L.size, flow.b.size
        if k * k > transport_ratio * n:
            return (
                f"closed_form leaves controlled rounding with k^2 > {transport_ratio:g} n "
                f"(k = {k} children, n = {n} cells) to HiGHS, faster there"
            )
        return "transport", flow
    in_row = part.group >= 0
    if problem.P is not None:
        P = problem.P
        if P.nnz != np.count_nonzero(P.diagonal()) or (P - sp.diags(P.diagonal())).count_nonzero():
            return "closed_form needs a diagonal Hessian (coupled QP)"
        if not np.all(P.diagonal() > 0):
            return "closed_form needs a positive Hessian diagonal"
        if in_row.any() and not (
            np.all(problem.lb[in_row] == 0) and np.all(np.isposinf(problem.ub[in_row]))
        ):
            return "closed_form projection needs lb = 0 and ub = +inf for variables in rows"
        return "projection", part
    if in_row.any():
        if not (np.all(problem.lb[in_row] == 0) and np.all(problem.ub[in_row] == 1)):
            return "closed_form rounding needs bounds [0, 1] for variables in rows"
        if np.max(np.abs(part.rhs - np.round(part.rhs)), initial=0.0) > _INT_TOL:
            return "closed_form rounding needs integer row right-hand sides"
    return "rounding", part


def buckets(group: np.ndarray, n_groups: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per distinct group size s: (group ids (G,), member indices (G, s) in index order).

    ``group[i]`` is member ``i``'s group (-1 for none). The one bucketing of the package and of
    ``topdown.estimation.batched.families`` (variables by row here, children by parent there): each
    bucket is one 2-D array, so equal-size groups are solved in one vectorised call.
    """
    members = np.flatnonzero(group >= 0)
    order = members[np.argsort(group[members], kind="stable")]
    sizes = np.bincount(group[members], minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    out = []
    for s in np.unique(sizes):
        gids = np.flatnonzero(sizes == s)
        if s == 0:
            out.append((gids, np.zeros((gids.size, 0), dtype=np.int64)))
            continue
        idx = order[starts[gids][:, None] + np.arange(s)[None, :]]
        out.append((gids, idx))
    return out


def project_groups(y: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Weighted projections of the rows of ``y`` onto ``{x >= 0, sum x = b}``.

    Args:
        y: targets, shape (G, s).
        w: positive weights, shape (G, s); the objective is ``sum w/2 (x - y)^2``.
        b: non-negative totals, shape (G,).

    Returns:
        x of shape (G, s): ``max(y - lam/w, 0)`` with each row's threshold ``lam`` taken at the
        last sorted breakpoint ``w y`` that keeps the active variables positive.
    """
    G, s = y.shape
    if s == 0:
        return y.copy()
    order = np.argsort(-(w * y), axis=1, kind="stable")
    ys = np.take_along_axis(y, order, axis=1)
    winv = 1.0 / np.take_along_axis(w, order, axis=1)
    lam = (np.cumsum(ys, axis=1) - b[:, None]) / np.cumsum(winv, axis=1)
    active = ys - lam * winv > 0
    last = np.where(active.any(axis=1), s - 1 - np.argmax(active[:, ::-1], axis=1), 0)
    lam_g = lam[np.arange(G), last]
    x = np.maximum(y - lam_g[:, None] / w, 0.0)
    x[b == 0] = 0.0
    return x


class ClosedFormBackend(Backend):
    """Exact solver of forms (a), (b) and (c); declines anything else, with a reason."""

    name = "closed_form"
    supports_lp = True
    supports_qp = True
    supports_milp = True
    REQUIRED_MODULES = ("numpy",)

    def __init__(self, *, transport_max_ratio: float = TRANSPORT_MAX_RATIO) -> None:
        self.transport_max_ratio = transport_max_ratio
        # the registry asks ``accepts`` and then ``solve`` on the same problem: analyse once
        self._last: tuple[weakref.ref[Problem], tuple[str, _Structure] | str] | None = None

    def _analysis(self, problem: Problem) -> tuple[str, _Structure] | str:
        last = self._last
        if last is not None and last[0]() is problem:
            return last[1]
        verdict = _analyse(problem, self.transport_max_ratio)
        self._last = (weakref.ref(problem), verdict)
        return verdict

    def accepts(self, problem: Problem) -> bool | str:
        """True for the three structures, else the reason they do not apply."""
        verdict = self._analysis(problem)
        return verdict if isinstance(verdict, str) else True

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        """Solve exactly; ``time_limit``/``tolerance`` are accepted and ignored (no iterations)."""
        start = time.perf_counter()
        verdict = self._analysis(problem)
        if isinstance(verdict, str):
            return failed_result(
                problem, SolveStatus.UNSUPPORTED, self.name, time.perf_counter() - start
            )
        kind, part = verdict
        if isinstance(part, _Bipartite):
            x = self._transport(problem, part)
        elif kind == "projection":
            x = self._projection(problem, part)
        else:
            x = self._rounding(problem, part)
        return solved_result(problem, x, self.name, time.perf_counter() - start, iterations=0)

    def _error(self, status: SolveStatus, problem: Problem, detail: str) -> SolverError:
        return error_for_status(status, solver=self.name, problem=problem.name, detail=detail)

    def _infeasible(self, problem: Problem, row: int, value: float, rule: str) -> SolverError:
        label = problem.row_names[row] if problem.row_names else f"row {row}"
        return self._error(
            SolveStatus.INFEASIBLE, problem, f"{label}: right-hand side {value:g} {rule}"
        )

    def _transport(self, problem: Problem, flow: _Bipartite) -> np.ndarray:
        C = np.full((flow.L.size, flow.b.size), np.inf)
        C[flow.child, flow.cell] = problem.c
        try:
            z = transport_round(C, flow.b, flow.L, flow.U)
        except TransportInfeasible as err:
            raise self._error(SolveStatus.INFEASIBLE, problem, str(err)) from None
        return z[flow.child, flow.cell].astype(float)

    def _projection(self, problem: Problem, part: _Partition) -> np.ndarray:
        assert problem.P is not None
        w = problem.P.diagonal()
        y = -problem.c / w
        x = np.clip(y, problem.lb, problem.ub)
        if part.rhs.size:
            bad = np.flatnonzero(part.rhs < 0)
            if bad.size:
                raise self._infeasible(
                    problem, int(bad[0]), part.rhs[bad[0]], "is negative, variables are >= 0"
                )
            for gids, idx in buckets(part.group, part.rhs.size):
                if idx.shape[1] == 0:
                    nonzero = gids[part.rhs[gids] != 0]
                    if nonzero.size:
                        raise self._infeasible(
                            problem,
                            int(nonzero[0]),
                            part.rhs[nonzero[0]],
                            "must be 0 for an empty row",
                        )
                    continue
                x[idx] = project_groups(y[idx], w[idx], part.rhs[gids])
        return x

    def _rounding(self, problem: Problem, part: _Partition) -> np.ndarray:
        lb, ub = problem.lb.copy(), problem.ub.copy()
        if problem.integrality is not None:
            lb = np.where(problem.integrality, np.ceil(lb - _INT_TOL), lb)
            ub = np.where(problem.integrality, np.floor(ub + _INT_TOL), ub)
            if np.any(lb > ub):
                i = int(np.flatnonzero(lb > ub)[0])
                raise self._error(
                    SolveStatus.INFEASIBLE,
                    problem,
                    f"integer variable {i} has no integer in [{problem.lb[i]}, {problem.ub[i]}]",
                )
        # a free variable goes to the bound its cost favours; at zero cost any point of the
        # box is optimal: take the one nearest 0 (finite even when a bound is infinite)
        x = np.where(problem.c < 0, ub, np.where(problem.c > 0, lb, np.clip(0.0, lb, ub)))
        free = part.group < 0
        if np.any(free & ~np.isfinite(x)):
            i = int(np.flatnonzero(free & ~np.isfinite(x))[0])
            raise self._error(
                SolveStatus.UNBOUNDED,
                problem,
                f"variable {i} has cost {problem.c[i]:g} and no bound in that direction",
            )
        if part.rhs.size:
            b = np.round(part.rhs)
            sizes = np.bincount(part.group[~free], minlength=b.size)
            bad = np.flatnonzero((b < 0) | (b > sizes))
            if bad.size:
                r = int(bad[0])
                raise self._infeasible(
                    problem, r, b[r], f"is outside [0, {int(sizes[r])}] (group size)"
                )
            for gids, idx in buckets(part.group, b.size):
                if idx.shape[1]:
                    x[idx] = round_groups(problem.c[idx], b[gids])
        return x
