"""The passes' metric under ``estimator="blue"``: weights that make their quadratic form the
BLUE's own precision.

The passes fit each family's children to fed answers, one weighted square per answer:
``sum_q w_q |Q_q (x - b)|^2``. The GLS of the children given their published parent (the BLUE's
downward step, which the L2 pass should reproduce wherever nothing is clipped) needs that form
to be ``(x - b)' Lambda (x - b)`` with ``Lambda`` the precision of the child's estimate from its
own subtree. In the subspace split of ``topdown.blue.plan`` that precision is ``sum_g pi_g P_g``
(one scalar ``pi_g`` per group, ``1 / subtree_scale``), and ``Q'Q`` of a marginal is ``lift_q``
times the identity on each subset S it keeps. So the weights solve, per subset S,

    sum_{q keeps S} lift_q w_q = pi_{g(S)},    w_q >= 0,

a small non-negative least-squares problem per distinct precision row (scaled to relative
error). At a leaf it gives back ``w_q = 1 / Var_q``, the raw measurements' weights; above, the
children's information enters. Feeding the final BLUE or the subtree estimates then gives the
same L2 answer, clipped or not (``blue_inputs``).

Why not each fed answer's own variance (what the passes were fed before). The fed answers are
functions of one estimate: weighing each by its own inverse variance counts the same information
once per query, and over-weights the coarse answers against the cells. Measured on the 2020
production PL94 strategy (``hhinstlevels`` folded into ``hhgq``, state total invariant, a
750,000-person state, 6 paired seeds): block total MAE 8.68 against TopDown's 8.41 (+0.27 +-
0.01), block-group totals +0.026 +- 0.012; with these weights 8.38 (-0.032 +- 0.002) and -0.034
+- 0.014, and every level's totals, voting-age totals and cells no worse than TopDown's.
``benchmarks/bench_estimators.py`` (discrete Gaussian, rho 0.5 and 2, 8 seeds, the root's total
held): on the synthetic sparse tracts the old weights gave tract totals 1.04-1.08 x TopDown's,
these 0.99-1.00. The price: on the ACS excerpt, detailed only, the state and PUMA totals gain
less (0.93-0.96 x TopDown's instead of 0.81-0.90), because the old over-weighted total also
countered the clipping bias of small nodes.

With recoded queries (``block_metric_weights``) the BLUE works on the blocks of
``topdown.blue.blocks``, where a node's subtree precision is a ``k x k`` matrix ``Lambda_b``
and a fed query's ``Q'Q`` is ``k x k`` too (``Block.gram``, zero on a block it does not see).
The weights then solve, per block,

    sum_q w_q G_qb = Lambda_b,    w_q >= 0,

stacked over the blocks. Made relative the way the scalar rows are (each divided by its
target): whitened by the subtree covariance ``V_b``, the equations are ``V_b^(1/2) (sum_q w_q
G_qb) V_b^(1/2) = I`` in the Frobenius norm (so each block's residual does not depend on the
block's basis); at ``k = 1`` this is the scalar row, and each block counts once whatever its
number of copies, as each scalar subset does. They are solved from their normal equations,
``tr(G_q V G_p V)`` and ``tr(G_q V)`` summed over the blocks (queries x queries), with each
``G_q V`` formed from ``G_q``'s Kronecker factors where ``G_q`` is large: no square root of
``V``, no ``k x k`` eigendecomposition and no ``G_q`` (the DHC persons preset's blocks have
``k = 1,160``). Unlike the plain split, the subtree precision of a parent is not
always in the span of the ``G_q``: the children's summed covariances, inverted, leave it (on
``hhinst``'s span the grams are combinations of ``I``, ``diag(s)`` and ``vv'``, ``v =
sqrt(s)``; the inverse of one is in general not one, ``1 / (a + b s)`` not being affine in the
three group sizes ``s``), so the weights are then the closest (relative, least squares); at a
leaf, and above
children whose precisions are all equal, they are exact. An exact direction (an invariant:
the covariance is 0 along the node total ``w``) adds nothing to its block's normal equations,
as the scalar rows leave out an exact group: the passes hold it as a constraint.

Before, a strategy with recoded queries kept each answer's own (mean) subtree variance, the
over-counting above. Measured on the production PL94 strategy as written (``hhinst``
measured, state total invariant, 750,000 persons, 10 paired seeds,
``benchmarks/bench_census2020.py``): blue minus topdown in block total MAE went from +0.27 +-
0.01 to -0.032 +- 0.004, in block-group totals from +0.038 +- 0.008 to -0.042 +- 0.005, in
block cells from +0.0006 to -0.000045 +- 0.000002; no figure of any level is now worse (the
tables, with a held-out state: docs/benchmarks.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls

from constraints.domain import Domain
from topdown.blue.blocks import Block
from topdown.blue.mapped_stacks import hand_back
from topdown.blue.plan import kept_axes, lift
from topdown.blue.shared_matrices import SharedMatrices, type_index
from topdown.query import Factor
from topdown.strategy import Query

__all__ = ["metric_weights", "block_metric_weights", "MetricNormals"]

log = logging.getLogger(__name__)

#: A relative residual above this means the fed queries cannot express the subtree precision
#: (a level feeds fewer queries than the tree measures): the weights are then the closest.
RESIDUAL = 1e-6

#: A subtree precision above this comes from exact answers (the inverse of
#: ``topdown.blue.estimate.EXACT_VARIANCE``, up to round-off).
EXACT_PRECISION = 1e90


def metric_weights(
    domain: Domain,
    groups: Sequence[Sequence[frozenset[int]]],
    subtree_scale: np.ndarray,
    queries: Sequence[Query],
) -> np.ndarray | None:
    """Per node and fed query, the weight ``w_q`` (nodes, queries), for a BLUE of plain
    groups; None when a fed query is recoded (the plain groups cannot weigh it: a strategy with
    recodes has blocks, ``block_metric_weights``).

    Args:
        domain: the query domain.
        groups: the BLUE's subspace groups (attribute subsets per group).
        subtree_scale: (groups, nodes) per-coordinate variance of each node's subtree estimate
            (inf: no information; 0: exact).
        queries: the fed queries, in the order of the result's columns.
    """
    if any(q.recoded(domain) for q in queries):
        return None
    kept = [kept_axes(q, domain) for q in queries]
    lifts = np.array([lift(q, domain) for q in queries])
    subsets = [(g, s) for g, members in enumerate(groups) for s in members]
    sees = np.array([[float(s <= k) for k in kept] for _, s in subsets])
    of_group = np.array([g for g, _ in subsets], dtype=np.int64)
    with np.errstate(divide="ignore"):
        precision = 1.0 / np.asarray(subtree_scale, dtype=float)  # (groups, nodes)
    inverse, first = type_index([precision.T])
    rows = precision.T[first]
    solved = np.zeros((rows.shape[0], len(queries)))
    worst = 0.0
    for r, row in enumerate(rows):
        target = row[of_group]
        # an exact direction (an invariant in the subtree) is left out: its answers keep their
        # variance 0 (``blue_inputs``), which the passes' ``precision`` weighs as exact
        ok = np.isfinite(target) & (target < EXACT_PRECISION)
        if not ok.any():
            continue
        scale = 1.0 / np.where(target[ok] > 0, target[ok], 1.0)
        A = sees[ok] * lifts[None, :] * scale[:, None]
        w, residual = nnls(A, target[ok] * scale)
        # NNLS leaves round-off (1e-18) where a weight is 0: a query that adds nothing
        solved[r] = np.where(w * A.max(axis=0) > 1e-12, w, 0.0)
        worst = max(worst, residual / np.sqrt(ok.sum()))
    if worst > RESIDUAL:
        log.debug("the fed queries express the subtree precision to %.2g (relative)", worst)
    return solved[inverse]


def _kron_times(parts: Sequence[np.ndarray], v: np.ndarray) -> np.ndarray:
    """``G V`` for ``G`` the Kronecker product of ``parts`` (each (g_a, g_a)) and ``V`` (k, k),
    one axis at a time: O(k^2 sum g_a), not the O(k^3) of ``G`` itself."""
    x = v.reshape([p.shape[0] for p in parts] + [v.shape[1]])
    for a, part in enumerate(parts):
        x = np.moveaxis(np.tensordot(part, x, axes=([1], [a])), 0, a)
    return x.reshape(v.shape)


#: One block's share of the normal equations: ``H`` (queries, queries), ``c`` (queries,)
#: and the squared norm of its target.
_Normal = tuple[np.ndarray, np.ndarray, float]


#: Bytes of a block's stacked ``G_q`` (queries, k, k) formed densely; above it, each ``G_q V``
#: from ``G_q``'s Kronecker factors (a dense product per query is cheaper for small ``k``).
DENSE_GRAM_BYTES = 1 << 24


def _stacked_grams(block: Block, factors: Sequence[Sequence[Factor]]) -> np.ndarray | None:
    """The fed queries' ``G_q`` on ``block`` (queries, k, k; zero where unseen), or None when
    ``k > 1`` and they are larger than ``DENSE_GRAM_BYTES``."""
    k = block.k
    if k > 1 and len(factors) * k * k * 8 > DENSE_GRAM_BYTES:
        return None
    return np.stack([block.gram(f) if block.sees(f) else np.zeros((k, k)) for f in factors])


def _block_normal(
    variance: np.ndarray,
    block: Block,
    factors: Sequence[Sequence[Factor]],
    grams: np.ndarray | None,
) -> _Normal:
    """One block's relative equations for one node, as their normal equations, from its
    subtree covariance (a scalar, or ``k x k``) and the fed queries' factors.

    Whitened by the covariance ``V`` (``S S' = V``), the equation is ``sum_q w_q S' G_q S =
    I`` in the Frobenius norm (every entry of the symmetric matrix, so it does not depend on
    the block's basis); its normal equations are ``H_qp = tr(G_q V G_p V)``, ``c_q = tr(G_q
    V)``, target ``k``, with no square root of ``V``. An exact direction (an invariant's total,
    projected out of ``V``) adds nothing to ``H`` or ``c``: left out, as the scalar rows leave
    out an exact group (its unmatched 1 only adds to the residual). A scalar block is one row,
    ``v g_q = 1``; with no information (infinite variance, precision 0) the row ``g_q = 0``
    asks the weights of the queries that see it to be 0, unscaled, as the scalar rows do.
    """
    n = len(factors)
    v = np.asarray(variance, dtype=float)
    if v.ndim == 0:
        assert grams is not None  # k = 1
        g = grams[:, 0, 0]
        if not np.isfinite(v):
            return np.outer(g, g), np.zeros(n), 0.0
        if v <= 0.0 or 1.0 / v >= EXACT_PRECISION:  # exact (an invariant)
            return np.zeros((n, n)), np.zeros(n), 0.0
        return np.outer(v * g, v * g), v * g, 1.0
    k = v.shape[0]
    if grams is not None:
        products = (grams @ v).reshape(n, -1)  # G_q V, flattened
    else:
        products = np.zeros((n, k * k))
        for q, f in enumerate(factors):
            if block.sees(f):
                products[q] = _kron_times(block.gram_factors(f), v).reshape(-1)
    # tr(G_q V G_p V) = sum_ij (G_q V)_ij (G_p V)_ji
    transposed = products.reshape(n, k, k).transpose(0, 2, 1).reshape(n, -1)
    h = products @ transposed.T
    return 0.5 * (h + h.T), products[:, :: k + 1].sum(axis=1), float(k)


def _normal_nnls(h: np.ndarray, c: np.ndarray, target: float) -> tuple[np.ndarray, float]:
    """``min |A w - b|`` over ``w >= 0`` given its normal equations ``A'A = h``, ``A'b = c``,
    ``|b|^2 = target``: the same minimiser from ``A = sqrt(e) U'``, ``b = U'c / sqrt(e)`` over
    ``h``'s non-zero eigenvalues ``e`` (``c`` is in ``h``'s range). Returns the weights and
    the residual ``|A w - b|``."""
    e, u = np.linalg.eigh(h)
    keep = e > 1e-14 * max(float(e[-1]), 0.0)
    if not keep.any():
        return np.zeros(len(c)), float(np.sqrt(max(target, 0.0)))
    root = np.sqrt(e[keep])
    w, _ = nnls(root[:, None] * u[:, keep].T, (u[:, keep].T @ c) / root)
    return w, float(np.sqrt(max(w @ h @ w - 2.0 * c @ w + target, 0.0)))


class MetricNormals:
    """The weights' normal equations (``_block_normal``) gathered a block at a time, so a
    block's covariances can be dropped once it is read: a streamed release's stream level
    holds a ``k x k`` matrix per node and block (``topdown.blue.fed_terms``). Each block's
    share is computed once per distinct covariance it has; ``weights`` sums them per node in
    block order and solves once per distinct combination, so the result is
    ``block_metric_weights``' bit for bit, whichever way the blocks came.
    """

    def __init__(self, domain: Domain, queries: Sequence[Query]) -> None:
        self.factors = [q.factors(domain) for q in queries]
        self._types: list[np.ndarray] = []  # per block, each node's distinct covariance
        self._parts: list[list[_Normal]] = []  # per block, per distinct covariance

    def add(self, block: Block, scale: np.ndarray | SharedMatrices) -> None:
        """Block ``block``'s share, from each node's covariance in it: (nodes,) for ``k =
        1`` (inf: no information; 0: exact), else (nodes, k, k), an array or shared
        matrices."""
        s = SharedMatrices.of(scale) if block.k > 1 else np.asarray(scale)
        key = s.index if isinstance(s, SharedMatrices) else s
        types, first = type_index([key])
        grams = _stacked_grams(block, self.factors)
        parts = []
        for node in first:
            v = s.values[s.index[node]] if isinstance(s, SharedMatrices) else s[node]
            parts.append(_block_normal(v, block, self.factors, grams))
        # the pages read of stacks mapped from disk (``topdown.blue.mapped_stacks``)
        if isinstance(s, SharedMatrices):
            hand_back(s.values)
        self._types.append(types)
        self._parts.append(parts)

    def weights(self) -> np.ndarray:
        """Per node and query, the weights (nodes, queries) from the blocks added."""
        n = len(self.factors)
        # a node's combination of the blocks' types: the same partition (and order) as of
        # their keys, each block's types being its keys renumbered
        inverse, first = type_index(self._types)
        solved = np.zeros((first.size, n))
        worst = 0.0
        for r, node in enumerate(first):
            h, c, target = np.zeros((n, n)), np.zeros(n), 0.0
            for types, parts in zip(self._types, self._parts, strict=True):
                part = parts[types[node]]
                h, c, target = h + part[0], c + part[1], target + part[2]
            if not target:
                continue
            w, residual = _normal_nnls(h, c, target)
            # NNLS leaves round-off where a weight is 0: a query that adds nothing
            solved[r] = np.where(w * np.sqrt(np.maximum(np.diag(h), 0.0)) > 1e-12, w, 0.0)
            worst = max(worst, residual / np.sqrt(max(1.0, target)))
        if worst > RESIDUAL:
            log.debug("the fed queries express the subtree precision to %.2g (relative)", worst)
        return solved[inverse]


def block_metric_weights(
    domain: Domain,
    blocks: Sequence[Block],
    subtree_scale: Sequence[np.ndarray | SharedMatrices],
    queries: Sequence[Query],
) -> np.ndarray:
    """Per node and fed query, the weight ``w_q`` (nodes, queries) for a BLUE of blocks
    (recoded queries; see the module docstring): the relative non-negative least squares fit
    of ``sum_q w_q Q_q'Q_q`` to each node's subtree precision on every block, solved once per
    distinct set of subtree covariances (``MetricNormals``).

    Args:
        domain: the query domain.
        blocks: the BLUE's blocks (``Blue.blocks``).
        subtree_scale: per block, the covariance of each node's subtree estimate in the block:
            (nodes,) for ``k = 1`` (inf: no information; 0: exact), else (nodes, k, k) (an
            array or shared matrices: solved once per distinct combination of types).
        queries: the fed queries, in the order of the result's columns.
    """
    normals = MetricNormals(domain, queries)
    for block, scale in zip(blocks, subtree_scale, strict=True):
        normals.add(block, scale)
    return normals.weights()
