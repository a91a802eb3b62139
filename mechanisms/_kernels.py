"""Compiled (numba) kernels of the CKS20 samplers, reading random bits from raw 64-bit words.

The algorithms are those of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), hereafter CKS20: Algorithm 1 (Bernoulli(exp(-gamma))),
Algorithm 2 (discrete Laplace) and Algorithm 3 (discrete Gaussian), one sample at a time in
compiled loops. Every decision is a comparison of int64 integers; no float is computed.

Randomness: the caller (:mod:`mechanisms._words`) passes a block of the secure generator's raw
64-bit words (``int64`` view). They are read as a stream of bits, low half-word first and
low bit first, through a small state array ``st``:

* ``st[0]`` the cached bits (fewer than 2**32), ``st[1]`` how many are left in it,
* ``st[2]`` the index of the next 32-bit half-word, ``st[3]`` a filler state, ``st[4]`` a flag,
* ``st[5:10]`` the checkpoint.

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

Running out of words: a kernel records a checkpoint (a copy of the state) before each candidate.
Past the end of the block the bits come from a filler generator and ``st[4]`` is set; the
candidate is then discarded, ``st`` restored, and the kernel returns ``NEED_WORDS`` so that the
caller appends words and calls again. The candidate is redrawn from the same stream position,
so the output is a function of the stream alone, not of the block sizes.

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
STATE_SIZE = 5  # the state array has twice this: the state, then its checkpoint

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
# tables: a block of digits is compared by multiplying instead.


@_compiled
def _half(words: np.ndarray, st: np.ndarray) -> int:
    """The next 32 random bits; past the end of ``words``, filler bits and the flag set."""
    index = st[2]
    if index < 2 * words.size:
        st[2] = index + 1
        return (words[index >> 1] >> (32 * (index & 1))) & _HALF_MASK
    st[4] = 1
    st[3] = st[3] * _FILLER_MUL + _FILLER_ADD  # wraps: filler only needs to end the loops
    return (st[3] >> 32) & _HALF_MASK


@_compiled
def _bit(words: np.ndarray, st: np.ndarray) -> int:
    """One random bit."""
    have = st[1]
    if have == 0:
        cached = _half(words, st)
        have = 32
    else:
        cached = st[0]
    st[0] = cached >> 1
    st[1] = have - 1
    return cached & 1


@_compiled
def _bits(words: np.ndarray, st: np.ndarray, k: int) -> int:
    """k random bits (1 <= k <= 32) as an integer in [0, 2**k)."""
    cached = st[0]
    have = st[1]
    if have >= k:
        st[0] = cached >> k
        st[1] = have - k
        return cached & ((1 << k) - 1)
    fresh = _half(words, st)
    need = k - have
    value = cached | ((fresh & ((1 << need) - 1)) << have)
    st[0] = fresh >> need
    st[1] = 32 - need
    return value


@_inlined
def _uniform(words: np.ndarray, st: np.ndarray, m: int, k: int) -> int:
    """Uniform integer on [0, m), 1 <= m < 2**62, k = bit_length(m - 1): rejection sampling."""
    if m == 1:
        return 0
    while True:
        if k <= 32:
            value = _bits(words, st, k)
        else:
            value = _bits(words, st, 32) | (_bits(words, st, k - 32) << 32)
        if value < m:
            return value


@_compiled
def _save(st: np.ndarray) -> None:
    """Checkpoint the bit state into st[STATE_SIZE:] (element by element: no temporary)."""
    for j in range(STATE_SIZE):
        st[STATE_SIZE + j] = st[j]


@_compiled
def _restore(st: np.ndarray) -> None:
    """Return the bit state to the checkpoint, clearing the out-of-words flag."""
    for j in range(STATE_SIZE):
        st[j] = st[STATE_SIZE + j]


@_inlined
def _uniform_small(words: np.ndarray, st: np.ndarray, m: int, threshold: int) -> int:
    """Uniform integer on [0, m), 2 <= m <= 2**12, by Lemire's multiply-and-shift.

    x = 16 bits, p = x m: p >> 16 is uniform on [0, m) when the low 16 bits of p are at least
    ``threshold`` = 2**16 mod m (Lemire, "Fast random integer generation in an interval",
    ACM TOMACS 2019); they are below it with probability < m / 2**16. Fewer mispredicted
    branches than :func:`_uniform` when m is far from a power of two.
    """
    while True:
        product = _bits(words, st, 16) * m
        if (product & 0xFFFF) >= threshold:
            return product >> 16


# ---------------------------------------------------------------- Bernoulli(r/d)


@_compiled
def _bernoulli_bits(words: np.ndarray, st: np.ndarray, x: int, d: int) -> bool:
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
        if _bit(words, st) != digit:
            return digit == 1
    return False


@_inlined
def _bernoulli(words: np.ndarray, st: np.ndarray, r: int, d: int) -> bool:
    """Bernoulli(r/d) for 0 <= r < d <= _BLOCK_DEN_MAX: a block of bits, then bit by bit.

    Draw u, ``_BLOCK`` fresh bits; r/d's first block of digits is D = floor(2**_BLOCK r / d).
    u < D iff (u + 1) d <= 2**_BLOCK r: U < r/d; u > D iff u d > 2**_BLOCK r: U > r/d; on a tie
    (probability 2**-_BLOCK) :func:`_bernoulli_bits` goes on from the remainder
    2**_BLOCK r - u d. Multiplications only, no division.
    """
    u = _bits(words, st, _BLOCK)
    ud = u * d
    shifted = r << _BLOCK
    if ud + d <= shifted:
        return True
    if ud > shifted:
        return False
    return _bernoulli_bits(words, st, shifted - ud, d)


@_inlined
def _bernoulli_any(words: np.ndarray, st: np.ndarray, r: int, d: int) -> bool:
    """Bernoulli(r/d) for 0 <= r < d < 2**62: blocks when d allows, else bit by bit."""
    if d <= _BLOCK_DEN_MAX:
        return _bernoulli(words, st, r, d)
    return _bernoulli_bits(words, st, r, d)


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
def _j_tie(words: np.ndarray, st: np.ndarray, w: int) -> int:
    """1 if W < 1/j! for the j whose threshold w ties with (the bits after w decide), else 0."""
    if w == _F3:
        return int(_bernoulli_bits(words, st, _R3, 6))
    if w == _F4:
        return int(_bernoulli_bits(words, st, _R4, 24))
    if w == _F5:
        return int(_bernoulli_bits(words, st, _R5, 120))
    return 0


@_inlined
def _first_failure(words: np.ndarray, st: np.ndarray) -> int:
    """J, the first j >= 2 at which Bernoulli(1/j) fails (independent coins): P(J > j) = 1/j!.

    8 bits and four comparisons, no branch on them (``_F2`` = 2**7 is exact: no tie there).
    """
    w = _bits(words, st, _J_BITS)
    count = int(w < _F2) + int(w < _F3) + int(w < _F4) + int(w < _F5)
    if w in (_F3, _F4, _F5):
        count += _j_tie(words, st, w)
    j = 2 + count
    if j > _J_TABLE:
        while _bernoulli(words, st, 1, j):
            j += 1
    return j


@_inlined
def _bern_exp1(words: np.ndarray, st: np.ndarray) -> bool:
    """Bernoulli(exp(-1)): Algorithm 1 with gamma = 1 (every Bernoulli(gamma) coin succeeds).

    K is the first k at which Bernoulli(1/k) fails, here K = J; the output is "K is odd".
    """
    return _first_failure(words, st) % 2 == 1


@_inlined
def _bern_exp_frac(words: np.ndarray, st: np.ndarray, rem: int, den: int) -> bool:
    """Bernoulli(exp(-rem/den)) for 0 <= rem <= den < 2**62 (CKS20 Algorithm 1, gamma <= 1).

    K is the first k at which Bernoulli(gamma/k) fails; the output is "K is odd". The k-th
    coin is Bernoulli(gamma) AND Bernoulli(1/k), independent, so K = min(G, J) with G the
    first failing Bernoulli(gamma) and J as in :func:`_first_failure`: J is drawn first, then
    at most J - 1 Bernoulli(gamma) coins. No product den*k is ever formed.
    """
    if rem == 0:
        return True
    if rem >= den:
        return _bern_exp1(words, st)
    j = _first_failure(words, st)
    for k in range(1, j):
        if not _bernoulli_any(words, st, rem, den):
            return k % 2 == 1
    return j % 2 == 1


@_inlined
def _bern_exp(words: np.ndarray, st: np.ndarray, whole: int, rem: int, den: int) -> bool:
    """Bernoulli(exp(-(whole + rem/den))), rem < den < 2**62 (CKS20 Algorithm 1, gamma > 1).

    exp(-gamma) = exp(-rem/den) * exp(-1)**whole: the fractional coin first, then one
    Bernoulli(exp(-1)) per unit, stopping at the first failure.
    """
    if not _bern_exp_frac(words, st, rem, den):
        return False
    for _ in range(whole):  # noqa: SIM110 - a generator expression does not compile in numba
        if not _bern_exp1(words, st):
            return False
    return True


@_inlined
def _geometric_exp1(words: np.ndarray, st: np.ndarray) -> int:
    """V = number of Bernoulli(exp(-1)) successes before the first failure: P(V >= v) = e^-v."""
    v = 0
    while _bern_exp1(words, st):
        v += 1
    return v


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

    Requires rem < den < 2**62. Returns (status, next index, 0, 0); status ``NEED_WORDS``
    when the block ran out.
    """
    i = start
    while i < out.size:
        _save(st)
        value = _bern_exp(words, st, whole, rem, den)
        if st[4] != 0:
            _restore(st)
            return NEED_WORDS, i, 0, 0
        out[i] = value
        i += 1
    return DONE, i, 0, 0


# ---------------------------------------------------------------- CKS20 Algorithms 2 and 3


@_inlined
def _laplace_uv(
    words: np.ndarray, st: np.ndarray, t: int, kt: int, lemire: int
) -> tuple[bool, int, int]:
    """The (U, V) part of one CKS20 Algorithm 2 candidate: (kept, U, V).

    U uniform on [0, t) kept with probability exp(-U/t), V geometric as above; X = U + tV is
    then geometric with parameter exp(-1/t). U is drawn by :func:`_uniform_small` with
    ``lemire`` = 2**16 mod t when that is >= 0, else by :func:`_uniform` on ``kt`` bits.
    """
    u = 0
    if t != 1:
        u = _uniform(words, st, t, kt) if lemire < 0 else _uniform_small(words, st, t, lemire)
        if not _bern_exp_frac(words, st, u, t):
            return False, 0, 0
    return True, u, _geometric_exp1(words, st)


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
    ``lemire`` as in :func:`_laplace_uv`.
    Returns (status, next index, U, V): ``BIG`` with the candidate's (U, V), before its sign
    bit, when U + tV might pass int64.
    """
    v_max = (_INT64_MAX - t) // t  # v <= v_max  =>  u + t v < 2**63
    i = start
    while i < out.size:
        _save(st)
        kept, u, v = _laplace_uv(words, st, t, kt, lemire)
        if kept and v > v_max:
            if st[4] != 0:
                _restore(st)
                return NEED_WORDS, i, 0, 0
            return BIG, i, u, v
        negative = 0
        y = 0
        if kept:
            y = u + t * v
            if s != 1:
                y = y // s
            negative = _bit(words, st)
        if st[4] != 0:
            _restore(st)
            return NEED_WORDS, i, 0, 0
        if not kept or (negative == 1 and y == 0):
            continue
        out[i] = -y if negative == 1 else y
        i += 1
    return DONE, i, 0, 0


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
    i = start
    while i < out.size:
        _save(st)
        kept, u, v = _laplace_uv(words, st, t, kt, lemire)
        big = False
        if kept:
            if v > v_max:
                big = True
            else:
                x = u + t * v
                big = x > y_safe or abs(x * bt - a) > _SQUARE_SAFE
        if big:
            if st[4] != 0:
                _restore(st)
                return NEED_WORDS, i, 0, 0
            return BIG, i, u, v
        accepted = False
        y = 0
        if kept:
            y = u + t * v
            negative = _bit(words, st)
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
                accepted = _bern_exp(words, st, whole, rem, den)
                if negative == 1:
                    y = -y
        if st[4] != 0:
            _restore(st)
            return NEED_WORDS, i, 0, 0
        if accepted:
            out[i] = y
            i += 1
    return DONE, i, 0, 0
