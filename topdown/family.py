"""One estimation task: a parent's children solved jointly (or the root alone).

A ``FamilyTask`` carries only public data (noisy measurements, the parent's already-published
counts, compiled constraint rows), so it can be shipped to a worker process or a Dask cluster.
``solve_family`` runs the two passes of DESIGN.md on it:

1. L2 pass: weighted (1/variance) non-negative least squares over every measurement of the
   children, restricted to the parent's non-zero cells, children summing to the parent cell by
   cell, each child's constraints held. With ``first_pass`` queries (multipass), those are
   fitted first and then kept within a tolerance while the rest are fitted.
2. Rounding pass: integers closest in L1 to the L2 answer, consistent and within constraints.
   If no rounding within one unit of the L2 answer exists, the window widens to two.

An infeasible family raises ``solvers.InfeasibleError`` naming the node, or, with the failsafe,
relaxes consistency with the least L1 slack (an LP), solves against the relaxed parent and
reports the slack: never a silent wrong answer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

import solvers
from solvers import InfeasibleError, Problem, SolverError, SolveStatus
from solvers.builders import children_l2_problem, is_identity, rounding_problem, rounding_solution

__all__ = ["FamilyTask", "FamilyResult", "solve_family"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FamilyTask:
    """The children of one parent (k = 1 and no parent values for the root).

    Attributes:
        level: the children's level.
        parent_label: label of the parent (``None`` for the root task).
        child_labels: labels of the k children.
        parent_values: parent's published counts on the support cells (None at the root).
        support: the cells solved for (the parent's non-zero cells; at the root, the cells no
            constraint forces to zero); the children are zero elsewhere.
        measurements: per query: (Q restricted to the support columns, Y (k x m), W (k x m)).
        first_pass: indices of the measurements fitted in the first pass (empty: one pass).
        rows: extra constraint rows over the joint vector (k * n columns) and their bounds.
        ub: upper bounds of the joint vector (0 on a child's structural zeros), or None.
        row_names: names of the extra rows, for diagnostics.
        solver: registry name for every solve (``auto`` lets the registry choose).
        options: solver options (time_limit, ...).
        failsafe: relax consistency instead of raising when infeasible.
        tolerance: how far multipass may move the first-pass answers.
        controlled_rounding: also keep each child's total within one unit of its L2 total.
    """

    level: int
    parent_label: str | None
    child_labels: tuple[str, ...]
    parent_values: np.ndarray | None
    measurements: tuple[tuple[sp.csr_matrix, np.ndarray, np.ndarray], ...]
    support: np.ndarray
    first_pass: tuple[int, ...] = ()
    rows: tuple[sp.csr_matrix, np.ndarray, np.ndarray] | None = None
    ub: np.ndarray | None = None
    row_names: tuple[str, ...] = ()
    solver: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    failsafe: bool = True
    tolerance: float = 1e-6
    controlled_rounding: bool = True

    @property
    def n(self) -> int:
        return len(self.support)

    @property
    def k(self) -> int:
        return len(self.child_labels)

    @property
    def where(self) -> str:
        if self.parent_label is None:
            return "level 0 (root)"
        return f"level {self.level}, children of {self.parent_label!r}"


@dataclass
class FamilyResult:
    """Integer counts of the children on the support cells, and what it took to get them."""

    counts: np.ndarray
    l2_time: float = 0.0
    round_time: float = 0.0
    problems: int = 0
    solvers_used: tuple[str, ...] = ()
    failsafe_slack: float = 0.0
    failsafe_note: str = ""
    widened: bool = False


def solve_family(task: FamilyTask) -> FamilyResult:
    """Run the L2 and rounding passes on one family (see the module docstring)."""
    if task.n == 0:
        return FamilyResult(np.zeros((task.k, 0), dtype=np.int64))
    if _is_trivial(task):
        return FamilyResult(task.parent_values.reshape(1, -1).astype(np.int64))  # type: ignore[union-attr]
    result = FamilyResult(np.empty(0))
    parent = task.parent_values
    try:
        x_tilde = _l2(task, parent, result)
        counts = _round(task, x_tilde, parent, result)
    except InfeasibleError:
        if not task.failsafe or parent is None:
            raise
        parent = _failsafe_parent(task, result)
        x_tilde = _l2(task, parent, result)
        counts = _round(task, x_tilde, parent, result)
    result.counts = counts
    return result


def _is_trivial(task: FamilyTask) -> bool:
    """An only child with no constraints of its own is its parent."""
    return (
        task.k == 1
        and task.parent_values is not None
        and task.rows is None
        and (task.ub is None or bool(np.all(task.ub >= task.parent_values)))
    )


def _solve(problem: Problem, task: FamilyTask, result: FamilyResult) -> np.ndarray:
    res = solvers.solve(problem, solver=task.solver, **task.options)
    result.problems += 1
    if res.solver not in result.solvers_used:
        result.solvers_used += (res.solver,)
    return np.asarray(res.x, dtype=float)


def _coupled(measurements) -> bool:
    """Any query other than the detailed histogram couples a child's cells."""
    return not all(is_identity(Q) for Q, _, _ in measurements)


def _l2(task: FamilyTask, parent: np.ndarray | None, result: FamilyResult) -> np.ndarray:
    """The L2 pass. Coupled strategies use the lifted form (one variable per answer of a
    marginal query), whose Hessian stays diagonal: the plain form's blocks Q'WQ are dense
    (a total query alone makes an n x n block per child)."""
    start = time.perf_counter()
    extra_A, extra_lb, extra_ub = task.rows if task.rows is not None else (None, None, None)
    if task.first_pass:
        first = [task.measurements[i] for i in task.first_pass]
        problem = children_l2_problem(
            parent,
            first,
            k=task.k,
            n=task.n,
            extra_A=extra_A,
            extra_lb=extra_lb,
            extra_ub=extra_ub,
            ub=task.ub,
            name=f"{task.where} / L2 pass 1",
            lifted=_coupled(first),
        )
        x1 = _solve(problem, task, result)[: task.k * task.n].reshape(task.k, task.n)
        keep_A, keep_lb, keep_ub = _keep_rows(first, x1, task.k, task.n, task.tolerance)
        extra_A, extra_lb, extra_ub = _stack_rows(
            (extra_A, extra_lb, extra_ub), (keep_A, keep_lb, keep_ub)
        )
    problem = children_l2_problem(
        parent,
        list(task.measurements),
        k=task.k,
        n=task.n,
        extra_A=extra_A,
        extra_lb=extra_lb,
        extra_ub=extra_ub,
        ub=task.ub,
        name=f"{task.where} / L2 pass{' 2' if task.first_pass else ''}",
        lifted=_coupled(task.measurements),
    )
    x = _solve(problem, task, result)[: task.k * task.n].reshape(task.k, task.n)
    result.l2_time += time.perf_counter() - start
    # interior-point answers sit a hair outside the bounds; the rounding pass needs x >= 0
    return np.maximum(x, 0.0)


def _round(
    task: FamilyTask, x_tilde: np.ndarray, parent: np.ndarray | None, result: FamilyResult
) -> np.ndarray:
    start = time.perf_counter()
    if task.ub is not None:
        x_tilde = np.minimum(x_tilde, task.ub.reshape(task.k, task.n))
    rows = task.rows
    if task.controlled_rounding:
        rows = _stack_rows(rows, _total_rows(x_tilde))
    extra_A, extra_lb, extra_ub = rows if rows is not None else (None, None, None)
    last: InfeasibleError | None = None
    for width in (1, 2):
        problem, floor = rounding_problem(
            x_tilde,
            parent,
            extra_A=extra_A,
            extra_lb=extra_lb,
            extra_ub=extra_ub,
            width=width,
            name=f"{task.where} / rounding pass (width {width})",
        )
        try:
            solution = _solve_integral(problem, task, result)
        except InfeasibleError as err:
            last = err
            continue
        counts = rounding_solution(solution, floor).reshape(task.k, task.n)
        if task.ub is not None and np.any(counts.reshape(-1) > task.ub):
            continue  # a wider window broke a structural zero: not an answer
        result.widened = width > 1
        result.round_time += time.perf_counter() - start
        return counts
    if last is None:
        raise InfeasibleError(
            f"{task.where}: no rounding within two units of the L2 answer keeps the structural "
            "zeros",
            status=SolveStatus.INFEASIBLE,
            solver="rounding",
            problem=f"{task.where} / rounding pass",
        )
    raise last


def _solve_integral(problem: Problem, task: FamilyTask, result: FamilyResult) -> np.ndarray:
    """Solve a rounding problem, as an LP when its rows are totally unimodular.

    Cell consistency and per-child totals form a bipartite incidence matrix (TU) and the
    window bounds and right-hand sides are integers, so a simplex vertex is integral and the
    LP is much cheaper than branch and bound. User rows can break that: the LP answer is
    checked and the MILP solved when it is fractional.
    """
    if task.rows is None and problem.integrality is not None:
        relaxed = dataclasses.replace(problem, integrality=None)
        try:
            x = _solve(relaxed, task, result)
        except SolverError:
            x = None
        if x is not None and np.max(np.abs(x - np.round(x)), initial=0.0) < 1e-7:
            return np.round(x)
    return _solve(problem, task, result)


def _total_rows(x_tilde: np.ndarray):
    """Controlled rounding (Cox 1987): each child's total stays between the floor and the
    ceiling of its L2 total. Independent cell rounding lets totals drift: an L2 answer that
    shifts every cell by -0.1 rounds every cell up. With the cell-by-cell consistency rows these
    rows form a bipartite incidence matrix, which is totally unimodular, so the rounding LP
    stays integral."""
    k, n = x_tilde.shape
    totals = x_tilde.sum(axis=1)
    A = sp.kron(sp.identity(k, format="csr"), np.ones((1, n)), format="csr")
    return A, np.floor(totals + 1e-9), np.ceil(totals - 1e-9)


def _keep_rows(first, x1: np.ndarray, k: int, n: int, tol: float):
    """Rows keeping each first-pass query's answers within ``tol`` of pass 1's answers."""
    blocks, lbs, ubs = [], [], []
    for Q, _, _ in first:
        blocks.append(sp.kron(sp.identity(k, format="csr"), Q, format="csr"))
        answers = np.concatenate([Q @ x1[c] for c in range(k)])
        lbs.append(answers - tol)
        ubs.append(answers + tol)
    return sp.vstack(blocks, format="csr"), np.concatenate(lbs), np.concatenate(ubs)


def _stack_rows(a, b):
    if a is None or a[0] is None:
        return b
    return (
        sp.vstack([a[0], b[0]], format="csr"),
        np.concatenate([a[1], b[1]]),
        np.concatenate([a[2], b[2]]),
    )


def _failsafe_parent(task: FamilyTask, result: FamilyResult) -> np.ndarray:
    """The parent values nearest (L1) to the published ones that the children can meet.

    LP: variables x (k n) >= 0 and slacks s+, s- (n each) >= 0, minimise sum(s+ + s-) subject to
    sum_c x_c + s+ - s- = parent and the children's constraint rows. The slack is rounded to
    integers (the parent's counts are integers) and reported.
    """
    k, n = task.k, task.n
    parent = task.parent_values
    assert parent is not None
    consistency = sp.hstack(
        [sp.kron(np.ones((1, k)), sp.identity(n), format="csr"), sp.identity(n), -sp.identity(n)],
        format="csr",
    )
    A_blocks, lb, ub = [consistency], [parent.astype(float)], [parent.astype(float)]
    if task.rows is not None:
        A, rlb, rub = task.rows
        A_blocks.append(sp.hstack([A, sp.csr_matrix((A.shape[0], 2 * n))], format="csr"))
        lb.append(rlb)
        ub.append(rub)
    var_ub = np.full(k * n + 2 * n, np.inf)
    if task.ub is not None:
        var_ub[: k * n] = task.ub
    problem = Problem(
        c=np.concatenate([np.zeros(k * n), np.ones(2 * n)]),
        lb=np.zeros(k * n + 2 * n),
        ub=var_ub,
        A=sp.vstack(A_blocks, format="csr"),
        row_lb=np.concatenate(lb),
        row_ub=np.concatenate(ub),
        name=f"{task.where} / failsafe slack LP",
    )
    sol = _solve(problem, task, result)
    s_plus, s_minus = sol[k * n : k * n + n], sol[k * n + n :]
    relaxed = np.rint(parent - s_plus + s_minus).astype(np.int64)
    relaxed = np.maximum(relaxed, 0)
    slack = float(np.abs(relaxed - parent).sum())
    result.failsafe_slack = slack
    result.failsafe_note = (
        f"{task.where}: constraints {list(dict.fromkeys(task.row_names))[:5]} cannot hold with the "
        f"children summing to the parent; consistency relaxed by {slack:g} unit(s) in "
        f"{int(np.count_nonzero(relaxed - parent))} cell(s)"
    )
    log.warning("failsafe: %s", result.failsafe_note)
    return relaxed
