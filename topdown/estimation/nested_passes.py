"""Two passes on the finest first-pass marginal's groups, when the others coarsen it.

The 2020 DHC persons strategy fits nine marginals in its first pass; every one of them is a
function of ``relgq * age_40_groups * hispanic * cenrace * sex`` (423,360 groups of the
1,227,744 cells: ``age_40_groups`` keeps single years to 17 and its adult bands split at every
edge of ``age_38_groups``, ``age_18_64_116`` and ``age_10_groups``; the RELGQ recodes and
HISPANIC x SEX are functions of RELGQ and the other attributes). When the first pass's
marginals are all coarsenings of one of them, ``F`` (each group of ``F`` lies inside one group
of each), both passes shrink:

- Pass 1 reads ``x`` only through ``u = A_F x``: every other first-pass answer is a sum of
  ``u``'s groups, ``x >= 0`` allows exactly ``u >= 0`` (each group of ``F`` has a cell), and
  children summing to their parent cell by cell allows exactly ``sum_c u_c = A_F p`` (a
  transportation problem with row sums ``u_c`` and column sums ``p`` over a group's cells has a
  non-negative solution whenever the two add up to the same total). So pass 1 is one strongly
  convex solve over ``F``'s groups, ``F``'s own measurement its centre term (the same Newton
  iterations, a third of the cells at the DHC), not the proximal-point sequence over the
  cells that ``topdown.estimation.multipass_newton`` needs when no term is strongly convex.
  Its answers are the unique optimal ones that sequence converges to.
- Pass 2 holding ``F``'s answers exactly holds every coarsening of them exactly too, so with
  the first-pass tolerance at ``HELD_EXACTLY`` and nothing else to fit it is
  ``min w ||x - y||^2`` with ``A_F x = u``, which splits into one problem per group of ``F``:
  at the root the projection of the group's detailed answers onto a simplex
  (``group_simplex``, closed form); in a family the group's cells for every child, each
  child's sum held at its answer and each cell's children summing to the parent's count
  (``hold_by_group``: each group a family of the level-batched Newton iteration holding its
  children's totals, as ``batched.multipass`` holds a family's). Each group then stops and
  searches its line on its own: one solve over a whole tract family (6,095 groups of 1 to 6
  cells, 11 children) crept, its line search cut short by its worst group. A marginal fitted
  in pass 2 that is a sum of ``F``'s answers (the node total under ``"blue"``) is a constant
  there and drops out; a looser tolerance, or any other pass-2 marginal, keeps the rounds of
  ``multipass_newton._hold``, from pass 1's answers here.

This module holds the layout-free pieces; the fitters' ``nested`` and ``hold_exactly``
(``multipass_newton``) use them.
"""

from __future__ import annotations

import numpy as np

from topdown.estimation.batched.marginals import TOLERANCE, Marginal, marginal_newton_dual

__all__ = ["coarse_map", "group_simplex", "hold_by_group"]

#: how many times ``hold_by_group``'s steps a group that did not settle is given once more
RETRY_STEPS = 10


def coarse_map(fine: np.ndarray, coarse: np.ndarray, n_fine: int) -> np.ndarray | None:
    """Each group of ``fine``'s group in ``coarse`` (-1 for a group of ``fine`` with no cell),
    or None when ``fine`` does not refine ``coarse``.

    Args:
        fine: each cell's group in the finer partition (1-d).
        coarse: each cell's group in the coarser one (the same shape).
        n_fine: the number of ``fine``'s groups (its groups are 0 .. n_fine - 1).
    """
    fine = np.asarray(fine, dtype=np.int64)
    coarse = np.asarray(coarse, dtype=np.int64)
    rep = np.full(n_fine, -1, dtype=np.int64)
    rep[fine] = coarse  # the last cell of each group wins; all must agree with it
    return rep if np.array_equal(rep[fine], coarse) else None


def group_simplex(y: np.ndarray, groups: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """``argmin ||x - y||^2`` over ``x >= 0`` with each group's cells summing to its total.

    Group by group the projection onto a scaled simplex: ``x = max(0, y - tau_g)`` with
    ``tau_g`` the threshold at which the group sums to its total (Held, Wolfe and Crowder,
    "Validation of subgradient optimization", Math. Programming 6, 1974; the sort-based form
    of Duchi et al., ICML 2008). With a group's values sorted in decreasing order, ``y_(1) >=
    y_(2) >= ...`` and ``S_r`` their running sums, the cells kept are the first ``rho``, the
    largest ``r`` with ``y_(r) > (S_r - total) / r``, and ``tau = (S_rho - total) / rho``. A
    group with total 0 (or below) is all 0. One sort of the cells by (group, value): O(n log n).

    Args:
        y: (n,) the values projected.
        groups: (n,) each cell's group, 0 .. len(totals) - 1.
        totals: each group's total, >= 0.
    """
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    totals = np.asarray(totals, dtype=float)
    order = np.lexsort((-y, groups))
    g = groups[order]
    v = y[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, g.size])
    # running sums and ranks within each group
    running = np.cumsum(v)
    before = np.repeat(np.r_[0.0, running[starts[1:] - 1]], sizes)
    running -= before
    rank = np.arange(1, g.size + 1) - np.repeat(starts, sizes)
    keep = v * rank > running - totals[g]
    kept = np.bincount(g, weights=keep, minlength=totals.size).astype(np.int64)
    # the threshold from the kept cells' own sum, added group by group (the running sums
    # above carry the rounding of every group before; they only choose the cells); a group
    # whose total is 0 keeps none
    kept = np.where(totals > 0, kept, 0)
    inside = rank <= kept[g]
    sums = np.bincount(g, weights=np.where(inside, v, 0.0), minlength=totals.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.where(kept > 0, (sums - totals) / np.maximum(kept, 1), np.inf)
    x = np.empty_like(y)
    x[order] = np.maximum(v - tau[g], 0.0)
    return x


def hold_by_group(
    y: np.ndarray,
    p: np.ndarray,
    w: np.ndarray,
    groups: np.ndarray,
    u: np.ndarray,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``argmin sum_c w_c ||x_c - y_c||^2`` over ``x >= 0`` with each cell's children summing
    to the parent's count and each child's sum over each group at ``u``, for a chunk's Q
    families (``batched.marginals``' layout), group by group.

    A child whose answer is 0 is 0 in every cell of the group, and a group with one cell, or
    one child with a positive answer, is its answers. The others, bucketed by their numbers of
    cells and of positive children (only those enter), are each a family of the marginal
    Newton iteration holding its children's totals (``Marginal.hard``), all but the largest,
    which the cells' consistency holds (holding all would leave the dual's Hessian singular).
    Without the zeros taken out first, a county family of the DHC preset at 750,000 persons (18
    children) left nine of its groups unsettled after 200 steps: children held at 0 whose
    detailed answers were positive took many short steps to leave their cells.

    Args:
        y: (Q, k, W) the detailed answers; p: (Q, W) the parents' counts (0 in the padding);
            w: (Q, k) their weights.
        groups: (Q, W) each position's group, 0 .. G - 1 (G or more: padding).
        u: (Q, k, G) the children's answers of the groups, >= 0, summing over the children
            to the parent's.
        max_iter: Newton steps a group may take.

    Returns:
        x (Q, k, W) and per family whether every one of its groups settled.
    """
    Q, k, W = y.shape
    G = u.shape[2]
    x = np.zeros((Q, k, W))
    ok = np.ones(Q, dtype=bool)
    q, j = np.nonzero((groups < G) & (p > 0))
    f = q * G + groups[q, j]  # each real position's group, numbered across the chunk
    order = np.argsort(f, kind="stable")
    q, j, f = q[order], j[order], f[order]
    starts = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])
    sizes = np.diff(np.r_[starts, f.size])
    fam_of, group_of = q[starts], groups[q[starts], j[starts]]
    positive = u[fam_of, :, group_of] > 0  # (groups, k)
    count = positive.sum(axis=1)
    for size, n_pos in sorted(set(zip(sizes.tolist(), count.tolist(), strict=True))):
        pick = np.flatnonzero((sizes == size) & (count == n_pos))
        at = starts[pick][:, None] + np.arange(size)  # (groups, size) positions
        qs, js, fam = q[at], j[at], fam_of[pick]
        # each group's positive children first (a stable sort keeps their order)
        kids = np.argsort(~positive[pick], axis=1, kind="stable")[:, :n_pos]
        us = u[fam[:, None], kids, group_of[pick][:, None]]  # (groups, n_pos)
        cells = (qs[:, None, :], kids[:, :, None], js[:, None, :])
        if size == 1 or n_pos == 1:
            # one cell: the children's answers; one child: the parent's counts
            x[cells] = us[:, :, None] if size == 1 else p[qs, js][:, None, :]
            continue
        ys, ps, ws = y[cells], p[qs, js], w[fam[:, None], kids]
        xs, settled = _hold_totals(ys, ps, ws, us, max_iter)
        if not np.all(settled):
            # a group whose children's totals lie far from the detailed answers crosses long
            # flat stretches of its dual, where the ridge's steps are short (``_Hessian``): a
            # block family of the DHC preset at 3,000 persons (2 children, 3 cells, answers
            # about 60 from the held totals) took 200 steps and did not settle; from zero
            # with RETRY_STEPS times the steps it does (``tests/test_multipass_nested.py``)
            again = np.flatnonzero(~settled)
            xs[again], settled[again] = _hold_totals(
                ys[again], ps[again], ws[again], us[again], RETRY_STEPS * max_iter
            )
        x[cells] = xs
        ok &= np.bincount(fam, weights=~settled, minlength=Q) == 0
    return x, ok


def _hold_totals(
    y: np.ndarray, p: np.ndarray, w: np.ndarray, u: np.ndarray, max_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    """Groups as families of the marginal Newton iteration: (groups, children, cells) answers
    ``y``, parents' counts ``p`` (groups, cells), weights ``w`` and children's totals ``u``
    (groups, children), all but each group's largest held hard; the answer and whether each
    group settled."""
    hard = np.ones(u.shape, dtype=bool)
    hard[np.arange(u.shape[0]), u.argmax(axis=1)] = False
    total = Marginal(np.zeros(p.shape, dtype=np.int64), u[:, :, None], np.zeros(u.shape), hard)
    xs, settled, _ = marginal_newton_dual(
        y, p, w, (total,), max_iter, tolerance=TOLERANCE, ridge=True
    )
    return xs, np.asarray(settled, dtype=bool)
