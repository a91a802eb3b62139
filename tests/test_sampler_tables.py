"""The exact tables of the table-driven samplers, and their undecided-comparison continuation.

The tables are checked entry by entry against an independent computation (Python's decimal
module at 100 significant digits, whose exp is correctly rounded). The kernels' rare paths
(a 64-bit tie, decided in Python with more bits; an escape past the table) are forced with
scripted raw words, whose bits are laid out as the kernels read them: word by word, low bit
first.
"""

from __future__ import annotations

import decimal
import logging
import math
from fractions import Fraction

import numpy as np
import pytest

from mechanisms import _exp_tables, samplers
from mechanisms._exp_tables import (
    acceptance_table,
    exp_neg_bounds,
    floor_exp_neg,
    geometric_table,
)

_CONTEXT = decimal.Context(prec=100)


def _decimal_exp_neg(x: Fraction) -> decimal.Decimal:
    """exp(-x) to 100 digits, independently of the module under test."""
    value = _CONTEXT.divide(decimal.Decimal(x.numerator), decimal.Decimal(x.denominator))
    return _CONTEXT.exp(_CONTEXT.minus(value))  # not -value: that rounds to 28 digits


def _decimal_floor(value: decimal.Decimal, bits: int) -> int:
    """floor(2**bits value), asserting the 100-digit value is far from an integer."""
    scaled = _CONTEXT.multiply(value, decimal.Decimal(2**bits))
    floor = int(scaled.to_integral_value(rounding=decimal.ROUND_FLOOR))
    assert decimal.Decimal(10) ** -20 < scaled - floor < 1 - decimal.Decimal(10) ** -20
    return floor


def _full(hi: np.ndarray, lo: np.ndarray, index: int) -> int:
    return (int(hi[index]) << 32) | int(lo[index])


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(45, 7)])
@pytest.mark.parametrize("precision", [64, 200])
def test_exp_neg_bounds_bracket_the_value(x: Fraction, precision: int) -> None:
    lo, hi = exp_neg_bounds(x, precision)
    exact = _CONTEXT.multiply(_decimal_exp_neg(x), decimal.Decimal(2**precision))
    assert lo <= exact <= hi
    assert hi - lo <= 2
    if precision == 64:
        assert floor_exp_neg(x, 64) == _decimal_floor(_decimal_exp_neg(x), 64)


def test_exp_neg_bounds_of_a_huge_exponent_are_quick_and_valid() -> None:
    """exp(-2**30): the power is taken by squaring, so this returns at once: (0, 1)."""
    assert exp_neg_bounds(Fraction(2**30), 64) == (0, 1)
    assert floor_exp_neg(Fraction(2**30), 64) == 0


@pytest.mark.parametrize(("t", "s"), [(1, 1), (10, 1), (7, 3), (1, 3), (1000, 1)])
def test_geometric_table_entries_are_exact(t: int, s: int) -> None:
    """Every entry is floor(2**64 (1 - exp(-(m + 1) s/t))), and the guide only skips entries
    that every uniform with that prefix exceeds."""
    table = geometric_table(t, s)
    assert table.size == math.ceil(6 * t / s) and table.hi[table.size] == 2**32
    step = max(1, table.size // 200)
    for m in [*range(0, table.size, step), table.size - 1]:
        cdf = _CONTEXT.subtract(1, _decimal_exp_neg(Fraction((m + 1) * s, t)))
        assert _full(table.hi, table.lo, m) == _decimal_floor(cdf, 64), m
    floors = [_full(table.hi, table.lo, m) for m in range(table.size)]
    assert floors == sorted(floors)  # so the last entry the guide skips is the largest
    for j, start in enumerate(table.guide):
        bound = j << (64 - table.k)
        assert start == 0 or floors[start - 1] < bound
        assert start == table.size or floors[start] >= bound


@pytest.mark.parametrize(("a", "b"), [(1, 1), (5, 2), (100, 1), (6, 1), (10**6, 1)])
def test_acceptance_table_entries_are_exact(a: int, b: int) -> None:
    """floor(2**64 exp(-(y b t - a)**2 / (2 a b t**2))); 2**32 in the high half where it is 1."""
    t = math.isqrt(a // b) + 1
    table = acceptance_table(a, b, t)
    step = max(1, table.size // 200)
    for y in [*range(0, table.size, step), table.size - 1]:
        z = y * b * t - a
        if z == 0:  # sigma2 = 6: t = 3 and y = 2
            assert table.hi[y] == 2**32
            continue
        value = _decimal_exp_neg(Fraction(z * z, 2 * a * b * t * t))
        assert _full(table.hi, table.lo, y) == _decimal_floor(value, 64), y
    if (a, b) == (6, 1):
        assert table.hi[2] == 2**32


# ---------------------------------------------------------------- scripted words


class ScriptedWords:
    """Stands in for a Generator: ``bit_generator.random_raw`` returns the scripted bits as
    64-bit words, then words of ``fill`` bits."""

    def __init__(self, chunks: list[tuple[int, int]], fill: int = 0) -> None:
        stream, position = 0, 0
        for value, bits in chunks:
            assert 0 <= value < 2**bits
            stream |= value << position
            position += bits
        count = -(-position // 64)
        mask = 2**64 - 1
        filler = (mask << position) & (2 ** (64 * count) - 1) if fill else 0
        stream |= filler
        self.words = [(stream >> (64 * w)) & mask for w in range(count)]
        self.fill = mask if fill else 0
        self.bit_generator = self

    def random_raw(self, count: int) -> np.ndarray:
        out = self.words[:count] + [self.fill] * max(0, count - len(self.words))
        self.words = self.words[count:]
        return np.array(out, dtype=np.uint64)


def _laplace(chunks: list[tuple[int, int]], scale: int, n: int, fill: int = 0) -> list[int]:
    table = geometric_table(scale, 1)
    out = np.empty(n, dtype=np.int64)
    rng = ScriptedWords(chunks, fill)
    return [int(v) for v in samplers._laplace_table(table, n, rng, out)]  # type: ignore[arg-type]


def _gaussian(chunks: list[tuple[int, int]], sigma2: int, n: int, fill: int = 0) -> list[int]:
    t = math.isqrt(sigma2) + 1
    table = acceptance_table(sigma2, 1, t)
    out = np.empty(n, dtype=np.int64)
    rng = ScriptedWords(chunks, fill)
    return [int(v) for v in samplers._gaussian_table(table, n, rng, out)]  # type: ignore[arg-type]


def _halves(value: int) -> list[tuple[int, int]]:
    """A 64-bit prefix as the kernels read it: the high 32 bits first, then the low 32."""
    return [(value >> 32, 32), (value & 0xFFFFFFFF, 32)]


def test_laplace_plain_words() -> None:
    """w = 0 is below F(0): G = 0, sign bit 0 gives +0; a w between F(2) and F(3) gives 3,
    and with the sign bit set, -3."""
    table = geometric_table(10, 1)
    between = int(table.hi[2]) + 1
    assert between < table.hi[3]
    assert _laplace([(0, 32), (0, 1)], 10, 1) == [0]
    assert _laplace([(between, 32), (0, 1)], 10, 1) == [3]
    assert _laplace([(between, 32), (1, 1)], 10, 1) == [-3]
    # "-0" is rejected and the next candidate read
    assert _laplace([(0, 32), (1, 1), (between, 32), (0, 1)], 10, 1) == [3]


@pytest.mark.parametrize("m", [0, 4, 37])
def test_laplace_tie_is_decided_exactly(m: int, caplog) -> None:
    """U's first 64 bits equal floor(2**64 F(m)): the kernel hands over, Python reads on.
    Zeros after put U just above floor/2**64, below F(m): G = m. Ones after put U above
    F(m) and below F(m + 1): G = m + 1, and the sign bit (a one) makes it negative."""
    table = geometric_table(10, 1)
    floor = _full(table.hi, table.lo, m)
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        assert _laplace(_halves(floor), 10, 1, fill=0) == [m]
    assert any("undecided on 64 bits" in r.getMessage() for r in caplog.records)
    assert _laplace(_halves(floor), 10, 1, fill=1) == [-(m + 1)]


def test_laplace_escape_adds_the_table_size() -> None:
    """A first uniform past F(size - 1) escapes: the magnitude is size plus a fresh draw."""
    table = geometric_table(10, 1)
    assert table.hi[table.size - 1] < 2**32 - 1
    assert _laplace([(2**32 - 1, 32), (0, 32), (0, 1)], 10, 1) == [table.size]
    between = int(table.hi[1]) + 1
    assert _laplace([(2**32 - 1, 32), (between, 32), (1, 1)], 10, 1) == [-(table.size + 2)]


def test_gaussian_acceptance_tie_is_decided_exactly(caplog) -> None:
    """sigma2 = 100 (t = 11): a proposal of 3, then an acceptance uniform whose 64 bits tie
    with floor(2**64 A(3)). Zeros after: accepted (3); ones after: rejected, and the next
    candidate (all zeros: +0, accepted since A(0) > 0) is the sample."""
    geo = geometric_table(11, 1)
    table = acceptance_table(100, 1, 11)
    between = int(geo.hi[2]) + 1
    tie = _full(table.hi, table.lo, 3)
    chunks = [(between, 32), (0, 1), *_halves(tie)]
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        assert _gaussian(chunks, 100, 1) == [3]
    assert any("acceptance undecided" in r.getMessage() for r in caplog.records)
    assert _gaussian([*chunks, (2**32 - 1, 32)], 100, 1) == [0]


def test_gaussian_proposal_tie_is_decided_exactly(caplog) -> None:
    """The proposal's 64 bits tie with floor(2**64 F(5)); zeros after: G = 5, sign +, and the
    acceptance uniform (zeros) is below A(5): the sample is 5."""
    geo = geometric_table(11, 1)
    with caplog.at_level(logging.DEBUG, logger="mechanisms.samplers"):
        assert _gaussian(_halves(_full(geo.hi, geo.lo, 5)), 100, 1) == [5]
    assert any("proposal undecided" in r.getMessage() for r in caplog.records)


def test_table_cap_routes_large_scales_to_the_cks_kernels(monkeypatch) -> None:
    """Past MAX_ENTRIES the tables are not built (the CKS20 kernels run instead)."""
    assert _exp_tables.table_size(2731, 1) > _exp_tables.MAX_ENTRIES
    with pytest.raises(ValueError, match="entries"):
        geometric_table(2731, 1)
    built: list[tuple[int, int]] = []
    monkeypatch.setattr(samplers._exp_tables, "geometric_table", lambda t, s: built.append((t, s)))
    samplers.sample_discrete_laplace(2731, 10, np.random.default_rng(1))
    assert built == []
