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
strategy is one group; detailed plus total is two.

The variance of every answer follows from the same split: within a group the estimate's
covariance is a scalar (per node) times the group's projector, so a marginal's answers all have
the same variance at a node, given by ``Blue.variance(level, query)``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
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
    "blue_inputs",
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


def _project(r: np.ndarray, subset: frozenset[int], shape: tuple[int, ...]) -> np.ndarray:
    """P_S applied to every row of r (nodes, cells): per axis the mean, or minus the mean."""
    x = r.reshape((r.shape[0],) + shape)
    for i, n in enumerate(shape):
        if n == 1:
            continue
        mean = x.mean(axis=1 + i, keepdims=True)
        x = x - mean if i in subset else mean
    return np.broadcast_to(x, (r.shape[0],) + shape).reshape(r.shape)


def _back(query: Query, values: np.ndarray, domain: Domain) -> np.ndarray:
    """Q' y for a stack of answers (nodes, answers) -> (nodes, cells)."""
    kept = _kept_axes(query, domain)
    reduced = tuple(n if i in kept else 1 for i, n in enumerate(domain.shape))
    x = values.reshape((values.shape[0],) + reduced)
    return np.broadcast_to(x, (values.shape[0],) + domain.shape).reshape(values.shape[0], -1)


def precision(variance: np.ndarray | float) -> np.ndarray:
    """Inverse variances, the one conversion every estimator uses: ``inf`` (no information)
    gives 0, and 0 (an exact answer) a huge but finite precision, so sums and ratios of
    precisions stay finite and an exact answer outweighs any noisy one."""
    v = np.maximum(np.asarray(variance, dtype=float), _TINY_VARIANCE)
    return np.where(np.isinf(v), 0.0, 1.0 / v)


# -- the estimate ------------------------------------------------------------------------


@dataclass(frozen=True)
class Blue:
    """The BLUE of every node's cells and the variances needed for any marginal's answers.

    Attributes:
        domain: the query domain.
        cells: per level, float (nodes, cells): the estimate (consistent, may be negative).
        groups: the attribute subsets solved together (same precisions everywhere).
        scale: per level, float (groups, nodes): each group's per-coordinate variance (inf
            where the measurements do not identify it).
        subtree_scale: the same for each node's estimate from its own subtree's measurements
            only (the upward recursion): siblings' subtree estimates are independent.
    """

    domain: Domain
    cells: tuple[np.ndarray, ...]
    groups: tuple[tuple[frozenset[int], ...], ...]
    scale: tuple[np.ndarray, ...]
    subtree_scale: tuple[np.ndarray, ...]

    def variance(self, level: int, query: Query | str, *, subtree: bool = False) -> np.ndarray:
        """Variance of each answer of ``query`` at every node of ``level`` (nodes,); with
        ``subtree``, that of the node's estimate from its own subtree only."""
        kept = _kept_axes(Query.parse(query), self.domain)
        scale = (self.subtree_scale if subtree else self.scale)[level]
        out = np.zeros(self.cells[level].shape[0])
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
            np.asarray(q.answer(self.cells[level], self.domain), dtype=float),
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

    Args:
        tree: the public structure.
        domain: the query domain.
        measurements: the noisy measurements (or float inputs with per-node variances).
        exact_totals: level -> node index -> a total published exactly (an invariant). Each
            enters as a measurement of variance 0, an exact constraint: the BLUE keeps it,
            spreads it over the node's cells and its neighbours, and reports its variance as 0.
    """
    inputs = as_inputs(measurements)
    if len(inputs.levels) != tree.n_levels:
        raise ValueError(
            f"measurements ({len(inputs.levels)} levels) must have one entry per tree level "
            f"({tree.n_levels})"
        )
    inputs = _with_exact_totals(inputs, tree, exact_totals or {})
    shape = tuple(int(n) for n in domain.shape)
    subsets = _subsets(domain)
    # r_v = sum_q Q_q' y_vq / Var_q(v), kept apart per kept-attribute set: a query's term lies
    # in the subspaces it sees, and projecting each term separately keeps an exact answer's
    # huge term (precision 1e200) from cancelling catastrophically against the noisy ones
    weighted: list[dict[frozenset[int], np.ndarray]] = []
    signature: dict[frozenset[int], list[tuple[int, int]]] = {s: [] for s in subsets}
    for level, lv in enumerate(inputs.levels):
        nodes = tree.levels[level].size
        terms: dict[frozenset[int], np.ndarray] = {}
        for qi, m in enumerate(lv):
            prec = precision(np.broadcast_to(m.variance, (nodes,)))
            values = np.where(prec[:, None] > 0, m.noisy, 0.0)
            kept = _kept_axes(m.query, domain)
            term = prec[:, None] * _back(m.query, values, domain)
            terms[kept] = terms[kept] + term if kept in terms else term
            for s in subsets:
                if s <= kept:
                    signature[s].append((level, qi))
        weighted.append(terms)
    by_sig: dict[tuple[tuple[int, int], ...], list[frozenset[int]]] = {}
    for s in subsets:
        by_sig.setdefault(tuple(signature[s]), []).append(s)
    groups = sorted(by_sig.items(), key=lambda kv: -len(kv[1]))
    sums = _sum_matrices(tree)
    cells = [np.zeros((lv.size, domain.size)) for lv in tree.levels]
    scale = [np.zeros((len(groups), lv.size)) for lv in tree.levels]
    subtree = [np.zeros((len(groups), lv.size)) for lv in tree.levels]
    for g, (sig, members) in enumerate(groups):
        pis = []
        for level, lv in enumerate(inputs.levels):
            nodes = tree.levels[level].size
            pi = np.zeros(nodes)
            for lvl, qi in sig:
                if lvl == level:
                    m = lv[qi]
                    pi += _lift(m.query, domain) * precision(np.broadcast_to(m.variance, (nodes,)))
            pis.append(pi)
        zs = []
        for level in range(tree.n_levels):
            proj = np.zeros((tree.levels[level].size, domain.size))
            for kept, term in weighted[level].items():
                if not members[0] <= kept:  # a group's subsets share the queries that see them
                    continue
                if g == 0:
                    # the largest group: the identity minus the other groups' projectors
                    proj += term
                    for _, others in groups[1:]:
                        for s in others:
                            if s <= kept:
                                proj -= _project(term, s, shape)
                else:
                    proj += sum(_project(term, s, shape) for s in members)
            pi = pis[level]
            with np.errstate(divide="ignore", invalid="ignore"):
                zs.append(np.where(pi[:, None] > 0, proj / pi[:, None], 0.0))
        u, f, v = _tree_gls(zs, pis, sums)
        for level in range(tree.n_levels):
            cells[level] += u[level]
            scale[level][g] = f[level]
            subtree[level][g] = v[level]
    log.debug("BLUE: %d subspace group(s) over %d level(s)", len(groups), tree.n_levels)
    return Blue(
        domain, tuple(cells), tuple(tuple(m) for _, m in groups), tuple(scale), tuple(subtree)
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


def _tree_gls(
    z: list[np.ndarray], pi: list[np.ndarray], sums: list[sp.csr_matrix]
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Cell-by-cell tree GLS: minimise sum_v pi_v ||u_v - z_v||^2 with u_parent = sum u_child.

    Upward: each node's estimate from its own subtree (its own value combined by inverse
    variance with the sum of its children's). Downward: each child's subtree estimate corrected
    by its share (its variance over the children's total variance) of the gap between its
    parent's final estimate and the children's sum. Infinite variances mean no information: a
    child without any takes the whole gap if it is alone, an equal share (infinite variance)
    if not. Returns the estimates, their per-coordinate variances and those of the subtree
    estimates (the upward pass's), per level.
    """
    n_levels = len(z)
    sub_est: list[np.ndarray] = [np.empty(0)] * n_levels
    sub_var: list[np.ndarray] = [np.empty(0)] * n_levels
    child_sum: list[np.ndarray] = [np.empty(0)] * n_levels
    child_var: list[np.ndarray] = [np.empty(0)] * n_levels
    with np.errstate(divide="ignore", invalid="ignore"):
        for level in range(n_levels - 1, -1, -1):
            own = pi[level]
            if level == n_levels - 1:
                m_prec = np.zeros_like(own)
                m_term = np.zeros_like(z[level])
            else:
                S = sums[level]
                m = S @ sub_est[level + 1]
                M = S @ sub_var[level + 1]
                M = np.where(S.getnnz(axis=1) > 0, M, np.inf)  # childless: no information
                child_sum[level], child_var[level] = m, M
                m_prec = precision(M)
                m_term = m * m_prec[:, None]
            prec = own + m_prec
            V = np.where(prec > 0, 1.0 / prec, np.inf)
            est = np.where(prec[:, None] > 0, (own[:, None] * z[level] + m_term) / prec[:, None], 0)
            sub_est[level], sub_var[level] = est, V
        u = [sub_est[0]]
        f = [sub_var[0]]
        for level in range(1, n_levels):
            S = sums[level - 1]
            par = np.asarray(S.T.argmax(axis=1)).ravel()  # each child's parent (one 1 per column)
            V = sub_var[level]
            inf = np.isinf(V)
            n_inf = (S @ inf.astype(float))[par]
            finite_sum = (S @ np.where(inf, 0.0, V))[par]
            M = child_var[level - 1][par]
            M_inf = np.isinf(M)
            ratio = np.where(inf, 1.0 / np.maximum(n_inf, 1.0), np.where(M_inf, 0.0, V / M))
            gap = u[level - 1] - child_sum[level - 1]
            u.append(sub_est[level] + ratio[:, None] * gap[par])
            Fp = f[level - 1][par]
            informed = V * (M - V) / M + ratio**2 * Fp  # both finite: Var(c | sum) + share of F_p
            uninformed = np.where(n_inf == 1, finite_sum + Fp, np.inf)  # takes the whole gap
            f.append(np.where(inf, uninformed, np.where(M_inf, V, informed)))
    return u, f, sub_var


def blue_inputs(
    measurements: Measurements | EstimatorInputs,
    estimate: Blue,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
) -> EstimatorInputs:
    """The passes' inputs under ``estimator="blue"``: per level the BLUE of the detailed
    cells, of the node totals and of every other query the level measured.

    The weights are the variances of each node's estimate from its own subtree (the upward
    recursion's), not of its final BLUE. The passes fix the parent's published counts and
    treat siblings as independent; siblings' subtree estimates are independent, their final
    BLUEs are not (they share the parent's gap). With these weights the L2 pass on the BLUE
    is the GLS of the children given the published parent: where nothing is clipped it moves
    each child by its share ``V_c / sum V`` of the gap between the published parent and the
    BLUE parent, the BLUE's own downward step (final variances would split it by
    ``f_c / sum f``). Feeding the BLUE values or the subtree estimates then gives the same
    answer, clipped or not (they differ by a per-cell shift proportional to ``V_c``, which the
    parent constraint absorbs). At the root the two variances coincide.

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

    The totals of ``exact_totals`` (invariants) weigh 0 in the passes, which hold each
    invariant as a constraint (their BLUE variance, 0, would drown every other input). Other
    answers of variance 0 (a measurement whose variance underflowed: a huge budget) keep it and
    weigh 1 against about 0 for the rest, as raw measurements do.
    """
    out = []
    for level, lv in enumerate(as_inputs(measurements).levels):
        names = ["detailed", "total"] + [
            m.query.name for m in lv if m.query.name not in ("detailed", "total")
        ]
        fed = []
        for name in names:
            query = Query.parse(name)
            values = np.asarray(query.answer(estimate.cells[level], estimate.domain), dtype=float)
            variance = estimate.variance(level, query, subtree=True)
            held = list((exact_totals or {}).get(level, {})) if name == "total" else []
            variance[held] = np.inf
            fed.append(QueryEstimate(level, query, values, variance))
        out.append(tuple(fed))
    return EstimatorInputs(tuple(out))
