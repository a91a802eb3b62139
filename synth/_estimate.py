"""Measure noisy marginal tables of the root and estimate consistent integer tables from them.

This is the flat, one-level tree of DESIGN.md ("The simpler generators as flat trees"): the
confidential records are read once, here, to answer a list of marginal queries with exact
discrete noise; everything after :func:`measure_marginals` is post-processing.

:func:`consistent_tables` is the estimator. Its variables are the marginal tables themselves,
stacked; the objective is the inverse-variance weighted squared distance to the noisy answers
(non-negative variables), and equality rows tie every pair of tables on the sub-marginal
they share (the total when they share no attribute). The weighted least-squares problem is
built by :func:`solvers.children_l2_problem` (one node, identity query) and the integer
rounding by :func:`solvers.rounding_problem`, both solved through :func:`solvers.solve`, so
the backend is the registry's choice as for TopDown itself.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

import solvers
from mechanisms.accounting import ZCDP, Budget, PureDP, split
from mechanisms.discrete import make_mechanism, sensitivity
from mechanisms.ledger import Ledger
from synth._domains import SynthError

__all__ = [
    "Measurement",
    "histogram",
    "measure_marginals",
    "consistent_tables",
    "weighted_least_squares",
    "marginalize",
    "MECHANISM_KINDS",
    "split_budget",
    "total_budget",
    "largest_remainder",
    "consistency_rows",
]

logger = logging.getLogger(__name__)

#: Noise for counts, by name, and the budget kind each spends.
MECHANISM_KINDS: dict[str, type[PureDP] | type[ZCDP]] = {
    "discrete_laplace": PureDP,
    "discrete_gaussian": ZCDP,
}


@dataclass(frozen=True)
class Measurement:
    """One noisy marginal: the attributes (positions), the noisy integer table, its variance."""

    attrs: tuple[int, ...]
    noisy: np.ndarray
    variance: float


def histogram(codes: np.ndarray, sizes: Sequence[int], attrs: Sequence[int]) -> np.ndarray:
    """The contingency table of ``codes[:, attrs]`` (shape: the attributes' domain sizes)."""
    shape = tuple(int(sizes[a]) for a in attrs)
    if not attrs:
        return np.array(codes.shape[0], dtype=np.int64)
    flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape).astype(np.int64)


def marginalize(table: np.ndarray, attrs: Sequence[int], keep: Sequence[int]) -> np.ndarray:
    """Sum ``table`` (over ``attrs``) down to the attributes ``keep``, in ``keep``'s order."""
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    reduced = table.sum(axis=axes)
    remaining = [a for a in attrs if a in keep]
    return np.transpose(reduced, [remaining.index(a) for a in keep])


#: The most cells the tables of one generator may hold in all: every cell is a variable of the
#: estimation (about BYTES_PER_CELL of memory there), so more would end in an allocation error
#: or a solve of hours; a crosstab of a few wide columns reaches it quickly (5,000 x 5,000 x 2).
MAX_TABLE_CELLS = 10_000_000
BYTES_PER_CELL = 200


def check_cells(
    sizes: Sequence[int], marginals: Sequence[tuple[int, ...]], names: Sequence[str]
) -> None:
    """Refuse tables whose cells would not fit, before any is allocated (exact integers).

    Raises:
        SynthError: naming the largest table, its columns' sizes, its cells and the memory.
    """
    cells = [math.prod(int(sizes[a]) for a in attrs) for attrs in marginals]
    total = sum(cells)
    if total <= MAX_TABLE_CELLS:
        return
    big = max(range(len(cells)), key=cells.__getitem__)
    shape = " x ".join(str(int(sizes[a])) for a in marginals[big]) or "1"
    raise SynthError(
        f"{names[big]}: the table has {cells[big]:,} cells ({shape} values)"
        + (f", {total:,} with the other tables" if total != cells[big] else "")
        + f"; at most {MAX_TABLE_CELLS:,} are measured (each is a variable of the estimation, "
        f"about {_size(total * BYTES_PER_CELL)} of memory here); measure fewer columns, or "
        "declare coarser domains (bins) for the wide ones"
    )


def unbiased_total(measurements: Sequence[Measurement]) -> int:
    """The number of records estimated from the noisy tables' raw sums, each unbiased (the
    noise has mean 0), combined with inverse-variance weights (a table of c cells sums c
    independent noises: variance c * var); rounded, at least 0. Post-processing only.

    The non-negative tables' sum is not it: on a wide sparse table the least-squares fit keeps
    every positive noise and clips every negative one, so the sum gains about
    E[max(0, noise)] per cell (300 records over two 20,000-value columns gave 57,592).
    """
    weights = [1.0 / (m.variance * m.noisy.size) for m in measurements]
    sums = [float(m.noisy.sum(dtype=np.int64)) for m in measurements]
    estimate = sum(w * t for w, t in zip(weights, sums, strict=True)) / sum(weights)
    return max(0, round(estimate))


def check_cell_cap(value: int, name: str) -> int:
    """Refuse a generator's cap on its tables' cells above :data:`MAX_TABLE_CELLS`: a cap is a
    promise that no larger table is built, so it cannot exceed the bound the tables are held to.

    Raises:
        SynthError: naming the argument, its value and the bound.
    """
    if value > MAX_TABLE_CELLS:
        raise SynthError(
            f"{name} ({value:,}) must be at most {MAX_TABLE_CELLS:,} cells: larger tables "
            "would not fit in memory (see MAX_TABLE_CELLS)"
        )
    return value


def _size(n_bytes: int) -> str:
    """A byte count for a message (decimal units)."""
    value = float(n_bytes)
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} TB"


def measure_marginals(
    codes: np.ndarray,
    sizes: Sequence[int],
    marginals: Sequence[tuple[int, ...]],
    budgets: Sequence[Budget],
    *,
    names: Sequence[str],
    ledger: Ledger,
    rng: np.random.Generator,
    mechanism: str = "discrete_laplace",
    neighbouring: str = "add_remove",
    note: str = "",
) -> list[Measurement]:
    """Answer each marginal query on the confidential codes with exact discrete noise.

    Under add/remove neighbours one person changes one cell of a marginal by one (L1 = L2 =
    1); under replace-one, two cells (L1 = 2, L2^2 = 2), from :func:`mechanisms.sensitivity`.
    Each query costs its budget; the queries compose sequentially (one ledger entry each, at
    level 0).
    """
    check_cells(sizes, marginals, names)  # before any table is allocated
    l1, l2_squared = sensitivity(neighbouring)
    out = []
    for attrs, budget, name in zip(marginals, budgets, names, strict=True):
        if mechanism == "discrete_gaussian":
            noise = make_mechanism(mechanism, budget, l2_sensitivity_squared=l2_squared)
            recorded = l2_squared
        else:
            noise = make_mechanism(mechanism, budget, l1)
            recorded = l1
        true = histogram(codes, sizes, attrs)
        noisy = noise.release(true.reshape(-1), rng).reshape(true.shape)
        ledger.record(name, 0, noise.name, budget, sensitivity=recorded, note=note)
        out.append(Measurement(tuple(attrs), noisy, float(noise.variance)))
    return out


def total_budget(epsilon: Fraction, mechanism: str) -> Budget:
    """The budget a generator spends: epsilon-DP for the discrete Laplace; for the discrete
    Gaussian, the rho = epsilon^2 / 2 zCDP that epsilon-DP implies (the guarantee is then
    rho-zCDP, not epsilon-DP; the ledger says so)."""
    if mechanism not in MECHANISM_KINDS:
        raise SynthError(f"mechanism ({mechanism!r}) must be one of {sorted(MECHANISM_KINDS)}")
    pure = PureDP(epsilon)
    return pure if mechanism == "discrete_laplace" else pure.to_zcdp()


def split_budget(epsilon: Fraction, mechanism: str, shares: Sequence[Fraction]) -> list[Budget]:
    """The total budget (see :func:`total_budget`) cut into exact shares summing to it."""
    return list(split(total_budget(epsilon, mechanism), list(shares)))


def _projection(attrs: Sequence[int], sizes: Sequence[int], keep: Sequence[int]) -> sp.csr_matrix:
    """Matrix mapping the flattened table over ``attrs`` to its marginal over ``keep``."""
    shape = tuple(int(sizes[a]) for a in attrs)
    n = int(np.prod(shape)) if shape else 1
    if not keep:
        return sp.csr_matrix(np.ones((1, n)))
    cells = np.unravel_index(np.arange(n), shape) if shape else ()
    keep_shape = tuple(int(sizes[a]) for a in keep)
    rows = np.ravel_multi_index(tuple(cells[list(attrs).index(a)] for a in keep), keep_shape)
    m = int(np.prod(keep_shape))
    return sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(m, n))


def consistency_rows(attr_sets: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> sp.csr_matrix:
    """Rows ``M_S x_t - M_S x_s = 0`` tying table t to earlier tables on what they share.

    For each table, one earlier table is chosen per maximal shared attribute set (the total
    when nothing is shared), which is enough for consistency: a sub-marginal of a tied set is
    tied through it.
    """
    offsets = np.cumsum([0] + [int(np.prod([sizes[a] for a in s])) for s in attr_sets])
    blocks: list[sp.csr_matrix] = []
    for t in range(1, len(attr_sets)):
        shared: dict[frozenset[int], int] = {}
        for s in range(t):
            key = frozenset(attr_sets[t]) & frozenset(attr_sets[s])
            shared.setdefault(key, s)
        maximal = [k for k in shared if not any(k < other for other in shared)]
        for key in maximal:
            s = shared[key]
            keep = [a for a in attr_sets[t] if a in key]
            left = _projection(attr_sets[t], sizes, keep)
            right = _projection(attr_sets[s], sizes, keep)
            parts = [
                sp.csr_matrix((left.shape[0], int(offsets[t]))),
                left,
                sp.csr_matrix((left.shape[0], int(offsets[-1] - offsets[t + 1]))),
            ]
            pos = sp.hstack(parts, format="csr")
            parts = [
                sp.csr_matrix((right.shape[0], int(offsets[s]))),
                right,
                sp.csr_matrix((right.shape[0], int(offsets[-1] - offsets[s + 1]))),
            ]
            blocks.append(sp.csr_matrix(pos - sp.hstack(parts, format="csr")))
    if not blocks:
        return sp.csr_matrix((0, int(offsets[-1])))
    return sp.csr_matrix(sp.vstack(blocks))


#: The largest noisy answer the L2 pass's solver sees (see ``weighted_least_squares``).
L2_SCALE = 1e5


def weighted_least_squares(
    measurements: Sequence[Measurement],
    sizes: Sequence[int],
    *,
    name: str = "synth",
    solver: str = "auto",
) -> tuple[np.ndarray, sp.csr_matrix]:
    """The L2 pass of :func:`consistent_tables`: stacked non-negative tables (floats) at
    minimal inverse-variance weighted squared distance to the noisy ones, tied on every
    shared sub-marginal; and the consistency rows that tie them."""
    attr_sets = [m.attrs for m in measurements]
    y = np.concatenate([m.noisy.reshape(-1).astype(float) for m in measurements])
    w = np.concatenate([np.full(m.noisy.size, 1.0 / max(m.variance, 1e-12)) for m in measurements])
    # scale the weights so the largest is 1: the solver's tolerances are relative to them
    w = w / w.max()
    n = y.size
    # scale the answers so the largest is at most L2_SCALE (no change below it, where every
    # solver copes): the constraints (x >= 0, equal shared sub-marginals) are homogeneous and
    # the objective quadratic, so the minimiser of the scaled problem times the scale is the
    # minimiser of the original. Without it the noise at the bottom of the epsilon range
    # (answers of ~1e6-1e7 at epsilon 1e-6) left the interior point solvers' tolerances behind
    # and CLARABEL reported the problem "unbounded".
    scale = max(1.0, float(np.abs(y).max(initial=0.0)) / L2_SCALE)
    rows = consistency_rows(attr_sets, sizes)
    extra = rows if rows.shape[0] else None
    zeros = np.zeros(rows.shape[0])
    problem = solvers.children_l2_problem(
        None,
        [(sp.identity(n, format="csr"), (y / scale).reshape(1, n), w.reshape(1, n))],
        k=1,
        n=n,
        extra_A=extra,
        extra_lb=zeros if extra is not None else None,
        extra_ub=zeros if extra is not None else None,
        name=f"{name} / L2 pass",
    )
    return np.maximum(solvers.solve(problem, solver).x[:n], 0.0) * scale, rows


def consistent_tables(
    measurements: Sequence[Measurement],
    sizes: Sequence[int],
    *,
    name: str = "synth",
    solver: str = "auto",
) -> list[np.ndarray]:
    """Non-negative, integer tables that agree on every shared sub-marginal.

    Step 1 (L2, :func:`weighted_least_squares`): minimise ``sum_t (1 / var_t) ||x_t - y_t||^2``
    over ``x >= 0`` with the consistency rows. Step 2 (L1): round to integers at minimal L1
    distance with the same rows (rounding window 1, then 2 if that is infeasible). If both
    fail (overlapping tables whose shared cells cannot all be rounded alike) or the integer
    program runs out of time, each cell is rounded on its own and a warning says the tables
    are then consistent only up to rounding.
    """
    x, rows = weighted_least_squares(measurements, sizes, name=name, solver=solver)
    extra = rows if rows.shape[0] else None
    counts = _round(x, extra, np.zeros(rows.shape[0]), name, solver)
    out = []
    start = 0
    for m in measurements:
        out.append(counts[start : start + m.noisy.size].reshape(m.noisy.shape))
        start += m.noisy.size
    return out


def _round(
    x: np.ndarray,
    rows: sp.csr_matrix | None,
    zeros: np.ndarray,
    name: str,
    solver: str,
    time_limit: float = 20.0,
) -> np.ndarray:
    """Integer counts near ``x`` satisfying ``rows @ counts == 0`` (see consistent_tables)."""
    if rows is None:
        return _largest_remainder_flat(x)
    for width in (1, 2):
        problem, floor = solvers.rounding_problem(
            x.reshape(1, -1),
            None,
            extra_A=rows,
            extra_lb=zeros,
            extra_ub=zeros,
            width=width,
            name=f"{name} / rounding pass (width {width})",
        )
        try:
            result = solvers.solve(problem, solver, time_limit=time_limit)
        except solvers.InfeasibleError:
            continue
        except solvers.SolverLimitError:
            break
        return solvers.rounding_solution(result.x, floor)
    logger.warning(
        "%s: no integer rounding keeping every shared sub-marginal equal was found (infeasible "
        "or over %g s); cells rounded one by one (consistent up to rounding)",
        name,
        time_limit,
    )
    return np.round(x).astype(np.int64)


def _largest_remainder_flat(x: np.ndarray) -> np.ndarray:
    """Round a non-negative vector to integers preserving its rounded sum."""
    return largest_remainder(x, int(round(float(x.sum()))))


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (largest-remainder method).

    Ties between equal remainders go to the earlier cell, so the result is deterministic.
    """
    w = np.maximum(np.asarray(weights, dtype=float).reshape(-1), 0.0)
    if total < 0:
        raise ValueError(f"total ({total}) must be >= 0")
    if w.size == 0:
        return np.zeros(0, dtype=np.int64)
    s = w.sum()
    if s <= 0:
        w = np.ones_like(w)
        s = w.sum()
    quota = w * (total / s)
    base = np.floor(quota).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        order = np.argsort(-(quota - base), kind="stable")
        base[order[:short]] += 1
    elif short < 0:  # float error only; take from the largest cells
        order = np.argsort(-base, kind="stable")
        base[order[:-short]] -= 1
    return base
