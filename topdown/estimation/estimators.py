"""The estimator option: what the top-down passes fit, and with which weights.

Two estimators share the non-negative L2 pass and the controlled rounding
(``topdown.estimation.estimate``,
``topdown.estimation.family``); they differ in the passes' inputs:

- ``"topdown"``: the Census Bureau's 2020 method. Each family is fitted from its parent's
  published counts and its children's own noisy measurements. One change: an only child's
  measurements are folded into its parent's by inverse variance before the parent's family is
  solved (a chain of only children folds up to its first ancestor with siblings), instead of
  being discarded when the child is copied from its parent.
- ``"blue"``: a first pass computes the whole-tree BLUE (``topdown.blue.estimate``), with the node
  totals that invariants publish exactly as exact measurements; its estimates of every node's cells,
  totals and measured marginals replace the raw measurements as the passes' inputs, weighted by the
  variances of each node's subtree estimate (why: ``topdown.blue.estimate.blue_inputs``).

Both read only the noisy measurements and their public variances: post-processing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import numpy as np

from constraints.aggregate_constraints import AggregateConstraint
from constraints.domain import Domain
from topdown.blue.estimate import Blue, NodeSummary, blue, blue_inputs
from topdown.blue.leaf_families import (
    LEAF_CHUNK_BYTES,
    LeafFamilies,
    blue_by_families,
    leaf_level_bytes,
)
from topdown.blue.on_disk import above_on_disk
from topdown.blue.plan import BluePlan
from topdown.errors import StrategyError
from topdown.measurement.estimator_inputs import (
    EstimatorInputs,
    QueryEstimate,
    as_inputs,
    precision,
)
from topdown.measurement.measure import Measurements, QueryMeasurement
from topdown.measurement.tree import Tree

__all__ = [
    "ESTIMATORS",
    "DEFAULT_ESTIMATOR",
    "check_estimator",
    "prepare_inputs",
    "prepare_blue_by_families",
    "fold_only_children",
    "family_weights",
    "exact_totals",
]

log = logging.getLogger(__name__)

ESTIMATORS = ("blue", "topdown")
#: "blue" is the default: benchmarks/bench_estimators.py (the issue's benchmark: the ACS excerpt
#: with 20 seeds and a PL94-shaped state with 10, three strategies, two budgets, both
#: mechanisms) found its cell and total MAE lower than "topdown"'s, or within two standard
#: errors of it, at every level below the root. It is not better everywhere: on the
#: homogeneous sparse tracts of benchmarks/synthetic.py its tract totals are worse when no
#: total is measured (see topdown.blue.estimate.blue_inputs and the README).
DEFAULT_ESTIMATOR = "blue"


def check_estimator(value: object, name: str = "estimator") -> str:
    """The estimator's name, or a StrategyError naming the argument and the choices."""
    if not isinstance(value, str) or value not in ESTIMATORS:
        raise StrategyError(
            f"{name} ({value!r}) is unknown; it must be one of {list(ESTIMATORS)} ('topdown' is "
            "the Census Bureau's 2020 method, 'blue' first pools every measurement of the tree)"
        )
    return value


def prepare_inputs(
    estimator: str,
    tree: Tree,
    domain: Domain,
    measurements: Measurements,
    invariants: Mapping[int, Mapping[int, tuple]] | None = None,
    threads: int = 1,
) -> tuple[EstimatorInputs, Blue | None, float]:
    """The passes' inputs under ``estimator``, the BLUE (None under ``"topdown"``) and the
    seconds the BLUE pass took. ``invariants`` (bound, as ``measurement.measure`` returns them):
    the node totals they publish exactly enter the BLUE as exact (see ``exact_totals``); the
    passes hold every invariant as a constraint under either estimator. ``threads``: the
    BLUE's recoded blocks solved at once (the release passes its executor's workers: the
    workers idle while this process runs the BLUE)."""
    check_estimator(estimator)
    if estimator == "topdown":
        return fold_only_children(tree, as_inputs(measurements)), None, 0.0
    start = time.perf_counter()
    exact = exact_totals(invariants, domain)
    estimate = blue(tree, domain, measurements, exact_totals=exact, threads=threads)
    inputs = blue_inputs(measurements, estimate, exact)
    seconds = time.perf_counter() - start
    log.debug("BLUE pass: %.3f s", seconds)
    return inputs, estimate, seconds


def prepare_blue_by_families(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    invariants: Mapping[int, Mapping[int, tuple]] | None = None,
    max_bytes: int | None = None,
    top: tuple[NodeSummary, BluePlan] | None = None,
) -> tuple[EstimatorInputs, Blue, LeafFamilies, float] | None:
    """``prepare_inputs`` under ``"blue"`` with the leaf level a chunk of families at a time
    (``topdown.blue.leaf_families``): the passes' inputs of the levels above the leaves (none
    at the leaves), the BLUE (its leaf level on demand), the leaves' chunks for
    ``estimate(..., leaves=)`` and the seconds. None, for the whole-tree path, when one float
    array over the leaf level fits in ``max_bytes`` (default ``LEAF_CHUNK_BYTES``), when the
    tree has one
    level, or when an invariant binds a leaf (the passes look leaves' invariants up by their
    index in the whole level). ``top``: a streamed subtree's top's final BLUE and the whole
    tree's plan (``blue_by_families``); its first level then gets no inputs (the passes take
    the top's published counts)."""
    max_bytes = LEAF_CHUNK_BYTES if max_bytes is None else max_bytes
    last = tree.n_levels - 1
    if last < 1 or (invariants or {}).get(last) or leaf_level_bytes(tree, domain.size) <= max_bytes:
        return None
    start = time.perf_counter()
    exact = exact_totals(invariants, domain)
    solved = blue_by_families(
        tree, domain, measurements, exact_totals=exact, max_bytes=max_bytes, top=top
    )
    if solved is None:
        return None
    estimate, leaves = solved
    del solved  # it would keep the estimate's covariances in memory beside their map
    # the levels above's covariances (a (k, k) matrix per node type and block: 2.3 GB for
    # the DHC counties at 750,000 persons) mapped from disk, not held through the passes'
    # inputs above and the leaf passes
    estimate = above_on_disk(estimate, leaves)
    above = EstimatorInputs(as_inputs(measurements).levels[:last])
    fixed = 0 if top is None else 1
    inputs = EstimatorInputs(blue_inputs(above, estimate, exact, fixed=fixed).levels + ((),))
    if leaves.parents_read is not None:
        leaves.parents_read()  # the pages the inputs above read, handed back
    seconds = time.perf_counter() - start
    log.debug("BLUE pass (leaves in %d chunk(s)): %.3f s", len(leaves.chunks), seconds)
    return inputs, estimate, leaves, seconds


def exact_totals(
    invariants: Mapping[int, Mapping[int, tuple]] | None, domain: Domain
) -> dict[int, dict[int, float]]:
    """level -> node -> the node total an invariant publishes exactly: a bound equality over
    every cell (``SumEqualRealTotal(TrueExpression())`` and those it implies above). Other
    invariants (part of the cells, or bounds) do not enter the BLUE, whose structure takes
    marginals only; the passes still hold them."""
    out: dict[int, dict[int, float]] = {}
    for level, per_node in (invariants or {}).items():
        for node, bound in per_node.items():
            for c in bound:
                if (
                    isinstance(c, AggregateConstraint)
                    and c.sense == "=="
                    and bool(np.all(c.expr.mask(domain)))
                ):
                    out.setdefault(level, {})[node] = float(c.value)
    return out


def _combine(
    y1: np.ndarray, v1: np.ndarray, y2: np.ndarray, v2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance mean of two unbiased estimates (per node), and its variance."""
    p1, p2 = precision(v1), precision(v2)
    p = p1 + p2
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(p[:, None] > 0, (p1[:, None] * y1 + p2[:, None] * y2) / p[:, None], 0.0)
        v = np.where(p > 0, 1.0 / p, np.inf)
    return y, v


def fold_only_children(tree: Tree, inputs: EstimatorInputs) -> EstimatorInputs:
    """Fold every only child's inputs into its parent's (bottom-up, so chains fold to the first
    ancestor with siblings). A query the parent's level does not measure is added to it, with
    infinite variance (no information) at the parents that receive nothing."""
    levels: list[dict[str, QueryEstimate]] = [{m.query.name: m for m in lv} for lv in inputs.levels]
    for level in range(tree.n_levels - 1, 0, -1):
        parent = tree.levels[level].parent
        n_parents = tree.levels[level - 1].size
        only = np.flatnonzero(np.bincount(parent, minlength=n_parents)[parent] == 1)
        if not len(only):
            continue
        dest = parent[only]
        for name, m in levels[level].items():
            target = levels[level - 1].get(name)
            if target is None:
                values = np.zeros((n_parents, m.noisy.shape[1]))
                variance = np.full(n_parents, np.inf)
            else:
                values, variance = target.noisy.astype(float), target.variance.copy()
            values[dest], variance[dest] = _combine(
                values[dest], variance[dest], m.noisy[only], m.variance[only]
            )
            levels[level - 1][name] = QueryEstimate(level - 1, m.query, values, variance)
        log.debug("folded %d only child(ren) of level %d into their parents", len(only), level)
    return EstimatorInputs(tuple(tuple(lv.values()) for lv in levels))


def family_weights(
    queries: Sequence[QueryMeasurement | QueryEstimate], children: np.ndarray
) -> list[np.ndarray]:
    """Per query, the L2 pass's weight of each child (k,): inverse variances scaled so the most
    precise answer of the family weighs 1 (only ratios matter; scaling keeps the objective well
    conditioned). A variance of 0 (a huge budget) makes its answers weigh 1 and all others
    about 0; an infinite one (no information) weighs 0."""
    precisions = []
    for m in queries:
        variance = np.asarray(m.variance, dtype=float)
        nodes = np.asarray(m.noisy).shape[0]
        precisions.append(precision(np.broadcast_to(variance, (nodes,))[children]))
    top = max((float(p.max(initial=0.0)) for p in precisions), default=0.0)
    if top <= 0.0:
        return [np.zeros_like(p) for p in precisions]
    return [p / top for p in precisions]
