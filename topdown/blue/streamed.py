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

from collections.abc import Iterable, Mapping

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_solve import OwnTerms, block_summary
from topdown.blue.estimate import Blue, NodeSummary, checked_inputs, solve
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, hand_back
from topdown.blue.plan import BluePlan
from topdown.blue.recursions import Means, pis_of, sum_matrices, upward, z_of
from topdown.blue.shared_matrices import dense
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree

__all__ = ["subtree_summary", "stacked_summaries", "blue_above", "blue_below"]


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


def stacked_summaries(n: int, summaries: Iterable[tuple[int, NodeSummary]]) -> NodeSummary:
    """The ``n`` stream nodes' summaries as one (``blue_above``'s ``below``), each put in its
    row as it comes (``(position, summary)``, in any order: a parallel sweep's results as
    they complete), so none waits for the others: under recodes a summary holds a ``k x k``
    matrix per block (86 MB a DHC node), which a sweep's list of results held all at once,
    one per stream node, in the parent's memory when they came from worker processes.
    Matrices of ``MAP_BYTES`` or more go to a file as they are put
    (``topdown.blue.mapped_stacks``), each summary's pages handed back. The same numbers as
    ``NodeSummary.stack``; the result's lists are handed over as that one's with ``free`` (a
    recoded solve empties them as it reads them)."""
    est: list[np.ndarray] = []
    var: list[MadeStack | np.ndarray] = []  # a stack of (k, k) matrices, or variances
    seen = np.zeros(n, dtype=bool)
    with MappedStacks.opened() as maps:
        for i, summary in summaries:
            if not est:
                est = [np.empty((n,) + np.shape(e)[1:]) for e in summary.est]
                var = [_holder(n, dense(v), maps) for v in summary.var]
            if seen[i]:
                raise ValueError(f"stream node {i}'s summary came twice")
            seen[i] = True
            for g, (e, v) in enumerate(zip(summary.est, summary.var, strict=True)):
                est[g][i] = e[0]
                one, into = dense(v), var[g]
                if isinstance(into, MadeStack):
                    into.put(i, one[0])
                    hand_back(one)
                else:
                    into[i] = one[0]
        if not seen.all():
            raise ValueError(f"no summary came for stream node(s) {np.flatnonzero(~seen)[:5]}")
        return NodeSummary(est, [v.done() if isinstance(v, MadeStack) else v for v in var])


def _holder(n: int, first: np.ndarray, maps: MappedStacks | None) -> MadeStack | np.ndarray:
    """Where ``n`` nodes' covariances like ``first`` (one node's) go: a stack of ``k x k``
    matrices (to a file when large enough), else an array in memory."""
    shape = (n,) + first.shape[1:]
    return MadeStack(shape, maps=maps) if first.ndim == 3 else np.empty(shape)


def blue_above(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    below: NodeSummary,
    plan: BluePlan,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    top: NodeSummary | None = None,
) -> tuple[Blue, NodeSummary]:
    """The whole tree's BLUE of the levels down to a stream level, from their measurements
    and the summaries of the subtrees under the stream level (``below``, one row per stream
    node in node order): the upward recursion completed above the stream level, then the
    downward one down to it. Also returns the stream nodes' final estimates per group, which
    ``blue_below`` continues from. Equal to ``blue`` on the whole tree at these levels.
    ``top``: the first level's final estimate when it is not the root (a streamed subtree
    whose leaves go a chunk of families at a time, ``topdown.blue.leaf_families``)."""
    inputs = checked_inputs(tree, measurements, exact_totals)
    return solve(tree, domain, inputs, plan, below=below, top=top)


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
