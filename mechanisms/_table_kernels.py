"""Compiled table-driven discrete Laplace: inversion of the geometric law on 32-bit words.

The CKS20 discrete Laplace (:mod:`mechanisms._kernels`) spends 20-66 random bits and several
unpredictable branches per sample at scales 1-1000. Here the magnitude is drawn by inversion
instead: G with P(G >= m) = q**m, q = exp(-s/t), is the smallest m with U < F(m) =
1 - q**(m + 1), for U uniform on [0, 1). The table (:mod:`mechanisms._exp_tables`) stores
floor(2**64 F(m)) for m < size = ceil(6 t/s); the kernel reads U's first 32 bits w, starts at a
guide entry indexed by w's top bits, and walks up the table. Each comparison is decided by w
alone unless w equals the entry's high half (then 32 more bits of U, read once, against the
low half), and is left undecided only if all 64 bits tie, with probability 2**-64; the
candidate is then handed to Python (status ``BIG``), which decides it exactly with more bits
(:func:`mechanisms._exp_tables.resolve_geometric`). If U passes the whole table (probability
q**size = exp(-6)) the magnitude is size plus a fresh geometric draw (memorylessness).

The discrete Laplace of scale t/s is then Y = +-G with one sign bit, "-0" rejected (CKS20's
Algorithm 2 ends the same way): P(Y = y) is proportional to q**|y|. About 33 bits per
candidate, 2/(1 + q) candidates per sample. Every decision is an integer comparison.

Bits come from :mod:`mechanisms._kernels`' stream (same order, same filler past the block, same
``NEED_WORDS`` checkpoint protocol); for an undecided candidate the kernel stores U's first 64
bits in ``st[3]`` (high half) and ``st[4]`` (low half) and returns (``BIG``, index, m, total).
"""

from __future__ import annotations

import numpy as np

from mechanisms._kernels import (
    _SQUARE_SAFE,
    BIG,
    DONE,
    LIMIT,
    NEED_WORDS,
    _bern_exp,
    _bit,
    _bits,
    _compiled,
    _inlined,
)

__all__ = [
    "laplace_table_kernel",
    "gaussian_table_kernel",
    "PROPOSAL_TIE",
    "ACCEPT_TIE",
    "ACCEPT_BIG",
]


@_inlined
def _invert(
    words: np.ndarray,
    c: int,
    h: int,
    i: int,
    hi: np.ndarray,
    lo: np.ndarray,
    guide: np.ndarray,
    k: int,
    size: int,
    end: int,
) -> tuple[int, int, int, int, bool, int, int, int]:
    """One geometric draw by table inversion: (total, m, w, w2, undecided, c, h, i).

    ``total`` is the magnitude when decided. When undecided, ``total`` holds the escapes so
    far (multiples of ``size``), m the entry that tied and (w, w2) U's first 64 bits; m equal
    to ``size`` means "continue with a fresh draw" (only when the total nears int64, or past
    the block, where the candidate is discarded anyway).
    """
    total = 0
    while True:
        w, c, h, i = _bits(words, c, h, i, 32)
        m = guide[w >> (32 - k)]
        loaded = False
        w2 = 0
        while True:  # hi[size] = 2**32 > w ends the walk at the latest
            fh = hi[m]
            if w < fh:
                break
            if w == fh:
                if not loaded:
                    w2, c, h, i = _bits(words, c, h, i, 32)
                    loaded = True
                fl = lo[m]
                if w2 < fl:
                    break
                if w2 == fl:
                    return total, m, w, w2, True, c, h, i
            m += 1
        if m < size:
            return total + m, m, w, w2, False, c, h, i
        total += size
        if i > end or total > LIMIT - size:
            return total, size, 0, 0, True, c, h, i


@_compiled
def laplace_table_kernel(
    words: np.ndarray,
    st: np.ndarray,
    hi: np.ndarray,
    lo: np.ndarray,
    guide: np.ndarray,
    k: int,
    size: int,
    out: np.ndarray,
    start: int,
) -> tuple[int, int, int, int]:
    """Fill ``out[start:]`` with discrete Laplace samples by table inversion (module docstring).

    ``hi``, ``lo``, ``guide``, ``k``, ``size``: the fields of a
    :class:`mechanisms._exp_tables.GeometricTable`. ``st`` holds the bit state (c, h, i)
    and, on ``BIG``, U's 64-bit prefix. Returns (status, next index, m, total) as the CKS20
    kernels return (status, next index, U, V).
    """
    c, h, i = st[0], st[1], st[2]
    end = 2 * words.size
    n = start
    while n < out.size:
        c0, h0, i0 = c, h, i
        g, m, w, w2, undecided, c, h, i = _invert(words, c, h, i, hi, lo, guide, k, size, end)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if undecided:
            st[0], st[1], st[2], st[3], st[4] = c, h, i, w, w2
            return BIG, n, m, g
        negative, c, h, i = _bit(words, c, h, i)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if negative == 1:
            if g == 0:
                continue
            g = -g
        out[n] = g
        n += 1
    st[0], st[1], st[2] = c, h, i
    return DONE, n, 0, 0


# undecided Gaussian candidates, told apart by the finisher (third value of the BIG return)
PROPOSAL_TIE = 0  # the proposal's inversion tied on 64 bits (st[3:5] = U's prefix, st[5] = m)
ACCEPT_TIE = 1  # the acceptance comparison tied on 64 bits (st[3:5] = prefix, st[6] = sign)
ACCEPT_BIG = 2  # |Y| beyond the table and its CKS20 integers beyond int64 (st[6] = sign)


@_compiled
def gaussian_table_kernel(
    words: np.ndarray,
    st: np.ndarray,
    hi: np.ndarray,
    lo: np.ndarray,
    guide: np.ndarray,
    k: int,
    size: int,
    ahi: np.ndarray,
    alo: np.ndarray,
    a: int,
    b: int,
    t: int,
    out: np.ndarray,
    start: int,
) -> tuple[int, int, int, int]:
    """Fill ``out[start:]`` with discrete Gaussian samples, sigma2 = a/b (CKS20 Algorithm 3).

    The proposal Y = +-G, G geometric by inversion of the scale-t table (``hi``, ``lo``,
    ``guide``, ``k``, ``size``), "-0" rejected; accepted with probability A(|Y|) =
    exp(-(|Y| b t - a)**2 / (2 a b t**2)): for |Y| < size a fresh 32-bit prefix of a uniform
    against floor(2**64 A) (``ahi``, ``alo``, 32 more bits on a tie), beyond the table by CKS20
    Algorithm 1 on integers. Returns (status, next index, kind, value): on ``BIG`` the kind is
    one of the constants above and the value the magnitude so far.
    """
    bt = b * t
    den = 2 * a * bt * t
    y_safe = LIMIT // bt
    c, h, i = st[0], st[1], st[2]
    end = 2 * words.size
    n = start
    while n < out.size:
        c0, h0, i0 = c, h, i
        g, m, w, w2, undecided, c, h, i = _invert(words, c, h, i, hi, lo, guide, k, size, end)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if undecided:
            st[0], st[1], st[2], st[3], st[4], st[5] = c, h, i, w, w2, m
            return BIG, n, PROPOSAL_TIE, g
        negative, c, h, i = _bit(words, c, h, i)
        accepted = False
        if not (negative == 1 and g == 0):
            if g < size:
                w, c, h, i = _bits(words, c, h, i, 32)
                fh = ahi[g]
                if w != fh:
                    accepted = w < fh
                else:
                    w2, c, h, i = _bits(words, c, h, i, 32)
                    fl = alo[g]
                    if w2 == fl:
                        if i > end:
                            st[0], st[1], st[2] = c0, h0, i0
                            return NEED_WORDS, n, 0, 0
                        st[0], st[1], st[2], st[3], st[4], st[6] = c, h, i, w, w2, negative
                        return BIG, n, ACCEPT_TIE, g
                    accepted = w2 < fl
            elif g > y_safe or abs(g * bt - a) > _SQUARE_SAFE:
                if i > end:
                    st[0], st[1], st[2] = c0, h0, i0
                    return NEED_WORDS, n, 0, 0
                st[0], st[1], st[2], st[6] = c, h, i, negative
                return BIG, n, ACCEPT_BIG, g
            else:
                z = g * bt - a
                rem = z * z
                whole = rem // den
                rem -= whole * den
                accepted, c, h, i = _bern_exp(words, c, h, i, whole, rem, den)
        if i > end:
            st[0], st[1], st[2] = c0, h0, i0
            return NEED_WORDS, n, 0, 0
        if accepted:
            out[n] = -g if negative == 1 else g
            n += 1
    st[0], st[1], st[2] = c, h, i
    return DONE, n, 0, 0
