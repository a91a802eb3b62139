"""Both passes on the finest first-pass marginal's groups (``topdown.estimation.nested_passes``),
when the other first-pass marginals coarsen it (the DHC preset's nine coarsen
``relgq * age_40_groups * hispanic * cenrace * sex``): the simplex projection and the map
worked by hand and checked by their optimality conditions; the families, the root and a chunk
against the per-family general path (Clarabel) held exactly, at production's 0.1 and holding a
subset; the route taken (and not taken when the marginals do not nest); a broken reduction fails
the comparison; the hold's Newton iteration settles where a child has no positive cell."""

from __future__ import annotations

import numpy as np
import pytest

import tests.test_multipass_marginals as tm
import tests.test_multipass_slack as ts
from topdown.estimation import multipass_newton, nested_passes
from topdown.estimation.batched.marginals import Marginal, marginal_newton_dual
from topdown.estimation.multipass_newton import ChunkFitter, RootFitter, two_passes
from topdown.estimation.nested_passes import coarse_map, group_simplex, hold_by_group
from topdown.presets import census2020_dhcp
from topdown.presets.census2020_dhcp import PRODUCTION_HELD_NAME

A, B, C = tm._AXES
#: A x B, A, B and the total: each of the last three is a sum of A x B's answers
NESTED = (A * 4 + B, A, B, np.zeros(tm.N, dtype=np.int64))


@pytest.fixture
def nested(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tests.test_multipass_marginals``' families with ``NESTED`` as their first pass."""
    monkeypatch.setattr(tm, "FIRST", NESTED)


# -- the pieces, by hand ------------------------------------------------------------------------
def test_group_simplex_worked_cases():
    """(3, 1, -1) to total 2: only the 3 is kept, less 1: (2, 0, 0). (3, 2.5, -1) to total 4:
    the first two less 0.75: (2.25, 1.75, 0). A group whose total is 0 is all 0."""
    y = np.array([3.0, 1.0, -1.0, 3.0, 2.5, -1.0, 5.0, 1.0])
    groups = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    x = group_simplex(y, groups, np.array([2.0, 4.0, 0.0]))
    np.testing.assert_allclose(x, [2.0, 0.0, 0.0, 2.25, 1.75, 0.0, 0.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_group_simplex_meets_the_projections_optimality_conditions(seed):
    """Random groups (sizes 1 to 12, cells shuffled): non-negative, each group at its total,
    and per group one threshold ``tau`` with ``x = y - tau`` on the positive cells and
    ``y <= tau`` on the zero ones (the KKT conditions of the projection onto the simplex)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 13, 40)
    groups = rng.permutation(np.repeat(np.arange(40), sizes))
    y = rng.normal(0, 3, groups.size)
    totals = rng.uniform(0, 10, 40) * (rng.random(40) < 0.9)
    x = group_simplex(y, groups, totals)
    assert x.min() >= 0
    np.testing.assert_allclose(np.bincount(groups, x, minlength=40), totals, atol=1e-9)
    for g in range(40):
        yg, xg = y[groups == g], x[groups == g]
        if totals[g] == 0:
            assert not xg.any()
            continue
        tau = (yg - xg)[xg > 0]
        np.testing.assert_allclose(tau, tau[0], atol=1e-9)
        assert np.all(yg[xg == 0] <= tau[0] + 1e-9)


def test_coarse_map_by_hand():
    fine = np.array([0, 0, 1, 2, 2, 3])
    np.testing.assert_array_equal(
        coarse_map(fine, np.array([5, 5, 5, 7, 7, 5]), 5), [5, 5, 7, 5, -1]
    )
    assert coarse_map(fine, np.array([5, 6, 5, 7, 7, 5]), 4) is None  # group 0 split


# -- against the general path ---------------------------------------------------------------------
def _result(y, p, w, marginals, tolerance=1e-6, held=None):
    """``two_passes`` on one family (the root when ``p`` is None), as the routes call it."""
    if p is None:
        fitter = RootFitter(tuple(g for g, _, _ in marginals))
        first = [(z[0], np.asarray(v[0])) for _, z, v in marginals[: len(NESTED)]]
        second = [(z[0], np.asarray(v[0])) for _, z, v in marginals[len(NESTED) :]]
        return two_passes(
            fitter, y[0], np.asarray(w[0]), first, second, tolerance=tolerance, held=held
        )
    chunk = [tm_chunk(g, z, v) for g, z, v in marginals]
    fitter = ChunkFitter(
        tuple(m.groups for m in chunk), tuple(m.targets.shape[2] for m in chunk), p[None]
    )
    support = np.flatnonzero(p > 0)
    first = [(m.targets, m.weights) for m in chunk[: len(NESTED)]]
    second = [(m.targets, m.weights) for m in chunk[len(NESTED) :]]
    res = two_passes(fitter, y[None], w[None], first, second, tolerance=tolerance, held=held)
    assert np.all(res.x[0][:, p == 0] == 0)
    return res, support


def tm_chunk(groups, answers, weights) -> Marginal:
    """One family's marginal on all its cells (a chunk of one, padding none: zero parent
    cells count in no group)."""
    return Marginal(groups[None].astype(np.int64), answers[None], weights[None])


@pytest.mark.parametrize("seed", range(4))
def test_family_two_passes_equal_the_general_path(nested, seed):
    y, p, w, marginals = tm._inputs(seed, k=2 + seed % 3, second=seed % 2 == 1)
    x, solved = tm._solve(tm._task(y, p, w, marginals, "auto"))
    assert solved == {"marginal_newton_multipass": 1}
    reference, general = tm._solve(tm._task(y, p, w, marginals, "cvxpy:CLARABEL"))
    assert general == {"cvxpy:CLARABEL": 2}
    tm._assert_same(x, reference, p)
    res, _ = _result(y, p, w, marginals)
    # one solve a pass; with a marginal fitted in pass 2 only, the rounds of the box hold
    assert res.nested and res.prox_steps == 1 and (res.hold_rounds == 1) == (seed % 2 == 0)


@pytest.mark.parametrize("seed", range(3))
def test_root_two_passes_equal_the_general_path(nested, seed):
    y, _, w, marginals = tm._inputs(10 + seed, k=1, second=seed == 1)
    x, solved = tm._solve(tm._task(y, None, w, marginals, "auto"))
    assert solved == {"root_newton_multipass": 1}
    reference, _ = tm._solve(tm._task(y, None, w, marginals, "cvxpy:CLARABEL"))
    tm._assert_same(x, reference, None)
    res = _result(y, None, w, marginals)
    # with a marginal fitted in pass 2 only (seed 1) the root holds by rounds, else by the
    # projection
    assert res.nested and (res.hold_rounds == 1) == (seed != 1)


@pytest.mark.parametrize("seed", range(3))
def test_a_pass_2_total_is_a_constant_of_the_hold(nested, seed):
    """A total fitted in pass 2 only (as ``"blue"`` adds its node-total estimate) is a sum of
    A x B's answers, fixed once they are held exactly: still one solve per group, and the
    general path's cells (a family; the root)."""
    y, p, w, marginals = tm._inputs(70 + seed, k=3)
    total = np.zeros(tm.N, dtype=np.int64)
    rng = np.random.default_rng(seed)
    extra = (total, np.maximum(y, 0).sum(axis=1, keepdims=True) + rng.normal(0, 3, (3, 1)), w)
    x, solved = tm._solve(tm._task(y, p, w, [*marginals, extra], "auto"))
    assert solved == {"marginal_newton_multipass": 1}
    reference, _ = tm._solve(tm._task(y, p, w, [*marginals, extra], "cvxpy:CLARABEL"))
    tm._assert_same(x, reference, p)
    res, _ = _result(y, p, w, [*marginals, extra])
    assert res.nested and res.hold_rounds == 1
    y, _, w, marginals = tm._inputs(80 + seed, k=1)
    extra = (total, np.maximum(y, 0).sum(axis=1, keepdims=True) + 2.0, w)
    x, _ = tm._solve(tm._task(y, None, w, [*marginals, extra], "auto"))
    reference, _ = tm._solve(tm._task(y, None, w, [*marginals, extra], "cvxpy:CLARABEL"))
    tm._assert_same(x, reference, None)
    assert _result(y, None, w, [*marginals, extra]).hold_rounds == 1


@pytest.mark.parametrize("seed", range(3))
def test_family_within_the_slack_as_the_general_path(nested, seed):
    """Production's 0.1: pass 1 on A x B's groups, then the box-holding rounds."""
    y, p, w, marginals = tm._inputs(40 + seed, k=3)
    x, solved = ts._solve(y, p, w, marginals, "auto", ts.SLACK)
    assert solved == {"marginal_newton_multipass": 1}
    reference, _ = ts._solve(y, p, w, marginals, "cvxpy:CLARABEL", ts.SLACK)
    np.testing.assert_allclose(x, reference, atol=ts.ATOL)
    np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9)
    assert ts._largest_move(x, ts._pass_1(y, p, w, marginals)) <= ts.SLACK + 1e-3
    res, _ = _result(y, p, w, marginals, tolerance=ts.SLACK)
    assert res.nested and res.hold_rounds > 1


@pytest.mark.parametrize("held", [(0,), (1, 2)])
def test_family_holding_a_subset_equals_the_general_path(nested, held):
    """Holding A x B alone (all four then held: each is a sum of its answers) and holding A and
    B only (the rounds of ``_hold``, from the answers pass 1 found on A x B's groups)."""
    import tests.test_multipass_held as th

    y, p, w, marginals = tm._inputs(50, k=3)
    as_measured = tuple(1 + h for h in held)  # tm._task numbers detailed 0, the first pass 1..
    x, solved = th._solve(y, p, w, marginals, "auto", held=as_measured)
    assert solved == {"marginal_newton_multipass": 1}
    reference, _ = th._solve(y, p, w, marginals, "cvxpy:CLARABEL", held=as_measured)
    np.testing.assert_allclose(x, reference, atol=tm.ATOL)
    res, _ = _result(y, p, w, marginals, held=list(held))
    assert res.nested and (res.hold_rounds == 1) == (held == (0,))


def test_a_held_marginal_splitting_the_cells_as_the_finest_is_held_exactly(monkeypatch):
    """Two first-pass marginals split the cells alike (on a DHC block family's support the two
    five-way ones can) and ``_finest`` picks the first, which pass 2 does not hold: the held
    one's answers are still held exactly, group by group (not the rounds of ``_hold``, which
    did not settle such a block family in 200 rounds), as the general path holds them."""
    import tests.test_multipass_held as th

    monkeypatch.setattr(tm, "FIRST", (A * 4 + B, A * 4 + B, A, np.zeros(tm.N, dtype=np.int64)))
    y, p, w, marginals = tm._inputs(70, k=3)
    x, solved = th._solve(y, p, w, marginals, "auto", held=(2,))
    assert solved == {"marginal_newton_multipass": 1}
    reference, _ = th._solve(y, p, w, marginals, "cvxpy:CLARABEL", held=(2,))
    np.testing.assert_allclose(x, reference, atol=tm.ATOL)
    res, _ = _result(y, p, w, marginals, held=[1])
    assert res.nested and res.hold_rounds == 1


def test_a_group_far_from_its_held_totals_settles_on_the_retry(monkeypatch):
    """Two children, three cells, parents (1, 1, 2); detailed answers child 0 (-60, -59, 11),
    child 1 (67, -44, -72); held totals 3.5 and 0.5 (a DHC block family at 3,000 persons had
    this shape: answers about 60 from the totals). Child 0's cells are clip(a + lam, 0, p)
    with a = (y_0 + p - y_1) / 2 = (-63, -7, 42.5): lam = 63.5 gives (0.5, 1, 2), summing to
    3.5, and child 1 the rest, (0.5, 0, 0). 200 steps do not cross the dual's flat stretch to
    lam; the retry's ten times as many do."""
    y = np.array([[[-60.0, -59.0, 11.0], [67.0, -44.0, -72.0]]])
    p = np.array([[1.0, 1.0, 2.0]])
    groups, u, w = np.zeros((1, 3), dtype=np.int64), np.array([[[3.5], [0.5]]]), np.ones((1, 2))
    x, ok = hold_by_group(y, p, w, groups, u, 200)
    assert ok[0]
    np.testing.assert_allclose(x[0], [[0.5, 1.0, 2.0], [0.5, 0.0, 0.0]], atol=1e-9)
    monkeypatch.setattr(nested_passes, "RETRY_STEPS", 1)
    _, ok = hold_by_group(y, p, w, groups, u, 200)
    assert not ok[0]


def test_holding_the_finest_alone_is_holding_all(nested):
    """Held exactly, A x B alone (production's DHC ordering holds its finest marginal alone)
    and all four give the same cells: each of the others is a sum of A x B's answers."""
    y, p, w, marginals = tm._inputs(60, k=3)
    one, _ = _result(y, p, w, marginals, held=[0])
    every, _ = _result(y, p, w, marginals)
    np.testing.assert_array_equal(one.x, every.x)
    y, _, w, marginals = tm._inputs(61, k=1)
    np.testing.assert_array_equal(
        _result(y, None, w, marginals, held=[0]).x, _result(y, None, w, marginals).x
    )


def test_a_chunk_of_families_equals_each_family_alone(nested, monkeypatch):
    """The level-batched route: ``tm``'s chunk of three families, their first pass nested,
    on the nested passes (the proximal ones would pass the comparison too)."""
    seen = tm.record_two_passes(monkeypatch, "tolerance")
    real = multipass_newton._nested_passes
    nested_calls: list[bool] = []

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        nested_calls.append(result.nested and result.hold_rounds == 1)
        return result

    monkeypatch.setattr(multipass_newton, "_nested_passes", spy)
    tm.test_a_chunk_of_families_equals_each_family_alone()
    assert seen and nested_calls == [True] * len(seen)


def test_marginals_that_do_not_nest_keep_the_proximal_passes():
    """A x B and B x C (``tm.FIRST``): neither coarsens the other, so pass 1 is proximal."""
    y, p, w, marginals = tm._inputs(0, k=3)
    res, _ = _result(y, p, w, marginals)
    assert not res.nested and res.prox_steps > 1


def test_a_pass_2_that_drops_the_hold_fails_the_comparison(nested, monkeypatch):
    """Pass 2 fitting the detailed answers alone (A x B's answers not held): the cells are
    not the general path's."""

    def unheld(self, y, w, fine, u):
        # a marginal of weight 0 counts for nothing: the detailed answers projected alone
        Q, k, _ = y.shape
        x, ok, _ = self.fit(y, w, [(np.zeros((Q, k, self.widths[0])), np.zeros((Q, k)))])
        return x, ok

    monkeypatch.setattr(ChunkFitter, "hold_exactly", unheld)
    y, p, w, marginals = tm._inputs(1, k=3)
    x, solved = tm._solve(tm._task(y, p, w, marginals, "auto"))
    assert solved == {"marginal_newton_multipass": 1}
    reference, _ = tm._solve(tm._task(y, p, w, marginals, "cvxpy:CLARABEL"))
    with pytest.raises(AssertionError):
        tm._assert_same(x, reference, p)


@pytest.mark.parametrize("seed", range(3))
def test_hold_by_group_equals_a_qp_solve(seed):
    """``hold_by_group`` on a chunk of three families (five children, groups of one to five
    cells, many children with a zero answer in a group, padding) against CVXPY's QP of the
    same problem, family by family: the same cells to 1e-5."""
    import cvxpy as cp

    from topdown.estimation.nested_passes import hold_by_group

    rng = np.random.default_rng(seed)
    Q, k, W, G = 3, 5, 14, 6
    groups = np.sort(rng.integers(0, G, (Q, W)), axis=1)
    groups[:, -2:] = G  # padding
    p = rng.integers(1, 6, (Q, W)).astype(float)
    p[:, -2:] = 0
    truth = rng.dirichlet(np.full(k, 0.3), (Q, W)).transpose(0, 2, 1) * p[:, None, :]
    u = np.zeros((Q, k, G))
    for q in range(Q):
        for c in range(k):
            u[q, c] = np.bincount(groups[q, :-2], truth[q, c, :-2], minlength=G)
    u[u < 0.5] = 0  # zero answers: move their mass to the group's largest child
    for q in range(Q):
        for g in range(G):
            cells = groups[q] == g
            gap = p[q, cells].sum() - u[q, :, g].sum()
            u[q, u[q, :, g].argmax(), g] += gap
    y = truth + rng.normal(0, 2, truth.shape)
    w = rng.uniform(0.5, 2, (Q, k))
    x, ok = hold_by_group(y, p, w, groups, u, 200)
    assert ok.all()
    for q in range(Q):
        real = groups[q] < G
        v = cp.Variable((k, int(real.sum())))
        member = (groups[q, real][None, :] == np.arange(G)[:, None]).astype(float)
        constraints = [v >= 0, cp.sum(v, axis=0) == p[q, real], v @ member.T == u[q]]
        objective = cp.sum(cp.multiply(w[q][:, None], cp.square(v - y[q][:, real])))
        best = cp.Problem(cp.Minimize(objective), constraints).solve(solver="CLARABEL")
        # Clarabel's cells sit up to about 5e-5 from the exact ones (tm.ATOL's note); ours
        # hold every constraint to 1e-9 and fit no worse
        np.testing.assert_allclose(x[q][:, real], v.value, atol=tm.ATOL)
        ours = x[q][:, real]
        np.testing.assert_allclose(ours.sum(axis=0), p[q, real], atol=1e-9)
        np.testing.assert_allclose(ours @ member.T, u[q], atol=1e-9)
        assert ours.min() >= 0 and not x[q][:, ~real].any()
        assert np.sum(w[q][:, None] * (ours - y[q][:, real]) ** 2) <= best + 1e-6


# -- the hold's Newton iteration -------------------------------------------------------------------
def test_a_hold_where_a_child_has_no_positive_cell_settles():
    """Two cells, one group, parents (2, 2); detailed answers child 0 (-5, -5), child 1 (3, 3);
    held group answers 3 and 1. At the start child 0 has no positive cell (each cell's
    projection gives child 1 both units), so its slot has no curvature (without a step there
    the iteration never moved: ``ridge=False``). The answer, by symmetry: (1.5, 1.5) and
    (0.5, 0.5)."""
    y = np.array([[[-5.0, -5.0], [3.0, 3.0]]])
    p = np.array([[2.0, 2.0]])
    held = Marginal(
        np.array([[0, 0]]),
        np.array([[[3.0], [1.0]]]),
        np.zeros((1, 2)),
        hard=np.array([[True, False]]),  # child 1's follows from the cells (as the route holds)
    )
    x, ok, _ = marginal_newton_dual(y, p, np.ones((1, 2)), (held,), max_iter=50, ridge=True)
    assert ok[0]
    np.testing.assert_allclose(x[0], [[1.5, 1.5], [0.5, 0.5]], atol=1e-9)
    _, ok, _ = marginal_newton_dual(y, p, np.ones((1, 2)), (held,), max_iter=50)
    assert not ok[0]  # without the ridge the slot never moves


def test_the_dhc_preset_first_pass_nests_in_its_held_marginal():
    """Every first-pass marginal of the DHC preset is a sum of the held one's answers (so the
    nested passes apply at every level), and ``detailed`` is not."""
    schema, strategy = census2020_dhcp(("STATE", "COUNTY", "TRACT"))
    domain = schema.domain
    level = strategy.levels[-1]
    queries = {q.name: q for q, _ in level.queries}
    fine = queries[PRODUCTION_HELD_NAME].groups(domain)
    n = int(fine.max()) + 1
    assert n == 42 * 40 * 2 * 63 * 2
    assert len(level.first_pass) == 9
    for name in level.first_pass:
        assert coarse_map(fine, queries[name].groups(domain), n) is not None, name
    assert coarse_map(fine, np.arange(domain.size), n) is None
