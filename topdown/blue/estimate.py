"""The whole-tree best linear unbiased estimate (BLUE) of every node, and its variance.

TopDown fits each family from its parent's published counts and its children's own
measurements, so a parent never learns from what was measured below it. The BLUE uses every
measurement of the tree: generalised least squares with weights 1/variance, children summing
exactly to their parent, no sign constraint. It reads only the noisy measurements (and their
public variances): it is post-processing.

How it is computed without a dense (nodes x cells)^2 system: the cell space splits into
orthogonal subspaces on which every marginal query acts as a scalar, grouped by equal
precisions (``topdown.blue.plan``); each group is one tree problem solved cell by cell by Hay
et al. (2010)'s upward and downward recursions, generalised to unequal variances and to nodes
without information (``topdown.blue.recursions``): O(groups x nodes x cells) time. This module
holds the estimate (``Blue``), the solve over the groups (``blue``, ``solve``) and the inputs
the passes are fed from it (``blue_inputs``).

The variance of every answer follows from the same split: within a group the estimate's
covariance is a scalar (per node) times the group's projector, so a marginal's answers all have
the same variance at a node, given by ``Blue.variance(level, query)``.

Recoded queries (an attribute through a grouping of its values) do not act as scalars on that
split when the groups have unequal sizes: a strategy with one is solved over the blocks of
``topdown.blue.blocks`` instead (``topdown.blue.block_solve``), some with a small matrix
precision per node, and its answers' variances differ within a node
(``Blue.answer_variance``; ``topdown.blue.variance_terms``).

In pieces, for a streamed release: ``topdown.blue.streamed`` (the same ``solve``, with a
subtree's summary below or its top's final estimate above, ``NodeSummary``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from constraints.domain import Domain
from topdown.blue.answers import shared_answers
from topdown.blue.block_solve import OwnTerms, solve_blocks
from topdown.blue.blocks import Block
from topdown.blue.fed_terms import FedTerms, fed_names
from topdown.blue.mapped_stacks import MadeStack, MappedStacks, hand_back
from topdown.blue.metric import block_metric_weights, metric_weights
from topdown.blue.plan import BluePlan, coefficient, kept_axes
from topdown.blue.recursions import (
    LeafShift,
    Means,
    add_reduced,
    downward,
    pis_of,
    shifted,
    sum_matrices,
    upward,
    z_of,
)
from topdown.blue.shared_matrices import Covariance, SharedMatrices, dense
from topdown.blue.variance_terms import mean_variance, plain_variance_terms, summed_variance_terms
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate, as_inputs
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree
from topdown.strategy import Query

__all__ = [
    "Blue",
    "blue",
    "blue_inputs",
    "NodeSummary",
    "solve",
    "checked_inputs",
]

log = logging.getLogger(__name__)

#: A BLUE variance below this comes from exact answers (invariants, whose variance 0
#: ``precision`` computes as a tiny one): reported as 0. Noise variances are never near it (a
#: variance of 1e-100 would take a budget of about rho = 1e100).
EXACT_VARIANCE = 1e-100


class LeafSource(Protocol):
    """The leaf level of a ``Blue`` computed on demand, a chunk of families at a time
    (``topdown.blue.leaf_families.LeafFamilies``)."""

    def cells(self, rows: slice) -> np.ndarray:
        """The final BLUE of the leaf rows ``rows`` (nodes, cells)."""
        ...

    def totals(self) -> np.ndarray:
        """The final BLUE of every leaf total (leaves,)."""
        ...

    def scale(self, subtree: bool) -> list[Covariance]:
        """The leaves' final (or subtree) covariances: per block, or the plain groups'
        (groups, leaves) as one entry."""
        ...


@dataclass(frozen=True)
class Blue:
    """The BLUE of every node's cells and the variances needed for any marginal's answers.

    The leaf level, the bulk of a tree, is kept as its subtree estimates when that is exact
    (one subspace group, every leaf informed: a detailed-only strategy, whose leaves' subtree
    estimates are their raw measurements, held without a copy); its final BLUE is then computed
    on demand (``cells_at``), a block of nodes at a time if asked. So the whole tree's BLUE is
    never held as dense floats.

    Attributes:
        domain: the query domain.
        fitted: per level (nodes, cells): the final BLUE (consistent, may be negative), except
            the leaf level when ``leaf_shift`` is set: its subtree estimates.
        groups: the attribute subsets solved together (same precisions everywhere).
        scale: per level, float (groups, nodes): each group's per-coordinate variance (inf
            where the measurements do not identify it).
        subtree_scale: the same for each node's estimate from its own subtree's measurements
            only (the upward recursion): siblings' subtree estimates are independent.
        leaf_shift: set when ``fitted[-1]`` holds the leaves' subtree estimates.
        blocks: with recoded queries, the blocks of ``topdown.blue.blocks`` (``groups``,
            ``scale`` and ``subtree_scale`` are then empty).
        block_scale: per level, per block, the final estimate's covariance in the block
            ((nodes,) for k = 1, else (nodes, k, k) held once per distinct matrix:
            ``topdown.blue.shared_matrices``).
        block_subtree_scale: the same for the subtree estimates.
        leaves: set when the leaf level is computed on demand (``fitted[-1]`` is then an
            empty placeholder and the leaf level's covariances are read from it:
            ``topdown.blue.leaf_families``).
        fed: per level whose subtree covariances were folded as its blocks were solved (a
            streamed release's stream level, ``topdown.blue.fed_terms``), what the passes
            read of them; that level's ``block_subtree_scale`` is then empty.
    """

    domain: Domain
    fitted: tuple[np.ndarray, ...]
    groups: tuple[tuple[frozenset[int], ...], ...]
    scale: tuple[np.ndarray, ...]
    subtree_scale: tuple[np.ndarray, ...]
    leaf_shift: LeafShift | None = None
    blocks: tuple[Block, ...] = ()
    block_scale: tuple[tuple[Covariance, ...], ...] = ()
    block_subtree_scale: tuple[tuple[Covariance, ...], ...] = ()
    leaves: LeafSource | None = None
    fed: Mapping[int, FedTerms] = field(default_factory=dict)

    @property
    def n_levels(self) -> int:
        return len(self.fitted)

    def holds_subtree(self, level: int) -> bool:
        """True when ``fitted[level]`` holds the subtree estimates, not the final BLUE."""
        return self.leaf_shift is not None and level == self.n_levels - 1

    def cells_at(self, level: int, nodes: slice | None = None) -> np.ndarray:
        """The final BLUE of the cells of ``level``'s nodes (all, or the slice ``nodes``):
        float (nodes, cells), a new array when the level is computed on demand."""
        rows = slice(None) if nodes is None else nodes
        if self._on_demand(level):
            assert self.leaves is not None
            return self.leaves.cells(rows)
        base = self.fitted[level][rows]
        shift = self.leaf_shift
        if shift is None or not self.holds_subtree(level):
            return np.asarray(base, dtype=float)
        return shifted(base, shift.gap, shift.parent[rows], shift.ratio[rows])

    def totals_at(self, level: int) -> np.ndarray:
        """The final BLUE of every node total of ``level`` (nodes,), without its cells."""
        if self._on_demand(level):
            assert self.leaves is not None
            return self.leaves.totals()
        total = self.fitted[level].sum(axis=1, dtype=float)
        shift = self.leaf_shift
        if shift is None or not self.holds_subtree(level):
            return total
        return total + shift.ratio * shift.gap.sum(axis=1)[shift.parent]

    def _on_demand(self, level: int) -> bool:
        return self.leaves is not None and level == self.n_levels - 1

    def block_scales(self, level: int, *, subtree: bool = False) -> tuple[Covariance, ...]:
        """Per block, the covariances of ``level``'s final (or subtree) estimates."""
        if self._on_demand(level):
            assert self.leaves is not None
            return tuple(self.leaves.scale(subtree))
        if subtree and level in self.fed:
            raise ValueError(
                f"level {level}'s subtree covariances were folded into the passes' terms as "
                f"its blocks were solved (queries {list(self.fed[level].names)}); they are not "
                "kept"
            )
        return (self.block_subtree_scale if subtree else self.block_scale)[level]

    def group_scale(self, level: int, *, subtree: bool = False) -> np.ndarray:
        """Without blocks: per group, each node's final (or subtree) variance (groups, nodes)."""
        if self._on_demand(level):
            assert self.leaves is not None
            return np.asarray(self.leaves.scale(subtree)[0])
        return (self.subtree_scale if subtree else self.scale)[level]

    @property
    def cells(self) -> tuple[np.ndarray, ...]:
        """Every level's final BLUE (float (nodes, cells) each). Builds the leaf level: for
        small trees and tests; large ones read ``cells_at`` level by level."""
        return tuple(self.cells_at(level) for level in range(self.n_levels))

    def variance(self, level: int, query: Query | str, *, subtree: bool = False) -> np.ndarray:
        """Variance of each answer of ``query`` at every node of ``level`` (nodes,); with
        ``subtree``, that of the node's estimate from its own subtree only.

        A plain marginal's answers at a node all have the same variance under a strategy
        without recodes. Under recodes (or for a recoded query) they differ with the groups'
        sizes: this is then their mean over the node's answers (the passes' one weight per
        node and query); ``answer_variance`` gives each answer's."""
        q = Query.parse(query)
        if self.blocks:
            scales = self.block_scales(level, subtree=subtree)
            return reported_variance(
                *mean_variance(list(zip(self.blocks, scales, strict=True)), q.factors(self.domain))
            )
        if q.recoded(self.domain):
            return self.answer_variance(level, q, subtree=subtree).mean(axis=1)
        kept = kept_axes(q, self.domain)
        scale = self.group_scale(level, subtree=subtree)
        out = np.zeros(scale.shape[1])
        for g, subsets in enumerate(self.groups):
            c = sum(coefficient(s, kept, self.domain.shape) for s in subsets)
            if c > 0:
                out = out + c * scale[g]
        return np.where(out < EXACT_VARIANCE, 0.0, out)  # an answer an invariant publishes

    def answer_variance(
        self,
        level: int,
        query: Query | str,
        *,
        subtree: bool = False,
        nodes: slice | None = None,
    ) -> np.ndarray:
        """Variance of every answer of ``query`` at the nodes of ``level`` (all, or the slice
        ``nodes``): float (nodes, answers), 0 for an answer an invariant publishes."""
        q = Query.parse(query)
        rows = slice(None) if nodes is None else nodes
        if not self.blocks and not q.recoded(self.domain):
            per_node = self.variance(level, q, subtree=subtree)[rows]
            return np.repeat(per_node[:, None], q.n_answers(self.domain), axis=1)
        factors = q.factors(self.domain)
        if self.blocks:
            scales = self.block_scales(level, subtree=subtree)
            terms = [
                (block, scale.rows(rows) if isinstance(scale, SharedMatrices) else scale[rows])
                for block, scale in zip(self.blocks, scales, strict=True)
            ]
            out, size = summed_variance_terms(terms, factors)
        else:
            scale = self.group_scale(level, subtree=subtree)[:, rows]
            out, size = plain_variance_terms(self.groups, scale, factors)
        out = out.reshape(out.shape[0], -1)
        size = size.reshape(out.shape)
        # an answer an invariant publishes: what is left is rounding of the exact direction
        return reported_variance(out, size)

    def cell_variance(self, level: int, nodes: slice | None = None) -> np.ndarray:
        """The variance of every cell of the nodes of ``level`` (all, or the slice
        ``nodes``): float (nodes, cells)."""
        return self.answer_variance(level, Query(None), nodes=nodes)

    def answer(self, level: int, query: Query | str) -> QueryEstimate:
        """The BLUE of ``query``'s answers at every node of ``level``, with their variance."""
        q = Query.parse(query)
        return QueryEstimate(
            level,
            q,
            np.asarray(q.answer(self.cells_at(level), self.domain), dtype=float),
            self.variance(level, q),
        )

    def stderr(self, level: int) -> np.ndarray:
        """Standard error of each cell at every node of ``level`` (nodes,); under recodes,
        where cells differ, the root mean square over the node's cells (``cell_variance``
        gives each cell's)."""
        return np.sqrt(self.variance(level, Query(None)))


def blue(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    threads: int = 1,
) -> Blue:
    """The whole-tree BLUE from the noisy measurements (see the module docstring).

    Memory: one subspace group (a detailed-only strategy) reads each level's measurements in
    place (a level with one query and no uninformed node is its own ``z``) and stores the leaf
    level as its subtree estimates, i.e. the raw measurements (``Blue.leaf_shift``): the only
    dense floats are those of the levels above the leaves. Several groups hold each level's
    final BLUE; a group whose subsets involve few attributes (the node totals' group: one
    value per node) is solved on those attributes' cells only.

    Args:
        tree: the public structure.
        domain: the query domain.
        measurements: the noisy measurements (or float inputs with per-node variances).
        exact_totals: level -> node index -> a total published exactly (an invariant). Each
            enters as a measurement of variance 0, an exact constraint: the BLUE keeps it,
            spreads it over the node's cells and its neighbours, and reports its variance as 0.
        threads: with recoded queries, how many of their independent blocks are solved at
            once (``topdown.blue.block_solve.solve_blocks``; the same answer with any number).
    """
    inputs = checked_inputs(tree, measurements, exact_totals)
    plan = BluePlan.of(domain, [[m.query for m in lv] for lv in inputs.levels])
    estimate, _ = solve(tree, domain, inputs, plan, threads=threads)
    return estimate


@dataclass(frozen=True)
class NodeSummary:
    """Per group, estimates and variances of some nodes, on the group's cells (``reduced``).

    A subtree's summary (``subtree_summary``): its top node's estimate from its descendants'
    measurements alone (the children's summed subtree estimates) and that estimate's variance.
    The top's final BLUE (``blue_above``): its estimate, final variance and whole-tree subtree
    variance (``subtree``). Everything is derived from noisy measurements: public.

    Attributes:
        est: per group, float (nodes, cells of the group).
        var: per group, float (nodes,); per block of a recoded plan, its covariances
            ((nodes,) for k = 1, else (nodes, k, k): an array, or shared matrices as the level
            holds them, ``topdown.blue.shared_matrices``).
        subtree: the same for the whole-tree subtree covariances, or empty when not needed
            (a streamed subtree's top: its passes take the top's counts as published, so its
            subtree covariances, ``k x k`` per block, are never read).

    A summary below a solve whose ``est`` and ``var`` are lists is handed over: a recoded
    plan's solve empties each block's entries as it reads them (``solve_blocks``).
    """

    est: Sequence[np.ndarray]
    var: Sequence[Covariance]
    subtree: Sequence[Covariance] = ()

    @classmethod
    def stacked(cls, n: int, parts: Iterable[tuple[int, NodeSummary]]) -> NodeSummary:
        """The summaries of ``n`` nodes as one, each part put in its rows as it comes
        (``(first row, summary)``, in any order: a parallel sweep's results as they
        complete), so no part waits for the others. Under recodes a node's summary holds a
        ``k x k`` matrix per block (86 MB a DHC node): a list of every part, stacked at the
        end, held them twice (in the parent's memory when worker processes sent them).
        Matrices of ``MAP_BYTES`` or more go to a file as they are put
        (``topdown.blue.mapped_stacks``), each part's pages handed back. The result's
        ``est`` and ``var`` are lists, handed over: a recoded solve empties them as it reads
        them (``solve_blocks``).

        Raises:
            ValueError: a row given twice, or one left without a summary.
        """
        est: list[np.ndarray] = []
        var: list[MadeStack | np.ndarray] = []  # a stack of (k, k) matrices, or variances
        seen = np.zeros(n, dtype=bool)
        with MappedStacks.opened() as maps:
            for at, part in parts:
                if not est:
                    est = [np.empty((n,) + np.shape(e)[1:]) for e in part.est]
                    var = [_holder(n, dense(v), maps) for v in part.var]
                rows = slice(at, at + len(part.est[0]))
                if seen[rows].any():
                    raise ValueError(f"a summary of rows {rows.start}-{rows.stop - 1} came twice")
                seen[rows] = True
                for g, (e, v) in enumerate(zip(part.est, part.var, strict=True)):
                    est[g][rows] = e
                    values, into = dense(v), var[g]
                    if isinstance(into, MadeStack):
                        into.put(at, values)
                        hand_back(values)
                    else:
                        into[rows] = values
            if not seen.all():
                raise ValueError(f"no summary came for row(s) {np.flatnonzero(~seen)[:5]}")
            return cls(est, [v.done() if isinstance(v, MadeStack) else v for v in var])

    @classmethod
    def stack(cls, parts: Sequence[NodeSummary]) -> NodeSummary:
        """The summaries of several nodes as one, in the order given (``stacked``)."""
        starts = np.cumsum([0] + [len(p.est[0]) for p in parts[:-1]]).tolist()
        return cls.stacked(sum(len(p.est[0]) for p in parts), zip(starts, parts, strict=True))

    def row(self, node: int) -> NodeSummary:
        """One node's summary, a copy (``blue_below`` works in its arrays: a view would write
        into this summary's)."""
        pick = slice(node, node + 1)
        return NodeSummary(
            tuple(e[pick].copy() for e in self.est),
            tuple(v[pick].copy() for v in self.var),
            tuple(s[pick].copy() for s in self.subtree),
        )


def _holder(n: int, first: np.ndarray, maps: MappedStacks | None) -> MadeStack | np.ndarray:
    """Where ``n`` nodes' covariances like ``first`` (some nodes') go: a stack of ``k x k``
    matrices (to a file when large enough), else an array in memory."""
    shape = (n,) + first.shape[1:]
    return MadeStack(shape, maps=maps) if first.ndim == 3 else np.empty(shape)


def checked_inputs(
    tree: Tree,
    measurements: Measurements | EstimatorInputs,
    exact_totals: Mapping[int, Mapping[int, float]] | None,
) -> EstimatorInputs:
    """The measurements as inputs, one entry per level of ``tree`` (checked), with the exact
    totals added as measurements of variance 0."""
    inputs = as_inputs(measurements)
    if len(inputs.levels) != tree.n_levels:
        raise ValueError(
            f"measurements ({len(inputs.levels)} levels) must have one entry per tree level "
            f"({tree.n_levels})"
        )
    return _with_exact_totals(inputs, tree, exact_totals or {})


def solve(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    plan: BluePlan,
    *,
    below: NodeSummary | None = None,
    top: NodeSummary | None = None,
    threads: int = 1,
    own: OwnTerms | None = None,
    fold: FedTerms | None = None,
) -> tuple[Blue, NodeSummary]:
    """The recursions of every group over ``tree``: its last level's children summarised by
    ``below`` (else they are leaves), its top's final estimate given by ``top`` (else it is
    the root). Returns the BLUE and, with ``below``, the last level's final estimates.
    ``threads``: the recoded blocks solved at once (``solve_blocks``); ``own``: their own
    terms when already computed (``topdown.blue.block_solve.own_terms``); ``fold``: with
    recoded queries, the last level's subtree covariances folded into it as each block is
    solved, not kept (``Blue.fed``; without recodes they are a scalar per node and kept)."""
    if plan.blocks:
        return _solve_blocks(
            tree, domain, inputs, plan, below=below, top=top, threads=threads, own=own, fold=fold
        )
    shape = plan.shape
    sums = sum_matrices(tree)
    parents = [lv.parent for lv in tree.levels]
    last = tree.n_levels - 1
    fitted: list[np.ndarray] = []
    scale = [np.zeros((len(plan), lv.size)) for lv in tree.levels]
    subtree = [np.zeros((len(plan), lv.size)) for lv in tree.levels]
    leaf_shift: LeafShift | None = None
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    means: Means = {}  # the answers' averages, shared by every group's z
    for g in range(len(plan)):
        reduced = plan.reduced(g)
        pis = pis_of(tree, domain, inputs, plan, g)
        child = None if below is None else (below.est[g], dense(below.var[g]))
        up = upward(z_of(domain, inputs, plan, g, pis, means), pis, sums, child)
        if top is not None and top.subtree:  # the top's whole-tree subtree variance
            up.var[0] = dense(top.subtree[g])
        lean = (
            below is None and len(plan) == 1 and bool(np.isfinite(up.var[last]).all()) and last > 0
        )
        given = None if top is None else (top.est[g], dense(top.var[g]))
        u, f, shift = downward(up, parents, sums, lean, given)
        if shift is not None:
            leaf_shift = shift
        if below is not None:
            ends.append((np.array(u[last], dtype=float), f[last], np.array(up.var[last])))
        for level in range(last + 1):
            scale[level][g] = f[level]
            subtree[level][g] = up.var[level]
            if g == 0:
                fitted.append(u[level])
            else:
                add_reduced(fitted[level], u[level], reduced, shape)
            u[level] = np.empty(0)  # this level's share is in ``fitted``: free it
    log.debug("BLUE: %d subspace group(s) over %d level(s)", len(plan), tree.n_levels)
    estimate = Blue(
        domain, tuple(fitted), tuple(plan.members), tuple(scale), tuple(subtree), leaf_shift
    )
    return estimate, NodeSummary(
        tuple(e for e, _, _ in ends), tuple(v for _, v, _ in ends), tuple(s for _, _, s in ends)
    )


def _solve_blocks(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    plan: BluePlan,
    *,
    below: NodeSummary | None,
    top: NodeSummary | None,
    threads: int = 1,
    own: OwnTerms | None = None,
    fold: FedTerms | None = None,
) -> tuple[Blue, NodeSummary]:
    """``solve`` for a plan with recoded queries: the blocks of ``topdown.blue.blocks``."""
    sol = solve_blocks(
        tree,
        domain,
        inputs,
        plan.blocks,
        below=None if below is None else (below.est, below.var),
        top=None if top is None else (top.est, top.var, top.subtree),
        threads=threads,
        own=own,
        fold=fold,
    )
    log.debug("BLUE: %d block(s) over %d level(s)", len(plan.blocks), tree.n_levels)
    empty = tuple(np.zeros((0, lv.size)) for lv in tree.levels)
    estimate = Blue(
        domain,
        tuple(sol.cells),
        (),
        empty,
        empty,
        None,
        plan.blocks,
        tuple(tuple(s) for s in sol.scale),
        tuple(tuple(s) for s in sol.subtree_scale),
        fed={} if fold is None else {tree.n_levels - 1: fold},
    )
    return estimate, NodeSummary(
        tuple(e for e, _, _ in sol.ends),
        tuple(v for _, v, _ in sol.ends),
        () if fold is not None else tuple(s for _, _, s in sol.ends),
    )


def _with_exact_totals(
    inputs: EstimatorInputs, tree: Tree, exact_totals: Mapping[int, Mapping[int, float]]
) -> EstimatorInputs:
    """One more total query on each level with exact totals: variance 0 at their nodes,
    infinite (no information) at the others."""
    levels = []
    for level, lv in enumerate(inputs.levels):
        known = exact_totals.get(level, {})
        if not known:
            levels.append(lv)
            continue
        nodes = tree.levels[level].size
        index = np.fromiter(known.keys(), dtype=np.int64, count=len(known))
        if index.min() < 0 or index.max() >= nodes:
            raise ValueError(
                f"exact_totals[{level}] names node {int(index.max())}; level {level} has "
                f"{nodes} node(s)"
            )
        values = np.zeros((nodes, 1))
        variance = np.full(nodes, np.inf)
        values[index, 0] = np.fromiter(known.values(), dtype=float, count=len(known))
        variance[index] = 0.0
        levels.append(lv + (QueryEstimate(level, Query(()), values, variance),))
    return EstimatorInputs(tuple(levels))


def blue_inputs(
    measurements: Measurements | EstimatorInputs,
    estimate: Blue,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    marginals: bool | Collection[int] = True,
    *,
    fixed: int = 0,
) -> EstimatorInputs:
    """The passes' inputs under ``estimator="blue"``: per level the BLUE of the detailed
    cells, of the node totals and (``marginals``: True, or the levels where) of every other
    query the level measured. ``fixed``: how many first levels the passes take as published
    (``topdown.estimation.estimate``'s ``fixed``: a streamed subtree's top, a chunk's
    parents); they get no inputs (none would be read), so their covariances are not read
    either: a streamed subtree's top comes without its subtree covariances.

    The weights are those of ``topdown.blue.metric``: per node, non-negative weights on the
    fed queries whose quadratic form is the precision of the node's estimate from its own
    subtree (the upward recursion's), not of its final BLUE. The passes fix the parent's
    published counts and treat siblings as independent; siblings' subtree estimates are
    independent, their final BLUEs are not (they share the parent's gap). With this metric the
    L2 pass on the BLUE is the GLS of the children given the published parent: where nothing
    is clipped it moves each child by its share of the gap between the published parent and
    the BLUE parent, the BLUE's own downward step; so feeding the final BLUE or the subtree
    estimates gives the same answer: the leaf level of a one-group BLUE is fed its subtree
    estimates (the raw measurements, held without a copy), every other level its final BLUE.
    The fed variance of a query is ``1 / w_q`` (inf where
    the weight is 0: for a strategy without a measured total, the total's). With recoded
    queries the weights fit the subtree precision block by block (``block_metric_weights``),
    exactly where it can be written as such a sum, else as closely as it can.

    The marginals go in at every level by default, although the BLUE cells already pool their
    measurements and a level fed only cells and totals could take the level-batched passes
    (faster than a QP per family). Without them the passes' metric within a node is one weight
    for every cell plus the total's: it no longer holds the well-measured marginals tighter
    than the rest when it spreads the gap to the published parent or the mass that clipping
    moves. The cost, measured (benchmarks/bench_estimators.py, discrete Gaussian, 20 seeds,
    ``marginals=False`` minus ``True`` paired on the same measurements, the root's total held
    in both): ACS "detailed 2/3 + two marginals 1/6", PUMA level, cell MAE +0.024 +- 0.002 on
    0.336 (rho 0.5) and +0.012 +- 0.001 on 0.130 (rho 2), marginal MAE +0.25 +- 0.01 on 1.15
    and +0.115 +- 0.009 on 0.65, total MAE +0.29 +- 0.04 on 3.3 and +0.15 +- 0.05 on 1.5; a
    PL94-shaped state of 20,000 persons with the production queries (detailed 1/2, voting age
    x Hispanic x race 3/10, HHGQ 1/10, total 1/10), root cell MAE 0.062 to 0.110 and 0.018 to
    0.039, block total MAE +0.53 +- 0.01 on 1.95 and +0.31 +- 0.01 on 0.91. Leaving them out
    only at the levels of many nodes (block groups and blocks) kept most of the block-level
    cost (total +0.52, +0.30). So every level gets them; ``marginals=False`` (or the levels
    that get them) is the benchmark's experiment.

    The totals of ``exact_totals`` (invariants) weigh 0 in the passes, which hold each
    invariant as a constraint (their BLUE variance, 0, would drown every other input). Other
    answers of variance 0 (a measurement whose variance underflowed: a huge budget) keep it and
    weigh 1 against about 0 for the rest, as raw measurements do.
    """
    out: list[tuple[QueryEstimate, ...]] = []
    for level, lv in enumerate(as_inputs(measurements).levels):
        if level < fixed:
            out.append(())
            continue
        keep = marginals if isinstance(marginals, bool) else level in marginals
        names = fed_names([m.query for m in lv], keep)
        cells = (
            estimate.fitted[level] if estimate.holds_subtree(level) else estimate.cells_at(level)
        )
        fed = []
        queries = [Query.parse(name) for name in names]
        folded = _folded(estimate, level, names)
        if folded is not None:
            weights: np.ndarray | None = folded.weights()
        elif estimate.blocks:
            weights = block_metric_weights(
                estimate.domain,
                estimate.blocks,
                estimate.block_scales(level, subtree=True),
                queries,
            )
        else:
            weights = metric_weights(
                estimate.domain, estimate.groups, estimate.group_scale(level, subtree=True), queries
            )
        answers = shared_answers(cells, queries, estimate.domain)
        for i, (name, query, values) in enumerate(zip(names, queries, answers, strict=True)):
            variance = (
                estimate.variance(level, query, subtree=True)
                if folded is None
                else reported_variance(*folded.mean_variance(i))
            )
            if weights is not None:
                with np.errstate(divide="ignore"):
                    variance = np.where(variance == 0.0, 0.0, 1.0 / weights[:, i])
            held = list((exact_totals or {}).get(level, {})) if name == "total" else []
            variance[held] = np.inf
            fed.append(QueryEstimate(level, query, values, variance))
        out.append(tuple(fed))
    return EstimatorInputs(tuple(out))


def reported_variance(variance: np.ndarray, size: np.ndarray) -> np.ndarray:
    """A variance summed over the blocks, 0 where it is an exact answer's: below
    ``EXACT_VARIANCE``, or rounding left of an exact direction (at most ``1e-20`` of the
    terms' absolute ``size``)."""
    return np.where((variance < EXACT_VARIANCE) | (variance <= 1e-20 * size), 0.0, variance)


def _folded(estimate: Blue, level: int, names: Sequence[str]) -> FedTerms | None:
    """The level's folded terms (``Blue.fed``), checked to be of the queries fed now and of
    every block; None when the level kept its subtree covariances."""
    folded = estimate.fed.get(level)
    if folded is None:
        return None
    if folded.names != tuple(names) or folded.blocks != len(estimate.blocks):
        raise ValueError(
            f"level {level}'s subtree covariances were folded for the queries "
            f"{list(folded.names)} over {folded.blocks} block(s); the passes are fed {list(names)}"
            f" over {len(estimate.blocks)}"
        )
    return folded
