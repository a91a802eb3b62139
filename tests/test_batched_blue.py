"""The level-batched L2 pass of families fitted to detailed cells and node totals (the inputs
``estimator="blue"`` gives a detailed-only strategy) solves the per-family QP."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from test_batched_round import needing

import solvers
from solvers.builders import children_l2_problem
from topdown.estimation.batched.total import batched_l2_total


def _solve(y, t, p, w, v, parent, **kw):
    return batched_l2_total(y, t, p, parent, weights=w, total_weights=v, **kw)


def test_hand_worked_one_cell():
    """One cell of 6, y = (3, 3), totals t = (6, 0), unit weights: minimise
    (x1-3)^2 + (x2-3)^2 + (x1-6)^2 + x2^2 with x1 + x2 = 6: x2 = 1.5, x1 = 4.5."""
    x, failed = _solve(
        np.array([[3.0], [3.0]]),
        np.array([6.0, 0.0]),
        np.array([[6]]),
        np.ones(2),
        np.ones(2),
        np.array([0, 0]),
    )
    assert failed.size == 0
    np.testing.assert_allclose(x, [[4.5], [1.5]], atol=1e-12)


def test_hand_worked_two_cells_and_a_zero_weight_total():
    """Cells (4, 4) over y = 2 everywhere, totals (6, 2): by symmetry x_c = (a_c, a_c) with
    f = 4(a1-2)^2 + 8(a1-3)^2, so a1 = 8/3, a2 = 4/3. With the totals weighing 0 the answer is
    the projection, 2 everywhere. A zero parent cell gives zero children."""
    y = np.full((2, 3), 2.0)
    p = np.array([[4, 4, 0]])
    x, _ = _solve(y, np.array([6.0, 2.0]), p, np.ones(2), np.ones(2), np.array([0, 0]))
    np.testing.assert_allclose(x, [[8 / 3, 8 / 3, 0], [4 / 3, 4 / 3, 0]], atol=1e-12)
    x, _ = _solve(y, np.array([6.0, 2.0]), p, np.ones(2), np.zeros(2), np.array([0, 0]))
    np.testing.assert_allclose(x, [[2, 2, 0], [2, 2, 0]], atol=1e-12)


def _level(rng, max_k=6, cells=None):
    """A random level: parents with 1..max_k children (permuted), integer parent counts with
    many zeros (some all-zero parents), noisy answers (negatives included), totals off the
    cells' sums, weights spanning three orders of magnitude, some total weights 0."""
    n = int(rng.integers(1, 10)) if cells is None else cells
    n_parents = int(rng.integers(1, 5))
    sizes = rng.integers(1, max_k + 1, n_parents)
    parent = rng.permutation(np.repeat(np.arange(n_parents), sizes))
    p = rng.integers(0, 30, (n_parents, n)) * (rng.random((n_parents, n)) < 0.7)
    p[rng.random(n_parents) < 0.1] = 0
    kids = parent.size
    scale = rng.choice([0.5, 3.0, 20.0])
    y = rng.normal((p / np.maximum(sizes, 1)[:, None])[parent], scale)
    if rng.random() < 0.3:
        y = np.round(y)  # integer answers: ties in the projections
    t = y.sum(axis=1) + rng.normal(0, scale * 3, kids)
    w = 10.0 ** rng.uniform(-3, 0, kids)
    v = 10.0 ** rng.uniform(-3, 1, kids) * (rng.random(kids) < 0.8)
    return y, t, p, w, v, parent


def _objective(x, y, t, p, w, v):
    live = p > 0
    return float(
        (w[:, None] * np.where(live, x - y, 0.0) ** 2).sum() + (v * (x.sum(1) - t) ** 2).sum()
    )


def _assert_kkt(x, y, t, p, w, v, tol=1e-8):
    """The convex QP's optimality certificate: x feasible (non-negative, summing to the parent
    cell by cell, zero on zero parent cells) and, with the gradient
    g_cj = w_c (x_cj - y_cj) + v_c (T_c - t_c), one multiplier per cell: g equal over the
    positive children of a cell and no smaller at its zero children."""
    assert x.min() >= 0
    scale = 1.0 + p.max(initial=0)
    np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9 * scale)
    assert np.all(x[:, p == 0] == 0)
    g = w[:, None] * (x - y) + (v * (x.sum(axis=1) - t))[:, None]
    g = g / w.max()
    for j in np.flatnonzero(p > 0):
        pos = x[:, j] > 1e-9 * scale
        lam = g[pos, j].mean()
        assert np.abs(g[pos, j] - lam).max() <= tol * scale, (j, g[:, j], x[:, j])
        assert np.all(g[~pos, j] >= lam - tol * scale), (j, g[:, j], x[:, j])


def _highs(y, t, p, w, v):
    """One family's QP as the per-family path builds it (support cells, the detailed query
    and the all-cells total), solved by HiGHS; zero off the support."""
    k, n = y.shape
    sup = np.flatnonzero(p > 0)
    out = np.zeros((k, n))
    if sup.size == 0:
        return out
    ms = [
        (
            sp.identity(sup.size, format="csr"),
            y[:, sup],
            np.broadcast_to(w[:, None], (k, sup.size)),
        ),
        (sp.csr_matrix(np.ones((1, sup.size))), t[:, None], v[:, None]),
    ]
    problem = children_l2_problem(p[sup].astype(float), ms, k=k, n=sup.size, lifted=True)
    out[:, sup] = solvers.solve(problem, solver="highs").x[: k * sup.size].reshape(k, sup.size)
    return out


@pytest.mark.parametrize("seed", range(60))
def test_batched_equals_the_per_family_qp(seed):
    """On random levels every family's answer meets the QP's KKT conditions to 1e-8, its
    objective is no worse than HiGHS's (to 1e-9 relative), and it equals HiGHS's answer to
    HiGHS's own accuracy (its interior answers are good to about 1e-6, not 1e-7)."""
    rng = np.random.default_rng(seed)
    y, t, p, w, v, parent = _level(rng, max_k=40 if seed % 10 == 0 else 6)
    x, failed = _solve(y, t, p, w, v, parent)
    assert failed.size == 0
    for q in range(p.shape[0]):
        kids = np.flatnonzero(parent == q)
        args = (y[kids], t[kids], p[q], w[kids], v[kids])
        _assert_kkt(x[kids], *args)
        if kids.size == 1:
            np.testing.assert_array_equal(x[kids[0]], p[q])  # an only child is its parent
            continue
        ref = _highs(*args)
        mine, theirs = _objective(x[kids], *args), _objective(ref, *args)
        assert mine <= theirs + 1e-9 * (1.0 + abs(theirs))
        np.testing.assert_allclose(x[kids], ref, atol=1e-4 * (1 + p[q].max()))


def test_chunks_do_not_change_the_answer():
    rng = np.random.default_rng(5)
    y, t, p, w, v, parent = _level(rng, cells=8)
    whole, _ = _solve(y, t, p, w, v, parent)
    chunked, _ = _solve(y, t, p, w, v, parent, max_values=1)
    np.testing.assert_array_equal(whole, chunked)


def test_families_that_do_not_settle_are_reported():
    """With no Newton step allowed, a family whose start (mu = 0) is not optimal is reported;
    one whose totals weigh 0 (the start is the answer) is not."""
    y = np.array([[3.0], [3.0], [1.0], [2.0]])
    t = np.array([6.0, 0.0, 9.0, 9.0])
    v = np.array([1.0, 1.0, 0.0, 0.0])
    _, failed = _solve(
        y, t, np.array([[6], [3]]), np.ones(4), v, np.array([0, 0, 1, 1]), max_iter=0
    )
    np.testing.assert_array_equal(failed, [0])


def test_bad_input_is_refused():
    y, p, parent = np.zeros((2, 2)), np.ones((1, 2), dtype=int), np.array([0, 0])
    with pytest.raises(ValueError, match=r"weights \(shape \(2,\)\) must be finite and > 0"):
        _solve(y, np.zeros(2), p, np.array([1.0, 0.0]), np.ones(2), parent)
    with pytest.raises(ValueError, match=r"total_weights \(shape \(2,\)\) must be finite and >= 0"):
        _solve(y, np.zeros(2), p, np.ones(2), np.array([1.0, -1.0]), parent)
    with pytest.raises(ValueError, match=r"totals \(shape \(3,\)\) must give one total per child"):
        _solve(y, np.zeros(3), p, np.ones(2), np.ones(2), parent)
    with pytest.raises(ValueError, match=r"negative entry \(-1\)"):
        _solve(y, np.zeros(2), -p, np.ones(2), np.ones(2), parent)


def test_blue_release_takes_the_batched_path_and_matches_the_per_family_path(tmp_path):
    """A detailed-only release under ``estimator="blue"`` solves every level below the root in
    batch (the statistics say closed_form for the L2 pass, closed_form for the rounding). Against the per-family path (a
    capture forces it), the root has the same total and level 1 (same parents) rounds the same L2
    answer up to HiGHS's accuracy: same total, within one unit cell by cell (ties may break
    either way); both releases are non-negative, integer and consistent."""
    from benchmarks.synthetic import synthetic
    from topdown import Strategy, release

    df, schema = synthetic(400, people=5, seed=4)
    strategy = Strategy.from_budgets(["1/2", "1/2", "1/2", "1/2"])
    batched = release(df, schema, strategy, seed=11, estimator="blue")
    per_family = release(
        df, schema, strategy, seed=11, estimator="blue", capture=tmp_path / "problems"
    )
    assert batched.check_correctness().ok
    assert per_family.check_correctness().ok
    for level in range(1, batched.tree.n_levels):
        families = needing(batched, level)
        assert families > 0
        # the totals weigh nothing under a detailed-only BLUE (topdown.blue.metric)
        assert batched.stats[level].solved_in("l2") == {"closed_form": families}
        assert batched.stats[level].solved_in("rounding") == {"closed_form": families}
        assert "dual_newton" not in per_family.stats[level].solved_in("l2")
    # the root: the closed form (topdown.estimation.root) against the general solvers (the capture),
    # the same total and within a unit per cell (a held root total leaves ties to break)
    assert batched.stats[0].solved_in("l2") == {"closed_form": 1}
    assert batched.counts[0].sum() == per_family.counts[0].sum()
    assert np.abs(batched.counts[0] - per_family.counts[0]).max() <= 1
    assert batched.counts[1].sum() == per_family.counts[1].sum()
    assert np.abs(batched.counts[1] - per_family.counts[1]).max() <= 1
