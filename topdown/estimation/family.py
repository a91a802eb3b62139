"""One estimation task: a parent's children solved jointly (or the root alone).

A ``FamilyTask`` carries only public data (noisy measurements, the parent's already-published
counts, compiled constraint rows), so it can be shipped to a worker process or a Dask cluster.
``solve_family`` runs the two estimation passes on it:

1. L2 pass: weighted (1/variance) non-negative least squares over every measurement of the
   children, restricted to the parent's non-zero cells, children summing to the parent cell by
   cell, each child's constraints held. With ``first_pass`` queries (multipass), those are
   fitted first and then kept within a tolerance while the rest are fitted.
2. Rounding pass: integers closest in L1 to the L2 answer, consistent and within constraints.
   If no rounding within one unit of the L2 answer exists, the window widens to two.

An infeasible family raises ``solvers.InfeasibleError`` naming the node, or, with the failsafe,
relaxes consistency with the least L1 slack (an LP), solves against the relaxed parent and
reports the slack: never a silent wrong answer.

Each pass's problems go to the backend ``task.options.solver`` names for it (``auto`` for
those it declines, unless strict), and every pass returns its ``SolveStats``: a family's
statistics are their sum, with no result object written into along the way.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

import solvers
from constraints.constraint import LinearRows
from solvers import InfeasibleError, Problem, SolverError, SolveStatus
from solvers.builders import children_l2_problem, is_identity, rounding_problem, rounding_solution
from topdown.estimation import capture
from topdown.estimation.family_newton import newton_l2
from topdown.estimation.first_pass_limit import check_family_first_pass
from topdown.estimation.nested_rounding import refinement_chain
from topdown.estimation.passes import EstimateOptions, SolveStats, controlled_window
from topdown.estimation.root import root_round

__all__ = ["FamilyTask", "FamilyResult", "solve_family"]

log = logging.getLogger(__name__)

#: One measurement restricted to the support: (Q (m x n), Y (k x m), W (k x m) weights).
Measurement = tuple[sp.csr_matrix, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class FamilyTask:
    """The children of one parent (k = 1 and no parent values for the root).

    Attributes:
        level: the children's level.
        parent_label: label of the parent (``None`` for the root task).
        child_labels: labels of the k children.
        parent_values: parent's published counts on the support cells (None at the root).
        measurements: per query: (Q restricted to the support columns, Y (k x m), W (k x m)),
            W the per-answer weights (inverse variances, relative).
        support: the cells solved for (the parent's non-zero cells; at the root, the cells no
            constraint forces to zero); the children are zero elsewhere.
        first_pass: indices of the measurements fitted in the first pass (empty: one pass).
        held: the indices of those whose answers the second pass holds (None: all of
            ``first_pass``; ``LevelStrategy.held``).
        rows: the children's constraint rows over the joint vector (k * n columns, child-major,
            names prefixed with the child's label), or None without any.
        ub: upper bounds of the joint vector (0 on a child's structural zeros), or None.
        options: the estimation options (solver per pass, failsafe, tolerances).
        l2: the L2 answer (k x n) when the level-batched pass
            (``topdown.estimation.batched.families``) solved it; the failsafe, which changes
            the parent, solves its own.
    """

    level: int
    parent_label: str | None
    child_labels: tuple[str, ...]
    parent_values: np.ndarray | None
    measurements: tuple[Measurement, ...]
    support: np.ndarray
    first_pass: tuple[int, ...] = ()
    held: tuple[int, ...] | None = None
    rows: LinearRows | None = None
    ub: np.ndarray | None = None
    options: EstimateOptions = EstimateOptions()
    l2: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.support)

    @property
    def held_pass(self) -> tuple[int, ...]:
        """The indices of the first-pass measurements the second pass holds."""
        return self.first_pass if self.held is None else self.held

    @property
    def k(self) -> int:
        return len(self.child_labels)

    @property
    def where(self) -> str:
        if self.parent_label is None:
            return "level 0 (root)"
        return f"level {self.level}, children of {self.parent_label!r}"


@dataclass(frozen=True)
class FamilyResult:
    """Integer counts of the children on the support cells, and what it took to get them."""

    counts: np.ndarray
    stats: SolveStats = SolveStats(families=1)


def solve_family(task: FamilyTask) -> FamilyResult:
    """Run the L2 and rounding passes on one family (see the module docstring)."""
    if task.n == 0:
        return FamilyResult(np.zeros((task.k, 0), dtype=np.int64))
    if task.parent_values is not None and _is_trivial(task):
        return FamilyResult(task.parent_values.reshape(1, -1).astype(np.int64))
    parent = task.parent_values
    try:
        return _passes(task, parent, SolveStats(families=1))
    except InfeasibleError:
        if not task.options.failsafe or parent is None:
            raise
    relaxed, stats = _failsafe_parent(task, parent)
    return _passes(task, relaxed, stats + SolveStats(families=1))


def _passes(task: FamilyTask, parent: np.ndarray | None, stats: SolveStats) -> FamilyResult:
    if task.l2 is not None and parent is task.parent_values:
        x_tilde, l2 = task.l2, SolveStats()  # the level-batched pass solved it (and counts it)
    else:
        x_tilde, l2 = _l2(task, parent)
    counts, rounding = _round(task, x_tilde, parent)
    return FamilyResult(counts, stats + l2 + rounding)


def _is_trivial(task: FamilyTask) -> bool:
    """An only child with no constraints of its own is its parent."""
    return (
        task.k == 1
        and task.parent_values is not None
        and task.rows is None
        and (task.ub is None or bool(np.all(task.ub >= task.parent_values)))
    )


def _solve(problem: Problem, task: FamilyTask, pass_name: str) -> tuple[np.ndarray, SolveStats]:
    """One solve with the pass's backend (``auto`` for what it declines, unless strict)."""
    choice = task.options.solver
    with capture.recording(
        task.options.capture,
        problem,
        pass_name,
        level=task.level,
        node=task.parent_label,
        constrained=task.rows is not None,
    ) as record:
        res = solvers.solve(
            problem,
            solver=choice.for_pass(pass_name),
            strict=choice.strict,
            **task.options.solver_options,
        )
        record(res)
    return np.asarray(res.x, dtype=float), SolveStats.one_solve(pass_name, res.solver)


def _extra(rows: LinearRows | None) -> dict[str, Any]:
    """The builders' keyword arguments for extra rows."""
    if rows is None:
        return {}
    return {"extra_A": rows.A, "extra_lb": rows.lb, "extra_ub": rows.ub}


def _with(rows: LinearRows | None, more: LinearRows) -> LinearRows:
    return more if rows is None else LinearRows.stack([rows, more], more.n_cols)


def _coupled(measurements: tuple[Measurement, ...] | list[Measurement]) -> bool:
    """Any query other than the detailed histogram couples a child's cells."""
    return not all(is_identity(Q) for Q, _, _ in measurements)


def _l2(task: FamilyTask, parent: np.ndarray | None) -> tuple[np.ndarray, SolveStats]:
    """The L2 pass. Coupled strategies use the lifted form (one variable per answer of a
    marginal query), whose Hessian stays diagonal: the plain form's blocks Q'WQ are dense
    (a total query alone makes an n x n block per child)."""
    start = time.perf_counter()
    fast = _newton(task, parent)
    if fast is not None:
        x, solver = fast
        took = SolveStats(l2_time=time.perf_counter() - start)
        return np.maximum(x, 0.0), SolveStats.one_solve("l2", solver) + took
    rows = task.rows
    stats = SolveStats()
    if task.first_pass:
        first = [task.measurements[i] for i in task.first_pass]
        check_family_first_pass(
            task.where,
            len(first),
            len(task.measurements),
            task.k,
            task.n,
            sum(Q.shape[0] for Q, _, _ in first if not is_identity(Q)),  # lifted answers
            l2_solver=task.options.solver.l2,
        )
        problem = children_l2_problem(
            parent,
            first,
            k=task.k,
            n=task.n,
            ub=task.ub,
            name=f"{task.where} / L2 pass 1",
            lifted=_coupled(first),
            **_extra(rows),
        )
        x1, stats = _solve(problem, task, "l2")
        x1 = x1[: task.k * task.n].reshape(task.k, task.n)
        held = [task.measurements[i] for i in task.held_pass]
        rows = _with(rows, _keep_rows(held, x1, task.options.multipass_tolerance))
    # pass 2 fits the rest: the first pass's held queries enter as its held answers only
    # and the others not at all, as in the DAS's multipass
    # (``topdown.estimation.multipass_newton``'s sources)
    rest = [m for i, m in enumerate(task.measurements) if i not in task.first_pass]
    fitted = rest or list(task.measurements)
    problem = children_l2_problem(
        parent,
        fitted,
        k=task.k,
        n=task.n,
        ub=task.ub,
        name=f"{task.where} / L2 pass{' 2' if task.first_pass else ''}",
        lifted=_coupled(fitted),
        **_extra(rows),
    )
    x, last = _solve(problem, task, "l2")
    x = x[: task.k * task.n].reshape(task.k, task.n)
    took = SolveStats(l2_time=time.perf_counter() - start)
    # interior-point answers sit a hair outside the bounds; the rounding pass needs x >= 0
    return np.maximum(x, 0.0), stats + last + took


def _newton(task: FamilyTask, parent: np.ndarray | None) -> tuple[np.ndarray, str] | None:
    """The matrix-free L2 pass (``topdown.estimation.family_newton``) when the pass is left to
    ``auto``, no capture is asked for (a capture records the general problem) and nothing but
    the queries binds the family; None otherwise or when it does not settle."""
    options = task.options
    if options.solver.l2 != "auto" or options.capture is not None:
        return None
    if task.rows is not None:
        return None
    if task.ub is not None and not np.all(np.isinf(task.ub)):
        return None
    return newton_l2(
        parent,
        task.measurements,
        task.k,
        task.n,
        task.first_pass,
        options.multipass_tolerance,
        task.held_pass,
    )


def _round(
    task: FamilyTask, x_tilde: np.ndarray, parent: np.ndarray | None
) -> tuple[np.ndarray, SolveStats]:
    """The rounding pass: a one-unit window around the L2 answer, two if one cannot hold."""
    start = time.perf_counter()
    nested = _nested_root(task, x_tilde, parent)
    if nested is not None:
        took = SolveStats(round_time=time.perf_counter() - start)
        return nested, SolveStats.one_solve("rounding", "closed_form") + took
    if task.ub is not None:
        x_tilde = np.minimum(x_tilde, task.ub.reshape(task.k, task.n))
    rows = task.rows
    if task.options.controlled_rounding:
        rows = _with(rows, _total_rows(x_tilde, task.child_labels))
    stats = SolveStats()
    last: InfeasibleError | None = None
    for width in (1, 2):
        problem, floor = rounding_problem(
            x_tilde,
            parent,
            width=width,
            name=f"{task.where} / rounding pass (width {width})",
            **_extra(rows),
        )
        try:
            solution, solved = _solve_integral(problem, task)
        except InfeasibleError as err:
            last = err
            continue
        stats += solved
        counts = rounding_solution(solution, floor).reshape(task.k, task.n)
        if task.ub is not None and np.any(counts.reshape(-1) > task.ub):
            continue  # a wider window broke a structural zero: not an answer
        took = SolveStats(round_time=time.perf_counter() - start, widened=int(width > 1))
        return counts, stats + took
    if last is None:
        raise InfeasibleError(
            f"{task.where}: no rounding within two units of the L2 answer keeps the structural "
            "zeros",
            status=SolveStatus.INFEASIBLE,
            solver="rounding",
            problem=f"{task.where} / rounding pass",
        )
    raise last


def _nested_root(
    task: FamilyTask, x_tilde: np.ndarray, parent: np.ndarray | None
) -> np.ndarray | None:
    """The root's counts rounded along its nested marginals, as the batched root rounds them
    (``topdown.estimation.root.root_round`` with a chain), when the root is in the batched
    root's form: nothing attached but bounds on the total (no other rows, no structural zeros),
    one pass, the option on, and at least one measured marginal (a partition of the cells,
    weighted) besides the cells and the total. None otherwise: the general rounding."""
    if (
        parent is not None
        or task.ub is not None
        or task.first_pass
        or not task.options.nested_root_rounding
    ):
        return None
    lo, hi = -np.inf, np.inf
    if task.rows is not None:  # only bounds on the total (rows of ones over every cell)
        a = task.rows.A
        if not (np.all(a.getnnz(axis=1) == task.n) and np.all(a.data == 1.0)):
            return None
        lo, hi = float(task.rows.lb.max()), float(task.rows.ub.min())
    partitions = []
    for q, _, w in task.measurements:
        cols = sp.csc_matrix(q)
        one_each = np.array_equal(np.diff(cols.indptr), np.ones(task.n, dtype=np.int64))
        if one_each and np.all(cols.data == 1.0) and 1 < q.shape[0] < task.n and np.all(w > 0):
            partitions.append(cols.indices.astype(np.int64))
    chain = [partitions[i] for i in refinement_chain(partitions)]
    if not chain:
        return None
    counts = root_round(
        x_tilde.reshape(-1), lo, hi, controlled=task.options.controlled_rounding, chain=chain
    )
    return None if counts is None else counts.reshape(1, -1)


def _solve_integral(problem: Problem, task: FamilyTask) -> tuple[np.ndarray, SolveStats]:
    """Solve a rounding problem, as an LP when its rows are totally unimodular.

    Cell consistency and per-child totals form a bipartite incidence matrix (TU) and the
    window bounds and right-hand sides are integers, so a simplex vertex is integral and the
    LP is much cheaper than branch and bound. User rows can break that, so a family with
    rows of its own goes straight to the integer program; without them the LP answer is still
    checked and the integer program solved if it is fractional.
    """
    tried = SolveStats()
    if task.rows is None and problem.integrality is not None:
        relaxed = dataclasses.replace(problem, integrality=None)
        try:
            x, tried = _solve(relaxed, task, "rounding")
        except SolverError:
            x = None
        if x is not None and np.max(np.abs(x - np.round(x)), initial=0.0) < 1e-7:
            return np.round(x), tried
    x, stats = _solve(problem, task, "rounding")
    return x, tried + stats


def _total_rows(x_tilde: np.ndarray, labels: tuple[str, ...]) -> LinearRows:
    """Controlled rounding (Cox 1987): each child's total stays between the floor and the
    ceiling of its L2 total. Independent cell rounding lets totals drift: an L2 answer that
    shifts every cell by -0.1 rounds every cell up. With the cell-by-cell consistency rows these
    rows form a bipartite incidence matrix, which is totally unimodular, so the rounding LP
    stays integral."""
    k, n = x_tilde.shape
    totals = x_tilde.sum(axis=1)
    A = sp.kron(sp.identity(k, format="csr"), np.ones((1, n)), format="csr")
    names = tuple(f"{label}: total within a unit of its L2 total" for label in labels)
    return LinearRows(A, *controlled_window(totals), names)


def _keep_rows(first: list[Measurement], x1: np.ndarray, tol: float) -> LinearRows:
    """Rows keeping each first-pass query's answers within ``tol`` of pass 1's answers."""
    k = x1.shape[0]
    blocks, lbs, ubs = [], [], []
    for Q, _, _ in first:
        blocks.append(sp.kron(sp.identity(k, format="csr"), Q, format="csr"))
        answers = np.concatenate([Q @ x1[c] for c in range(k)])
        lbs.append(answers - tol)
        ubs.append(answers + tol)
    lb = np.concatenate(lbs)
    names = ("first-pass answer kept within the multipass tolerance",) * lb.size
    return LinearRows(sp.vstack(blocks, format="csr"), lb, np.concatenate(ubs), names)


def _failsafe_parent(task: FamilyTask, parent: np.ndarray) -> tuple[np.ndarray, SolveStats]:
    """The parent values nearest (L1) to the published ones that the children can meet.

    LP: variables x (k n) >= 0 and slacks s+, s- (n each) >= 0, minimise sum(s+ + s-) subject to
    sum_c x_c + s+ - s- = parent and the children's constraint rows. The slack is rounded to
    integers (the parent's counts are integers) and reported.
    """
    k, n = task.k, task.n
    consistency = sp.hstack(
        [sp.kron(np.ones((1, k)), sp.identity(n), format="csr"), sp.identity(n), -sp.identity(n)],
        format="csr",
    )
    A_blocks, lb, ub = [consistency], [parent.astype(float)], [parent.astype(float)]
    if task.rows is not None:
        rows = task.rows
        A_blocks.append(sp.hstack([rows.A, sp.csr_matrix((rows.n_rows, 2 * n))], format="csr"))
        lb.append(rows.lb)
        ub.append(rows.ub)
    var_ub = np.full(k * n + 2 * n, np.inf)
    if task.ub is not None:
        var_ub[: k * n] = task.ub
    problem = Problem(
        c=np.concatenate([np.zeros(k * n), np.ones(2 * n)]),
        lb=np.zeros(k * n + 2 * n),
        ub=var_ub,
        A=sp.csr_matrix(sp.vstack(A_blocks, format="csr")),
        row_lb=np.concatenate(lb),
        row_ub=np.concatenate(ub),
        name=f"{task.where} / failsafe slack LP",
    )
    sol, stats = _solve(problem, task, "failsafe")
    s_plus, s_minus = sol[k * n : k * n + n], sol[k * n + n :]
    relaxed = np.maximum(np.rint(parent - s_plus + s_minus).astype(np.int64), 0)
    slack = float(np.abs(relaxed - parent).sum())
    names = list(dict.fromkeys(task.rows.names))[:5] if task.rows is not None else []
    note = (
        f"{task.where}: constraints {names} cannot hold with the children summing to the "
        f"parent; consistency relaxed by {slack:g} unit(s) in "
        f"{int(np.count_nonzero(relaxed - parent))} cell(s)"
    )
    log.warning("failsafe: %s", note)
    return relaxed, stats + SolveStats(failsafe=(note,), failsafe_slack=slack)
