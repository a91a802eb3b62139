"""The multipass L2 pass of a level's families when the first pass fits the node total alone.

The 2020 production strategies fit each family in two passes (``topdown.strategy``'s
``first_pass``; ``topdown.estimation.family`` solves them with a general solver): first the
children's totals alone, then every query while holding the first pass's totals (within the
``multipass_tolerance``). When the first pass is the total query alone, both passes fit the
level-batched structure of ``topdown.estimation.batched.marginals``:

1. Pass 1, per family (children ``c``, total answers ``t_c`` with weights ``v_c > 0``, parent
   counts ``p_j`` on the support, ``P = sum_j p_j``): minimize ``sum_c v_c (1'x_c - t_c)^2``
   subject to ``sum_c x_cj = p_j`` and ``x >= 0``. Only the totals ``T_c = 1'x_c`` enter the
   objective, and every ``T >= 0`` with ``sum_c T_c = P`` is reachable (``x_cj = T_c p_j /
   P``), so pass 1 is ``min sum_c v_c (T_c - t_c)^2`` subject to ``sum_c T_c = P``, ``T >= 0``.
   Without the bound its answer is ``T_c = t_c - lambda / v_c`` with ``lambda = (sum_c t_c -
   P) / sum_c (1 / v_c)`` (one Lagrange multiplier); when every ``T_c`` is positive that is
   the answer with the bound too (the KKT conditions hold with zero bound multipliers). A
   family with a child at ``T_c <= 0`` (the bound active: that child is all zero) or a zero
   weight (pass 1 does not fix that child's total) goes to the per-family path.
2. Pass 2: the marginal Newton iteration with the total held, ``1'x_c = T_c``, as a hard
   constraint (a multiplier with no penalty, ``Marginal.hard``) in place of the total's soft
   fit, whose term is then a constant. Only the first ``k - 1`` children's totals are held:
   the last one's follows from the cell-by-cell consistency (``sum_c 1'x_c = P = sum_c T_c``),
   and holding it too would make the dual's Hessian singular.

The per-family path holds pass 1's totals within the tolerance (1e-6 by default) from an
interior-point solve of pass 1; here they are held exactly from the closed form, so the L2
answers agree to about the solvers' tolerances (``tests/test_multipass_batched.py`` compares
them), and the rounding pass is the same.
"""

from __future__ import annotations

import numpy as np

from topdown.estimation.batched.families import seq_sum
from topdown.estimation.batched.marginals import Marginal

__all__ = ["first_pass_totals", "held_totals"]


def first_pass_totals(total: Marginal, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 in closed form (see the module docstring) for a chunk's Q families.

    Args:
        total: the total query on the chunk (one group: ``targets`` (Q, k, 1)).
        p: (Q, W) the parents' counts on the support (0 in the padding).

    Returns:
        T (Q, k), the children's pass-1 totals, and (Q,) whether each family's is the answer
        (every weight positive and every ``T_c > 0``); the others go to the per-family path.
    """
    if total.targets.shape[2] != 1:
        raise ValueError(
            f"total targets (shape {total.targets.shape}) must have one group: the first "
            "pass fitted here is the node total alone"
        )
    t = np.asarray(total.targets[:, :, 0], dtype=float)
    v = np.asarray(total.weights, dtype=float)
    positive = np.all(v > 0, axis=1)
    with np.errstate(divide="ignore"):
        inv_v = np.where(v > 0, 1.0 / np.where(v > 0, v, 1.0), 0.0)
    # the parents' counts are integers: their sum is exact in any order
    lam = (seq_sum(t, axis=1) - p.sum(axis=1)) / np.where(positive, seq_sum(inv_v, axis=1), 1.0)
    T = t - lam[:, None] * inv_v
    return T, positive & np.all(T > 0, axis=1)


def held_totals(total: Marginal, T: np.ndarray) -> Marginal:
    """The total query of pass 2: each child's total held at ``T`` (hard), the last child's
    left to the consistency rows (see the module docstring)."""
    Q, k = T.shape
    hard = np.zeros((Q, k), dtype=bool)
    hard[:, : k - 1] = True
    return Marginal(total.groups, T[:, :, None].copy(), np.zeros((Q, k)), hard)
