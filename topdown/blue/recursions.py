"""The BLUE's recursions: Hay et al. (2010)'s upward and downward passes over a tree, per group.

Within one subspace group (``topdown.blue.plan``) every node has one scalar precision, so the
tree GLS is solved cell by cell: upward, each node's estimate from its own subtree (its own
value combined by inverse variance with its children's sum); downward, each child's subtree
estimate corrected by its share of the gap to its parent's final estimate. Generalised to
unequal variances and to nodes without information (infinite variance): O(nodes x cells) per
group. Here also a group's per-level precisions and its ``z`` (the measurements projected on
the group), the inputs of both recursions.

Kept apart from ``topdown.blue.estimate`` (the estimate and its variances) because these are the
numerical kernels that the whole-tree BLUE and the pieces of a streamed one
(``topdown.blue.streamed``) both run; they pass only per-node summaries across a level.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from topdown.blue.plan import BluePlan, kept_axes, lift
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate, precision
from topdown.measurement.tree import Tree
from topdown.strategy import Query
from topdown.support.row_blocks import for_row_blocks, row_blocks

__all__ = [
    "LeafShift",
    "child_sums",
    "Means",
    "upward",
    "downward",
    "pis_of",
    "z_of",
    "add_reduced",
    "sum_matrices",
    "shifted",
]


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


def pis_of(
    tree: Tree, domain: Domain, inputs: EstimatorInputs, plan: BluePlan, g: int
) -> list[np.ndarray]:
    """Group ``g``'s precision ``pi_v`` at every node, per level of ``tree``."""
    first = tree.levels[0].number  # the signatures name the whole tree's levels
    return [
        _group_precision(inputs.at(i), plan.signatures[g], first + i, lv.size, domain)
        for i, lv in enumerate(tree.levels)
    ]


#: Means of a level's query answers over attribute subsets, by (level, query position) and the
#: axes kept: shared by every group's ``z`` (see ``z_of``).
Means = dict[tuple[int, int], dict[frozenset[int], np.ndarray]]


def z_of(
    domain: Domain,
    inputs: EstimatorInputs,
    plan: BluePlan,
    g: int,
    pis: list[np.ndarray],
    means: Means | None = None,
) -> Callable[[int], np.ndarray]:
    """Group ``g``'s ``z`` of a level, computed when the recursion asks for it.

    ``means``: a store shared by the calls for every group of one solve. Each group needs the
    answers averaged onto some axes, and the first group needs every other group's: a
    detailed query's answers (the bulk of a level) are then read twice per level in all (one
    average per group's axes, the smaller ones taken from the larger) instead of about twice
    per group."""
    members = list(plan.members)
    reduced = plan.reduced(g)
    store: Means = {} if means is None else means

    def z_at(level: int) -> np.ndarray:
        return _group_z(inputs.at(level), pis[level], domain, members, g, reduced, store, level)

    return z_at


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
            pi = pi + lift(m.query, domain) * precision(m.variance)
    return pi


def _group_z(
    lv: tuple[QueryEstimate, ...],
    pi: np.ndarray,
    domain: Domain,
    members: list[tuple[frozenset[int], ...]],
    g: int,
    reduced: tuple[int, ...],
    means: Means,
    level: int,
) -> np.ndarray:
    """A group's ``z_v = P_g r_v / pi_v`` at every node of a level, shape (nodes, cells of
    ``reduced``), with ``r_v = sum_q Q_q' y_vq / Var_q(v)`` kept apart per kept-attribute set:
    a query's term lies in the subspaces it sees, and each term is projected before it is
    scaled by its precision's share of ``pi_v``, so an exact answer (precision 1e200, a share
    of about 1) is projected exactly instead of swamping the noisy ones. One group and one
    informed query: ``z`` is the measurement itself (no copy)."""
    shape = tuple(int(n) for n in domain.shape)
    nodes = pi.shape[0]
    width = int(np.prod(reduced))
    if len(members) == 1 and len(lv) == 1 and np.all(pi > 0):
        raw = np.asarray(lv[0].noisy)
        return raw if raw.shape == (nodes, width) else raw.reshape(nodes, width)
    axes = [frozenset().union(*ms) for ms in members]
    z: np.ndarray | None = None
    for qi, m in enumerate(lv):
        kept = kept_axes(m.query, domain)
        if not members[g][0] <= kept:  # a group's subsets share the queries that see them
            continue
        prec = precision(m.variance)
        with np.errstate(divide="ignore", invalid="ignore"):  # z is 0 where pi is 0
            weight = np.where(pi > 0, prec / pi, 0.0).reshape((nodes,) + (1,) * len(shape))
        values = _reduced(m.query, m.noisy, domain)
        if not np.all(prec > 0):
            values = np.where(weight > 0, values, 0.0)
        mean = _averages(means.setdefault((level, qi), {}), values)
        if g == 0:  # the identity minus the other groups' projectors
            others = [
                _group_part(mean(axes[h]), ms, axes[h])
                for h, ms in enumerate(members)
                if h != g and ms[0] <= kept
            ]
            part = _minus(values, others, weight)
        else:  # averaged onto the group's axes first: the product is of the group's size
            part = weight * _group_part(mean(axes[g]), members[g], axes[g])
        if z is None and part.shape[1:] == reduced:
            z = part  # a fresh array of the group's shape: no second dense copy
        elif z is None:
            z = np.zeros((nodes,) + reduced) + part
        else:
            z += part
        del part
    if z is None:
        return np.zeros((nodes, width))
    return z.reshape(nodes, width)


def _averages(
    store: dict[frozenset[int], np.ndarray], values: np.ndarray
) -> Callable[[frozenset[int]], np.ndarray]:
    """``values`` (nodes, *shape or reduced) averaged over every axis outside the given ones,
    each average computed once (kept in ``store``) and from the smallest one already there
    that keeps those axes (an average of equal-sized averages is the average)."""

    def mean(keep: frozenset[int]) -> np.ndarray:
        if keep not in store:
            sources = [a for k, a in store.items() if keep <= k] + [values]
            store[keep] = _mean_over(min(sources, key=lambda a: a.size), keep)
        return store[keep]

    return mean


def _minus(values: np.ndarray, terms: list[np.ndarray], weight: np.ndarray) -> np.ndarray:
    """A new float array ``weight * (values - sum(terms))``, the terms and the per-node
    ``weight`` broadcast over ``values``. Terms that broadcast onto another are added to it first
    (small arrays); the rest is done a block of nodes at a time (``topdown.support.row_blocks``),
    so ``values``' size is read once and written once whatever the number of terms."""
    merged: list[np.ndarray] = []
    for t in sorted(terms, key=lambda a: -a.size):
        for i, acc in enumerate(merged):
            if all(b == 1 or b == a for a, b in zip(acc.shape, t.shape, strict=True)):
                merged[i] = acc + t  # a new array: a term may be a stored average
                break
        else:
            merged.append(t)
    out = np.empty(values.shape, dtype=float)

    def block(rows: slice) -> None:
        part = out[rows]
        if merged:
            np.subtract(values[rows], merged[0][rows], out=part)
        else:
            part[...] = values[rows]
        for t in merged[1:]:
            part -= t[rows]
        part *= weight[rows]

    for_row_blocks(block, values.shape[0], out[:1].nbytes)
    return out


def _mean_over(x: np.ndarray, axes: frozenset[int]) -> np.ndarray:
    """x (nodes, *shape or reduced) averaged over every axis outside ``axes`` (one pass; x
    itself when there is nothing to average)."""
    drop = tuple(1 + i for i in range(x.ndim - 1) if i not in axes and x.shape[1 + i] > 1)
    return x.mean(axis=drop, keepdims=True) if drop else x


def _group_part(
    x: np.ndarray, members: tuple[frozenset[int], ...], axes: frozenset[int]
) -> np.ndarray:
    """sum_{S in members} P_S x, on the members' axes only: x is averaged over the other axes
    once (every P_S does that first), then each P_S acts on the small array.

    The projectors of all subsets of the members' axes sum to the identity on the small
    array, so when the members are most of those subsets the sum is the small array minus the
    few projectors left out: a group of every non-empty subset of k attributes (a marginal's
    own group) is the array minus its mean, not 2^k - 1 projections."""
    small = _mean_over(x, axes)
    live = sorted(i for i in axes if small.shape[1 + i] > 1)
    every = {frozenset(c) for r in range(len(live) + 1) for c in itertools.combinations(live, r)}
    rest = every - set(members)
    if set(members) <= every and len(rest) < len(members):
        out = np.array(small, dtype=float)
        for s in sorted(rest, key=sorted):
            out -= _project(small, s)
        return out
    out = _project(small, members[0])
    for s in members[1:]:
        out = out + _project(small, s)
    return out


def _reduced(query: Query, values: np.ndarray, domain: Domain) -> np.ndarray:
    """A query's answers (nodes, answers) as (nodes, *shape) with summed axes of size 1: Q' y
    by broadcasting, never materialised."""
    kept = kept_axes(query, domain)
    reduced = tuple(n if i in kept else 1 for i, n in enumerate(domain.shape))
    return np.asarray(values).reshape((values.shape[0],) + reduced)


def _project(x: np.ndarray, subset: frozenset[int]) -> np.ndarray:
    """P_S applied to every node's array x (nodes, *shape or a reduced shape): per axis the
    mean, or minus the mean (the per-axis factors commute). The averaging axes go first, so
    the result and every temporary have the size of S's axes only."""
    x = _mean_over(x, subset)
    for i in sorted(subset):
        if x.shape[1 + i] > 1:
            x = x - x.mean(axis=1 + i, keepdims=True)
    return x


def add_reduced(
    out: np.ndarray, part: np.ndarray, reduced: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    """out (nodes, cells) += a group's estimate on its own axes, broadcast over the others (in
    place: one pass, no temporary)."""
    nodes = out.shape[0]
    full = out.reshape((nodes,) + shape)
    full += part.reshape((nodes,) + reduced)


@dataclass
class _Upward:
    """The upward recursion's results per level: subtree estimates and variances, and the
    children's summed estimates and summed variances (parents' levels).

    Every ``est`` array is the recursion's own (fresh from ``upward`` or ``_group_z``), which
    ``downward`` overwrites with the final estimate, except the leaves' when they are the raw
    measurements: that takes one group, one query and every leaf informed, the lean case,
    whose leaves ``downward`` never moves (``LeafShift``)."""

    est: list[np.ndarray]
    var: list[np.ndarray]
    child_sum: list[np.ndarray]
    child_var: list[np.ndarray]


def upward(
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
                m = child_sums(S, up.est[level + 1])
                M = S @ up.var[level + 1]
                M = np.where(S.getnnz(axis=1) > 0, M, np.inf)  # childless: no information
            up.child_sum[level], up.child_var[level] = m, M
            m_prec = precision(M)
            prec = own + m_prec
            up.var[level] = np.where(prec > 0, 1.0 / prec, np.inf)
            est = _combined(z, own, m, m_prec, prec)
            est[prec <= 0] = 0.0
            up.est[level] = est
    return up


def _combined(
    z: np.ndarray,
    own: np.ndarray,
    m: np.ndarray,
    m_prec: np.ndarray,
    prec: np.ndarray,
) -> np.ndarray:
    """``(own z + m_prec m) / prec`` per node (the inverse-variance mean of a node's own value
    and its children's sum), a block of nodes at a time: one new array, no level-sized
    temporaries."""
    out = np.empty(m.shape, dtype=float)

    def block(rows: slice) -> None:
        part = out[rows]
        np.multiply(z[rows], own[rows, None], out=part)
        part += m[rows] * m_prec[rows, None]
        part /= prec[rows, None]

    for_row_blocks(block, m.shape[0], out[:1].nbytes)
    return out


def downward(
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
            else:  # in place: the subtree estimate is not needed any more (see ``_Upward``)
                u.append(shifted(up.est[level], gap, par, ratio, in_place=True))
            up.est[level] = np.empty(0)
            Fp = f[level - 1][par]
            informed = V * (M - V) / M + ratio**2 * Fp  # both finite: Var(c | sum) + share of F_p
            uninformed = np.where(n_inf == 1, finite_sum + Fp, np.inf)  # takes the whole gap
            f.append(np.where(inf, uninformed, np.where(M_inf, V, informed)))
    return u, f, shift


def shifted(
    base: np.ndarray,
    gap: np.ndarray,
    parent: np.ndarray,
    ratio: np.ndarray,
    *,
    in_place: bool = False,
) -> np.ndarray:
    """``base + ratio[:, None] * gap[parent]``: each node's estimate moved by its share of its
    parent's gap (the downward step), a block of nodes at a time (``topdown.support.row_blocks``),
    so the gathered gaps never make a level-sized temporary. A new float array, or ``base`` itself
    with ``in_place`` (a float array the caller owns): no second level-sized array,
    whose fresh pages cost the kernel about as much as the arithmetic."""
    out = base if in_place else np.empty(base.shape, dtype=float)
    if in_place and (base.dtype != np.float64 or not base.flags.writeable):
        raise ValueError(f"shifted in place needs a writeable float64 base, got {base.dtype}")

    def block(rows: slice) -> None:
        moved = gap[parent[rows]]  # a block's gaps: a small array
        moved *= ratio[rows, None]
        np.add(moved, base[rows], out=out[rows])

    for_row_blocks(block, base.shape[0], out[:1].nbytes)
    return out


#: Bytes of the float copy of one block of children in ``child_sums``: large enough that the
#: blocks are a few dozen per level (each is a sparse slice and a product), small enough to be
#: reused from the heap rather than fresh memory
CHILD_BLOCK_BYTES = 1 << 24


def child_sums(S: sp.csr_matrix, values: np.ndarray) -> np.ndarray:
    """``S @ values`` in float64, for a (parents x children) summing matrix of ``sum_matrices``.

    scipy converts an integer operand to float64 whole before the product. The leaf level's
    ``z`` is its raw measurements, small integers: the copy was a level-sized temporary (968 MB
    at the blocks of the 3-million-person state), fresh memory whose first touch took most of
    the upward pass (1.7 s of the BLUE's 1.9 in a parallel release, sampled). Integer values
    whose children are numbered parent by parent (as in every tree the engine builds) are
    converted and summed a block of parents at a time instead. Sums of integers are exact in
    float64, so the result is the same; other values take the plain product.
    """
    values = np.asarray(values)
    n_parents, n_children = S.shape
    if (
        values.ndim != 2
        or values.dtype.kind not in "iu"
        or not np.array_equal(S.indices, np.arange(n_children))
    ):
        return S @ values
    out = np.empty((n_parents, values.shape[1]))
    per_parent = 8 * values.shape[1] * max(1, n_children // max(1, n_parents))
    for rows in row_blocks(n_parents, per_parent, CHILD_BLOCK_BYTES):
        lo, hi = S.indptr[rows.start], S.indptr[rows.stop]
        out[rows] = S[rows, lo:hi] @ values[lo:hi].astype(np.float64)
    return out


def sum_matrices(tree: Tree) -> list[sp.csr_matrix]:
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
