"""Seeded random instances that mimic one TopDown parent and its k children.

True child histograms are sparse Poisson counts (a log-normal rate per cell, so many cells are
empty), the parent is their sum, and every query answer gets Gaussian noise with its own
variance. The n cells are a product domain so marginal queries make sense:

    64    = 4 x 4 x 4
    2016  = 2 x 7 x 144     (sex x race x age-like)
    10000 = 4 x 25 x 100

Other n fall back to a single attribute. The coupled strategy per child is: detailed, total,
every one-attribute marginal and the two-attribute marginal of the first two attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers import Problem, children_l2_problem, rounding_problem

__all__ = ["DIMS", "Instance", "children_instance", "marginal_matrix", "rounding_instance"]

DIMS: dict[int, tuple[int, ...]] = {64: (4, 4, 4), 2016: (2, 7, 144), 10_000: (4, 25, 100)}


@dataclass(frozen=True)
class Instance:
    """One benchmark problem with its family label and shape."""

    family: str
    k: int
    n: int
    problem: Problem


def marginal_matrix(dims: tuple[int, ...], keep: tuple[int, ...]) -> sp.csr_matrix:
    """Marginal over attributes ``keep`` as ``kron`` of identities (kept) and ones rows."""
    mat = sp.csr_matrix(np.ones((1, 1)))
    for a, size in enumerate(dims):
        factor = sp.identity(size, format="csr") if a in keep else sp.csr_matrix(np.ones((1, size)))
        mat = sp.kron(mat, factor, format="csr")
    return mat


def _truth(k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    rate = np.exp(rng.normal(-0.5, 1.5, n))
    rate[rng.random(n) < 0.5] = 0.0
    return rng.poisson(rate[None, :] * rng.uniform(0.5, 2.0, (k, 1))).astype(float)


def _seed(*parts: object) -> int:
    return int(
        np.frombuffer(repr(parts).encode(), dtype=np.uint8).astype(np.uint64).sum() * 7919 % 2**31
    )


def children_instance(k: int, n: int, *, coupled: bool, seed: int | None = None) -> Instance:
    """The L2 children problem: detailed-only (separable) or the coupled strategy (lifted)."""
    rng = np.random.default_rng(_seed("l2", k, n, coupled) if seed is None else seed)
    true = _truth(k, n, rng)
    parent = true.sum(axis=0)
    dims = DIMS.get(n, (n,))
    queries = [tuple(range(len(dims)))]
    if coupled:
        queries += [()] + [(a,) for a in range(len(dims))] + ([(0, 1)] if len(dims) > 2 else [])
    measurements = []
    for keep in queries:
        Q = marginal_matrix(dims, keep)
        answers = (Q @ true.T).T
        # Variance per query and, for the detailed query, per child (unequal budgets).
        sigma = (
            rng.uniform(0.5, 3.0, k) if keep == queries[0] else np.full(k, rng.uniform(0.5, 3.0))
        )
        noisy = answers + rng.normal(0.0, 1.0, answers.shape) * sigma[:, None]
        measurements.append((Q, noisy, 1.0 / sigma**2))
    family = "L2 coupled" if coupled else "L2 separable"
    problem = children_l2_problem(
        parent, measurements, k=k, n=n, lifted=coupled, name=f"{family} k={k} n={n}"
    )
    return Instance(family, k, n, problem)


def rounding_instance(
    k: int, n: int, *, capped: bool = False, controlled: bool = False, seed: int | None = None
) -> Instance:
    """The rounding problem of a separable L2 solution: consistency only (TU), with caps, or
    controlled (the engine's default).

    The caps are one row per child: its total over the cells of the first attribute's first
    value may not exceed the ceiling of its L2 estimate there, which binds for some children
    and turns the problem into a genuine MILP (no longer a partition). Controlled rounding adds
    one row per child keeping its total between the floor and the ceiling of its L2 total: with
    the consistency rows a bipartite (transportation) structure, still TU.
    """
    from solvers.backends.closed_form import ClosedFormBackend

    l2 = children_instance(k, n, coupled=False, seed=seed)
    parent = np.asarray(l2.problem.row_lb, dtype=float)
    x_tilde = np.maximum(ClosedFormBackend().solve(l2.problem).x.reshape(k, n), 0.0)
    extra_A = extra_ub = None
    if capped:
        dims = DIMS.get(n, (n,))
        cells = np.zeros(n)
        cells[: n // dims[0]] = 1.0
        extra_A = sp.kron(sp.identity(k), sp.csr_matrix(cells[None, :]), format="csr")
        extra_ub = np.ceil(x_tilde @ cells - 1e-9)
    extra_lb = None
    if controlled:
        totals = x_tilde.sum(axis=1)
        extra_A = sp.kron(sp.identity(k), sp.csr_matrix(np.ones((1, n))), format="csr")
        extra_lb, extra_ub = np.floor(totals + 1e-9), np.ceil(totals - 1e-9)
    family = "round controlled" if controlled else "round capped" if capped else "round TU"
    problem, _ = rounding_problem(
        x_tilde,
        parent,
        extra_A=extra_A,
        extra_lb=extra_lb,
        extra_ub=extra_ub,
        name=f"{family} k={k} n={n}",
    )
    return Instance(family, k, n, problem)
