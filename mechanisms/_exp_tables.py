"""Exact fixed-point tables of exp(-x) for the table-driven samplers, and their exact fallback.

A geometric variable G with P(G >= m) = q**m, q = exp(-s/t), is drawn by inversion: G is the
smallest m with U < F(m) = 1 - q**(m + 1), U uniform on [0, 1). The compiled kernel
(:mod:`mechanisms._table_kernels`) reads U's first 32 bits, and the next 32 only when they
tie, and compares them with ``floor(2**64 F(m))`` stored as two 32-bit halves. F(m) is
irrational for m + 1 < infinity (exp of a nonzero rational is transcendental, Lindemann 1882),
so ``2**64 F(m)`` is never an integer and a 64-bit prefix P of U decides: P < floor means
U < F(m), P > floor means U > F(m); only P == floor (probability 2**-64 per comparison) is
undecided, and then :func:`resolve_geometric` reads more bits of U and compares them with
``floor(2**n F(m))`` for growing n, exactly, on Python ints. No float is involved anywhere.

The table entries are computed once per scale with interval arithmetic on integers: lower and
upper bounds of ``2**P q`` (P = 128 bits, from Taylor partial sums that bracket exp(-x) for
0 <= x <= 1, a standard property of alternating series with decreasing terms), then of
``2**P q**r`` by repeated multiplication rounded down and up. When the floors of the two bounds
agree the entry is exact; otherwise (never seen; the bounds are ~2**-110 apart) it is
recomputed from :func:`floor_exp_neg`, which raises the precision until the floor is decided.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

__all__ = [
    "GeometricTable",
    "exp_neg_bounds",
    "floor_exp_neg",
    "geometric_table",
    "resolve_geometric",
]

_PRECISION = 128  # bits of the interval recurrence that builds a table
_ESCAPE_SCALES = 6  # table length in units of the scale t/s: escape probability exp(-6)
MAX_ENTRIES = 2**14  # beyond this many entries the samplers keep the CKS20 kernels


class BitReader(Protocol):
    """What :func:`resolve_geometric` reads bits from (:class:`mechanisms._words.WordStream`)."""

    def bits(self, k: int) -> int:
        """k random bits as an integer, in the kernels' order."""
        ...


def _exp_neg_unit(x: Fraction, terms_bits: int) -> tuple[Fraction, Fraction]:
    """Rational (lower, upper) bounds of exp(-x) for 0 <= x <= 1, within 2**-terms_bits.

    The Taylor series of exp(-x) alternates and its terms x**k/k! do not increase for x <= 1,
    so consecutive partial sums bracket the value and differ by the last term.
    """
    total = Fraction(1)
    term = Fraction(1)
    k = 0
    bound = Fraction(1, 2**terms_bits)
    while True:
        k += 1
        term = term * x / k
        following = total - term if k % 2 == 1 else total + term
        if term <= bound:
            return (min(total, following), max(total, following))
        total = following


def _fixed(value: Fraction, precision: int, up: bool) -> int:
    """2**precision * value rounded down (or up when ``up``), as an integer."""
    scaled = value * 2**precision
    if up:
        return -(-scaled.numerator // scaled.denominator)
    return scaled.numerator // scaled.denominator


def _power_bounds(lo: int, hi: int, exponent: int, precision: int) -> tuple[int, int]:
    """Bounds of 2**precision x**exponent from bounds (lo, hi) of 2**precision x, x > 0.

    Square and multiply, each product rounded outwards: O(log exponent) products, so a huge
    exponent costs little (the lower bound then reaches 0, still a bound).
    """
    result_lo = result_hi = 1 << precision
    while exponent:
        if exponent & 1:
            result_lo = (result_lo * lo) >> precision
            result_hi = -((-result_hi * hi) >> precision)
        lo, hi = (lo * lo) >> precision, -((-hi * hi) >> precision)
        exponent >>= 1
    return result_lo, result_hi


def exp_neg_bounds(x: Fraction, precision: int) -> tuple[int, int]:
    """Integers (lo, hi) with lo <= 2**precision * exp(-x) <= hi, for rational x >= 0.

    exp(-x) = exp(-f) * exp(-1)**w with w = floor(x), f = x - w; each factor is bracketed by
    :func:`_exp_neg_unit`, the power and the product are taken on integers rounded outwards,
    with guard bits for the rounding errors of the power (about 2 log2(w) bits of them).
    """
    if x < 0:
        raise ValueError(f"x ({x}) must be >= 0")
    whole = x.numerator // x.denominator
    guard = precision + 16 + 2 * whole.bit_length()
    f_lo, f_hi = _exp_neg_unit(x - whole, guard)
    lo, hi = _fixed(f_lo, guard, up=False), _fixed(f_hi, guard, up=True)
    if whole:
        e_lo, e_hi = _exp_neg_unit(Fraction(1), guard)
        p_lo, p_hi = _power_bounds(
            _fixed(e_lo, guard, up=False), _fixed(e_hi, guard, up=True), whole, guard
        )
        lo, hi = (lo * p_lo) >> guard, -((-hi * p_hi) >> guard)
    shift = guard - precision
    return lo >> shift, -((-hi) >> shift)


def floor_exp_neg(x: Fraction, n: int) -> int:
    """floor(2**n exp(-x)) exactly, for rational x > 0 (exp(-x) is irrational, so this ends)."""
    precision = n + 32
    while True:
        lo, hi = exp_neg_bounds(x, precision)
        shift = precision - n
        if lo >> shift == hi >> shift:
            return lo >> shift
        precision += 64


def _floor_cdf(t: int, s: int, m: int, n: int) -> int:
    """floor(2**n F(m)), F(m) = 1 - exp(-(m + 1) s / t): 2**n - 1 - floor(2**n q**(m+1)).

    2**n q**(m+1) is not an integer (irrational), so floor(2**n - y) = 2**n - 1 - floor(y).
    """
    return 2**n - 1 - floor_exp_neg(Fraction((m + 1) * s, t), n)


@dataclass(frozen=True)
class GeometricTable:
    """Inversion table of the geometric law P(G >= m) = exp(-m s/t), truncated to [0, size).

    ``hi[m]``, ``lo[m]``: the high and low 32 bits of floor(2**64 F(m)) (int64 arrays; a
    sentinel ``hi[size]`` = 2**32 exceeds every 32-bit prefix). ``guide[j]`` for the ``k``-bit
    prefix j: the first m with floor(2**64 F(m)) >= j 2**(64 - k); every m below it has
    F(m) < j / 2**k <= U, so the scan may start there.
    """

    t: int
    s: int
    size: int
    k: int
    hi: np.ndarray
    lo: np.ndarray
    guide: np.ndarray


def table_size(t: int, s: int) -> int:
    """Entries of the table for scale t/s: ceil(6 t/s) (escape probability exp(-6)), >= 1."""
    return max(1, -(-_ESCAPE_SCALES * t // s))


@functools.lru_cache(maxsize=32)
def geometric_table(t: int, s: int) -> GeometricTable:
    """The inversion table for q = exp(-s/t), t and s >= 1 (cached: one build per scale)."""
    size = table_size(t, s)
    if size > MAX_ENTRIES:
        raise ValueError(f"scale t/s ({t}/{s}) needs {size} entries, over {MAX_ENTRIES}")
    p = _PRECISION
    q_lo, q_hi = exp_neg_bounds(Fraction(s, t), p)
    floors = np.empty(size, dtype=object)
    pow_lo = pow_hi = 1 << p  # bounds of 2**p q**r, r = 0
    for m in range(size):
        pow_lo = (pow_lo * q_lo) >> p
        pow_hi = -((-pow_hi * q_hi) >> p)
        low_floor, high_floor = pow_lo >> (p - 64), pow_hi >> (p - 64)
        if low_floor == high_floor:
            floors[m] = 2**64 - 1 - low_floor
        else:  # pragma: no cover - the bounds are ~2**-110 apart; exact recomputation
            floors[m] = _floor_cdf(t, s, m, 64)
    hi = np.empty(size + 1, dtype=np.int64)
    lo = np.zeros(size + 1, dtype=np.int64)
    for m in range(size):
        hi[m], lo[m] = int(floors[m]) >> 32, int(floors[m]) & 0xFFFFFFFF
    hi[size] = 2**32
    k = min(max(size.bit_length() + 1, 1), 16)
    guide = np.empty(2**k, dtype=np.int64)
    m = 0
    for j in range(2**k):
        start = j << (64 - k)
        while m < size and int(floors[m]) < start:
            m += 1
        guide[j] = m
    return GeometricTable(t, s, size, k, hi, lo, guide)


@dataclass(frozen=True)
class AcceptanceTable:
    """CKS20 Algorithm 3's acceptance probabilities A(y) = exp(-(y b t - a)**2 / (2 a b t**2)).

    For sigma2 = a/b and the proposal scale t, y in [0, size): ``hi[y]``, ``lo[y]`` the halves
    of floor(2**64 A(y)); where A(y) = 1 (y b t = a) ``hi`` is 2**32, which every 32-bit
    prefix is below (always accepted). ``geometric`` is the proposal's inversion table.
    """

    a: int
    b: int
    t: int
    size: int
    hi: np.ndarray
    lo: np.ndarray
    geometric: GeometricTable

    def floor_at(self, y: int, n: int) -> int:
        """floor(2**n A(y)) for y < size, A(y) < 1: from the table up to 64 bits, else exact."""
        if n == 32:
            return int(self.hi[y])
        if n == 64:
            return (int(self.hi[y]) << 32) | int(self.lo[y])
        z = y * self.b * self.t - self.a
        return floor_exp_neg(Fraction(z * z, 2 * self.a * self.b * self.t * self.t), n)


def _exp_bounds_signed(num: int, den: int, p: int) -> tuple[int, int]:
    """Bounds of 2**p exp(-num/den) for an integer num of either sign (exp(x) = 1/exp(-x))."""
    if num >= 0:
        return exp_neg_bounds(Fraction(num, den), p)
    lo, hi = exp_neg_bounds(Fraction(-num, den), p)
    return (1 << (2 * p)) // hi, -(-(1 << (2 * p)) // lo)


@functools.lru_cache(maxsize=32)
def acceptance_table(a: int, b: int, t: int) -> AcceptanceTable:
    """The acceptance table of sigma2 = a/b with proposal scale t (cached: one per sigma2).

    With z_y = y b t - a and den = 2 a b t**2, A(y + 1) = A(y) R(y) where R(y) = exp(-(2 z_y b t
    + (b t)**2) / den), and R(y + 1) = R(y) C with C = exp(-2 (b t)**2 / den): two interval
    recurrences on 128-bit fixed point, rounded outwards, as :func:`geometric_table`.
    """
    geometric = geometric_table(t, 1)
    size = geometric.size
    p = _PRECISION
    bt, den = b * t, 2 * a * b * t * t
    one = 1 << p
    a_lo, a_hi = exp_neg_bounds(Fraction(a * a, den), p)
    r_lo, r_hi = _exp_bounds_signed(bt * bt - 2 * a * bt, den, p)
    c_lo, c_hi = exp_neg_bounds(Fraction(2 * bt * bt, den), p)
    hi = np.empty(size, dtype=np.int64)
    lo = np.zeros(size, dtype=np.int64)
    for y in range(size):
        z = y * bt - a
        if z == 0:
            hi[y] = 2**32  # A(y) = 1: every U is below it
            floor = -1
        elif (a_lo >> (p - 64)) == (min(a_hi, one - 1) >> (p - 64)):
            floor = a_lo >> (p - 64)
        else:  # pragma: no cover - the bounds are far tighter than 2**-64
            floor = floor_exp_neg(Fraction(z * z, den), 64)
        if floor >= 0:
            hi[y], lo[y] = floor >> 32, floor & 0xFFFFFFFF
        a_lo, a_hi = (a_lo * r_lo) >> p, -((-a_hi * r_hi) >> p)
        r_lo, r_hi = (r_lo * c_lo) >> p, -((-r_hi * c_hi) >> p)
    return AcceptanceTable(a, b, t, size, hi, lo, geometric)


def _table_floor(table: GeometricTable, m: int, bits: int) -> int:
    """floor(2**bits F(m)): from the table up to 64 bits, else computed exactly."""
    if bits == 32:
        return int(table.hi[m])
    if bits == 64:
        return (int(table.hi[m]) << 32) | int(table.lo[m])
    return _floor_cdf(table.t, table.s, m, bits)


def below_exact(
    reader: BitReader, prefix: int, bits: int, floor_at: Callable[[int], int]
) -> tuple[bool, int, int]:
    """Whether U < p, given U's first ``bits`` bits ``prefix`` and floor(2**n p) = floor_at(n).

    p is irrational (never 2**-n times an integer), so a prefix below the floor means U < p,
    above it U > p; on equality 32 more bits of U are read from ``reader``, and so on.
    Returns (U < p, the prefix, its length) so that a caller can go on comparing the same U.
    """
    while True:
        floor = floor_at(bits)
        if prefix != floor:
            return prefix < floor, prefix, bits
        prefix = (prefix << 32) | reader.bits(32)
        bits += 32


def resolve_geometric(
    table: GeometricTable, reader: BitReader, m: int, prefix: int, bits: int
) -> int:
    """Finish an inversion the kernel left undecided: the smallest m' >= m with U < F(m').

    ``prefix`` holds U's first ``bits`` bits, which tie with floor(2**bits F(m)); further
    32-bit groups of U are read from ``reader`` in the kernels' order until every comparison
    is decided exactly. Returns ``table.size`` if U passes every entry (the escape).
    """
    while m < table.size:
        below, prefix, bits = below_exact(
            reader, prefix, bits, functools.partial(_table_floor, table, m)
        )
        if below:
            return m
        m += 1  # U > F(m): the same U, its prefix perhaps longer, against the next entry
    return table.size


def draw_geometric(table: GeometricTable, reader: BitReader) -> int:
    """One geometric G from fresh bits, on Python ints only (escapes included): P(G >= m) = q**m.

    The slow twin of the kernel's inversion, for the continuation after an undecided
    comparison; it reads bits exactly as the kernel would (32, then 32 more on a tie).
    """
    total = 0
    while True:
        prefix = reader.bits(32)
        m = int(table.guide[prefix >> (32 - table.k)])
        g = resolve_geometric(table, reader, m, prefix, 32)
        total += g
        if g < table.size:
            return total
