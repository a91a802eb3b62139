"""The vectorised numpy samplers the compiled kernels replaced, kept as a test oracle.

Before the compiled kernels (:mod:`mechanisms._kernels`) the exact samplers ran CKS20
(Canonne, Kamath, Steinke, NeurIPS 2020; Algorithms 1-3) on whole numpy int64 arrays: a batch
of candidates is drawn with ``Generator.integers``, rejection masks drop the refused ones, and
the loop repeats until ``n`` samples are filled; the inner loops of Algorithm 1 run in lockstep
over the lanes still active. Lanes whose integers would pass int64 take the Python-int code of
:mod:`mechanisms._bigint`. The tests compare the kernels with these functions (two-sample
tests): for the CKS20 kernels an independent implementation of the same algorithms, for the
table kernels (:mod:`mechanisms._table_kernels`, inversion) a different algorithm for the same
law; both read randomness differently. Not used by any release.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from mechanisms import _bigint

__all__ = ["bernoulli_exp", "discrete_laplace", "discrete_gaussian"]

logger = logging.getLogger(__name__)

_LIMIT = 2**62  # bound on denominators and intermediate values in the int64 path
_INT64_MAX = 2**63 - 1
_SQUARE_SAFE = math.isqrt(_INT64_MAX)  # |z| <= this  =>  z * z fits in int64


def _fill(n: int, batch: Callable[[int], np.ndarray], accept: float) -> np.ndarray:
    """Call ``batch(m)`` (which returns the accepted samples of m candidates) until n are kept.

    ``accept`` is a first guess of the acceptance rate; it is then re-estimated from what the
    batches return, so the loop usually finishes in one or two rounds.
    """
    parts: list[np.ndarray] = []
    have = 0
    while have < n:
        need = n - have
        m = int(need / max(accept, 0.05) * 1.05) + 64
        got = batch(m)
        accept = 0.5 * accept + 0.5 * max(got.size / m, 0.01)
        parts.append(got[:need])
        have += parts[-1].size
    if not parts:
        return np.empty(0, dtype=np.int64)
    if any(part.dtype == object for part in parts):
        return np.concatenate([part.astype(object) for part in parts])
    return np.concatenate(parts)


# ---------------------------------------------------------------- Bernoulli(exp(-gamma))


def _uniform(rng: np.random.Generator, high: int, n: int) -> np.ndarray:
    """n unbiased uniform integers on [0, high), in the narrowest dtype that holds them.

    numpy's bounded integers are unbiased for every dtype; narrow dtypes consume fewer random
    bits per draw (measured ~2.5x faster for uint8 than int64), which matters in the inner loops.
    """
    if high <= 256:
        return rng.integers(0, high, size=n, dtype=np.uint8)
    if high <= 2**15:
        return rng.integers(0, high, size=n, dtype=np.int16)
    if high <= 2**31:
        return rng.integers(0, high, size=n, dtype=np.int32)
    return rng.integers(0, high, size=n, dtype=np.int64)


def _bern_exp_frac(rem: np.ndarray, den: int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-rem_i/den)) per lane, for int64 ``0 <= rem_i <= den < 2**62``.

    CKS20 Algorithm 1 for gamma in [0, 1]: K is the first k at which Bernoulli(gamma/k) fails;
    the output is "K is odd". All active lanes share the same k, so each round is one array
    draw: U uniform on [0, den*k) and success iff U < rem. When den*k would pass int64, the
    event is split exactly as Bernoulli(rem/den) AND Bernoulli(1/k) (independent draws).
    """
    out = np.empty(rem.size, dtype=bool)
    idx = np.arange(rem.size)
    r = rem
    k = 1
    while idx.size:
        if den * k <= _INT64_MAX:
            ok = _uniform(rng, den * k, idx.size) < r
        else:
            ok = (_uniform(rng, den, idx.size) < r) & (_uniform(rng, k, idx.size) == 0)
        out[idx[~ok]] = k % 2 == 1
        idx = idx[ok]
        r = r[ok]
        k += 1
    return out


def _bern_exp1(n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of Bernoulli(exp(-1)): Algorithm 1 with gamma = 1 (Bernoulli(1/k) = [U_k == 0]).

    The k = 1 round always succeeds and is skipped.
    """
    out = np.empty(n, dtype=bool)
    idx = np.arange(n)
    k = 2
    while idx.size:
        ok = _uniform(rng, k, idx.size) == 0
        out[idx[~ok]] = k % 2 == 1
        idx = idx[ok]
        k += 1
    return out


def _geometric_exp1(n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of V = number of Bernoulli(exp(-1)) successes before the first failure.

    P(V >= v) = exp(-v): the inner loop of CKS20 Algorithm 2, run over the lanes still going.
    """
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        idx = idx[_bern_exp1(idx.size, rng)]
        v[idx] += 1
    return v


def _bern_exp_lanes(
    whole: np.ndarray, rem: np.ndarray, den: int, rng: np.random.Generator
) -> np.ndarray:
    """Bernoulli(exp(-(whole_i + rem_i/den))) per lane (CKS20 Algorithm 1, gamma > 1 case).

    exp(-gamma) = exp(-1)**whole * exp(-rem/den): the fractional draw first, then one
    Bernoulli(exp(-1)) per unit of ``whole``, only on lanes still True and still owing units.
    """
    out = _bern_exp_frac(rem, den, rng)
    idx = np.flatnonzero(out & (whole > 0))
    done = 0
    while idx.size:
        ok = _bern_exp1(idx.size, rng)
        out[idx[~ok]] = False
        done += 1
        idx = idx[ok]
        idx = idx[whole[idx] > done]
    return out


# ---------------------------------------------------------------- discrete Laplace


def _laplace_batch(t: int, s: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted samples out of m candidates of CKS20 Algorithm 2 (scale t/s, t, s < 2**62).

    Returns int64, or an object array if some X = U + tV would overflow int64 (checked).
    """
    if t == 1:
        u = np.zeros(m, dtype=np.int64)
    else:
        u = rng.integers(0, t, size=m)
        u = u[_bern_exp_frac(u, t, rng)]
    v = _geometric_exp1(u.size, rng)
    if v.size and t * (int(v.max()) + 1) > _INT64_MAX:
        logger.debug("discrete Laplace: t*V near int64, batch computed with Python ints")
        x = u.astype(object) + v.astype(object) * t
    else:
        x = u + v * t
    y = x // s if s != 1 else x
    negative = rng.integers(0, 2, size=y.size, dtype=np.int8).astype(bool)
    keep = ~(negative & (y == 0))
    return np.where(negative, -y, y)[keep]


def _laplace_flat(t: int, s: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n discrete Laplace samples of scale t/s, flat; vectorised unless t or s is huge."""
    if t < _LIMIT and s < _LIMIT:
        return _fill(n, lambda m: _laplace_batch(t, s, m, rng), accept=0.6)
    logger.debug("discrete Laplace: big-integer path for scale=%s/%s", t, s)
    return np.array([_bigint.discrete_laplace_scalar(t, s, rng) for _ in range(n)], dtype=object)


# ---------------------------------------------------------------- discrete Gaussian


def _gaussian_batch(a: int, b: int, t: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted samples out of m candidates of CKS20 Algorithm 3, sigma2 = a/b.

    Acceptance is Bernoulli(exp(-(|Y| b t - a)^2 / (2 a b t^2))): vectorised when the common
    denominator and the lane's numerator fit; lanes that would not fit take the scalar path.
    """
    # the proposals' own rejections need no inner loop: the outer _fill keeps drawing batches
    # until enough candidates survive both steps (samples are i.i.d., so a short batch is fine)
    y = _laplace_batch(t, 1, m, rng) if t < _LIMIT else _laplace_flat(t, 1, m, rng)
    den = 2 * a * b * t * t
    bt = b * t
    if y.dtype == object or den >= _LIMIT or a >= _LIMIT or bt >= _LIMIT:
        logger.debug("discrete Gaussian: big-integer acceptance for sigma2=%s/%s", a, b)
        kept = [_bigint.bernoulli_exp_scalar((abs(int(v)) * bt - a) ** 2, den, rng) for v in y]
        return y[np.array(kept, dtype=bool)] if kept else y
    absy = np.abs(y)
    safe = absy <= (_LIMIT // bt)
    z = np.where(safe, absy, 0) * bt - a
    safe &= np.abs(z) <= _SQUARE_SAFE
    zz = np.where(safe, z, 0) ** 2
    keep = np.empty(y.size, dtype=bool)
    fast = np.flatnonzero(safe)
    keep[fast] = _bern_exp_lanes(zz[fast] // den, zz[fast] % den, den, rng)
    for i in np.flatnonzero(~safe):
        zi = abs(int(y[i])) * bt - a
        keep[i] = _bigint.bernoulli_exp_scalar(zi * zi, den, rng)
    return y[keep]


def bernoulli_exp(gamma: Fraction, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of Bernoulli(exp(-gamma)), vectorised (CKS20 Algorithm 1)."""
    num, den = gamma.numerator, gamma.denominator
    if not (den < _LIMIT and num // den < _LIMIT):
        raise ValueError(f"gamma ({gamma}) is beyond the vectorised path")
    whole = np.full(n, num // den, dtype=np.int64)
    rem = np.full(n, num % den, dtype=np.int64)
    return _bern_exp_lanes(whole, rem, den, rng)


def discrete_laplace(scale: Fraction, n: int, rng: np.random.Generator) -> np.ndarray:
    """n discrete Laplace samples of ``scale``, vectorised (CKS20 Algorithm 2)."""
    return _laplace_flat(scale.numerator, scale.denominator, n, rng)


def discrete_gaussian(sigma2: Fraction, n: int, rng: np.random.Generator) -> np.ndarray:
    """n discrete Gaussian samples of ``sigma2``, vectorised (CKS20 Algorithm 3)."""
    a, b = sigma2.numerator, sigma2.denominator
    t = math.isqrt(a // b) + 1
    return _fill(n, lambda m: _gaussian_batch(a, b, t, m, rng), accept=0.5)
