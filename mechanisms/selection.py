"""Private selection: the exponential mechanism, permute-and-flip and report-noisy-max.

Each picks the index of a candidate with a high score u_i, where changing one person's data
moves any score by at most ``sensitivity`` (Delta). The privacy factor is
c = epsilon / (2 Delta) in general and c = epsilon / Delta when the scores are monotonic (all
move in the same direction between neighbours, e.g. counts under add/remove).

Exact sampling (no float decides the output): scores, epsilon and Delta are converted to
Fractions (a float score exactly, by ``Fraction(float)``), so every exponent
gamma_i = c (u* - u_i) >= 0 is an exact rational, u* = max u. Then

- exponential mechanism: propose an index uniformly (an unbiased integer), accept it with
  probability exp(-gamma_i) by an exact Bernoulli(exp(-gamma)) (CKS20, Algorithm 1), else
  propose again. An accepted index has probability proportional to exp(c u_i): exactly the
  exponential mechanism. The best candidate is always accepted, so at most k proposals are
  needed on average;
- permute-and-flip (McKenna & Sheldon, NeurIPS 2020, Algorithm 1): visit the candidates in a
  uniformly random order and stop at the first that passes a Bernoulli(exp(-gamma_i)) flip.

Both draw their coins in blocks (one vectorised Bernoulli call per distinct exponent in a
block) and take the first success in visiting order, which is the same as flipping them one
at a time because the coins are independent.

Report-noisy-max adds float Gumbel noise (same distribution as the exponential mechanism) or
float exponential noise (same distribution as permute-and-flip, Ding et al. 2021). It is NOT
floating-point safe (Mironov 2012); prefer the exact mechanisms.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from fractions import Fraction
from numbers import Rational
from typing import Literal

import numpy as np

from mechanisms.errors import BudgetError, MechanismError
from mechanisms.exact import as_fraction
from mechanisms.rng import make_rng
from mechanisms.samplers import sample_bernoulli_exp

__all__ = [
    "selection_factor",
    "exponential_probabilities",
    "exponential_mechanism",
    "permute_and_flip",
    "permute_and_flip_probabilities",
    "report_noisy_max",
]

logger = logging.getLogger(__name__)

_MAX_BLOCK = 1024


def _score_fraction(value: object, index: int) -> Fraction:
    """One score as an exact Fraction (negative allowed; NaN, inf, bool, text refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise MechanismError(f"scores[{index}] ({value!r}) must be a finite number, not a bool")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, (float, np.floating)):
        as_float = float(value)
        if math.isfinite(as_float):
            return Fraction(as_float)
    raise MechanismError(f"scores[{index}] ({value!r}) must be a finite number")


def _scores(scores: Iterable[object]) -> list[Fraction]:
    """A non-empty 1-D sequence of scores as exact Fractions."""
    array = np.asarray(scores, dtype=object) if not isinstance(scores, np.ndarray) else scores
    if array.ndim != 1:
        raise MechanismError(f"scores must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise MechanismError("scores must not be empty")
    return [_score_fraction(value, i) for i, value in enumerate(array.tolist())]


def selection_factor(epsilon: object, sensitivity: object = 1, monotonic: bool = False) -> Fraction:
    """The exact factor c: epsilon / (2 Delta), or epsilon / Delta for monotonic scores."""
    eps = as_fraction(epsilon, "epsilon", error=BudgetError)
    delta = as_fraction(sensitivity, "sensitivity")
    return eps / delta if monotonic else eps / (2 * delta)


def _gammas(
    scores: Iterable[object], epsilon: object, sensitivity: object, monotonic: bool
) -> list[Fraction]:
    """Exact exponents gamma_i = c (u* - u_i) >= 0."""
    factor = selection_factor(epsilon, sensitivity, monotonic)
    exact = _scores(scores)
    best = max(exact)
    return [factor * (best - u) for u in exact]


def exponential_probabilities(
    scores: Iterable[object], epsilon: object, sensitivity: object = 1, monotonic: bool = False
) -> np.ndarray:
    """Selection probabilities of the exponential mechanism, P(i) proportional to exp(c u_i).

    Computed from the exact differences u* - u_i, so huge scores (1e300) neither overflow nor
    lose the small differences between them. Floats: for inspection and tests, not sampling.
    """
    logits = -np.array([float(g) for g in _gammas(scores, epsilon, sensitivity, monotonic)])
    weights = np.exp(logits)
    return weights / weights.sum()


def permute_and_flip_probabilities(
    scores: Iterable[object], epsilon: object, sensitivity: object = 1, monotonic: bool = False
) -> np.ndarray:
    """Selection probabilities of permute-and-flip, by exact enumeration of orders (k <= 8).

    P(i) = p_i * E[prod over candidates j before i of (1 - p_j)], p_j = exp(-gamma_j); the
    expectation over uniform orders is the average over subsets S of the others, weighted by
    |S|! (k-1-|S|)! / k!. For tests and small examples only.
    """
    p = np.exp(-np.array([float(g) for g in _gammas(scores, epsilon, sensitivity, monotonic)]))
    k = len(p)
    if k > 8:
        raise MechanismError(
            f"permute_and_flip_probabilities enumerates orders; k ({k}) must be <= 8"
        )
    out = np.zeros(k)
    for i in range(k):
        others = [j for j in range(k) if j != i]
        for mask in range(1 << (k - 1)):
            chosen = [others[b] for b in range(k - 1) if mask >> b & 1]
            weight = (
                math.factorial(len(chosen))
                * math.factorial(k - 1 - len(chosen))
                / math.factorial(k)
            )
            out[i] += weight * np.prod([1 - p[j] for j in chosen])
        out[i] *= p[i]
    return out


def _first_success(
    candidates: np.ndarray, gamma_ids: np.ndarray, gammas: list[Fraction], rng: np.random.Generator
) -> int | None:
    """Flip Bernoulli(exp(-gamma)) for each candidate in order; return the first success."""
    ids = gamma_ids[candidates]
    accepted = np.zeros(len(candidates), dtype=bool)
    for gid in np.unique(ids):
        positions = np.flatnonzero(ids == gid)
        gamma = gammas[int(gid)]
        if gamma == 0:
            accepted[positions] = True
        else:
            accepted[positions] = np.asarray(
                sample_bernoulli_exp(gamma, len(positions), rng=rng), dtype=bool
            )
    hits = np.flatnonzero(accepted)
    return int(candidates[hits[0]]) if hits.size else None


def _prepare(
    scores: Iterable[object], epsilon: object, sensitivity: object, monotonic: bool
) -> tuple[np.ndarray, list[Fraction]]:
    """Group candidates by their exact exponent: (gamma id per candidate, distinct gammas)."""
    gammas = _gammas(scores, epsilon, sensitivity, monotonic)
    distinct: dict[Fraction, int] = {}
    ids = np.array([distinct.setdefault(g, len(distinct)) for g in gammas], dtype=np.int64)
    return ids, list(distinct)


def exponential_mechanism(
    scores: Iterable[object],
    epsilon: object,
    sensitivity: object = 1,
    monotonic: bool = False,
    rng: np.random.Generator | None = None,
) -> int:
    """Sample index i with probability proportional to exp(c u_i), exactly.

    Uniform proposals accepted with probability exp(-c (u* - u_i)) (see the module
    docstring): no float decides the output.

    Args:
        scores: 1-D finite numbers (ints, Fractions, floats converted exactly); higher is better.
        epsilon: privacy parameter > 0 (the mechanism is epsilon-DP).
        sensitivity: Delta > 0, the largest change of any score between neighbours.
        monotonic: scores all move in the same direction between neighbours (factor eps/Delta).
        rng: random source; the secure default of :func:`mechanisms.rng.make_rng` if None.
    """
    ids, gammas = _prepare(scores, epsilon, sensitivity, monotonic)
    k = len(ids)
    generator = rng if rng is not None else make_rng()
    block = min(max(k, 8), _MAX_BLOCK)
    while True:
        proposals = generator.integers(0, k, size=block)
        chosen = _first_success(proposals, ids, gammas, generator)
        if chosen is not None:
            return chosen


def permute_and_flip(
    scores: Iterable[object],
    epsilon: object,
    sensitivity: object = 1,
    monotonic: bool = False,
    rng: np.random.Generator | None = None,
) -> int:
    """Permute-and-flip (McKenna & Sheldon 2020), exact: epsilon-DP, never worse in expected
    score than the exponential mechanism.

    Visits candidates in a uniformly random order (numpy's unbiased Fisher-Yates shuffle) and
    returns the first whose Bernoulli(exp(-c (u* - u_r))) flip succeeds; the best candidate's
    flip always succeeds, so one pass suffices. Arguments as :func:`exponential_mechanism`
    (the monotonic factor eps/Delta applies as for the exponential mechanism).
    """
    ids, gammas = _prepare(scores, epsilon, sensitivity, monotonic)
    k = len(ids)
    generator = rng if rng is not None else make_rng()
    order = generator.permutation(k)
    for start in range(0, k, _MAX_BLOCK):
        chosen = _first_success(order[start : start + _MAX_BLOCK], ids, gammas, generator)
        if chosen is not None:
            return chosen
    raise RuntimeError("permute_and_flip: the best candidate was not accepted")  # pragma: no cover


def report_noisy_max(
    scores: Iterable[object],
    epsilon: object,
    sensitivity: object = 1,
    monotonic: bool = False,
    noise: Literal["gumbel", "exponential"] = "gumbel",
    rng: np.random.Generator | None = None,
) -> int:
    """Argmax of the scores plus float noise of scale 1 / c.

    ``noise="gumbel"`` gives the exponential mechanism's distribution; ``"exponential"`` gives
    permute-and-flip's (Ding, Kifer, Saravanan et al., "The permute-and-flip mechanism is
    identical to report-noisy-max with exponential noise", 2021). NOT floating-point safe
    (Mironov 2012): use :func:`exponential_mechanism` or :func:`permute_and_flip` for releases.
    """
    if noise not in ("gumbel", "exponential"):
        raise MechanismError(f"noise ({noise!r}) must be 'gumbel' or 'exponential'")
    factor = selection_factor(epsilon, sensitivity, monotonic)
    exact = _scores(scores)
    best = max(exact)
    shifted = np.array([float(u - best) for u in exact])  # exact differences, then floats
    generator = rng if rng is not None else make_rng()
    noise_scale = float(1 / factor)
    if noise == "gumbel":
        draws = generator.gumbel(0.0, noise_scale, size=len(shifted))
    else:
        draws = generator.exponential(noise_scale, size=len(shifted))
    return int(np.argmax(shifted + draws))
