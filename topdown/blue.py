"""The whole-tree best linear unbiased estimate (BLUE) of every node, and its variance.

TopDown fits each family from its parent's published counts and its children's own
measurements, so a parent never learns from what was measured below it. The BLUE uses every
measurement of the tree: generalised least squares with weights 1/variance, children summing
exactly to their parent, no sign constraint. It reads only the noisy measurements (and their
public variances): it is post-processing.

How it is computed without a dense (nodes x cells)^2 system. Every query is a marginal, the
Kronecker product over attributes of an identity (kept) or a row of ones (summed). In the
"ANOVA" basis (per attribute: the mean direction and its orthogonal complement) the cell space
splits into orthogonal subspaces, one per attribute subset S (the attributes whose complement
part is taken). ``Q'Q`` of a marginal keeping K is ``prod_{a not in K} n_a`` times the identity
on every subspace with S a subset of K, and zero on the others; consistency acts cell by cell.
So the whole-tree problem splits into independent tree problems, one per subspace, in which
each node has one scalar precision ``pi_v(S) = sum_q [S subset K_q] prod_{a not in K_q} n_a /
Var_q(v)``. Subspaces with the same precisions everywhere are solved together, cell by cell,
by Hay et al. (2010)'s upward and downward recursions, generalised to unequal variances and to
nodes without information (infinite variance): O(groups x nodes x cells) time. A detailed-only
strategy is one group; detailed plus total is two (the second, the node totals' direction, is
solved on one value per node).

The variance of every answer follows from the same split: within a group the estimate's
covariance is a scalar (per node) times the group's projector, so a marginal's answers all have
the same variance at a node, given by ``Blue.variance(level, query)``.

In pieces, for a streamed release (``topdown.stream``): both recursions only pass per-node
summaries across a level, so a subtree's upward recursion reduces to its top's estimate and
variance per group (``subtree_summary``), the levels above finish the upward recursion from
those and run the downward one to the stream level (``blue_above``), and each subtree runs the
downward one from its top's final estimate (``blue_below``). Every piece uses the whole tree's
groups (``BluePlan``), so the pieces give the whole-tree BLUE.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from topdown.measure import ByLevel, Measurements
from topdown.strategy import Query
from topdown.tree import Tree

__all__ = [
    "QueryEstimate",
    "EstimatorInputs",
    "Blue",
    "as_inputs",
    "blue",
    "blue_above",
    "blue_below",
    "blue_inputs",
    "BluePlan",
    "NodeSummary",
    "subtree_summary",
    "precision",
]

log = logging.getLogger(__name__)

_TINY_VARIANCE = 1e-200  # a variance of 0 (an exact answer) computes as this one
#: A BLUE variance below this comes from exact answers (invariants, computed with variance
#: ``_TINY_VARIANCE``): reported as 0. Noise variances are never near it (a variance of 1e-100
#: would take a budget of about rho = 1e100).
EXACT_VARIANCE = 1e-100


@dataclass(frozen=True)
class QueryEstimate:
    """An input of the estimation passes: one query's values for every node of one level.

    Stands in for a ``QueryMeasurement`` (the passes read ``query``, ``noisy`` and
    ``variance``): a noisy vector, its query and its variance, like private-pgm's
    ``LinearMeasurement``. ``variance`` is per node (``inf`` = no information, weight 0).

    Attributes:
        level: level number (0 = root).
        query: the query.
        noisy: the values fitted by the passes (nodes, answers): raw integer answers, or floats.
        variance: float array (nodes,): the variance of every answer of each node.
    """

    level: int
    query: Query
    noisy: np.ndarray
    variance: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.noisy)
        if values.dtype.kind not in "iuf":  # raw integer answers stay integers (no copy)
            values = values.astype(float)
        if values.ndim != 2:
            raise ValueError(f"noisy (shape {values.shape}) must be 2-d: (nodes, answers)")
        var = np.broadcast_to(np.asarray(self.variance, dtype=float), (values.shape[0],)).copy()
        if np.isnan(var).any() or (var < 0).any():
            raise ValueError(f"variance ({var[:5]}...) must be >= 0 (inf = no information)")
        object.__setattr__(self, "noisy", values)
        object.__setattr__(self, "variance", var)

    @property
    def name(self) -> str:
        return self.query.name


@dataclass(frozen=True)
class EstimatorInputs(ByLevel[QueryEstimate]):
    """The inputs of the estimation passes, level by level (root first)."""

    levels: tuple[tuple[QueryEstimate, ...], ...]


def as_inputs(measurements: Measurements | EstimatorInputs) -> EstimatorInputs:
    """Raw measurements as estimator inputs with per-node variances (values unchanged: raw
    integer answers stay integers)."""
    if isinstance(measurements, EstimatorInputs):
        return measurements
    return EstimatorInputs(
        tuple(
            tuple(QueryEstimate(m.level, m.query, m.noisy, np.asarray(m.variance)) for m in lv)
            for lv in measurements.levels
        )
    )


# -- the subspace split ------------------------------------------------------------------


def _kept_axes(query: Query, domain: Domain) -> frozenset[int]:
    kept = set(query.kept(domain))
    return frozenset(i for i, a in enumerate(domain.names) if a in kept)


def _subsets(domain: Domain) -> list[frozenset[int]]:
    """Attribute subsets with a non-empty subspace (an attribute of one value has none)."""
    axes = [i for i, n in enumerate(domain.shape) if n > 1]
    return [frozenset(c) for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]


def _lift(query: Query, domain: Domain) -> float:
    """``Q'Q`` of a marginal on the subspaces it sees: the product of the summed sizes."""
    kept = _kept_axes(query, domain)
    return float(np.prod([n for i, n in enumerate(domain.shape) if i not in kept]))


def _coefficient(subset: frozenset[int], kept: frozenset[int], shape: Sequence[int]) -> float:
    """diag(Q P_S Q') of a marginal keeping ``kept``: the share of subspace S in one answer."""
    if not subset <= kept:
        return 0.0
    c = 1.0
    for i, n in enumerate(shape):
        if i in subset:
            c *= 1.0 - 1.0 / n
        elif i in kept:
            c *= 1.0 / n
        else:
            c *= n
    return c


def precision(variance: np.ndarray | float) -> np.ndarray:
    """Inverse variances, the one conversion every estimator uses: ``inf`` (no information)
    gives 0, and 0 (an exact answer) a huge but finite precision, so sums and ratios of
    precisions stay finite and an exact answer outweighs any noisy one."""
    v = np.maximum(np.asarray(variance, dtype=float), _TINY_VARIANCE)
    return np.where(np.isinf(v), 0.0, 1.0 / v)


# -- the estimate ------------------------------------------------------------------------


@dataclass(frozen=True)
class LeafShift:
    """How the leaf level's final BLUE follows from its subtree estimates: each leaf moves by
    its share ``ratio`` (its subtree variance over its siblings' total) of its parent's gap
    (the parent's final estimate minus its children's summed subtree estimates), cell by cell.
    Exact for one subspace group with finite variances (see ``blue``).

    Attributes:
        parent: each leaf's parent index (leaves,).
        ratio: float (leaves,).
        gap: float (parents, cells).
    """

    parent: np.ndarray
    ratio: np.ndarray
    gap: np.ndarray


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
    """

    domain: Domain
    fitted: tuple[np.ndarray, ...]
    groups: tuple[tuple[frozenset[int], ...], ...]
    scale: tuple[np.ndarray, ...]
    subtree_scale: tuple[np.ndarray, ...]
    leaf_shift: LeafShift | None = None

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
        base = self.fitted[level][rows]
        shift = self.leaf_shift
        if shift is None or not self.holds_subtree(level):
            return np.asarray(base, dtype=float)
        out = shift.gap[shift.parent[rows]]
        out *= shift.ratio[rows, None]
        out += base
        return out

    def totals_at(self, level: int) -> np.ndarray:
        """The final BLUE of every node total of ``level`` (nodes,), without its cells."""
        total = self.fitted[level].sum(axis=1, dtype=float)
        shift = self.leaf_shift
        if shift is None or not self.holds_subtree(level):
            return total
        return total + shift.ratio * shift.gap.sum(axis=1)[shift.parent]

    @property
    def cells(self) -> tuple[np.ndarray, ...]:
        """Every level's final BLUE (float (nodes, cells) each). Builds the leaf level: for
        small trees and tests; large ones read ``cells_at`` level by level."""
        return tuple(self.cells_at(level) for level in range(self.n_levels))

    def variance(self, level: int, query: Query | str, *, subtree: bool = False) -> np.ndarray:
        """Variance of each answer of ``query`` at every node of ``level`` (nodes,); with
        ``subtree``, that of the node's estimate from its own subtree only."""
        kept = _kept_axes(Query.parse(query), self.domain)
        scale = (self.subtree_scale if subtree else self.scale)[level]
        out = np.zeros(scale.shape[1])
        for g, subsets in enumerate(self.groups):
            c = sum(_coefficient(s, kept, self.domain.shape) for s in subsets)
            if c > 0:
                out = out + c * scale[g]
        return np.where(out < EXACT_VARIANCE, 0.0, out)  # an answer an invariant publishes

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
        """Standard error of each cell at every node of ``level`` (nodes,)."""
        return np.sqrt(self.variance(level, Query(None)))


def blue(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
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
    """
    inputs = _checked_inputs(tree, measurements, exact_totals)
    plan = BluePlan.of(domain, [[m.query for m in lv] for lv in inputs.levels])
    estimate, _ = _solve(tree, domain, inputs, plan)
    return estimate


# -- the BLUE in pieces: a streamed release's subtrees (``topdown.stream``) ----------------


@dataclass(frozen=True)
class BluePlan:
    """The subspace groups of a whole tree's BLUE: which attribute subsets are solved together,
    from the queries every level measures (public: the strategy, and the levels where an
    invariant publishes node totals). The pieces of a streamed BLUE share the whole tree's plan,
    so each piece runs the same recursions the whole tree would.

    Attributes:
        signatures: per group, the (level, query index) pairs whose queries see its subsets.
        members: per group, its attribute subsets (the group on the most cells first).
    """

    signatures: tuple[tuple[tuple[int, int], ...], ...]
    members: tuple[tuple[frozenset[int], ...], ...]
    shape: tuple[int, ...]

    @classmethod
    def of(
        cls,
        domain: Domain,
        queries: Sequence[Sequence[Query]],
        exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    ) -> BluePlan:
        """The plan of a tree whose level ``l`` measures ``queries[l]`` (in this order), plus a
        total at the levels where ``exact_totals`` names a node (as ``blue`` adds them)."""
        per_level = [
            list(qs) + ([Query(())] if (exact_totals or {}).get(level) else [])
            for level, qs in enumerate(queries)
        ]
        subsets = _subsets(domain)
        signature: dict[frozenset[int], list[tuple[int, int]]] = {s: [] for s in subsets}
        for level, qs in enumerate(per_level):
            for qi, q in enumerate(qs):
                kept = _kept_axes(q, domain)
                for s in subsets:
                    if s <= kept:
                        signature[s].append((level, qi))
        by_sig: dict[tuple[tuple[int, int], ...], list[frozenset[int]]] = {}
        for s in subsets:
            by_sig.setdefault(tuple(signature[s]), []).append(s)
        # the group on the most cells first: solved on every cell, as the identity minus the
        # other groups' projectors; the others on their own axes' cells
        groups = sorted(
            by_sig.items(),
            key=lambda kv: (-_width(frozenset().union(*kv[1]), domain.shape), -len(kv[1])),
        )
        return cls(
            tuple(sig for sig, _ in groups),
            tuple(tuple(m) for _, m in groups),
            tuple(int(n) for n in domain.shape),
        )

    def __len__(self) -> int:
        return len(self.members)

    def reduced(self, g: int) -> tuple[int, ...]:
        """The cell shape group ``g`` is solved on: every cell for the first group, its own
        axes' cells for the others."""
        if g == 0:
            return self.shape
        axes = frozenset().union(*self.members[g])
        return tuple(n if i in axes else 1 for i, n in enumerate(self.shape))


@dataclass(frozen=True)
class NodeSummary:
    """Per group, estimates and variances of some nodes, on the group's cells (``reduced``).

    A subtree's summary (``subtree_summary``): its top node's estimate from its descendants'
    measurements alone (the children's summed subtree estimates) and that estimate's variance.
    The top's final BLUE (``blue_above``): its estimate, final variance and whole-tree subtree
    variance (``subtree``). Everything is derived from noisy measurements: public.

    Attributes:
        est: per group, float (nodes, cells of the group).
        var: per group, float (nodes,).
        subtree: per group, float (nodes,), or empty when not needed.
    """

    est: tuple[np.ndarray, ...]
    var: tuple[np.ndarray, ...]
    subtree: tuple[np.ndarray, ...] = ()

    @classmethod
    def stack(cls, parts: Sequence[NodeSummary]) -> NodeSummary:
        """The summaries of several nodes as one (in the order given)."""
        n = len(parts[0].est)
        return cls(
            tuple(np.concatenate([p.est[g] for p in parts]) for g in range(n)),
            tuple(np.concatenate([p.var[g] for p in parts]) for g in range(n)),
        )

    def row(self, node: int) -> NodeSummary:
        """One node's summary."""
        pick = slice(node, node + 1)
        return NodeSummary(
            tuple(e[pick] for e in self.est),
            tuple(v[pick] for v in self.var),
            tuple(s[pick] for s in self.subtree),
        )


def subtree_summary(
    tree: Tree, domain: Domain, measurements: Measurements | EstimatorInputs, plan: BluePlan
) -> NodeSummary:
    """The upward recursion over a subtree, down to its leaves: its top node's estimate from
    its descendants' measurements alone, per group (the bottom-up half of ``blue``).

    ``tree``'s levels are the whole tree's from the subtree's top down (``Level.number`` kept;
    the top level has one node); ``measurements`` has one entry per one of them, the top's
    empty (it is measured with the levels above). ``plan``: the whole tree's.
    """
    inputs = _checked_inputs(tree, measurements, None)
    sums = _sum_matrices(tree)
    est, var = [], []
    for g in range(len(plan)):
        pis = _pis_of(tree, domain, inputs, plan, g)
        up = _upward(_z_of(domain, inputs, plan, g, pis), pis, sums)
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
) -> tuple[Blue, NodeSummary]:
    """The whole tree's BLUE of the levels down to a stream level, from their measurements
    and the summaries of the subtrees under the stream level (``below``, one row per stream
    node in node order): the upward recursion completed above the stream level, then the
    downward one down to it. Also returns the stream nodes' final estimates per group, which
    ``blue_below`` continues from. Equal to ``blue`` on the whole tree at these levels."""
    inputs = _checked_inputs(tree, measurements, exact_totals)
    return _solve(tree, domain, inputs, plan, below=below)


def blue_below(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    top: NodeSummary,
    plan: BluePlan,
) -> Blue:
    """The whole tree's BLUE of a subtree's levels, from its own measurements and its top's
    final estimate (``blue_above``'s, one row): the upward recursion within the subtree, then
    the downward one from the given top. ``tree`` and ``measurements`` as in
    ``subtree_summary``; the result's level 0 is the top (its given estimate)."""
    inputs = _checked_inputs(tree, measurements, None)
    estimate, _ = _solve(tree, domain, inputs, plan, top=top)
    return estimate


def _checked_inputs(
    tree: Tree,
    measurements: Measurements | EstimatorInputs,
    exact_totals: Mapping[int, Mapping[int, float]] | None,
) -> EstimatorInputs:
    inputs = as_inputs(measurements)
    if len(inputs.levels) != tree.n_levels:
        raise ValueError(
            f"measurements ({len(inputs.levels)} levels) must have one entry per tree level "
            f"({tree.n_levels})"
        )
    return _with_exact_totals(inputs, tree, exact_totals or {})


def _pis_of(
    tree: Tree, domain: Domain, inputs: EstimatorInputs, plan: BluePlan, g: int
) -> list[np.ndarray]:
    first = tree.levels[0].number  # the signatures name the whole tree's levels
    return [
        _group_precision(inputs.at(i), plan.signatures[g], first + i, lv.size, domain)
        for i, lv in enumerate(tree.levels)
    ]


def _z_of(
    domain: Domain, inputs: EstimatorInputs, plan: BluePlan, g: int, pis: list[np.ndarray]
) -> Callable[[int], np.ndarray]:
    members = list(plan.members)
    reduced = plan.reduced(g)

    def z_at(level: int) -> np.ndarray:
        return _group_z(inputs.at(level), pis[level], domain, members, g, reduced)

    return z_at


def _solve(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    plan: BluePlan,
    *,
    below: NodeSummary | None = None,
    top: NodeSummary | None = None,
) -> tuple[Blue, NodeSummary]:
    """The recursions of every group over ``tree``: its last level's children summarised by
    ``below`` (else they are leaves), its top's final estimate given by ``top`` (else it is
    the root). Returns the BLUE and, with ``below``, the last level's final estimates."""
    shape = plan.shape
    sums = _sum_matrices(tree)
    parents = [lv.parent for lv in tree.levels]
    last = tree.n_levels - 1
    fitted: list[np.ndarray] = []
    scale = [np.zeros((len(plan), lv.size)) for lv in tree.levels]
    subtree = [np.zeros((len(plan), lv.size)) for lv in tree.levels]
    leaf_shift: LeafShift | None = None
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for g in range(len(plan)):
        reduced = plan.reduced(g)
        pis = _pis_of(tree, domain, inputs, plan, g)
        child = None if below is None else (below.est[g], below.var[g])
        up = _upward(_z_of(domain, inputs, plan, g, pis), pis, sums, child)
        if top is not None:  # the top's whole-tree subtree variance, not its children's only
            up.var[0] = top.subtree[g]
        lean = (
            below is None and len(plan) == 1 and bool(np.isfinite(up.var[last]).all()) and last > 0
        )
        given = None if top is None else (top.est[g], top.var[g])
        u, f, shift = _downward(up, parents, sums, lean, given)
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
                _add_reduced(fitted[level], u[level], reduced, shape)
            u[level] = np.empty(0)  # this level's share is in ``fitted``: free it
    log.debug("BLUE: %d subspace group(s) over %d level(s)", len(plan), tree.n_levels)
    estimate = Blue(
        domain, tuple(fitted), tuple(plan.members), tuple(scale), tuple(subtree), leaf_shift
    )
    return estimate, NodeSummary(
        tuple(e for e, _, _ in ends), tuple(v for _, v, _ in ends), tuple(s for _, _, s in ends)
    )


def _width(axes: frozenset[int], shape: Sequence[int]) -> int:
    return int(np.prod([n for i, n in enumerate(shape) if i in axes]))


def _group_precision(
    lv: tuple[QueryEstimate, ...],
    sig: tuple[tuple[int, int], ...],
    level: int,
    nodes: int,
    domain: Domain,
) -> np.ndarray:
    """pi_v of a group at every node of a level: its queries' lifts over their variances. A
    level without inputs (a subtree's top, measured with the levels above it) has none."""
    pi = np.zeros(nodes)
    for lvl, qi in sig:
        if lvl == level and lv:
            m = lv[qi]
            pi = pi + _lift(m.query, domain) * precision(m.variance)
    return pi


def _group_z(
    lv: tuple[QueryEstimate, ...],
    pi: np.ndarray,
    domain: Domain,
    members: list[tuple[frozenset[int], ...]],
    g: int,
    reduced: tuple[int, ...],
) -> np.ndarray:
    """A group's ``z_v = P_g r_v / pi_v`` at every node of a level, shape (nodes, cells of
    ``reduced``), with ``r_v = sum_q Q_q' y_vq / Var_q(v)`` kept apart per kept-attribute set:
    a query's term lies in the subspaces it sees, and each term is projected before terms are
    added, so an exact answer's huge term (precision 1e200) cancels exactly against its own
    projection instead of swamping the noisy ones. One group and one informed query: ``z`` is
    the measurement itself (no copy)."""
    shape = tuple(int(n) for n in domain.shape)
    nodes = pi.shape[0]
    width = int(np.prod(reduced))
    if len(members) == 1 and len(lv) == 1 and np.all(pi > 0):
        raw = np.asarray(lv[0].noisy)
        return raw if raw.shape == (nodes, width) else raw.reshape(nodes, width)
    axes = [frozenset().union(*ms) for ms in members]
    z: np.ndarray | None = None
    for m in lv:
        kept = _kept_axes(m.query, domain)
        if not members[g][0] <= kept:  # a group's subsets share the queries that see them
            continue
        prec = precision(m.variance).reshape((nodes,) + (1,) * len(shape))
        values = _reduced(m.query, m.noisy, domain)
        if not np.all(prec > 0):
            values = np.where(prec > 0, values, 0.0)
        if g == 0:  # the identity minus the other groups' projectors
            part = prec * values
            for h, ms in enumerate(members):
                if h != g and ms[0] <= kept:
                    part -= _group_part(part, ms, axes[h])
        else:  # averaged onto the group's axes first: the product is of the group's size
            part = _group_part(prec * _mean_over(values, axes[g]), members[g], axes[g])
        if z is None and part.shape[1:] == reduced:
            z = part  # a fresh array of the group's shape: no second dense copy
        elif z is None:
            z = np.zeros((nodes,) + reduced) + part
        else:
            z += part
        del part
    if z is None:
        return np.zeros((nodes, width))
    z = z.reshape(nodes, width)
    with np.errstate(divide="ignore", invalid="ignore"):
        z /= pi[:, None]
    z[pi <= 0] = 0.0
    return z


def _mean_over(x: np.ndarray, axes: frozenset[int]) -> np.ndarray:
    """x (nodes, *shape or reduced) averaged over every axis outside ``axes``."""
    for i in range(x.ndim - 1):
        if i not in axes and x.shape[1 + i] > 1:
            x = x.mean(axis=1 + i, keepdims=True)
    return x


def _group_part(
    x: np.ndarray, members: tuple[frozenset[int], ...], axes: frozenset[int]
) -> np.ndarray:
    """sum_{S in members} P_S x, on the members' axes only: x is averaged over the other axes
    once (every P_S does that first), then each P_S acts on the small array."""
    small = _mean_over(x, axes)
    out = _project(small, members[0])
    for s in members[1:]:
        out = out + _project(small, s)
    return out


def _reduced(query: Query, values: np.ndarray, domain: Domain) -> np.ndarray:
    """A query's answers (nodes, answers) as (nodes, *shape) with summed axes of size 1: Q' y
    by broadcasting, never materialised."""
    kept = _kept_axes(query, domain)
    reduced = tuple(n if i in kept else 1 for i, n in enumerate(domain.shape))
    return np.asarray(values).reshape((values.shape[0],) + reduced)


def _project(x: np.ndarray, subset: frozenset[int]) -> np.ndarray:
    """P_S applied to every node's array x (nodes, *shape or a reduced shape): per axis the
    mean, or minus the mean (the per-axis factors commute). The averaging axes go first, so
    the result and every temporary have the size of S's axes only."""
    ndim = x.ndim - 1
    for i in range(ndim):
        if i not in subset and x.shape[1 + i] > 1:
            x = x.mean(axis=1 + i, keepdims=True)
    for i in sorted(subset):
        if x.shape[1 + i] > 1:
            x = x - x.mean(axis=1 + i, keepdims=True)
    return x


def _add_reduced(
    out: np.ndarray, part: np.ndarray, reduced: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    """out (nodes, cells) += a group's estimate on its own axes, broadcast over the others."""
    nodes = out.shape[0]
    full = out.reshape((nodes,) + shape)
    full += part.reshape((nodes,) + reduced)


@dataclass
class _Upward:
    """The upward recursion's results per level: subtree estimates and variances, and the
    children's summed estimates and summed variances (parents' levels)."""

    est: list[np.ndarray]
    var: list[np.ndarray]
    child_sum: list[np.ndarray]
    child_var: list[np.ndarray]


def _upward(
    z_at: Callable[[int], np.ndarray],
    pi: list[np.ndarray],
    sums: list[sp.csr_matrix],
    below: tuple[np.ndarray, np.ndarray] | None = None,
) -> _Upward:
    """Cell-by-cell tree GLS, upward: each node's estimate from its own subtree (its own value
    combined by inverse variance with the sum of its children's). A leaf's is its own ``z``
    (no arithmetic: raw measurements stay as they are). ``below``: the last level's children's
    summed estimates and summed variances, when its nodes are not leaves (a streamed release's
    subtrees, summarised)."""
    n_levels = len(pi)
    empty = [np.empty(0)] * n_levels
    up = _Upward(list(empty), list(empty), list(empty), list(empty))
    with np.errstate(divide="ignore", invalid="ignore"):
        for level in range(n_levels - 1, -1, -1):
            own = pi[level]
            z = z_at(level)
            if level == n_levels - 1 and below is None:
                up.est[level] = z
                up.var[level] = np.where(own > 0, 1.0 / own, np.inf)
                continue
            if level == n_levels - 1:
                assert below is not None
                m, M = below
            else:
                S = sums[level]
                m = S @ up.est[level + 1]
                M = S @ up.var[level + 1]
                M = np.where(S.getnnz(axis=1) > 0, M, np.inf)  # childless: no information
            up.child_sum[level], up.child_var[level] = m, M
            m_prec = precision(M)
            prec = own + m_prec
            up.var[level] = np.where(prec > 0, 1.0 / prec, np.inf)
            est = (own[:, None] * z + m * m_prec[:, None]) / prec[:, None]
            est[prec <= 0] = 0.0
            up.est[level] = est
    return up


def _downward(
    up: _Upward,
    parents: list[np.ndarray],
    sums: list[sp.csr_matrix],
    lean: bool,
    top: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], LeafShift | None]:
    """Cell-by-cell tree GLS, downward: each child's subtree estimate corrected by its share
    (its variance over the children's total variance) of the gap between its parent's final
    estimate and the children's sum. Infinite variances mean no information: a child without
    any takes the whole gap if it is alone, an equal share (infinite variance) if not.

    ``top``: the first level's final estimates and variances when it is not the root (a
    streamed release's subtree, from its top's whole-tree BLUE).

    Returns the final estimates per level (with ``lean``, the leaves' subtree estimates, and
    the shift that makes them final), their per-coordinate variances, and the shift."""
    n_levels = len(up.est)
    u = [up.est[0] if top is None else top[0]]
    f = [up.var[0] if top is None else top[1]]
    shift: LeafShift | None = None
    with np.errstate(divide="ignore", invalid="ignore"):
        for level in range(1, n_levels):
            S = sums[level - 1]
            par = parents[level]
            V = up.var[level]
            inf = np.isinf(V)
            n_inf = (S @ inf.astype(float))[par]
            finite_sum = (S @ np.where(inf, 0.0, V))[par]
            M = up.child_var[level - 1][par]
            M_inf = np.isinf(M)
            ratio = np.where(inf, 1.0 / np.maximum(n_inf, 1.0), np.where(M_inf, 0.0, V / M))
            gap = u[level - 1] - up.child_sum[level - 1]
            up.child_sum[level - 1] = np.empty(0)
            if lean and level == n_levels - 1:
                shift = LeafShift(par, ratio, gap)
                u.append(up.est[level])
            else:
                final = gap[par]
                final *= ratio[:, None]
                final += up.est[level]
                u.append(final)
            up.est[level] = np.empty(0)  # the level's subtree estimate is not needed any more
            Fp = f[level - 1][par]
            informed = V * (M - V) / M + ratio**2 * Fp  # both finite: Var(c | sum) + share of F_p
            uninformed = np.where(n_inf == 1, finite_sum + Fp, np.inf)  # takes the whole gap
            f.append(np.where(inf, uninformed, np.where(M_inf, V, informed)))
    return u, f, shift


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


def _sum_matrices(tree: Tree) -> list[sp.csr_matrix]:
    """Per level l < last: the (parents x children) 0/1 matrix summing level l + 1 into l."""
    out = []
    for level in range(tree.n_levels - 1):
        parent = tree.levels[level + 1].parent
        n_children = len(parent)
        out.append(
            sp.csr_matrix(
                (np.ones(n_children), (parent, np.arange(n_children))),
                shape=(tree.levels[level].size, n_children),
            )
        )
    return out


def blue_inputs(
    measurements: Measurements | EstimatorInputs,
    estimate: Blue,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    marginals: bool | Collection[int] = True,
) -> EstimatorInputs:
    """The passes' inputs under ``estimator="blue"``: per level the BLUE of the detailed
    cells, of the node totals and (``marginals``: True, or the levels where) of every other
    query the level measured.

    The weights are the variances of each node's estimate from its own subtree (the upward
    recursion's), not of its final BLUE. The passes fix the parent's published counts and
    treat siblings as independent; siblings' subtree estimates are independent, their final
    BLUEs are not (they share the parent's gap). With these weights the L2 pass on the BLUE
    is the GLS of the children given the published parent: where nothing is clipped it moves
    each child by its share ``V_c / sum V`` of the gap between the published parent and the
    BLUE parent, the BLUE's own downward step (final variances would split it by
    ``f_c / sum f``). At the root the two variances coincide.

    Feeding the BLUE values or the subtree estimates gives the same answer, clipped or not,
    when the BLUE has one subspace group (a detailed-only strategy): a child's final BLUE is
    its subtree estimate plus ``V_c`` times a per-parent vector ``g``, so every query's answer
    moves by ``V_c Q g`` and its fed variance is ``c_Q V_c``; the passes' objective changes by
    ``-2 sum_c (Q g)' Q x_c / c_Q`` plus a constant, fixed by the parent's sum constraint on
    the ``x_c``. So the leaf level, whose final BLUE is never built (``Blue.leaf_shift``), is
    fed its subtree estimates: the raw measurements, integers as measured. With several
    groups the shift is ``sum_g V_c^g P_g g_g`` and the fed cell variance mixes the groups'
    ``V_c^g``, so no such identity holds: every level gets its final BLUE.

    The totals go in although, for a strategy without a measured total, they are a linear
    function of the cells (the Mahalanobis weight of such a total is 0): non-negativity is
    not linear. Clipping a small child's near-zero cells moves mass to it from its larger
    siblings, a bias of the child's total that grows with the noise; the BLUE total, unbiased,
    pulls it back. Measured (benchmarks/bench_estimators.py, ACS, detailed only, 5 seeds), a
    total weight of 0, 1/4, 1 and 4 times its inverse variance gave state total MAE 0.95,
    0.86, 0.76 and 0.69 of TopDown's at rho 0.5 (0.90, 0.81, 0.79, 0.87 at rho 2). On
    homogeneous sparse families (``benchmarks/synthetic.py``: ten tracts of about 60 people
    per county) clipping has no such bias to correct, and the same weights gave tract totals
    1.00, 1.02, 1.09 and 1.36 times TopDown's: the weight 1 (the total as one more
    measurement, weighted by its own variance) is the compromise kept.

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
    out = []
    for level, lv in enumerate(as_inputs(measurements).levels):
        keep = marginals if isinstance(marginals, bool) else level in marginals
        names = ["detailed", "total"] + [
            m.query.name for m in lv if keep and m.query.name not in ("detailed", "total")
        ]
        cells = (
            estimate.fitted[level] if estimate.holds_subtree(level) else estimate.cells_at(level)
        )
        fed = []
        for name in names:
            query = Query.parse(name)
            values = query.answer(cells, estimate.domain)  # the cells themselves: no copy
            variance = estimate.variance(level, query, subtree=True)
            held = list((exact_totals or {}).get(level, {})) if name == "total" else []
            variance[held] = np.inf
            fed.append(QueryEstimate(level, query, values, variance))
        out.append(tuple(fed))
    return EstimatorInputs(tuple(out))
