"""The whole-tree BLUE in pieces, for a streamed release's subtrees (``topdown.streaming.run``).

Both recursions (``topdown.blue.recursions``) only pass per-node summaries across a level, so a
subtree's upward recursion reduces to its top's estimate and variance per group
(``subtree_summary``), the levels above finish the upward recursion from those and run the
downward one to the stream level (``blue_above``), and each subtree runs the downward one from
its top's final estimate (``blue_below``). Every piece uses the whole tree's groups
(``BluePlan``), so the pieces give the whole-tree BLUE (``topdown.blue.estimate.blue``).

Kept apart from ``topdown.blue.estimate`` because only the streamed release runs these; the
whole-tree estimator needs none of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_solve import OwnTerms, block_summary
from topdown.blue.estimate import Blue, NodeSummary, checked_inputs, solve
from topdown.blue.fed_terms import FedTerms
from topdown.blue.plan import BluePlan
from topdown.blue.recursions import Means, pis_of, sum_matrices, upward, z_of
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree

__all__ = ["subtree_summary", "blue_above", "blue_below"]


def subtree_summary(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    plan: BluePlan,
    own: OwnTerms | None = None,
) -> NodeSummary:
    """The upward recursion over a subtree, down to its leaves: its top node's estimate from
    its descendants' measurements alone, per group (the bottom-up half of ``blue``).

    ``tree``'s levels are the whole tree's from the subtree's top down (``Level.number`` kept;
    the top level has one node); ``measurements`` has one entry per one of them, the top's
    empty (it is measured with the levels above). ``plan``: the whole tree's. ``own``: a
    recoded plan's own terms of the subtree (``own_terms``), when computed already; they are
    read, not taken, so ``blue_below`` can use them after.
    """
    inputs = checked_inputs(tree, measurements, None)
    if plan.blocks:
        return NodeSummary(*block_summary(tree, domain, inputs, plan.blocks, own))
    sums = sum_matrices(tree)
    est, var = [], []
    means: Means = {}  # the answers' averages, shared by every group's z
    for g in range(len(plan)):
        pis = pis_of(tree, domain, inputs, plan, g)
        up = upward(z_of(domain, inputs, plan, g, pis, means), pis, sums)
        est.append(np.asarray(up.est[0], dtype=float))
        var.append(up.var[0])
    return NodeSummary(tuple(est), tuple(var))


def blue_above(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    below: NodeSummary,
    plan: BluePlan,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    top: NodeSummary | None = None,
    fold: FedTerms | None = None,
) -> tuple[Blue, NodeSummary]:
    """The whole tree's BLUE of the levels down to a stream level, from their measurements
    and the summaries of the subtrees under the stream level (``below``, one row per stream
    node in node order): the upward recursion completed above the stream level, then the
    downward one down to it. Also returns the stream nodes' final estimates per group, which
    ``blue_below`` continues from. Equal to ``blue`` on the whole tree at these levels.
    ``top``: the first level's final estimate when it is not the root (a streamed subtree
    whose leaves go a chunk of families at a time, ``topdown.blue.leaf_families``).
    ``fold``: with recoded queries, the stream level's subtree covariances (one ``k x k``
    matrix per node and block: each subtree is its own node type) folded into the passes'
    terms block by block and dropped (``topdown.blue.fed_terms``); the stream nodes' summaries
    then come without them."""
    inputs = checked_inputs(tree, measurements, exact_totals)
    return solve(tree, domain, inputs, plan, below=below, top=top, fold=fold)


def blue_below(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    top: NodeSummary,
    plan: BluePlan,
    own: OwnTerms | None = None,
) -> Blue:
    """The whole tree's BLUE of a subtree's levels, from its own measurements and its top's
    final estimate (``blue_above``'s, one row): the upward recursion within the subtree, then
    the downward one from the given top. ``tree`` and ``measurements`` as in
    ``subtree_summary``; the result's level 0 is the top (its given estimate). ``own``: a
    recoded plan's own terms of the subtree, when computed already (taken: the recursions
    write in them)."""
    inputs = checked_inputs(tree, measurements, None)
    estimate, _ = solve(tree, domain, inputs, plan, top=top, own=own)
    return estimate
