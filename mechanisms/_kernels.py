"""Compiled (numba) kernels of the CKS20 samplers, reading random bits from raw 64-bit words.

The samplers use these for Bernoulli(exp(-gamma)) and for discrete Laplace and Gaussian scales
past the exact tables' cap (:mod:`mechanisms._table_kernels` below it, which also reuses the
bit helpers here).

The algorithms are those of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS20: Algorithm 1 (Bernoulli(exp(-gamma))),
Algorithm 2 (discrete Laplace) and Algorithm 3 (discrete Gaussian), one sample at a time in
compiled loops. Every decision is a comparison of int64 integers; no float is computed.

Randomness: the caller (:mod:`mechanisms._words`) passes a block of the secure generator's raw
64-bit words (``int64`` view). They are read as a stream of bits, low half-word first and
low bit first. The bit state is three integers: ``c`` the cached bits (fewer than 2**32),
``h`` how many are left in it, ``i`` the index of the next 32-bit half-word; the helpers take
and return it (so it stays in registers), the kernels load it from and store it to ``st[0:3]``.

How bits become decisions (all exact, all integer):

* a uniform integer on [0, m): ``bit_length(m - 1)`` bits, rejected when >= m; or, for
  m <= 2**12 far from a power of two, Lemire's multiply-and-shift on 16 bits;
* Bernoulli(r/d): 8 fresh bits u against r/d's first 8 binary digits D, compared without
  dividing ((u + 1) d <= 2**8 r iff u < D); on a tie (probability 2**-8) bit by bit against
  the remainder's digits, by doubling;
* Algorithm 1's K (the first k at which Bernoulli(gamma/k) fails) as min(G, J): G the first
  failing Bernoulli(gamma) coin, J the first failing Bernoulli(1/j) coin, independent. J has
  P(J > j) = 1/j!, a rational, so it is read off one uniform W (8 bits, ties decided by the
  following bits) by comparing with 1/2!, ..., 1/5!; then at most J - 1 Bernoulli(gamma)
  coins are drawn.

Measured: a discrete Laplace sample takes about 20-66 bits at scales 1-1000, a discrete
Gaussian about 85-115 (``benchmarks/bench_samplers.py`` prints words per sample).

Running out of words: a kernel keeps a checkpoint (a copy of the state) before each candidate.
Past the end of the block the bits come from a filler (a hash of the index); when the
candidate is done the kernel sees ``i`` past the block, discards it, stores the checkpoint and
returns ``NEED_WORDS`` so that the caller appends words and calls again. The candidate is
redrawn from the same stream position, so the output is a function of the stream alone, not of
the block sizes.

Candidates whose intermediate integers would pass int64 (a Laplace value beyond 2**63, or a
Gaussian acceptance exponent whose square would overflow) are returned as ``BIG`` with their
(U, V) before the sign bit is drawn; the caller finishes them with Python ints on the same bit
stream (:class:`mechanisms._words.WordStream`) and calls the kernel again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

__all__ = [
    "DONE",
    "NEED_WORDS",
    "BIG",
    "STATE_SIZE",
    "LIMIT",
    "bernoulli_exp_kernel",
    "laplace_kernel",
    "gaussian_kernel",
]

DONE = 0
NEED_WORDS = 1
BIG = 2
STATE_SIZE = 8  # c, h, i, then words a kernel may hand to its Python continuation

LIMIT = 2**62  # bound on every denominator and parameter the kernels take
_INT64_MAX = 2**63 - 1
_SQUARE_SAFE = 3037000499  # isqrt(2**63 - 1): |z| <= this  =>  z * z fits in int64
_HALF_MASK = 0xFFFFFFFF
_BLOCK = 8  # bits of U compared at once with a probability's first digits
_BLOCK_DEN_MAX = 2 ** (62 - _BLOCK)  # r << _BLOCK fits in int64 for r < d <= this
_FILLER_MUL = 6364136223846793005
_FILLER_ADD = 1442695040888963407

_F = TypeVar("_F", bound=Callable[..., Any])
_njit: Any = numba.njit  # its stubs do not list _nrt


def _compiled(function: _F) -> _F:
    """numba-compile ``function``: machine code cached on disk; no reference counting.

    Without the runtime's reference counting (``_nrt=False``) a call that passes the word and
    state arrays costs no atomic increments; measured, those were most of a sample's time. It
    also forbids allocating arrays in a kernel: the callers pass every array.
    """
    return cast(_F, _njit(cache=True, _nrt=False)(function))


def _inlined(function: _F) -> _F:
    """As :func:`_compiled`, and inlined into its callers by numba (the per-sample helpers)."""
    return cast(_F, _njit(cache=True, _nrt=False, inline="always")(function))


# ---------------------------------------------------------------- bits
# Speed notes (measured): in-place operators on array items (st[0] >>= 1) compile about 50x
# slower than a load and a store; reading a global numpy array from an inlined helper cost
# about 30 ns; a 64-bit division about 40 ns on the development machine, and LLVM hoists a
# division out of a rarely taken branch. So the kernels never divide in a loop and use no
# tables: a block of digits is compared by multiplying instead. The bit state travels as
# three integers (c, h, i) through the helpers, which return it updated, so that it stays in
# registers (measured 15% faster than reading and writing it in an array).


@_inlined
def _half(words: np.ndarray, i: int) -> tuple[int, int]:
    """(the next 32 random bits, i + 1); past the end of ``words``, filler bits.

    The filler is a multiplicative hash of the index: it only has to end the loops of a
    candidate that the kernel then discards (``i`` past ``2 * words.size`` says so).
    """
    if i < 2 * words.size:
        return (words[i >> 1] >> (32 * (i & 1))) & _HALF_MASK, i + 1
    return ((i * _FILLER_MUL + _FILLER_ADD) >> 32) & _HALF_MASK, i + 1


@_inlined
def _bit(words: np.ndarray, c: int, h: int, i: int) -> tuple[int, int, int, int]:
    """(one random bit, c, h, i): c holds h unread bits, i is the next half-word's index."""
    if h == 0:
        c, i = _half(words, i)
        h = 32
    return c & 1, c >> 1, h - 1, i


@_inlined
def _bits(words: np.ndarray, c: int, h: int, i: int, k: int) -> tuple[int, int, int, int]:
    """(k random bits as an integer in [0, 2**k), c, h, i), for 1 <= k <= 32."""
    if h >= k:
        return c & ((1 << k) - 1), c >> k, h - k, i
    fresh, i = _half(words, i)
    need = k - h
    value = c | ((fresh & ((1 << need) - 1)) << h)
    return value, fresh >> need, 32 - need, i


@_inlined
def _uniform(
    words: np.ndarray, c: int, h: int, i: int, m: int, k: int
) -> tuple[int, int, int, int]:
    """Uniform integer on [0, m), 1 <= m < 2**62, k = bit_length(m - 1): rejection sampling."""
    if m == 1:
        return 0, c, h, i
    while True:
        if k <= 32:
            value, c, h, i = _bits(words, c, h, i, k)
        else:
            low, c, h, i = _bits(words, c, h, i, 32)
            high, c, h, i = _bits(words, c, h, i, k - 32)
            value = low | (high << 32)
        if value < m:
            return value, c, h, i


@_inlined
def _uniform_small(
    words: np.ndarray, c: int, h: int, i: int, m: int, threshold: int
) -> tuple[int, int, int, int]:
    """Uniform integer on [0, m), 2 <= m <= 2**12, by Lemire's multiply-and-shift.

    x = 16 bits, p = x m: p >> 16 is uniform on [0, m) when the low 16 bits of p are at least
    ``threshold`` = 2**16 mod m (Lemire, "Fast random integer generation in an interval",
    ACM TOMACS 2019); they are below it with probability < m / 2**16. Fewer mispredicted
    branches than :func:`_uniform` when m is far from a power of two.
    """
    while True:
        x, c, h, i = _bits(words, c, h, i, 16)
        product = x * m
        if (product & 0xFFFF) >= threshold:
            return product >> 16, c, h, i


# ---------------------------------------------------------------- Bernoulli(r/d)


@_compiled
def _bernoulli_bits(
    words: np.ndarray, c: int, h: int, i: int, x: int, d: int
) -> tuple[bool, int, int, int]:
    """Bernoulli(x/d), 0 <= x < d < 2**62: fresh bits against x/d's binary digits.

    The uniform U = 0.u1 u2 ... is below x/d iff at the first digit where they differ U's
    bit is 0. Digits by doubling (no division). Once the remainder is 0 the remaining digits
    are all 0, and U >= x/d.
    """
    while x != 0:
        x <<= 1
        digit = 0
        if x >= d:
            digit = 1
            x -= d
        bit, c, h, i = _bit(words, c, h, i)
        if bit != digit:
            return digit == 1, c, h, i
    return False, c, h, i


@_inlined
def _bernoulli(
    words: np.ndarray, c: int, h: int, i: int, r: int, d: int
) -> tuple[bool, int, int, int]:
    """Bernoulli(r/d) for 0 <= r < d <= _BLOCK_DEN_MAX: a block of bits, then bit by bit.

    Draw u, ``_BLOCK`` fresh bits; r/d's first block of digits is D = floor(2**_BLOCK r / d).
    u < D iff (u + 1) d <= 2**_BLOCK r: U < r/d; u > D iff u d > 2**_BLOCK r: U > r/d; on a tie
    (probability 2**-_BLOCK) :func:`_bernoulli_bits` goes on from the remainder
    2**_BLOCK r - u d. Multiplications only, no division.
    """
    u, c, h, i = _bits(words, c, h, i, _BLOCK)
    ud = u * d
    shifted = r << _BLOCK
    if ud + d <= shifted:
        return True, c, h, i
    if ud > shifted:
        return False, c, h, i
    return _bernoulli_bits(words, c, h, i, shifted - ud, d)


@_inlined
def _bernoulli_any(
    words: np.ndarray, c: int, h: int, i: int, r: int, d: int
) -> tuple[bool, int, int, int]:
    """Bernoulli(r/d) for 0 <= r < d < 2**62: blocks when d allows, else bit by bit."""
    if d <= _BLOCK_DEN_MAX:
        return _bernoulli(words, c, h, i, r, d)
    return _bernoulli_bits(words, c, h, i, r, d)


# ---------------------------------------------------------------- CKS20 Algorithm 1

# J = the first j >= 2 at which Bernoulli(1/j) fails has P(J > j) = 1/j!, a rational: J is
# read off ONE uniform W by comparing it with 1/2!, 1/3!, 1/4!, 1/5! (the events are nested).
# With w = the first 8 bits of W: w < floor(2**8/j!) means W < 1/j!, w > it means W > 1/j!,
# and on a tie (w in {42, 10, 2}: 3 in 256) the following bits decide against the remainder
# (2**8 mod j!)/j!. Past 1/5! (probability 1/120), one Bernoulli(1/j) coin at a time.
_J_BITS = 8
_F2, _F3, _F4, _F5 = (2**_J_BITS // math.factorial(j) for j in range(2, 6))
_R3, _R4, _R5 = (2**_J_BITS % math.factorial(j) for j in range(3, 6))
_J_TABLE = 5


@_compiled
def _j_tie(words: np.ndarray, c: int, h: int, i: int, w: int) -> tuple[int, int, int, int]:
    """1 if W < 1/j! for the j whose threshold w ties with (the bits after w decide), else 0."""
    below = False
    if w == _F3:
        below, c, h, i = _bernoulli_bits(words, c, h, i, _R3, 6)
    elif w == _F4:
        below, c, h, i = _bernoulli_bits(words, c, h, i, _R4, 24)
    elif w == _F5:
        below, c, h, i = _bernoulli_bits(words, c, h, i, _R5, 120)
    return int(below), c, h, i


@_inlined
def _first_failure(words: np.ndarray, c: int, h: int, i: int) -> tuple[int, int, int, int]:
    """J, the first j >= 2 at which Bernoulli(1/j) fails (independent coins): P(J > j) = 1/j!.

    8 bits and four comparisons, no branch on them (``_F2`` = 2**7 is exact: no tie there).
    """
    w, c, h, i = _bits(words, c, h, i, _J_BITS)
    count = int(w < _F2) + int(w < _F3) + int(w < _F4) + int(w < _F5)
    if w in (_F3, _F4, _F5):
        tie, c, h, i = _j_tie(words, c, h, i, w)
        count += tie
    j = 2 + count
    if j > _J_TABLE:
        while True:
            ok, c, h, i = _bernoulli(words, c, h, i, 1, j)
            if not ok:
                break
            j += 1
    return j, c, h, i


@_inlined
def _bern_exp1(words: np.ndarray, c: int, h: int, i: int) -> tuple[bool, int, int, int]:
    """Bernoulli(exp(-1)): Algorithm 1 with gamma = 1 (every Bernoulli(gamma) coin succeeds).

    K is the first k at which Bernoulli(1/k) fails, here K = J; the output is "K is odd".
    """
    j, c, h, i = _first_failure(words, c, h, i)
    return j % 2 == 1, c, h, i


@_inlined
def _bern_exp_frac(
    words: np.ndarray, c: int, h: int, i: int, rem: int, den: int
) -> tuple[bool, int, int, int]:
    """Bernoulli(exp(-rem/den)) for 0 <= rem <= den < 2**62 (CKS20 Algorithm 1, gamma <= 1).

    K is the first k at which Bernoulli(gamma/k) fails; the output is "K is odd". The k-th
    coin is Bernoulli(gamma) AND Bernoulli(1/k), independent, so K = min(G, J) with G the
    first failing Bernoulli(gamma) and J as in :func:`_first_failure`: J is drawn first, then
    at most J - 1 Bernoulli(gamma) coins. No product den*k is ever formed.
    """
    if rem == 0:
        return True, c, h, i
    if rem >= den:
        return _bern_exp1(words, c, h, i)
    j, c, h, i = _first_failure(words, c, h, i)
    for k in range(1, j):
        ok, c, h, i = _bernoulli_any(words, c, h, i, rem, den)
        if not ok:
            return k % 2 == 1, c, h, i
    return j % 2 == 1, c, h, i


@_inlined
def _bern_exp(
    words: np.ndarray, c: int, h: int, i: int, whole: int, rem: int, den: int
) -> tuple[bool, int, int, int]:
    """Bernoulli(exp(-(whole + rem/den))), rem < den < 2**62 (CKS20 Algorithm 1, gamma > 1).

    exp(-gamma) = exp(-rem/den) * exp(-1)**whole: the fractional coin first, then one
    Bernoulli(exp(-1)) per unit, stopping at the first failure.
    """
    ok, c, h, i = _bern_exp_frac(words, c, h, i, rem, den)
    if not ok:
        return False, c, h, i
    for _ in range(whole):
        ok, c, h, i = _bern_exp1(words, c, h, i)
        if not ok:
            return False, c, h, i
    return True, c, h, i


@_inlined
def _geometric_exp1(words: np.ndarray, c: int, h: int, i: int) -> tuple[int, int, int, int]:
    """V = number of Bernoulli(exp(-1)) successes before the first failure: P(V >= v) = e^-v."""
    v = 0
    while True:
        ok, c, h, i = _bern_exp1(words, c, h, i)
        if not ok:
            return v, c, h, i
        v += 1


@_compiled
def bernoulli_exp_kernel(
    words: np.ndarray,
    st: np.ndarray,
    whole: int,
    rem: int,
    den: int,
    out: np.ndarray,
    start: int,
) -> tuple[int, int, int, int]:
    """Fill ``out[start:]`` (bool) with Bernoulli(exp(-(whole + rem/den))) (CKS20 Algorithm 1).

    Requires rem < den < 2**62. ``st[0:3]`` holds the bit state (c, h, i) on entry and on
    return. Returns (status, next index, 0, 0); status ``NEED_WORDS`` when the block ran out
    (the state is then the one before the unfinished draw).
    """
    c, h, i = st[0], st[1], st[2]
    end = 2 * words.size
    n = start
    while n < out.size:
        c0, h0, i0 = c, h, i
        value, c, h, i = _bern_exp(words, c, h, i, whole, rem, den)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        out[n] = value
        n += 1
    st[0], st[1], st[2] = c, h, i
    return DONE, n, 0, 0


# ---------------------------------------------------------------- CKS20 Algorithms 2 and 3


@_inlined
def _laplace_uv(
    words: np.ndarray, c: int, h: int, i: int, t: int, kt: int, lemire: int
) -> tuple[bool, int, int, int, int, int]:
    """The (U, V) part of one CKS20 Algorithm 2 candidate: (kept, U, V, c, h, i).

    U uniform on [0, t) kept with probability exp(-U/t), V geometric as above; X = U + tV is
    then geometric with parameter exp(-1/t). U is drawn by :func:`_uniform_small` with
    ``lemire`` = 2**16 mod t when that is >= 0, else by :func:`_uniform` on ``kt`` bits.
    """
    u = 0
    if t != 1:
        if lemire < 0:
            u, c, h, i = _uniform(words, c, h, i, t, kt)
        else:
            u, c, h, i = _uniform_small(words, c, h, i, t, lemire)
        ok, c, h, i = _bern_exp_frac(words, c, h, i, u, t)
        if not ok:
            return False, 0, 0, c, h, i
    v, c, h, i = _geometric_exp1(words, c, h, i)
    return True, u, v, c, h, i


@_compiled
def laplace_kernel(
    words: np.ndarray,
    st: np.ndarray,
    t: int,
    kt: int,
    lemire: int,
    s: int,
    out: np.ndarray,
    start: int,
) -> tuple[int, int, int, int]:
    """Fill ``out[start:]`` with discrete Laplace samples of scale t/s (CKS20 Algorithm 2).

    Y = floor((U + tV) / s) with a random sign, "-0" rejected. ``kt`` = bit_length(t - 1);
    ``lemire`` as in :func:`_laplace_uv`. ``st[0:3]`` holds the bit state on entry and
    return. Returns (status, next index, U, V): ``BIG`` with the candidate's (U, V), before
    its sign bit, when U + tV might pass int64.
    """
    v_max = (_INT64_MAX - t) // t  # v <= v_max  =>  u + t v < 2**63
    c, h, i = st[0], st[1], st[2]
    end = 2 * words.size
    n = start
    while n < out.size:
        c0, h0, i0 = c, h, i
        kept, u, v, c, h, i = _laplace_uv(words, c, h, i, t, kt, lemire)
        negative = 0
        y = 0
        if kept:
            if v > v_max:
                if i > end:
                    st[0], st[1], st[2] = c0, h0, i0
                    return NEED_WORDS, n, 0, 0
                st[0], st[1], st[2] = c, h, i
                return BIG, n, u, v
            y = u + t * v
            if s != 1:
                y = y // s
            negative, c, h, i = _bit(words, c, h, i)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if not kept or (negative == 1 and y == 0):
            continue
        out[n] = -y if negative == 1 else y
        n += 1
    st[0], st[1], st[2] = c, h, i
    return DONE, n, 0, 0


@_compiled
def gaussian_kernel(
    words: np.ndarray,
    st: np.ndarray,
    a: int,
    b: int,
    t: int,
    kt: int,
    lemire: int,
    out: np.ndarray,
    start: int,
) -> tuple[int, int, int, int]:
    """Fill ``out[start:]`` with discrete Gaussian samples, sigma2 = a/b (CKS20 Algorithm 3).

    t = floor(sqrt(a/b)) + 1; propose Y from the discrete Laplace of scale t (Algorithm 2,
    whose "-0" rejection just restarts the candidate) and accept with probability
    exp(-(|Y| b t - a)^2 / (2 a b t^2)), an exact ratio of integers. The caller guarantees
    2 a b t^2 < 2**62. Returns (status, next index, U, V) as :func:`laplace_kernel`; ``BIG``
    also when |Y| b t or its square with a subtracted might pass int64.
    """
    den = 2 * a * b * t * t
    bt = b * t
    y_safe = LIMIT // bt
    v_max = (_INT64_MAX - t) // t
    c, h, i = st[0], st[1], st[2]
    end = 2 * words.size
    n = start
    while n < out.size:
        c0, h0, i0 = c, h, i
        kept, u, v, c, h, i = _laplace_uv(words, c, h, i, t, kt, lemire)
        big = False
        if kept:
            if v > v_max:
                big = True
            else:
                x = u + t * v
                big = x > y_safe or abs(x * bt - a) > _SQUARE_SAFE
        if big:
            if i > end:
                st[0], st[1], st[2] = c0, h0, i0
                return NEED_WORDS, n, 0, 0
            st[0], st[1], st[2] = c, h, i
            return BIG, n, u, v
        accepted = False
        y = 0
        if kept:
            y = u + t * v
            negative, c, h, i = _bit(words, c, h, i)
            if not (negative == 1 and y == 0):
                z = y * bt - a
                rem = z * z
                whole = 0
                while rem >= den and whole < 8:  # usually a few units: no division
                    rem -= den
                    whole += 1
                if rem >= den:
                    q = rem // den
                    whole += q
                    rem -= q * den
                accepted, c, h, i = _bern_exp(words, c, h, i, whole, rem, den)
                if negative == 1:
                    y = -y
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if accepted:
            out[n] = y
            n += 1
    st[0], st[1], st[2] = c, h, i
    return DONE, n, 0, 0
