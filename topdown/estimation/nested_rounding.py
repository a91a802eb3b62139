"""The root's rounding along a chain of nested marginals: each of their answers within a unit.

Why. The root's cell rounding (``topdown.estimation.root.root_round``) keeps every cell within
one unit of the L2 answer and the total in its window, and nothing else: each cell goes to its
nearest integer. On a sparse root the L2 answer spreads mass thinly over many cells (the DHC
persons preset at 20,000 persons: 14,113 positive cells of 1,227,744, most of them fractions
below one half), so the answers of a coarse marginal, sums of hundreds of such cells, move by
the sum of their cells' rounding errors, all of one sign where the cells are all small. Measured
there (seed 0, ``docs/benchmarks.md``, the DHC preset's section): the root's mean absolute error
on ``AGE:age_18_64_116 x SEX`` is 2.7 (topdown) and 2.2 (blue) in the L2 answer and 14.8 and
12.2 after the rounding; the tracts inherit it, and which estimator's root the rounding happens
to favour decided which estimator had the better tracts on those marginals.

What. The measured marginals that nest (each answer of a finer one inside one answer of a
coarser one: ``refines``) form a chain, coarse to fine (``refinement_chain``: the longest).
Rounding down the chain (``nested_round``) keeps every answer of every marginal in it within
one unit of its L2 answer, and every cell too: the total is an integer target; each answer of
the next marginal gets the floor of its L2 answer plus one unit for the largest fractions
within its coarser answer, as many as that answer's integer count needs (a largest-remainder
apportionment, Hamilton's method); the cells last, the same way within the finest marginal's
answers. Each step is feasible: a coarser answer's integer count lies between the floor and
the ceiling of its L2 answer, so between the sum of its finer answers' floors and the sum of
their ceilings. The result is non-negative (floors of non-negative values), consistent (one
integer per cell) and within a unit of the L2 answer in every cell, as the cell rounding is;
its L1 distance to the L2 cells is a little larger (the cell rounding minimises it: 3,549
against 3,449 at the DHC root above), its chain marginals much closer. Marginals off the chain
are rounded as their cells fall. O(cells x chain length) time, deterministic.

Measured on the DHC preset at 20,000 persons (seed 0, the same L2 answers rounded both ways,
``docs/benchmarks.md``): the root's error on its chain (``AGE:age_18_64_116 x SEX``,
``AGE:age_38_groups x SEX`` and the two large marginals) falls to the L2 answer's (14.8 to 2.7
topdown, 12.2 to 2.2 blue on the first), and at the tracts ``AGE:age_18_64_116 x SEX`` goes
from 3.99 / 4.14 (topdown / blue) to 3.85 / 3.26, ``HISPANIC x SEX`` from 5.02 / 4.57 to
4.09 / 3.98, ``AGE:age_38_groups x SEX`` from 2.051 / 2.075 to 2.010 / 2.013. Seed 1 gains at
the root alike (15.2 / 14.0 to 1.8 / 1.0) but not at the tracts (blue's ``HISPANIC x SEX`` 4.59
to 5.09): there the tract families' own rounding is the larger share.

Why it is off by default (``EstimateOptions.nested_root_rounding``). On the production PL94
strategy (a dense root: 30,000 persons on 2,016 cells, the state total invariant, 4 paired
seeds) it made the root's coarse marginals off the chain worse (``VOTINGAGE`` +4.0 +- 1.1 on
11.3 under blue, ``HISPANIC`` +2.75 +- 1.03 on 6.75 under topdown) and the block totals a little
worse under blue (+0.016 +- 0.003 on 10.80); there the cells' fractions are not one-sided and
the extra units the chain hands out to fractions below one half add cell error that the
marginals off the chain collect. A release that wants it sets the option.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from topdown.estimation.nested_passes import coarse_map

__all__ = ["refines", "refinement_chain", "nested_round"]

log = logging.getLogger(__name__)

#: A fraction below this is round-off of an integer (the L2 answers' sums)
_INTEGER_TOL = 1e-9


def refines(finer: np.ndarray, coarser: np.ndarray) -> bool:
    """Whether the partition ``finer`` (each cell's group) refines ``coarser``: every group of
    ``finer`` lies inside one group of ``coarser``."""
    a = np.asarray(finer, dtype=np.int64)
    b = np.asarray(coarser, dtype=np.int64)
    if a.shape != b.shape:
        raise ValueError(f"partitions have different shapes ({a.shape} and {b.shape})")
    if not a.size:
        return True
    _, fine = np.unique(a, return_inverse=True)
    fine = fine.reshape(-1)
    return coarse_map(fine, b.reshape(-1), int(fine.max()) + 1) is not None


def refinement_chain(partitions: Sequence[np.ndarray]) -> list[int]:
    """The indices of the longest chain of ``partitions`` (each an array of cells' groups) in
    which each refines the one before, coarse first. Partitions that are equal (both refine
    each other) count once; one with a single group (the total) is left out (the rounding holds
    the total by itself). Ties go by the partitions' contents (their groups in a canonical
    numbering), not their order: the batched root and the per-family root list their
    marginals in different orders and must round alike."""
    canonical = [_canonical(p) for p in partitions]
    sizes = [int(c.max(initial=-1)) + 1 for c in canonical]
    order = sorted(
        (i for i in range(len(partitions)) if sizes[i] > 1),
        key=lambda i: (sizes[i], canonical[i].tobytes()),
    )
    best: dict[int, list[int]] = {}
    for i in order:  # coarse first: every partition i refines has its chain already
        below = [
            best[j]
            for j in order[: order.index(i)]
            if sizes[j] < sizes[i] and refines(canonical[i], canonical[j])
        ]
        best[i] = max(below, key=len, default=[]) + [i]
    return max((best[i] for i in order), key=len, default=[])


def _canonical(partition: np.ndarray) -> np.ndarray:
    """The partition with its groups numbered by first appearance (0, 1, ...)."""
    _, first, inverse = np.unique(
        np.asarray(partition).reshape(-1), return_index=True, return_inverse=True
    )
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def nested_round(x: np.ndarray, chain: Sequence[np.ndarray], total: int) -> np.ndarray:
    """Integer counts (int64, like ``x``) summing to ``total``, with every answer of each
    partition of ``chain`` (coarse first, each refining the one before) and every cell within
    one unit of its sum of ``x`` (see the module docstring).

    Args:
        x: the L2 answer (cells,), >= 0 (round-off below 0 is clipped).
        chain: partitions of the cells (each cell's group), coarse first.
        total: the integer total, between the floor and the ceiling of ``x``'s sum.

    Raises:
        ValueError: ``total`` is outside that window, or a partition does not refine the one
            before it.
    """
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    whole = float(x.sum())
    if not np.floor(whole + _INTEGER_TOL) <= total <= np.ceil(whole - _INTEGER_TOL):
        raise ValueError(
            f"total ({total}) must be between the floor and the ceiling of the L2 total "
            f"({whole:.6f})"
        )
    parent = np.zeros(x.size, dtype=np.int64)  # each cell's answer of the previous step
    counts = np.array([int(total)], dtype=np.int64)  # that step's integer answers
    for step, part in enumerate([*chain, np.arange(x.size)]):
        part = np.asarray(part, dtype=np.int64)
        width = int(part.max(initial=0)) + 1
        # this step's answers are (parent answer, group) pairs: a group split by two parents
        # means the partition does not refine the previous one
        keys, group = np.unique(parent * width + part, return_inverse=True)
        of = keys // width
        if step < len(chain) and np.unique(keys % width).size != keys.size:
            raise ValueError(f"chain[{step}] does not refine the partition before it")
        sums = np.bincount(group, weights=x, minlength=keys.size)
        floors = np.floor(sums + _INTEGER_TOL)
        fractions = np.maximum(sums - floors, 0.0)
        extra = counts - np.rint(np.bincount(of, weights=floors, minlength=counts.size))
        # within each parent answer, its ``extra`` largest fractions get a unit (ties: the
        # first answer); ``keys`` is sorted by parent, so each parent's answers are contiguous
        rank_order = np.lexsort((-fractions, of))
        first = np.searchsorted(of, of)  # each answer's parent's first position
        rank = np.empty(keys.size, dtype=np.int64)
        rank[rank_order] = np.arange(keys.size) - first[rank_order]
        counts = floors.astype(np.int64) + (rank < extra[of])
        parent = group.reshape(-1)
    return counts[parent]
