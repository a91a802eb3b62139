"""Randomized response matrices, their inverses, simplex projection and invariant PRAM.

The steps of DP2-Pub's publication phase, each on its own:

- :func:`grr_inverse`: the inverse of the k-ary randomized-response matrix
  Q = (p - q) I + q J (rows: true value, columns: report), which is (I - q J) / (p - q)
  because p + (k - 1) q = 1.
- :func:`estimate_distribution`: the true distribution of a compound variable from the
  counts of its reports, when each component was randomized independently (Q is the
  Kronecker product of the components' matrices, so its inverse is applied axis by axis),
  then the Euclidean projection onto the probability simplex. Projection, not "shift by
  the minimum and renormalise": the latter is not an inverse any more and biases the
  estimate towards uniform.
- :func:`maximum_likelihood_distribution`: the same inverse constrained to the simplex by
  likelihood instead of Euclidean distance (EM, the "iterative Bayesian update"). When the
  plain inverse already lies in the simplex it is the maximum-likelihood estimate and both
  agree; when it does not (small budgets, many cells) the projection zeroes whole groups of
  cells and puts their mass on the rest, while the likelihood keeps mass wherever the reports
  support it, which for a compound variable of many cells is a far smaller error.
- :func:`post_randomization_matrix`: invariant PRAM's Q'[j, i] = pi_i Q[i, j] / lambda_j,
  lambda = pi Q, so that post-randomizing the reports with Q' leaves a data set whose
  expected distribution is pi (lambda Q' = pi).
- :func:`post_randomize`: draw each record's released value from its report's row of Q'.

The post-randomization draws are floating-point sampling of post-processing (no privacy
cost); the client-side reports are exact (:func:`mechanisms.randomized_response`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.randomized_response import rr_probabilities, transition_matrix
from topdown.estimation.nested_passes import group_simplex

__all__ = [
    "grr_inverse",
    "compound_matrix",
    "project_simplex",
    "estimate_distribution",
    "maximum_likelihood_distribution",
    "ESTIMATORS",
    "post_randomization_matrix",
    "post_randomize",
]

Factors = Sequence[tuple[int, object]]
"""(domain size, epsilon) of each independently randomized component, in axis order."""


def grr_inverse(k: int, epsilon: object) -> np.ndarray:
    """The inverse of the k-ary randomized-response matrix: (I - q J) / (p - q)."""
    p, q = rr_probabilities(k, epsilon)
    return (np.eye(k) - q) / (p - q)


def compound_matrix(factors: Factors) -> np.ndarray:
    """Q of the compound variable: the Kronecker product of the components' matrices."""
    matrix = np.ones((1, 1))
    for k, epsilon in factors:
        matrix = np.kron(matrix, transition_matrix(k, epsilon))
    return matrix


def project_simplex(v: np.ndarray) -> np.ndarray:
    """The Euclidean projection of ``v`` onto {x >= 0, sum x = 1} (sort-based algorithm of
    Held, Wolfe & Crowder 1974; see also Duchi et al. 2008)."""
    v = np.asarray(v, dtype=float).reshape(-1)
    # one group of total 1: the engine's grouped projection (the same sort-based threshold)
    return group_simplex(v, np.zeros(v.size, dtype=np.int64), np.ones(1))


def _apply_q(table: np.ndarray, factors: Factors) -> np.ndarray:
    """``table`` (one axis per component) times the compound Q, axis by axis: each GRR
    matrix (p - q) I + q J is symmetric, so this is both pi Q and Q v."""
    out = table
    for axis, (k, epsilon) in enumerate(factors):
        if k == 1:
            continue
        p, q = rr_probabilities(k, epsilon)
        out = (p - q) * out + q * out.sum(axis=axis, keepdims=True)
    return out


def estimate_distribution(
    counts: np.ndarray, factors: Factors, estimator: str = "projection"
) -> np.ndarray:
    """The compound variable's true distribution from its report counts (shape: the
    components' sizes): the inverse of Q applied axis by axis, then brought onto the simplex
    by Euclidean projection (``estimator="projection"``) or by likelihood
    (``estimator="mle"``, :func:`maximum_likelihood_distribution`)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator ({estimator!r}) must be one of {ESTIMATORS}")
    if estimator == "mle":
        return maximum_likelihood_distribution(counts, factors)
    table = np.asarray(counts, dtype=float)
    total = table.sum()
    if total <= 0:
        return np.full(table.shape, 1.0 / table.size)
    freq = table / total
    for axis, (k, epsilon) in enumerate(factors):
        p, q = rr_probabilities(k, epsilon)
        if k == 1:
            continue
        # (I - qJ)/(p - q) along this axis: subtract q times the axis sum
        freq = (freq - q * freq.sum(axis=axis, keepdims=True)) / (p - q)
    return project_simplex(freq.reshape(-1)).reshape(table.shape)


def maximum_likelihood_distribution(
    counts: np.ndarray,
    factors: Factors,
    *,
    tolerance: float = 1e-9,
    max_iterations: int = 2_000,
) -> np.ndarray:
    """The distribution pi on the simplex that maximises the likelihood of the report
    counts, sum_j n_j log (pi Q)_j, by expectation-maximisation from the uniform start:
    pi <- pi * Q (f / (pi Q)), f the report frequencies (every step stays on the simplex and
    never lowers the likelihood). Stops when no cell moves by more than ``tolerance``, or
    after ``max_iterations`` steps: EM crawls where the likelihood is flat (reports of a
    tiny budget), and stopping there leaves the estimate nearer uniform, as uncertain as it is.

    Q is applied axis by axis (:func:`_apply_q`), so a step costs a few passes over the
    table, never the full compound matrix.
    """
    table = np.asarray(counts, dtype=float)
    total = table.sum()
    if total <= 0:
        return np.full(table.shape, 1.0 / table.size)
    freq = table / total
    # start at the projected inverse (mixed with 1% uniform: EM never revives an empty
    # cell), so a run stopped early sits near the plain inverse, not near uniform
    start = estimate_distribution(table, factors, "projection")
    pi = 0.99 * start + 0.01 / table.size
    for _ in range(max_iterations):
        lam = _apply_q(pi, factors)
        ratio = np.divide(freq, lam, out=np.zeros_like(freq), where=lam > 0)
        new = pi * _apply_q(ratio, factors)
        new /= new.sum()
        done = float(np.abs(new - pi).max()) < tolerance
        pi = new
        if done:
            break
    # mass EM is still draining from cells the likelihood empties (its approach to the
    # boundary is geometric, never exact) is dropped, so those cells stay empty
    pi = np.where(pi < tolerance, 0.0, pi)
    return pi / pi.sum()


ESTIMATORS = ("projection", "mle")
"""How :func:`estimate_distribution` brings the inverse onto the simplex."""


def post_randomization_matrix(q_matrix: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """Q'[j, i] = pi_i Q[i, j] / lambda_j with lambda = pi Q (a report never seen under pi
    gets the row pi itself)."""
    pi = np.asarray(pi, dtype=float).reshape(-1)
    joint = pi[:, None] * q_matrix  # P(true i, report j)
    lam = joint.sum(axis=0)
    out = np.where(lam[None, :] > 0, joint / np.where(lam > 0, lam, 1.0)[None, :], pi[:, None])
    return out.T


def post_randomize(
    reports: np.ndarray, pi: np.ndarray, factors: Factors, rng: np.random.Generator
) -> np.ndarray:
    """Released codes: each flat compound report j replaced by a draw from row j of Q'.

    Rows are built only for the reports that occur (one Kronecker column each), so the cost
    is (distinct reports) x (compound domain), never the full matrix. With one component
    the row has a closed form: keep j with probability (p - q) pi_j / lambda_j, else draw
    from pi.
    """
    reports = np.asarray(reports, dtype=np.int64).reshape(-1)
    pi = np.asarray(pi, dtype=float).reshape(-1)
    out = np.empty_like(reports)
    if len(factors) == 1:
        k, epsilon = factors[0]
        p, q = rr_probabilities(k, epsilon)
        lam = q + (p - q) * pi
        keep = rng.random(reports.size) < (p - q) * pi[reports] / lam[reports]
        draws = rng.choice(pi.size, size=reports.size, p=pi / pi.sum())
        return np.where(keep, reports, draws)
    sizes = [k for k, _ in factors]
    matrices = [transition_matrix(k, eps) for k, eps in factors]
    for j in np.unique(reports):
        parts = np.unravel_index(int(j), sizes)
        column = np.ones(1)
        for matrix, part in zip(matrices, parts, strict=True):
            column = np.kron(column, matrix[:, part])
        row = pi * column
        row = row / row.sum() if row.sum() > 0 else pi / pi.sum()
        where = np.flatnonzero(reports == j)
        out[where] = rng.choice(pi.size, size=where.size, p=row)
    return out
