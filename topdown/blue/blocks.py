"""The block split of the whole-tree BLUE when queries group an attribute's values by recodes.

The plain split (``topdown.blue.plan``) puts every axis in its mean direction or the mean's
orthogonal complement, on which an identity and a row of ones both act as scalars. A grouping
with groups of unequal sizes does not: ``G'G`` (all-ones blocks) and ``11'`` do not commute.
What holds instead, per axis, with the axis's *finest partition* (the common refinement of
every recode of the axis the strategy uses; a single group for an axis never recoded):

- the within-group contrasts (dimension ``n - g``): the identity acts as 1, every grouping by
  a recode of the strategy and the row of ones as 0 (each is constant on a finest group);
- the span of the ``g`` group indicators, in the orthonormal basis ``f_k = e_k / sqrt(s_k)``
  (``s_k`` the group's size): the identity is ``I_g``, a grouping ``H`` is
  ``U'H'HU`` (``diag(s)`` for the finest one), the row of ones ``sqrt(s) sqrt(s)'``.

So the cell space splits into blocks, one per set S of axes taken in their contrast part (the
others in their span part). In a block every query's ``Q'Q`` is zero (the query merges cells
of a contrast axis) or ``prod_{a not in S} K_a``, a ``k x k`` matrix with ``k = prod_{a not in S}
g_a``, the same for each of the block's copies (the contrast axes' values): the whole-tree GLS
is one tree problem per block, with a ``k x k`` precision per node (``k = 1``: a scalar, Hay's
recursions as before; ``topdown.blue.block_recursions`` for ``k > 1``). An axis never recoded
has ``g = 1``: its span is the mean, and the split is the plain one.

A block's vector at a node is held in the coordinates of ``topdown.blue.rotation``: per
contrast axis an orthonormal basis of its within-group contrasts, per span axis the ``f``
coordinates; there every block is a box of one rotated array, read from each query's answers
rotated once and written back to the cells once.

Kept apart from ``topdown.blue.plan`` (the plain groups) because only strategies with recodes
take it; the plain path keeps its speed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from constraints.domain import Domain
from topdown.query import Factor, Query

__all__ = ["AxisSplit", "Block", "blocks_of", "axis_diag"]


@dataclass(frozen=True)
class AxisSplit:
    """One axis's finest partition: the group of each value and the groups' sizes.

    Attributes:
        groups: int (n,), the finest group of each value.
        sizes: int (g,), the size of each group.
    """

    groups: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.groups)

    @property
    def g(self) -> int:
        return len(self.sizes)

    def basis(self) -> np.ndarray:
        """``U`` (n, g): the orthonormal basis ``f_k = e_k / sqrt(s_k)`` of the groups' span."""
        u = np.zeros((self.n, self.g))
        u[np.arange(self.n), list(self.groups)] = 1.0
        return u / np.sqrt(np.asarray(self.sizes, dtype=float))

    def contrast(self) -> np.ndarray:
        """The projector (n, n) onto the within-group contrasts: ``I - U U'``."""
        u = self.basis()
        return np.eye(self.n) - u @ u.T

    @classmethod
    def of(cls, factors: Sequence[Factor], n: int) -> AxisSplit:
        """The common refinement of the groupings in ``factors`` (one group when none)."""
        labels = [f.groups for f in factors if f.kept and f.recode is not None]
        if not labels:
            return cls((0,) * n, (n,))
        keys = list(zip(*labels, strict=True))
        index: dict[tuple[int, ...], int] = {}
        groups = tuple(index.setdefault(k, len(index)) for k in keys)
        sizes = tuple(int(c) for c in np.bincount(groups, minlength=len(index)))
        return cls(groups, sizes)


def axis_diag(factor: Factor, projector: np.ndarray) -> np.ndarray:
    """``diag(F P F')`` of an axis factor ``F`` and a projector ``P`` of the axis (n_out,)."""
    f = factor.matrix().toarray()
    return np.einsum("ij,jk,ik->i", f, projector, f)


@dataclass(frozen=True)
class Block:
    """One block of the split: the axes in their contrast part (``contrast``), the others in
    their span part.

    Attributes:
        contrast: the axes taken in their contrast part.
        splits: every axis's finest partition.
    """

    contrast: frozenset[int]
    splits: tuple[AxisSplit, ...]

    @property
    def span(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.splits)) if i not in self.contrast)

    @property
    def k(self) -> int:
        """The size of the per-node precision matrix: the product of the span axes' groups."""
        return int(np.prod([self.splits[i].g for i in self.span], dtype=np.int64))

    @property
    def copies(self) -> int:
        """The product of the contrast axes' sizes: the copies of the k-vector the block's
        projection holds per node in value coordinates (its dimension is ``k`` times the
        product of the ``n - g``, the copies in ``topdown.blue.rotation``'s coordinates)."""
        return int(np.prod([self.splits[i].n for i in self.contrast], dtype=np.int64))

    def sees(self, factors: Sequence[Factor]) -> bool:
        """Whether a query's ``Q'Q`` is non-zero on this block: it keeps every contrast axis
        whole (a grouping or a sum is constant on each finest group, so zero there)."""
        return all(factors[i].identity for i in self.contrast)

    def gram(self, factors: Sequence[Factor]) -> np.ndarray:
        """``Q'Q`` on the block (k, k): the Kronecker product of the span axes' ``U'F'FU``."""
        return _gram(self, tuple(factors))

    def gram_factors(self, factors: Sequence[Factor]) -> tuple[np.ndarray, ...]:
        """``gram``'s Kronecker factors, one ``U'F'FU`` (g, g) per span axis: ``gram`` itself
        is 10.8 MB at the DHC persons preset's ``k = 1,160``."""
        return _gram_factors(self, tuple(factors))

    def total_direction(self) -> np.ndarray:
        """``w`` (k,): the node total of a block vector is ``w' c`` (span axes only)."""
        out = np.ones(1)
        for i in self.span:
            out = np.kron(out, np.sqrt(np.asarray(self.splits[i].sizes, dtype=float)))
        return out

    def answer_terms(self, factors: Sequence[Factor]) -> tuple[np.ndarray, np.ndarray]:
        """How a query's answers read this block: ``B`` (n_out of the span axes, k) for the
        span axes (``F U`` per axis, Kronecker), and the product over the contrast axes of
        ``diag(F P_contrast F')`` (n_out of the contrast axes, flattened). An answer's
        variance from this block is then ``d[contrast index] * (B Phi B')[span index]``."""
        return _answer_terms(self, tuple(factors))

    def answer_maps(self, factors: Sequence[Factor]) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """``answer_terms`` with ``B`` as its Kronecker factors, one ``F U`` (n_out, g) per span
        axis: ``B`` itself has a row per answer of the span axes and ``k`` columns, 1.2
        million x 1,160 for the detailed query on the DHC persons preset's largest block."""
        return _answer_maps(self, tuple(factors))

    def mean_terms(self, factors: Sequence[Factor]) -> MeanTerms:
        """What the mean over a query's answers needs of ``answer_terms``, per axis.

        ``B`` is a Kronecker product over the span axes, so ``B'B / rows(B)`` is the Kronecker
        product of the axes' ``(FU)'(FU) / rows`` (and the same for ``|B|``, as
        ``|X (x) Y| = |X| (x) |Y|``), and the mean of the contrast axes' Kronecker product
        ``d`` (and of ``|d|``) is the product of the axes' means. A detailed query's ``B`` has a
        row per answer of the span axes (up to every cell of the domain); these are
        (k, k) and scalars, built without it."""
        return _mean_terms(self, tuple(factors))


@dataclass(frozen=True)
class MeanTerms:
    """``Block.mean_terms``: ``gram`` = ``B'B / rows(B)``, ``gram_abs`` = ``|B|'|B| / rows(B)``
    (k, k), held as their Kronecker factors (one (g, g) per span axis: ``gram_parts``,
    ``gram_abs_parts``), ``d_mean`` = mean of ``d`` and ``d_abs_mean`` = mean of ``|d|``.

    The factors, not the (k, k) products, are what the cache of ``mean_terms`` keeps: at the
    DHC persons preset's ``k = 1,160`` a product is 10.8 MB, and two per block and query
    (eight such blocks, ten queries) held 1.8 GB for the life of the process (tracemalloc
    at the 20,000-person preset's peak, docs/benchmarks.md)."""

    gram_parts: tuple[np.ndarray, ...]
    gram_abs_parts: tuple[np.ndarray, ...]
    d_mean: float
    d_abs_mean: float

    @property
    def gram(self) -> np.ndarray:
        """``B'B / rows(B)`` (k, k), built on each call (for tests and small blocks)."""
        return _kron(self.gram_parts)

    @property
    def gram_abs(self) -> np.ndarray:
        """``|B|'|B| / rows(B)`` (k, k), built on each call."""
        return _kron(self.gram_abs_parts)


def _kron(parts: Sequence[np.ndarray]) -> np.ndarray:
    out = np.ones((1, 1))
    for part in parts:
        out = np.kron(out, part)
    return out


def _frozen(a: np.ndarray) -> np.ndarray:
    """A cached array, made read-only: every caller shares it."""
    a.flags.writeable = False
    return a


@lru_cache(maxsize=4096)
def _gram(block: Block, factors: tuple[Factor, ...]) -> np.ndarray:
    out = np.ones((1, 1))
    for part in _gram_factors(block, factors):
        out = np.kron(out, part)
    return _frozen(out)


@lru_cache(maxsize=4096)
def _gram_factors(block: Block, factors: tuple[Factor, ...]) -> tuple[np.ndarray, ...]:
    parts = []
    for i in block.span:
        fu = factors[i].matrix().toarray() @ block.splits[i].basis()
        parts.append(_frozen(fu.T @ fu))
    return tuple(parts)


@lru_cache(maxsize=4096)
def _mean_terms(block: Block, factors: tuple[Factor, ...]) -> MeanTerms:
    gram, gram_abs = [], []
    for i in block.span:
        fu = factors[i].matrix().toarray() @ block.splits[i].basis()
        gram.append(_frozen(fu.T @ fu / fu.shape[0]))
        gram_abs.append(_frozen(np.abs(fu).T @ np.abs(fu) / fu.shape[0]))
    d_mean = d_abs_mean = 1.0
    for i in sorted(block.contrast):
        d = axis_diag(factors[i], block.splits[i].contrast())
        d_mean, d_abs_mean = d_mean * float(d.mean()), d_abs_mean * float(np.abs(d).mean())
    return MeanTerms(tuple(gram), tuple(gram_abs), d_mean, d_abs_mean)


@lru_cache(maxsize=4096)
def _answer_terms(block: Block, factors: tuple[Factor, ...]) -> tuple[np.ndarray, np.ndarray]:
    maps, d = _answer_maps(block, factors)
    b = np.ones((1, 1))
    for m in maps:
        b = np.kron(b, m)
    return _frozen(b), d


@lru_cache(maxsize=4096)
def _answer_maps(
    block: Block, factors: tuple[Factor, ...]
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    maps = tuple(
        _frozen(factors[i].matrix().toarray() @ block.splits[i].basis()) for i in block.span
    )
    d = np.ones(1)
    for i in sorted(block.contrast):
        d = np.kron(d, axis_diag(factors[i], block.splits[i].contrast()))
    return maps, _frozen(d)


def blocks_of(domain: Domain, queries: Sequence[Query]) -> tuple[Block, ...]:
    """The blocks of a strategy's queries over ``domain`` (the largest first: all axes in
    their contrast part), skipping empty ones (a contrast of dimension 0)."""
    factors = [q.factors(domain) for q in queries]
    splits = tuple(
        AxisSplit.of([f[i] for f in factors], int(n)) for i, n in enumerate(domain.shape)
    )
    possible = [i for i, s in enumerate(splits) if s.n > s.g]
    subsets = [
        frozenset(c)
        for r in range(len(possible), -1, -1)
        for c in itertools.combinations(possible, r)
    ]
    return tuple(Block(s, splits) for s in subsets)
