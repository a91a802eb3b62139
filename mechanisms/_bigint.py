"""Scalar, arbitrary-precision versions of the CKS20 samplers (Python ints throughout).

These are the reference algorithms of Canonne, Kamath and Steinke, "The Discrete Gaussian
for Differential Privacy" (NeurIPS 2020), written one sample at a time. They serve two roles:

* the big-integer path of :mod:`mechanisms.samplers`, taken when a parameter's numerator or
  denominator (or an intermediate product) does not fit in int64, where the vectorised code
  would overflow;
* the scalar reference that the benchmarks and tests compare the vectorised samplers against.

Randomness is drawn from a numpy Generator as unbiased uniform integers; nothing here uses a
float.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "uniform_below",
    "bernoulli_exp_scalar",
    "discrete_laplace_scalar",
    "discrete_gaussian_scalar",
]

_INT64_BOUND = 2**63


def uniform_below(m: int, rng: np.random.Generator) -> int:
    """Uniform integer in ``[0, m)`` for any ``m >= 1``.

    numpy's bounded integers are unbiased up to 2**63; above that, draw ``m.bit_length()``
    random bits and reject values ``>= m`` (fewer than 2 tries on average).
    """
    if m <= _INT64_BOUND:
        return int(rng.integers(0, m))
    bits = m.bit_length()
    nbytes = (bits + 7) // 8
    excess = 8 * nbytes - bits
    while True:
        value = int.from_bytes(rng.bytes(nbytes), "little") >> excess
        if value < m:
            return value


def _bernoulli_fraction(num: int, den: int, rng: np.random.Generator) -> bool:
    """Bernoulli(num/den) for ``0 <= num <= den``, by comparing a uniform integer."""
    return uniform_below(den, rng) < num


def bernoulli_exp_scalar(num: int, den: int, rng: np.random.Generator) -> bool:
    """One draw of Bernoulli(exp(-num/den)) for ``num >= 0``, ``den >= 1`` (CKS20, Algorithm 1).

    For gamma = num/den in [0, 1], count K = the first k at which Bernoulli(gamma/k) fails and
    return whether K is odd. For gamma > 1, multiply floor(gamma) draws of Bernoulli(exp(-1))
    with one Bernoulli(exp(-(gamma - floor(gamma)))), stopping at the first failure.
    """
    whole, rem = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_unit(rem=1, den=1, rng=rng):
            return False
    return _bernoulli_exp_unit(rem=rem, den=den, rng=rng)


def _bernoulli_exp_unit(rem: int, den: int, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(-rem/den)) for ``0 <= rem <= den``: the K loop of CKS20 Algorithm 1."""
    k = 1
    while _bernoulli_fraction(rem, den * k, rng):
        k += 1
    return k % 2 == 1


def discrete_laplace_scalar(t: int, s: int, rng: np.random.Generator) -> int:
    """One draw from the discrete Laplace with scale t/s, P(x) ~ exp(-|x| s/t) (CKS20, Alg. 2).

    Draw U uniform on [0, t) kept with probability exp(-U/t), V geometric (count of
    Bernoulli(exp(-1)) successes), X = U + tV is then geometric with parameter exp(-1/t); Y =
    floor(X/s) is geometric with parameter exp(-s/t); a random sign, rejecting "-0".
    """
    while True:
        u = uniform_below(t, rng)
        if not bernoulli_exp_scalar(u, t, rng):
            continue
        v = 0
        while _bernoulli_exp_unit(rem=1, den=1, rng=rng):
            v += 1
        y = (u + t * v) // s
        negative = bool(rng.integers(0, 2))
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian_scalar(a: int, b: int, rng: np.random.Generator) -> int:
    """One draw from the discrete Gaussian with variance parameter sigma2 = a/b (CKS20, Alg. 3).

    With t = floor(sqrt(sigma2)) + 1, propose Y from the discrete Laplace of scale t and accept
    with probability exp(-(|Y| - sigma2/t)^2 / (2 sigma2)) = exp(-(|Y| b t - a)^2 / (2 a b t^2)),
    the exponent kept as an exact ratio of integers.
    """
    t = math.isqrt(a // b) + 1
    den = 2 * a * b * t * t
    while True:
        y = discrete_laplace_scalar(t, 1, rng)
        z = abs(y) * b * t - a
        if bernoulli_exp_scalar(z * z, den, rng):
            return y
