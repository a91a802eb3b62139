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

A strategy with recoded queries keeps each answer's own variance (its precision is not a sum of
scalar projectors: see ``topdown.blue.plan``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls

from constraints.domain import Domain
from topdown.blue.plan import kept_axes, lift
from topdown.strategy import Query

__all__ = ["metric_weights"]

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
    """Per node and fed query, the weight ``w_q`` (nodes, queries); None when a query is
    recoded (the caller keeps each answer's own variance).

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
    rows, inverse = np.unique(precision.T, axis=0, return_inverse=True)
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
    return solved[np.asarray(inverse).reshape(-1)]
