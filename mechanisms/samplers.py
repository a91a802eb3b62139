"""Exact samplers: Bernoulli(exp(-gamma)), discrete Laplace, discrete Gaussian.

The algorithms are those of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS20: Algorithm 1 (Bernoulli(exp(-gamma))),
Algorithm 2 (discrete Laplace), Algorithm 3 (discrete Gaussian). Parameters are converted to
Fractions exactly (:func:`mechanisms.exact.as_fraction`) and every decision is a comparison of
integers, so no floating-point rounding can change an output (Mironov 2012).

Speed comes from compiled kernels (numba) that run one sample at a time on the generator's
raw 64-bit words, drawn in bulk and read as a bit stream (:mod:`mechanisms._words`). Up to a
scale (or proposal scale) of about 2730 the discrete Laplace and Gaussian draw by inversion
against exact fixed-point tables of exp(-x) (:mod:`mechanisms._table_kernels`,
:mod:`mechanisms._exp_tables`: about 33 bits a Laplace candidate, integer comparisons, a
comparison left undecided by 64 bits finished exactly in Python); beyond, and for
Bernoulli(exp(-gamma)), CKS20's algorithms run in :mod:`mechanisms._kernels`. The same
Generator state gives the same samples on every machine and in every process.

Overflow: the kernels take parameters whose denominators and intermediate products stay below
2**62; a candidate whose integers would not fit is finished with Python ints on the same bit
stream. Parameters beyond that go through the Python-int reference code in
:mod:`mechanisms._bigint`. An output that does not fit in int64 (only possible for scales
around 10**17 and above) makes the result an object array of Python ints, with a logged
warning, instead of a wrapped value.

The numpy-vectorised samplers these kernels replaced are kept in :mod:`mechanisms._oracle`, as
a test oracle only. The pmf helpers at the end return floats and are for tests and analysis
only.
"""

from __future__ import annotations

import functools
import logging
import math
from fractions import Fraction

import numpy as np

from mechanisms import _bigint, _exp_tables, _kernels, _table_kernels
from mechanisms._words import WordStream, bit_length_below
from mechanisms.errors import MechanismError
from mechanisms.exact import Exact, as_fraction
from mechanisms.rng import make_rng

__all__ = [
    "sample_bernoulli_exp",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "discrete_laplace_pmf",
    "discrete_gaussian_pmf",
    "compiled_gaussian_sigma2",
]

logger = logging.getLogger(__name__)

_LIMIT = _kernels.LIMIT  # bound on denominators and parameters of the compiled path
_INT64_MAX = 2**63 - 1

Size = int | tuple[int, ...]


# ---------------------------------------------------------------- argument handling


def _shape(size: object) -> tuple[int, ...]:
    """Normalise ``size`` (int or tuple of ints, all >= 0) to a shape tuple."""
    dims = size if isinstance(size, tuple) else (size,)
    shape = []
    for dim in dims:
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise MechanismError(f"size ({size!r}) must be an int or a tuple of ints >= 0")
        if dim < 0:
            raise MechanismError(f"size ({size!r}) must be an int or a tuple of ints >= 0")
        shape.append(int(dim))
    return tuple(shape)


def _resolve_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """The caller's Generator, or a fresh secure one."""
    if rng is None:
        return make_rng()
    if not isinstance(rng, np.random.Generator):
        raise MechanismError(f"rng ({rng!r}) must be a numpy.random.Generator or None")
    return rng


def _finish(values: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Cast the flat samples to int64 when every value fits, else keep Python ints."""
    if values.dtype == object:
        if all(-_INT64_MAX - 1 <= int(v) <= _INT64_MAX for v in values):
            return values.astype(np.int64).reshape(shape)
        logger.warning("%s: samples exceed int64; returning an object array of Python ints", name)
        return values.reshape(shape)
    return values.astype(np.int64, copy=False).reshape(shape)


# ---------------------------------------------------------------- Bernoulli(exp(-gamma))


def sample_bernoulli_exp(
    gamma: Exact, size: Size, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw Bernoulli(exp(-gamma)) exactly (CKS20, Algorithm 1).

    Used on its own by mechanisms that need an exact coin with an exponential bias, and by the
    Laplace and Gaussian samplers. ``gamma`` is converted exactly: ``0.1`` means the float's
    binary value (a denominator of 2**55), ``"0.1"`` means 1/10.

    Args:
        gamma: rational >= 0 (int, Fraction, float, or decimal string).
        size: output shape (int or tuple; 0 allowed).
        rng: random source; ``None`` makes a fresh secure one.

    Returns:
        bool array of shape ``size``.

    Raises:
        MechanismError: naming ``gamma`` (or ``size``/``rng``) when the argument is invalid.
    """
    g = as_fraction(gamma, "gamma", allow_zero=True)
    shape = _shape(size)
    gen = _resolve_rng(rng)
    n = math.prod(shape)
    num, den = g.numerator, g.denominator
    if den < _LIMIT and num // den < _LIMIT:
        return _bernoulli_exp_compiled(num // den, num % den, den, n, gen).reshape(shape)
    logger.debug("sample_bernoulli_exp: big-integer path for gamma=%s", g)
    flat = [_bigint.bernoulli_exp_scalar(num, den, gen) for _ in range(n)]
    return np.array(flat, dtype=bool).reshape(shape)


# ---------------------------------------------------------------- discrete Laplace


def sample_discrete_laplace(
    scale: Exact, size: Size, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw from the discrete Laplace, P(x) proportional to exp(-|x|/scale) (CKS20, Alg. 2).

    The exact noise of pure-DP counting queries: with sensitivity Delta and budget epsilon,
    ``scale = Delta/epsilon`` gives epsilon-DP.

    Args:
        scale: rational > 0 (int, Fraction, float converted exactly, or decimal string),
            written t/s in lowest terms.
        size: output shape (int or tuple; 0 allowed).
        rng: random source; ``None`` makes a fresh secure one.

    Returns:
        int64 array of shape ``size`` (object array of Python ints if a sample exceeds int64).

    Raises:
        MechanismError: naming ``scale`` (or ``size``/``rng``) when the argument is invalid.
    """
    frac = as_fraction(scale, "scale")
    shape = _shape(size)
    gen = _resolve_rng(rng)
    t, s, n = frac.numerator, frac.denominator, math.prod(shape)
    if t < _LIMIT and s < _LIMIT:
        flat = _laplace_compiled(t, s, n, gen)
    else:
        logger.debug("discrete Laplace: big-integer path for scale=%s/%s", t, s)
        flat = np.array(
            [_bigint.discrete_laplace_scalar(t, s, gen) for _ in range(n)], dtype=object
        )
    return _finish(flat, shape, "sample_discrete_laplace")


# ---------------------------------------------------------------- discrete Gaussian


def sample_discrete_gaussian(
    sigma2: Exact, size: Size, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw from the discrete Gaussian, P(x) proportional to exp(-x^2/(2 sigma2)) (CKS20, Alg. 3).

    The exact noise of zCDP counting queries: sensitivity Delta and budget rho give
    ``sigma2 = Delta**2 / (2 rho)``. t = floor(sqrt(sigma2)) + 1 is computed with an integer
    square root, so the proposal scale is exact too.

    Args:
        sigma2: variance parameter, rational > 0 (int, Fraction, float converted exactly,
            or decimal string).
        size: output shape (int or tuple; 0 allowed).
        rng: random source; ``None`` makes a fresh secure one.

    Returns:
        int64 array of shape ``size`` (object array of Python ints if a sample exceeds int64).

    Raises:
        MechanismError: naming ``sigma2`` (or ``size``/``rng``) when the argument is invalid.
    """
    frac = as_fraction(sigma2, "sigma2")
    shape = _shape(size)
    gen = _resolve_rng(rng)
    a, b = frac.numerator, frac.denominator
    t = math.isqrt(a // b) + 1
    n = math.prod(shape)
    if 2 * a * b * t * t < _LIMIT:
        flat = _gaussian_compiled(a, b, t, n, gen)
    else:
        logger.debug("discrete Gaussian: big-integer path for sigma2=%s/%s", a, b)
        flat = np.array(
            [_bigint.discrete_gaussian_scalar(a, b, gen) for _ in range(n)], dtype=object
        )
    return _finish(flat, shape, "sample_discrete_gaussian")


# ---------------------------------------------------------------- compiled paths

# first block of words per sample: a little under the mean use measured at scales 1-1000 (the
# rest is drawn at the observed rate if the kernel asks for more; the output does not depend
# on it, and words drawn but not read are wasted)
_WORDS_BERNOULLI = 0.15
_WORDS_LAPLACE_BASE = 0.3
_WORDS_GAUSSIAN_BASE = 1.3
_WORDS_PER_BIT = 0.06  # per bit of the uniform U on [0, t)
# the table kernels: 33 bits a Laplace candidate, 2 / (1 + q) candidates a sample (0.52 words
# at large scales, 0.75 at scale 1); about 65 bits a Gaussian candidate, 1.3-2 candidates
_WORDS_LAPLACE_TABLE = 0.5
_WORDS_GAUSSIAN_TABLE = 1.3


def _lemire_threshold(t: int, kt: int) -> int:
    """2**16 mod t when the kernels should draw U on [0, t) by multiply-and-shift, else -1.

    Rejection on ``kt`` bits refuses a fraction 1 - t / 2**kt of its draws (a mispredicted
    branch each); multiply-and-shift on 16 bits refuses below t / 2**16 but reads more bits.
    Measured, it pays when the first refuses over a quarter, for t up to 2**12.
    """
    if 2 <= t <= 2**12 and 4 * t < 3 * 2**kt:
        return 2**16 % t
    return -1


def _with_big(flat: np.ndarray, big: dict[int, int]) -> np.ndarray:
    """The kernel's int64 output with the samples beyond int64 put in (object array)."""
    if not big:
        return flat
    out = flat.astype(object)
    for index, value in big.items():
        out[index] = value
    return out


def _bernoulli_exp_compiled(
    whole: int, rem: int, den: int, n: int, rng: np.random.Generator
) -> np.ndarray:
    """n draws of Bernoulli(exp(-(whole + rem/den))), whole and den < 2**62 (CKS20 Alg. 1)."""
    out = np.empty(n, dtype=np.bool_)
    if n == 0:
        return out
    stream = WordStream(rng, int(n * _WORDS_BERNOULLI) + 8)

    def kernel(words: np.ndarray, st: np.ndarray, dest: np.ndarray, i: int) -> tuple:
        return _kernels.bernoulli_exp_kernel(words, st, whole, rem, den, dest, i)

    stream.run(kernel, out, _no_big)
    return out


def _no_big(stream: WordStream, u: int, v: int) -> int | None:  # pragma: no cover
    raise RuntimeError("the Bernoulli kernel has no big-integer candidates")


def _laplace_compiled(t: int, s: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n discrete Laplace samples of scale t/s, t and s < 2**62.

    By table inversion (:mod:`mechanisms._table_kernels`) when the scale's table is small
    enough, else by CKS20 Algorithm 2 (:mod:`mechanisms._kernels`).
    """
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    if _exp_tables.table_size(t, s) <= _exp_tables.MAX_ENTRIES:
        return _laplace_table(_exp_tables.geometric_table(t, s), n, rng, out)
    kt = bit_length_below(t)
    lemire = _lemire_threshold(t, kt)
    stream = WordStream(rng, int(n * (_WORDS_LAPLACE_BASE + _WORDS_PER_BIT * kt)) + 8)

    def kernel(words: np.ndarray, st: np.ndarray, dest: np.ndarray, i: int) -> tuple:
        return _kernels.laplace_kernel(words, st, t, kt, lemire, s, dest, i)

    def finish(reader: WordStream, u: int, v: int) -> int | None:
        logger.debug("discrete Laplace: U + tV beyond int64, finished with Python ints")
        y = (u + t * v) // s
        negative = reader.bit() == 1
        if negative and y == 0:
            return None
        return -y if negative else y

    return _with_big(out, stream.run(kernel, out, finish))


def _geometric_finish(
    table: _exp_tables.GeometricTable, reader: WordStream, m: int, total: int
) -> int:
    """The magnitude of a candidate whose table inversion the kernel left undecided at m.

    ``total`` holds the escapes before it; m = table size means a fresh draw is due.
    """
    g = table.size
    if m < table.size:
        prefix = (int(reader.state[3]) << 32) | int(reader.state[4])
        g = _exp_tables.resolve_geometric(table, reader, m, prefix, 64)
    total += g
    if g == table.size:
        total += _exp_tables.draw_geometric(table, reader)
    return total


def _laplace_table(
    table: _exp_tables.GeometricTable, n: int, rng: np.random.Generator, out: np.ndarray
) -> np.ndarray:
    """Fill ``out`` (n > 0) with discrete Laplace samples by inversion of ``table``."""
    stream = WordStream(rng, int(n * _WORDS_LAPLACE_TABLE) + 8)
    hi, lo, guide, k, size = table.hi, table.lo, table.guide, table.k, table.size

    def kernel(words: np.ndarray, st: np.ndarray, dest: np.ndarray, i: int) -> tuple:
        return _table_kernels.laplace_table_kernel(words, st, hi, lo, guide, k, size, dest, i)

    def finish(reader: WordStream, m: int, total: int) -> int | None:
        logger.debug("discrete Laplace: an inversion undecided on 64 bits, finished exactly")
        total = _geometric_finish(table, reader, m, total)
        negative = reader.bit() == 1
        if negative and total == 0:
            return None
        return -total if negative else total

    return _with_big(out, stream.run(kernel, out, finish))


def _gaussian_table(
    table: _exp_tables.AcceptanceTable, n: int, rng: np.random.Generator, out: np.ndarray
) -> np.ndarray:
    """Fill ``out`` (n > 0) with discrete Gaussian samples: tabled proposal and acceptance."""
    geo = table.geometric
    a, b, t = table.a, table.b, table.t
    den, bt = 2 * a * b * t * t, b * t
    stream = WordStream(rng, int(n * _WORDS_GAUSSIAN_TABLE) + 8)

    def kernel(words: np.ndarray, st: np.ndarray, dest: np.ndarray, i: int) -> tuple:
        return _table_kernels.gaussian_table_kernel(
            words, st, geo.hi, geo.lo, geo.guide, geo.k, geo.size,
            table.hi, table.lo, a, b, t, dest, i,
        )  # fmt: skip

    def accept(reader: WordStream, y: int) -> bool:
        """Exact acceptance of |Y| = y, reading bits as the kernel does."""
        if y >= table.size:
            z = y * bt - a
            return reader.bern_exp(z * z, den)
        if y * bt == a:
            return True
        below, _, _ = _exp_tables.below_exact(
            reader, reader.bits(32), 32, functools.partial(table.floor_at, y)
        )
        return below

    def finish(reader: WordStream, kind: int, y: int) -> int | None:
        st = reader.state
        if kind == _table_kernels.PROPOSAL_TIE:
            logger.debug("discrete Gaussian: a proposal undecided on 64 bits, finished exactly")
            y = _geometric_finish(geo, reader, int(st[5]), y)
            negative = reader.bit() == 1
            if negative and y == 0:
                return None
            accepted = accept(reader, y)
        else:
            negative = int(st[6]) == 1
            if kind == _table_kernels.ACCEPT_TIE:
                logger.debug("discrete Gaussian: an acceptance undecided on 64 bits, exact")
                prefix = (int(st[3]) << 32) | int(st[4])
                at = functools.partial(table.floor_at, y)
                accepted, _, _ = _exp_tables.below_exact(reader, prefix, 64, at)
            else:
                logger.debug(
                    "discrete Gaussian: acceptance beyond int64, finished with Python ints"
                )
                z = y * bt - a
                accepted = reader.bern_exp(z * z, den)
        if not accepted:
            return None
        return -y if negative else y

    return _with_big(out, stream.run(kernel, out, finish))


def _gaussian_compiled(a: int, b: int, t: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n discrete Gaussian samples, sigma2 = a/b, 2 a b t^2 < 2**62 (CKS20 Algorithm 3).

    With tables (:mod:`mechanisms._table_kernels`) when the proposal's table is small enough,
    else with CKS20's Algorithms 1-2 for the proposal and the acceptance.
    """
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    kt = bit_length_below(t)
    lemire = _lemire_threshold(t, kt)
    if _exp_tables.table_size(t, 1) <= _exp_tables.MAX_ENTRIES:
        return _gaussian_table(_exp_tables.acceptance_table(a, b, t), n, rng, out)
    den, bt = 2 * a * b * t * t, b * t
    stream = WordStream(rng, int(n * _WORDS_GAUSSIAN_BASE) + 8)

    def kernel(words: np.ndarray, st: np.ndarray, dest: np.ndarray, i: int) -> tuple:
        return _kernels.gaussian_kernel(words, st, a, b, t, kt, lemire, dest, i)

    def finish(reader: WordStream, u: int, v: int) -> int | None:
        logger.debug("discrete Gaussian: acceptance beyond int64, finished with Python ints")
        y = u + t * v
        negative = reader.bit() == 1
        if negative and y == 0:
            return None
        z = y * bt - a
        if not reader.bern_exp(z * z, den):
            return None
        return -y if negative else y

    return _with_big(out, stream.run(kernel, out, finish))


# ---------------------------------------------------------------- pmfs (floats: analysis only)


def discrete_laplace_pmf(x: int | np.ndarray, scale: Exact) -> float | np.ndarray:
    """P(X = x) for the discrete Laplace of ``scale``, as floats (tests and analysis only).

    P(x) = (1 - q) / (1 + q) * q**|x| with q = exp(-1/scale).
    """
    s = float(as_fraction(scale, "scale"))
    q = math.exp(-1.0 / s)
    values = np.abs(np.asarray(x, dtype=float))
    result = (-math.expm1(-1.0 / s)) / (1.0 + q) * np.exp(-values / s)
    return float(result) if np.ndim(result) == 0 else result


def _gaussian_normaliser(s2: float) -> float:
    """sum_k exp(-k^2 / (2 s2)): direct sum for moderate s2, Poisson summation beyond."""
    if s2 > 1e8:
        # Poisson summation: sqrt(2 pi s2) * (1 + 2 sum_m exp(-2 pi^2 s2 m^2)); the tail
        # terms are far below double precision at this size.
        return math.sqrt(2.0 * math.pi * s2)
    half = math.ceil(math.sqrt(2.0 * s2 * 800.0)) + 1  # exp(-800) underflows: wide enough
    k = np.arange(-half, half + 1, dtype=float)
    return float(np.exp(-(k * k) / (2.0 * s2)).sum())


def discrete_gaussian_pmf(x: int | np.ndarray, sigma2: Exact) -> float | np.ndarray:
    """P(X = x) for the discrete Gaussian of ``sigma2``, as floats (tests and analysis only).

    The normalising constant is summed over |k| <= sqrt(1600 sigma2), beyond which terms
    underflow (Poisson summation for very large sigma2).
    """
    s2 = float(as_fraction(sigma2, "sigma2"))
    values = np.asarray(x, dtype=float)
    result = np.exp(-(values * values) / (2.0 * s2)) / _gaussian_normaliser(s2)
    return float(result) if np.ndim(result) == 0 else result


def compiled_gaussian_sigma2(sigma2: Exact) -> Fraction:
    """The smallest dyadic rational ``>= sigma2`` whose draws the compiled kernel takes
    (``sigma2`` itself when it does), or ``sigma2`` when none does (a huge scale).

    Why: a budget split by exact shares (the Census's production strategies: rho 293764/114921
    times 447/4099 times 754/4097) gives a sigma^2 of 40-bit numerator and denominator, beyond
    the kernel's 62-bit integers, so every draw took the big-integer path (Python, one draw at a
    time: hours for a state). Rounding sigma^2 up by less than 1e-7 of itself keeps every
    decision exact and never adds less noise than calibrated: the privacy loss is at most the
    recorded budget (``DiscreteGaussianMechanism.noise_sigma2``).
    """
    frac = as_fraction(sigma2, "sigma2")
    a, b = frac.numerator, frac.denominator
    t = math.isqrt(a // b) + 1
    if 2 * a * b * t * t < _LIMIT:
        return frac
    for k in range(62, -1, -1):
        den = 1 << k
        num = -((-a * den) // b)  # ceil(sigma2 * den)
        if 2 * num * den * t * t < _LIMIT and math.isqrt(num // den) + 1 == t:
            return Fraction(num, den)
    return frac
