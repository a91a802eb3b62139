"""The recoded BLUE on a small DHC-persons-like domain, its covariances held per node type
(``topdown.blue.shared_matrices``), against ``test_blue``'s dense generalised least squares.

The domain copies the preset's pattern on four attributes: a relationship-like axis with three
overlapping recodes (not nested in each other), an age-like axis with three, two plain axes,
and ten queries a level crossing them as ``census2020_dhcp``'s do. Its largest block has
``k = 25`` (5 relationship x 5 age finest groups). The trees have nodes that share a type
(the same variances and the same number of children) and nodes that do not (1 to 3
children, per-node variances), so a type key that left out what a node's covariance
depends on (its precision, its children's or parent's covariances, an exact total) would
give some node another's covariance and move its estimate off the dense GLS.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_blue as tb

from constraints.domain import Domain
from topdown.blue import block_recursions, metric
from topdown.blue.blocks import blocks_of
from topdown.blue.estimate import blue, blue_inputs
from topdown.blue.shared_matrices import SharedMatrices, type_index, type_rows
from topdown.blue.variance_terms import _kron_diag
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Level, Tree
from topdown.strategy import Query

DOMAIN = Domain(
    {"R": list(range(6)), "S": [0, 1], "G": list(range(6)), "E": [0, 1]},
    {
        "R": {
            "r3": {"hh": [0, 1], "inst": [2, 3], "non": [4, 5]},
            "gq": {"a": [0], "b": [1, 2], "c": [3, 4, 5]},
            "rel": {"x": [0], "y": [1, 2, 3, 4, 5]},
        },
        "G": {
            "adult": {"minor": [0, 1], "adult": [2, 3, 4, 5]},
            "bands": {"b0": [0], "b1": [1, 2, 3], "b2": [4, 5]},
            "dec": {"d0": [0, 1, 2], "d1": [3, 4, 5]},
        },
    },
)
#: ``census2020_dhcp``'s ten queries, in this domain's terms
QUERIES = [
    "G:adult x R:r3",
    "G:adult x S",
    "G:bands x S",
    "E x S",
    "S x R:r3",
    "R:gq x G:dec",
    "R:rel",
    "E x S x G:bands x R:rel",
    "R x G:bands x E x S",
    "detailed",
]
ASKED = ["detailed", "total", "G:adult x R:r3", "R:gq x G:dec", "R x G:bands", "E x S"]


@pytest.fixture(autouse=True)
def _domain(monkeypatch) -> None:
    """``test_blue``'s dense reference reads its module's DOMAIN: this module's."""
    monkeypatch.setattr(tb, "DOMAIN", DOMAIN)


def leaf_marginals_every_other_node(inputs: EstimatorInputs) -> EstimatorInputs:
    """``inputs`` with the leaf level's marginals unmeasured (variance inf) at every other
    node: nodes the BLUE must estimate from ``detailed`` and their relatives alone."""
    masked = []
    for m in inputs.at(2):
        var = np.broadcast_to(m.variance, (m.noisy.shape[0],)).astype(float)
        if m.query.name != "detailed":
            var[::2] = np.inf
        masked.append(QueryEstimate(m.level, m.query, m.noisy, var))
    return EstimatorInputs((inputs.at(0), inputs.at(1), tuple(masked)))


def _matrix_scales(est, level: int, subtree: bool = False) -> list[SharedMatrices]:
    scales = (est.block_subtree_scale if subtree else est.block_scale)[level]
    return [s for s in scales if isinstance(s, SharedMatrices)]


def test_the_domain_has_large_matrix_blocks() -> None:
    """What the module's tests rely on: the queries split into matrix blocks up to k = 25."""
    blocks = blocks_of(DOMAIN, [Query.parse(q) for q in QUERIES])
    assert max(b.k for b in blocks) == 25
    assert sum(b.k > 1 for b in blocks) >= 4


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_dhc_like_blue_equals_dense_gls(seed: int) -> None:
    """Every level's cells and the variances of every asked query equal the dense GLS's, on
    trees of 1-3 children (seed 1: 2-3), per-node variances for seeds 2 and 3."""
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 2), only_child=seed != 1)
    inputs = tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=seed >= 2)
    est = blue(tree, DOMAIN, inputs)
    dense, cov = tb.dense_gls(tree, inputs)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], rtol=0, atol=1e-8)
        for query in ASKED:
            want = tb.dense_variance(tree, cov, level, query)
            np.testing.assert_allclose(est.answer_variance(level, query), want, rtol=1e-8)
            np.testing.assert_allclose(est.variance(level, query), want.mean(axis=1), rtol=1e-8)


def test_dhc_like_blue_with_an_exact_total_equals_dense_gls() -> None:
    """An exact root total (an invariant) and a level whose nodes measure different things
    (the marginals at every other node only): the dense GLS with the total's variance 1e-9
    (the limit: cells agree to about 1e-9 of their scale)."""
    rng = np.random.default_rng(5)
    tree = tb.random_tree(rng, (3, 2), only_child=True)
    inputs = leaf_marginals_every_other_node(
        tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False)
    )
    est = blue(tree, DOMAIN, inputs, exact_totals={0: {0: 500.0}})
    assert est.cells[0][0].sum() == pytest.approx(500.0, abs=1e-8)
    near = EstimatorInputs(
        (inputs.at(0) + (QueryEstimate(0, Query(()), np.array([[500.0]]), np.array([1e-9])),),)
        + inputs.levels[1:]
    )
    dense, cov = tb.dense_gls(tree, near)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], rtol=1e-7, atol=1e-7)
        for query in ("detailed", "G:adult x R:r3", "total"):
            want = tb.dense_variance(tree, cov, level, query)
            # the reference's own round-off (inverting a normal matrix with a 1e9 weight) is
            # about 1e-5 relative here: cells of one group differ by 2e-6 in ``want``
            got = est.answer_variance(level, query)
            np.testing.assert_allclose(got, want, rtol=5e-5, atol=1e-5)


def _two_or_three_children() -> Tree:
    """Root; 4 nodes of 2, 3, 2, 3 children; 10 leaves: two parent types."""
    parent1 = np.zeros(4, dtype=np.int64)
    parent2 = np.repeat(np.arange(4), [2, 3, 2, 3])
    levels = [Level(0, None, np.array(["r"], dtype=object), np.array([-1]))]
    for number, parent in enumerate((parent1, parent2), start=1):
        labels = np.array([f"L{number}_{i}" for i in range(parent.size)], dtype=object)
        levels.append(Level(number, f"L{number}", labels, parent))
    return Tree(tuple(levels))


def test_covariances_are_held_once_per_node_type() -> None:
    """One variance per query and level, parents of 2 or 3 children: every matrix block
    holds at most two distinct covariances a level (the two parent types, and their
    children), not one per node, and the estimate is still the dense GLS."""
    rng = np.random.default_rng(11)
    tree = _two_or_three_children()
    inputs = tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False)
    est = blue(tree, DOMAIN, inputs)
    for level in range(tree.n_levels):
        for subtree in (False, True):
            scales = _matrix_scales(est, level, subtree)
            assert scales
            for s in scales:
                assert len(s) == tree.levels[level].size
                assert len(s.values) <= min(2, tree.levels[level].size)
    # the leaves under a parent of 2 and under one of 3 differ; those under equal parents not
    leaf = np.asarray(_matrix_scales(est, 2)[0])
    np.testing.assert_array_equal(leaf[0], leaf[5])
    assert not np.allclose(leaf[0], leaf[2])
    dense, _ = tb.dense_gls(tree, inputs)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], rtol=0, atol=1e-8)


def _with_variances(inputs: EstimatorInputs, level: int, query: str, var: np.ndarray):
    """``inputs`` with ``query``'s per-node variances at ``level`` replaced by ``var``."""
    levels = list(inputs.levels)
    levels[level] = tuple(
        QueryEstimate(m.level, m.query, m.noisy, var) if m.query.name == query else m
        for m in levels[level]
    )
    return EstimatorInputs(tuple(levels))


def test_types_follow_every_query_and_the_parents_final_covariance() -> None:
    """Nodes that share the number of children and a query's variance but not another's:
    the level-1 parents of 2 children measure ``detailed`` with different variances (so
    their children, alike themselves, differ in their parents' final covariance), and one
    marginal is unmeasured at three leaves (so leaves differ in a query other than the
    first). Still the dense GLS, cells and variances."""
    rng = np.random.default_rng(13)
    tree = _two_or_three_children()
    inputs = tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False)
    inputs = _with_variances(inputs, 1, "detailed", np.array([0.5, 2.0, 4.0, 2.0]))
    missing = np.full(10, 1.5)
    missing[[0, 3, 7]] = np.inf
    inputs = _with_variances(inputs, 2, "E x S", missing)
    est = blue(tree, DOMAIN, inputs)
    dense, cov = tb.dense_gls(tree, inputs)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], rtol=0, atol=1e-8)
        for query in ("detailed", "E x S"):
            want = tb.dense_variance(tree, cov, level, query)
            np.testing.assert_allclose(est.answer_variance(level, query), want, rtol=1e-8)


def test_the_large_k_paths_give_the_same_blue_and_weights(monkeypatch) -> None:
    """What the DHC preset's ``k = 1,160`` takes, forced here at ``k <= 25``: products per
    node type instead of a gathered batch (``GATHER_BYTES``), and the metric's ``G_q V``
    from the Kronecker factors instead of stacked grams (``DENSE_GRAM_BYTES``). The same
    estimate (the dense GLS), variances and fed weights as the small-k paths."""
    rng = np.random.default_rng(17)
    tree = tb.random_tree(rng, (3, 2), only_child=True)
    inputs = tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False)
    small = blue(tree, DOMAIN, inputs, exact_totals={0: {0: 400.0}})
    fed_small = blue_inputs(inputs, small, {0: {0: 400.0}})
    monkeypatch.setattr(block_recursions, "GATHER_BYTES", 0)
    monkeypatch.setattr(metric, "DENSE_GRAM_BYTES", 0)
    large = blue(tree, DOMAIN, inputs, exact_totals={0: {0: 400.0}})
    fed_large = blue_inputs(inputs, large, {0: {0: 400.0}})
    for level in range(tree.n_levels):
        np.testing.assert_allclose(large.cells[level], small.cells[level], rtol=1e-12, atol=1e-9)
        for query in ("detailed", "G:adult x R:r3"):
            np.testing.assert_allclose(
                large.answer_variance(level, query),
                small.answer_variance(level, query),
                rtol=1e-10,
                atol=1e-12,
            )
        for a, b in zip(fed_large.at(level), fed_small.at(level), strict=True):
            np.testing.assert_allclose(a.variance, b.variance, rtol=1e-8)


def test_fed_inputs_weigh_equal_types_equally() -> None:
    """The passes' weights (``blue_inputs``) are solved per combination of types and spread
    to the nodes: nodes of one type get equal variances, the two leaf types different ones."""
    rng = np.random.default_rng(3)
    tree = _two_or_three_children()
    inputs = tb.random_inputs(rng, tree, [QUERIES] * 3, per_node=False)
    fed = blue_inputs(inputs, blue(tree, DOMAIN, inputs))
    for m in fed.at(1):
        var = np.broadcast_to(m.variance, (4,))
        assert var[0] == var[2] and var[1] == var[3]


def test_type_index_numbers_distinct_keys_by_first_node() -> None:
    keys = [np.array([3, 1, 3, 2, 1, 3]), np.array([0, 0, 0, 0, 0, 1])]
    types, first = type_index(keys)
    np.testing.assert_array_equal(types, [0, 1, 0, 2, 1, 3])
    np.testing.assert_array_equal(first, [0, 1, 3, 5])
    assert type_rows(np.array([0, 0, 1, 1, 0]), 1) == slice(2, 4)
    np.testing.assert_array_equal(type_rows(np.array([0, 1, 0]), 0), [0, 2])


def test_shared_matrices_round_trip_and_validation() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 3, 3))
    per_node = a[[1, 0, 1, 1]]
    shared = SharedMatrices.of(per_node)
    assert len(shared.values) == 2 and len(shared) == 4
    np.testing.assert_array_equal(np.asarray(shared), per_node)
    np.testing.assert_array_equal(np.asarray(shared.rows(slice(1, 3))), per_node[1:3])
    with pytest.raises(ValueError, match=r"index \(shape \(2,\)\) must be one type in \[0, 2\)"):
        SharedMatrices(a, np.array([0, 2]))
    with pytest.raises(ValueError, match="must be .* square matrices"):
        SharedMatrices(rng.normal(size=(2, 3, 4)), np.array([0, 1]))


def test_kron_diag_is_the_diagonal_of_b_phi_b() -> None:
    """``diag(B Phi B')`` contracted axis by axis equals the explicit one, ``B = A1 (x) A2
    (x) A3``, for several matrices at once."""
    rng = np.random.default_rng(1)
    maps = [rng.normal(size=(4, 3)), rng.normal(size=(2, 1)), rng.normal(size=(5, 2))]
    b = np.kron(np.kron(maps[0], maps[1]), maps[2])
    phi = rng.normal(size=(3, 6, 6))
    phi = phi @ np.swapaxes(phi, 1, 2)
    want = np.stack([np.diag(b @ p @ b.T) for p in phi])
    np.testing.assert_allclose(_kron_diag(maps, phi), want, rtol=1e-12)
