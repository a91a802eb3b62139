"""The whole-tree BLUE (topdown.blue.estimate) against a dense generalised-least-squares reference, its
variances against the reference's exact covariance and a seeded simulation, and the 90%
interval's coverage."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.domain import Domain
from topdown.blue.estimate import Blue, blue, blue_inputs
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Level, Tree
from topdown.strategy import Query
from topdown.support import row_blocks

DOMAIN = Domain({"A": [0, 1], "B": [0, 1, 2], "C": [0, 1, 2, 3]})
MARGINALS = ["detailed", "total", "A", "B", "A x B", "B x C", "C"]


def random_tree(rng: np.random.Generator, sizes: tuple[int, ...], only_child: bool) -> Tree:
    """Root, then levels where every parent has 1-3 children (some only children)."""
    levels = [Level(0, None, np.array(["root"], dtype=object), np.array([-1]))]
    for number, _ in enumerate(sizes, start=1):
        n_parents = levels[-1].size
        counts = rng.integers(1 if only_child else 2, 4, size=n_parents)
        parent = np.repeat(np.arange(n_parents), counts)
        labels = np.array([f"L{number}_{i}" for i in range(len(parent))], dtype=object)
        levels.append(Level(number, f"L{number}", labels, parent))
    return Tree(tuple(levels))


def leaves_under(tree: Tree) -> list[np.ndarray]:
    """Per level, a (nodes x leaves) 0/1 matrix: which leaves each node holds."""
    last = tree.n_levels - 1
    anc = tree.ancestors(last)
    n_leaves = tree.levels[last].size
    out = []
    for level in range(tree.n_levels):
        mat = np.zeros((tree.levels[level].size, n_leaves))
        mat[anc[level], np.arange(n_leaves)] = 1.0
        out.append(mat)
    return out


def dense_gls(tree: Tree, inputs: EstimatorInputs) -> tuple[list[np.ndarray], np.ndarray]:
    """Stacked measurement matrix over the leaf cells, weighted normal equations, solved densely.

    Returns the estimate per level and the covariance of the leaf-cell vector."""
    under = leaves_under(tree)
    rows, ys, ws = [], [], []
    for level, lv in enumerate(inputs.levels):
        for m in lv:
            Q = m.query.matrix(DOMAIN).toarray()
            for v in range(tree.levels[level].size):
                if np.isinf(m.variance[v]):
                    continue
                rows.append(np.kron(under[level][v], Q))
                ys.append(m.noisy[v])
                ws.append(np.full(Q.shape[0], 1.0 / m.variance[v]))
    A, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(ws)
    normal = A.T @ (w[:, None] * A)
    cov = np.linalg.inv(normal)
    # the estimate from the weighted rows (condition number the square root of the normal
    # matrix's): a near-exact row (variance 1e-7) made cov @ A'Wy off by 3e-5 with numpy 2.4
    root = np.sqrt(w)
    beta = np.linalg.lstsq(root[:, None] * A, root * y, rcond=None)[0]
    leaves = beta.reshape(under[0].shape[1], DOMAIN.size)
    return [u @ leaves for u in under], cov


def dense_variance(tree: Tree, cov: np.ndarray, level: int, query: str) -> np.ndarray:
    """Variance of each answer of ``query`` at every node of ``level`` from the dense covariance."""
    Q = Query.parse(query).matrix(DOMAIN).toarray()
    under = leaves_under(tree)[level]
    out = np.zeros((under.shape[0], Q.shape[0]))
    for v in range(under.shape[0]):
        C = np.kron(under[v], Q)
        # diag(C cov C'): the product through BLAS (a three-operand einsum loops in C, 10 s on
        # test_blue_dhc_like's 1,440 cells), then each row's dot with C's
        out[v] = np.einsum("ij,ij->i", C @ cov, C)
    return out


def random_inputs(
    rng: np.random.Generator, tree: Tree, strategy: list[list[str]], per_node: bool
) -> EstimatorInputs:
    levels = []
    for level, names in enumerate(strategy):
        nodes = tree.levels[level].size
        row = []
        for name in names:
            q = Query.parse(name)
            answers = q.n_answers(DOMAIN)
            var = rng.uniform(0.3, 5.0, size=nodes if per_node else 1)
            row.append(QueryEstimate(level, q, rng.normal(3.0, 4.0, (nodes, answers)), var))
        levels.append(tuple(row))
    return EstimatorInputs(tuple(levels))


STRATEGIES = {
    "detailed only": [["detailed"]] * 3,
    "detailed plus total": [["detailed", "total"]] * 3,
    "marginals": [["detailed", "A", "B x C"], ["detailed", "total", "A x B"], ["detailed", "C"]],
    "middle level marginals only": [["detailed"], ["total", "B"], ["detailed"]],
    "root unmeasured in detail": [["total"], ["detailed", "A"], ["detailed", "total"]],
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blue_equals_dense_gls(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, (2, 2), only_child=seed != 1)
    inputs = random_inputs(rng, tree, STRATEGIES[name], per_node=seed == 2)
    est = blue(tree, DOMAIN, inputs)
    reference, cov = dense_gls(tree, inputs)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], reference[level], rtol=0, atol=1e-9)
        for query in MARGINALS:
            dense = dense_variance(tree, cov, level, query)
            # every answer of a marginal has the same variance at a node
            np.testing.assert_allclose(dense, dense[:, :1] * np.ones_like(dense), atol=1e-9)
            np.testing.assert_allclose(est.variance(level, query), dense[:, 0], atol=1e-9)
    # consistency: children sum to their parent exactly
    for level in range(1, tree.n_levels):
        sums = np.zeros_like(est.cells[level - 1])
        np.add.at(sums, tree.levels[level].parent, est.cells[level])
        np.testing.assert_allclose(sums, est.cells[level - 1], atol=1e-9)


@pytest.mark.parametrize("name", ["marginals", "root unmeasured in detail"])
def test_blue_by_blocks_of_two_nodes_is_the_dense_gls(monkeypatch, name: str) -> None:
    """The level-wide passes (z, the upward combination, the downward shift, the groups'
    sum) a block of two nodes at a time: still the dense GLS."""
    rng = np.random.default_rng(7)
    tree = random_tree(rng, (3, 3), only_child=True)
    inputs = random_inputs(rng, tree, STRATEGIES[name], per_node=True)
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", 2 * DOMAIN.size * 8)
    est = blue(tree, DOMAIN, inputs)
    reference, _ = dense_gls(tree, inputs)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], reference[level], rtol=0, atol=1e-9)


def test_unidentified_split_has_infinite_variance() -> None:
    """Leaves measured by their totals only: the split of their cells is not identified, but
    the totals and every cell of the root are."""
    rng = np.random.default_rng(5)
    tree = random_tree(rng, (3,), only_child=False)
    inputs = random_inputs(rng, tree, [["detailed"], ["total"]], per_node=False)
    est = blue(tree, DOMAIN, inputs)
    assert np.isfinite(est.variance(0, "detailed")).all()
    assert np.isinf(est.variance(1, "detailed")).all()
    assert np.isfinite(est.variance(1, "total")).all()
    assert np.isfinite(est.cells[1]).all()


def test_only_child_combines_with_parent_by_inverse_variance() -> None:
    """Root with one child, detailed only: both are the inverse-variance mean, variance
    1 / (1/v0 + 1/v1) (worked by hand)."""
    tree = Tree(
        (
            Level(0, None, np.array(["root"], dtype=object), np.array([-1])),
            Level(1, "S", np.array(["a"], dtype=object), np.array([0])),
        )
    )
    y0 = np.arange(24, dtype=float).reshape(1, -1)
    y1 = y0 + 4.0
    inputs = EstimatorInputs(
        (
            (QueryEstimate(0, Query(None), y0, np.array([1.0])),),
            (QueryEstimate(1, Query(None), y1, np.array([3.0])),),
        )
    )
    est = blue(tree, DOMAIN, inputs)
    for level in (0, 1):
        np.testing.assert_allclose(est.cells[level], y0 + 1.0, atol=1e-12)  # (3 y0 + y1) / 4
        np.testing.assert_allclose(est.variance(level, "detailed"), [0.75], atol=1e-12)


def simulate(
    tree: Tree,
    truth: list[np.ndarray],
    strategy: list[list[tuple[str, float]]],
    seed,
    domain: Domain = DOMAIN,
):
    """Seeded Gaussian measurements of the true answers, each query with its variance."""
    rng = np.random.default_rng(seed)
    levels = []
    for level, queries in enumerate(strategy):
        row = []
        for name, var in queries:
            q = Query.parse(name)
            exact = q.answer(truth[level], domain).astype(float)
            noisy = exact + rng.normal(0.0, np.sqrt(var), exact.shape)
            row.append(QueryEstimate(level, q, noisy, np.array([var])))
        levels.append(tuple(row))
    return EstimatorInputs(tuple(levels))


def truth_of(tree: Tree, rng: np.random.Generator) -> list[np.ndarray]:
    leaves = rng.poisson(2.0, (tree.levels[-1].size, DOMAIN.size)).astype(float)
    return [u @ leaves for u in leaves_under(tree)]


def test_variance_matches_simulation_and_interval_covers_90_percent() -> None:
    """400 seeded replications: the empirical variance of the estimate of a few nodes' cells and
    totals matches the stated one (a ratio test; the chi-square spread of a 400-draw variance
    is about +-7% (1 sd), so +-25% is a 3.5 sd bound) and the stated 90% interval covers 85-95%
    of the true values (binomial sd of the pooled coverage under 0.5%)."""
    rng = np.random.default_rng(11)
    tree = random_tree(rng, (3, 2), only_child=True)
    truth = truth_of(tree, rng)
    strategy = [
        [("detailed", 2.0), ("total", 1.0)],
        [("detailed", 4.0), ("A", 2.0)],
        [("detailed", 4.0)],
    ]
    reps = 400
    errors: dict[int, list[np.ndarray]] = {lv: [] for lv in range(tree.n_levels)}
    totals: dict[int, list[np.ndarray]] = {lv: [] for lv in range(tree.n_levels)}
    est: Blue | None = None
    for r in range(reps):
        est = blue(tree, DOMAIN, simulate(tree, truth, strategy, 1000 + r))
        for lv in range(tree.n_levels):
            errors[lv].append(est.cells[lv] - truth[lv])
            totals[lv].append(est.cells[lv].sum(axis=1) - truth[lv].sum(axis=1))
    assert est is not None
    covered, count = 0, 0
    for lv in range(tree.n_levels):
        err = np.stack(errors[lv])  # (reps, nodes, cells)
        tot = np.stack(totals[lv])
        stated = est.variance(lv, "detailed")
        ratio = err.var(axis=(0, 2)) / stated
        assert np.all(np.abs(ratio - 1) < 0.25 / np.sqrt(DOMAIN.size) * 3), ratio
        t_ratio = tot.var(axis=0) / est.variance(lv, "total")
        assert np.all(np.abs(t_ratio - 1) < 0.25), t_ratio
        half = 1.6448536269514722 * np.sqrt(stated)
        covered += int((np.abs(err) <= half[None, :, None]).sum())
        count += err.size
    assert 0.85 <= covered / count <= 0.95, covered / count
    assert abs(covered / count - 0.90) < 0.01


def test_blue_inputs_carry_detailed_total_and_measured_marginals() -> None:
    rng = np.random.default_rng(3)
    tree = random_tree(rng, (2,), only_child=False)
    inputs = random_inputs(rng, tree, [["detailed"], ["detailed", "A x B"]], per_node=False)
    est = blue(tree, DOMAIN, inputs)
    fed = blue_inputs(inputs, est)
    assert [m.query.name for m in fed.at(0)] == ["detailed", "total"]
    assert [m.query.name for m in fed.at(1)] == ["detailed", "total", "A x B"]
    total = fed.get(1, "total")
    assert total is not None
    np.testing.assert_allclose(total.noisy[:, 0], est.cells[1].sum(axis=1))
    # the leaves are fed their own measurements' weights (topdown.blue.metric): the total,
    # not measured there, weighs nothing
    assert np.all(np.isinf(total.variance))
    for name in ("detailed", "A x B"):
        fed_q, raw = fed.get(1, name), inputs.get(1, name)
        assert fed_q is not None and raw is not None
        np.testing.assert_allclose(
            fed_q.variance, np.broadcast_to(raw.variance, fed_q.variance.shape)
        )
    # a published first level (a streamed subtree's top) is fed nothing; the others the same
    fixed = blue_inputs(inputs, est, fixed=1)
    assert fixed.at(0) == ()
    for got, want in zip(fixed.at(1), fed.at(1), strict=True):
        assert got.query == want.query
        assert np.array_equal(got.noisy, want.noisy)
        assert np.array_equal(got.variance, want.variance)


def _subtree_precision(tree: Tree, inputs: EstimatorInputs, level: int, node: int) -> np.ndarray:
    """Dense precision of one node's cells estimated from its own subtree's measurements."""
    under = leaves_under(tree)
    mine = under[level][node] > 0
    rows, ws = [], []
    for lv, ms in enumerate(inputs.levels):
        if lv < level:
            continue
        for m in ms:
            Q = m.query.matrix(DOMAIN).toarray()
            for v in range(tree.levels[lv].size):
                if (under[lv][v] > 0).any() and (under[lv][v] <= mine).all():
                    rows.append(np.kron(under[lv][v][mine], Q))
                    ws.append(
                        np.full(
                            Q.shape[0], 1.0 / np.broadcast_to(m.variance, (under[lv].shape[0],))[v]
                        )
                    )
    A, w = np.vstack(rows), np.concatenate(ws)
    cov = np.linalg.inv(A.T @ (w[:, None] * A))
    U = np.kron(np.ones(int(mine.sum())), np.eye(DOMAIN.size))
    return np.linalg.inv(U @ cov @ U.T)


@pytest.mark.parametrize(
    "queries", [["detailed"], ["detailed", "total"], ["detailed", "A x B", "C"], MARGINALS]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_fed_weights_make_the_passes_metric_the_subtree_precision(
    queries: list[str], seed: int
) -> None:
    """sum_q w_q Q'Q over the fed queries equals the dense precision of each node's subtree
    estimate, at every level (the L2 pass is then the BLUE's downward step)."""
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, (2, 2), only_child=seed == 1)
    inputs = random_inputs(rng, tree, [queries] * 3, per_node=seed == 1)
    fed = blue_inputs(inputs, blue(tree, DOMAIN, inputs))
    for level in range(tree.n_levels):
        for node in range(tree.levels[level].size):
            metric = sum(
                (1.0 / m.variance[node]) * (M := m.query.matrix(DOMAIN).toarray()).T @ M
                for m in fed.at(level)
                if np.isfinite(m.variance[node])
            )
            dense = _subtree_precision(tree, inputs, level, node)
            np.testing.assert_allclose(metric, dense, rtol=1e-7, atol=1e-9 * np.abs(dense).max())


def test_leaf_subtree_variance_is_its_own_measurements() -> None:
    rng = np.random.default_rng(8)
    tree = random_tree(rng, (2, 2), only_child=True)
    inputs = random_inputs(rng, tree, STRATEGIES["detailed only"], per_node=True)
    est = blue(tree, DOMAIN, inputs)
    np.testing.assert_allclose(est.variance(2, "detailed", subtree=True), inputs.at(2)[0].variance)
    np.testing.assert_allclose(
        est.variance(0, "detailed", subtree=True), est.variance(0, "detailed")
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_projection_of_the_blue_is_the_gls_given_the_parent(seed: int) -> None:
    """The passes fix the published parent. Projecting the BLUE children onto it with the
    subtree weights (what ``blue_inputs`` feeds) is the BLUE given the parent exactly (the
    parent level re-measured with variance 0), wherever nothing is clipped. Per-node variances
    make siblings' subtree and final variances disagree, so the final ones would fail."""
    from topdown.estimation.batched.families import batched_l2

    rng = np.random.default_rng(seed)
    tree = random_tree(rng, (2, 2), only_child=False)
    inputs = random_inputs(rng, tree, STRATEGIES["detailed only"], per_node=True)
    truth = leaves_under(tree)  # consistent counts far from zero, noised with each variance
    leaves = rng.uniform(100, 200, (truth[0].shape[1], DOMAIN.size))
    inputs = EstimatorInputs(
        tuple(
            tuple(
                QueryEstimate(
                    m.level,
                    m.query,
                    truth[m.level] @ leaves
                    + rng.normal(size=m.noisy.shape) * np.sqrt(m.variance)[:, None],
                    m.variance,
                )
                for m in lv
            )
            for lv in inputs.levels
        )
    )
    est = blue(tree, DOMAIN, inputs)
    published = np.round(est.cells[1]) + rng.integers(-3, 4, est.cells[1].shape)
    fixed = list(inputs.levels)
    nodes = tree.levels[1].size
    fixed[1] = fixed[1] + (QueryEstimate(1, Query(None), published, np.zeros(nodes)),)
    given = blue(tree, DOMAIN, EstimatorInputs(tuple(fixed)))
    fed = blue_inputs(inputs, est).get(2, "detailed")
    assert fed is not None
    projected = batched_l2(fed.noisy, published, tree.levels[2].parent, weights=1 / fed.variance)
    assert projected.min() > 0  # nothing clipped
    np.testing.assert_allclose(projected, given.cells[2], atol=1e-8)
    final = batched_l2(
        fed.noisy, published, tree.levels[2].parent, weights=1 / est.variance(2, "detailed")
    )
    assert np.abs(final - given.cells[2]).max() > 1e-3


def test_an_exact_total_is_kept_and_has_no_error() -> None:
    """An invariant's total enters with variance 0: the BLUE keeps it, reports stderr 0 for
    it (not for the cells), matches a dense GLS that gives it variance 1e-7, and the passes
    get it with weight 0 (their constraint holds it)."""
    rng = np.random.default_rng(11)
    tree = random_tree(rng, (2, 2), only_child=False)
    inputs = random_inputs(rng, tree, STRATEGIES["detailed only"], per_node=True)
    est = blue(tree, DOMAIN, inputs, exact_totals={0: {0: 100.0}, 2: {1: 40.0}})
    assert est.cells[0].sum() == pytest.approx(100.0, abs=1e-9)
    assert est.cells[2][1].sum() == pytest.approx(40.0, abs=1e-9)
    assert est.variance(0, "total")[0] == 0.0 and est.variance(2, "total")[1] == 0.0
    assert (
        est.variance(2, "total")[0] > 0
        and est.variance(1, "total").min() > 0
        and (est.stderr(0) > 0).all()
    )
    heavy = list(inputs.levels)
    heavy[0] = heavy[0] + (QueryEstimate(0, Query(()), np.array([[100.0]]), 1e-7),)
    var2 = np.full(tree.levels[2].size, np.inf)
    var2[1] = 1e-7
    heavy[2] = heavy[2] + (QueryEstimate(2, Query(()), np.full((len(var2), 1), 40.0), var2),)
    reference, _ = dense_gls(tree, EstimatorInputs(tuple(heavy)))
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], reference[level], atol=1e-5)
    total = blue_inputs(inputs, est, {0: {0: 100.0}, 2: {1: 40.0}}).get(2, "total")
    assert total is not None
    # the invariant's total is held by the passes' constraint (weight 0); node 0's total is
    # not measured at the leaves, so it weighs nothing in the passes' metric either
    assert np.isinf(total.variance).all()
    root_total = blue_inputs(inputs, est, {0: {0: 100.0}, 2: {1: 40.0}}).get(0, "total")
    assert root_total is not None and np.isinf(root_total.variance[0])
    with pytest.raises(ValueError, match="names node 9"):
        blue(tree, DOMAIN, inputs, exact_totals={0: {9: 1.0}})


def test_blue_inputs_feed_the_marginals_only_where_asked() -> None:
    """``marginals=False`` leaves every level's measured marginals out (detailed and total
    unchanged in value; their weights are the metric of the queries fed, see
    ``topdown.blue.metric``); a set of levels keeps them at those levels only."""
    rng = np.random.default_rng(5)
    tree = random_tree(rng, (2, 2), only_child=False)
    queries = [["detailed", "A"], ["detailed", "A x B"], ["detailed", "B", "C"]]
    inputs = random_inputs(rng, tree, queries, per_node=False)
    est = blue(tree, DOMAIN, inputs)
    full = blue_inputs(inputs, est)
    assert [m.query.name for m in full.at(2)] == ["detailed", "total", "B", "C"]
    lean = blue_inputs(inputs, est, marginals=False)
    some = blue_inputs(inputs, est, marginals={1})
    for level in range(tree.n_levels):
        assert [m.query.name for m in lean.at(level)] == ["detailed", "total"]
        expected = [m.query.name for m in (full if level == 1 else lean).at(level)]
        assert [m.query.name for m in some.at(level)] == expected
        for name in ("detailed", "total"):
            a, b = full.get(level, name), lean.get(level, name)
            assert a is not None and b is not None
            np.testing.assert_array_equal(a.noisy, b.noisy)
    assert [m.query.name for m in some.at(1)] == ["detailed", "total", "A x B"]
