"""k-ary randomized response (local differential privacy) and its unbiased frequency estimator.

Each person's value v from a domain of k values is reported as v with probability
p = e^eps / (e^eps + k - 1) and as each other value with probability q = 1 / (e^eps + k - 1),
which is epsilon-local-DP because p / q = e^eps.

Exact sampling (no float decides a report), for rational epsilon: propose J uniformly from
the k values (an unbiased integer); accept J if it is the true value, or else with
probability exp(-eps) (an exact Bernoulli(exp(-eps)), CKS20 Algorithm 1); otherwise propose
again. An accepted report equals the true value with weight 1 and each other value with
weight e^-eps, i.e. with probabilities p and q above. Each round accepts with probability
(1 + (k-1) e^-eps) / k >= 1 / k, and all pending people are handled in one vectorised round.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from mechanisms.errors import BudgetError, MechanismError
from mechanisms.exact import as_fraction
from mechanisms.rng import make_rng
from mechanisms.samplers import sample_bernoulli_exp

__all__ = [
    "randomized_response",
    "estimate_frequencies",
    "rr_probabilities",
    "transition_matrix",
]

logger = logging.getLogger(__name__)


def _domain_index(domain: Sequence[Hashable]) -> dict[Hashable, int]:
    """Map each domain value to its code, refusing an empty domain or repeated values."""
    values = list(domain)
    if not values:
        raise MechanismError("domain ([]) must not be empty")
    index: dict[Hashable, int] = {}
    for code, value in enumerate(values):
        if value in index:
            raise MechanismError(f"domain has the value {value!r} more than once")
        index[value] = code
    return index


def _encode(
    values: Any, index: dict[Hashable, int], name: str
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Codes of ``values`` in the domain, refusing any value outside it."""
    array = np.asarray(values, dtype=object)
    codes = np.empty(array.size, dtype=np.int64)
    for position, value in enumerate(array.ravel().tolist()):
        code = index.get(value)
        if code is None:
            raise MechanismError(f"{name} has the value {value!r}, which is not in the domain")
        codes[position] = code
    return codes, array.shape


def _decode(codes: np.ndarray, domain: Sequence[Hashable], shape: tuple[int, ...]) -> np.ndarray:
    """Domain values at ``codes``, as a typed array when numpy can hold the domain flat."""
    domain_array = np.asarray(list(domain))
    if domain_array.ndim != 1:
        domain_array = np.empty(len(domain), dtype=object)
        domain_array[:] = list(domain)
    return domain_array[codes].reshape(shape)


def rr_probabilities(domain_size: int, epsilon: object) -> tuple[float, float]:
    """(p, q): the probabilities of reporting the true value and one given other value.

    Computed as p = 1 / (1 + (k-1) e^-eps), q = e^-eps p, which does not overflow for large
    epsilon. For k = 1, (1.0, 0.0).
    """
    if isinstance(domain_size, bool) or not isinstance(domain_size, int) or domain_size < 1:
        raise MechanismError(f"domain_size ({domain_size!r}) must be an integer >= 1")
    eps = float(as_fraction(epsilon, "epsilon", error=BudgetError))
    if domain_size == 1:
        return 1.0, 0.0
    decay = math.exp(-eps)
    p = 1.0 / (1.0 + (domain_size - 1) * decay)
    return p, decay * p


def transition_matrix(domain_size: int, epsilon: object) -> np.ndarray:
    """M[i, j] = P(report j | true i): p on the diagonal, q elsewhere (rows sum to 1)."""
    p, q = rr_probabilities(domain_size, epsilon)
    matrix = np.full((domain_size, domain_size), q)
    np.fill_diagonal(matrix, p)
    return matrix


def randomized_response(
    values: Any,
    domain: Sequence[Hashable],
    epsilon: object,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Report each value truthfully with probability e^eps / (e^eps + k - 1), else a uniformly
    chosen other domain value; exact (see the module docstring).

    With a one-value domain there is nothing to randomise: every report must be that value,
    and the values are returned unchanged (this reveals nothing beyond the domain).

    Args:
        values: array-like of domain values (any shape).
        domain: the k distinct possible values, declared, not read from the data.
        epsilon: local privacy parameter > 0 (exact).
        rng: random source; the secure default of :func:`mechanisms.rng.make_rng` if None.

    Returns:
        An array of reports, of the shape of ``values``.

    Raises:
        MechanismError: empty or repeated domain, or a value outside the domain.
        BudgetError: a bad epsilon.
    """
    eps = as_fraction(epsilon, "epsilon", error=BudgetError)
    index = _domain_index(domain)
    codes, shape = _encode(values, index, "values")
    k = len(index)
    if k == 1:
        return _decode(codes, domain, shape)
    generator = rng if rng is not None else make_rng()
    reports = np.empty_like(codes)
    pending = np.arange(codes.size)
    rounds = 0
    while pending.size:
        rounds += 1
        proposals = generator.integers(0, k, size=pending.size)
        accept = proposals == codes[pending]
        others = np.flatnonzero(~accept)
        if others.size:
            coins = np.asarray(sample_bernoulli_exp(eps, others.size, rng=generator), dtype=bool)
            accept[others] = coins
        reports[pending[accept]] = proposals[accept]
        pending = pending[~accept]
    logger.debug("randomized response: %d values, k=%d, %d rounds", codes.size, k, rounds)
    return _decode(reports, domain, shape)


def estimate_frequencies(reports: Any, domain: Sequence[Hashable], epsilon: object) -> np.ndarray:
    """Unbiased estimates of the true count of each domain value from randomized responses.

    With c_v reports of v among n, E[c_v] = n_v p + (n - n_v) q, so
    n_hat_v = (c_v - n q) / (p - q) is unbiased. Its variance is
    (n_v p (1-p) + (n - n_v) q (1-q)) / (p - q)^2. Estimates can be negative; make them
    non-negative and integer downstream if needed (post-processing, no privacy cost).

    Returns:
        A float array of length k, in domain order.
    """
    index = _domain_index(domain)
    codes, _ = _encode(reports, index, "reports")
    k = len(index)
    counts = np.bincount(codes, minlength=k).astype(np.float64)
    if k == 1:
        return counts
    p, q = rr_probabilities(k, epsilon)
    return (counts - codes.size * q) / (p - q)
