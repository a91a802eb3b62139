"""The BLUE of the root's total alone, without the rest of the whole-tree BLUE.

``topdown check`` verifies the ledger's estimation note on the root's total (the BLUE's root
total, its standard error and the integer the passes held: ``topdown.estimation.root_total``)
by recomputing it from the published measurements. The whole BLUE costs what the release's did:
at the DHC persons preset (32 blocks, one of 1,160 x 1,160 precisions a node, every level's
cells rotated back) about 75 CPU s at a 20,000-person state; the total's block alone about 8
(``docs/benchmarks.md``). The total needs far less, for two reasons that are exact, not
approximations:

- The cell space splits into blocks solved independently (``topdown.blue.blocks``; a strategy
  without recodes is the case of one group per axis). A node's total reads only the block in
  which every axis is in its span part (the others hold, on some axis, within-group contrasts,
  which sum to zero): the total's BLUE and its variance are that block's, whatever the others
  hold.
- The root has no ancestor, so its final BLUE is its estimate from its own subtree: the upward
  recursion alone gives it (Hay et al. 2010's first pass), no downward pass.

So this solves the upward recursion of that one block (``block_summary``) and returns a
``Blue`` of the root level only, whose cells are the root BLUE's projection on that block: its
total (``answer(0, "total")``) and that total's variance are the whole BLUE's, to the round-off
of a different order of sums (``tests/test_blue_root_total.py`` compares them); its cells and
every other answer are not the BLUE's and must not be read as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_solve import block_summary
from topdown.blue.blocks import Block, blocks_of
from topdown.blue.estimate import Blue, checked_inputs
from topdown.blue.rotation import box, from_block, unrotate
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree
from topdown.strategy import Query

__all__ = ["root_total_blue", "total_block"]


def total_block(domain: Domain, queries: Sequence[Sequence[Query]]) -> Block:
    """The block holding the node totals: every axis in its span part (the finest partitions
    of the recodes the strategy uses; one group for an axis never recoded)."""
    every = [q for qs in queries for q in qs]
    return next(b for b in blocks_of(domain, every) if not b.contrast)


def root_total_blue(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
) -> Blue:
    """A ``Blue`` of the root level alone that holds the whole-tree BLUE's root total and its
    variance (see the module docstring): what ``topdown.estimation.root_total.decide`` reads.

    Args:
        tree: the public structure (one root).
        domain: the query domain.
        measurements: the noisy measurements (or float inputs with per-node variances).
        exact_totals: as ``topdown.blue.estimate.blue``'s (invariants: variance 0).
    """
    inputs = checked_inputs(tree, measurements, exact_totals)
    block = total_block(domain, [[m.query for m in lv] for lv in inputs.levels])
    est, var = block_summary(tree, domain, inputs, [block])
    top = est[0].reshape(tree.levels[0].size, -1)
    splits = block.splits
    rotated = np.zeros((top.shape[0],) + tuple(s.n for s in splits))
    rotated[box(block)] = from_block(top, block)
    cells = unrotate(rotated, splits).reshape(top.shape[0], -1)
    empty = (np.zeros((0, tree.levels[0].size)),)
    return Blue(domain, (cells,), (), empty, empty, None, (block,), ((var[0],),), ((var[0],),))
