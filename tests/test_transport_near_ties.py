"""Controlled rounding by min-cost flow on near-tied costs: two rounding problems of BLUE-fed
releases (sparse synthetic tracts and a PL94-shaped state, saved from the runs) on which the
float-cost search once chased a rounding-error negative cycle and raised. The exact answer is
the rounding LP's optimum (HiGHS through scipy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.optimize as so

from solvers.backends.transport import transport_round

CASES = np.load(Path(__file__).parent / "data" / "transport_near_ties.npz")


@pytest.mark.parametrize("case", [0, 1])
def test_near_tied_costs_round_to_the_lp_optimum(case: int) -> None:
    C, b, L, U = (CASES[f"{name}{case}"] for name in "CbLU")
    k, n = C.shape
    z = transport_round(C, b, L, U)
    np.testing.assert_array_equal(z.sum(axis=0), b)
    rows = z.sum(axis=1)
    assert np.all((rows >= L) & (rows <= U))
    one_per_cell = np.kron(np.ones((1, k)), np.eye(n))
    per_child = np.kron(np.eye(k), np.ones((1, n)))
    lp = so.linprog(
        C.ravel(),
        A_ub=np.vstack([per_child, -per_child]),
        b_ub=np.concatenate([U, -L]),
        A_eq=one_per_cell,
        b_eq=b,
        bounds=(0, 1),
        method="highs",
    )
    assert lp.status == 0
    assert float((C * z).sum()) == pytest.approx(lp.fun, abs=1e-6)
