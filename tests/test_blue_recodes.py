"""The whole-tree BLUE of recoded queries (topdown.blue.blocks, block_recursions, block_solve)
against a dense generalised-least-squares reference on small random trees: its estimate,
every answer's variance against the reference's covariance, exact node totals, and the
refusals where it cannot be exact."""

from __future__ import annotations

import numpy as np
import pytest
import test_blue as tb

from constraints.domain import Domain
from topdown.blue.blocks import blocks_of
from topdown.blue.estimate import _with_exact_totals, blue
from topdown.errors import StrategyError
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Level, Tree
from topdown.strategy import Query

#: An HHGQ-like axis with an ``hhinst``-like recode (groups of 1, 3 and 2 values), a nested
#: coarser one (household / group quarters), one not nested in it (bands), and a one-group
#: recode (a total through a recode)
DOMAIN = Domain(
    {"A": [0, 1], "H": list(range(6)), "C": [0, 1, 2]},
    {
        "H": {
            "hhinst": {"h": [0], "i": [1, 2, 3], "o": [4, 5]},
            "gq": {"h": [0], "g": [1, 2, 3, 4, 5]},
            "band": {"lo": [0, 1], "hi": [2, 3, 4, 5]},
            "all": {"all": list(range(6))},
        },
        "C": {"c2": {"x": [0], "y": [1, 2]}},
    },
)
ASKED = ["detailed", "total", "hhinst", "H:gq x C", "H:band", "A x H", "C:c2", "H:all x A"]

STRATEGIES = {
    "hhinst": [["detailed", "hhinst"], ["detailed", "A x hhinst", "total"], ["detailed"]],
    "nested": [["detailed", "H:gq"], ["detailed", "hhinst x C"], ["detailed", "H:gq", "A"]],
    "not nested": [["detailed", "H:band x C"], ["detailed", "hhinst"], ["detailed", "hhinst"]],
    "two recoded axes": [["detailed"], ["detailed", "hhinst x C:c2"], ["detailed", "C:c2"]],
    "total through a recode": [["detailed", "H:all"], ["detailed", "H:all x A"], ["detailed"]],
    "middle level recodes only": [["detailed"], ["hhinst", "total"], ["detailed", "hhinst"]],
    "root unmeasured in detail": [["total"], ["detailed", "hhinst"], ["detailed", "H:gq"]],
}


@pytest.fixture(autouse=True)
def _domain(monkeypatch) -> None:
    """``test_blue``'s dense reference reads its module's DOMAIN: this module's."""
    monkeypatch.setattr(tb, "DOMAIN", DOMAIN)


def _check(tree: Tree, inputs: EstimatorInputs, reference: EstimatorInputs, **kwargs) -> None:
    est = blue(tree, DOMAIN, inputs, **kwargs)
    assert est.blocks  # the recoded split, not the plain groups
    dense, cov = tb.dense_gls(tree, reference)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], rtol=0, atol=1e-8)
        for query in ASKED:
            want = tb.dense_variance(tree, cov, level, query)
            got = est.answer_variance(level, query)
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-9)
            np.testing.assert_allclose(est.variance(level, query), want.mean(axis=1), atol=1e-9)
    for level in range(1, tree.n_levels):  # children sum to their parent exactly
        sums = np.zeros_like(est.cells[level - 1])
        np.add.at(sums, tree.levels[level].parent, est.cells[level])
        np.testing.assert_allclose(sums, est.cells[level - 1], atol=1e-9)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blue_of_recoded_queries_equals_dense_gls(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 2), only_child=seed != 1)
    inputs = tb.random_inputs(rng, tree, STRATEGIES[name], per_node=seed == 2)
    _check(tree, inputs, inputs)


def test_answers_of_unequal_groups_have_unequal_variances() -> None:
    """The point of the matrix blocks: under ``hhinst`` a household cell (a group of 1) and
    an institutional one (a group of 3) are not estimated equally well, and the plain
    groups' one variance per node would be wrong for both (the dense test checks each)."""
    rng = np.random.default_rng(4)
    tree = tb.random_tree(rng, (2,), only_child=False)
    inputs = tb.random_inputs(rng, tree, STRATEGIES["hhinst"][:2], per_node=False)
    est = blue(tree, DOMAIN, inputs)
    hh = est.answer_variance(1, "hhinst")
    assert np.ptp(hh[0]) > 0.05 * hh[0].mean()
    cells = est.cell_variance(1).reshape(-1, 2, 6, 3)
    assert not np.allclose(cells[:, :, 0], cells[:, :, 1])  # household vs institutional
    np.testing.assert_allclose(cells[:, :, 1], cells[:, :, 3])  # same group, same variance


def test_nodes_without_some_queries_have_infinite_variance_there() -> None:
    """Per-node infinite variances (a query not measured at some nodes) are no information."""
    rng = np.random.default_rng(9)
    tree = tb.random_tree(rng, (2, 2), only_child=True)
    inputs = tb.random_inputs(rng, tree, STRATEGIES["nested"], per_node=True)
    levels = []
    for lv in inputs.levels:
        row = []
        for m in lv:
            var = np.array(m.variance, dtype=float)
            if m.query.name != "detailed":
                var[::2] = np.inf
            row.append(QueryEstimate(m.level, m.query, m.noisy, var))
        levels.append(tuple(row))
    masked = EstimatorInputs(tuple(levels))
    _check(tree, masked, masked)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_totals_are_kept_with_variance_zero(seed: int) -> None:
    """An invariant's total (variance 0) is a constraint in the matrix block of the node
    totals: kept exactly, its variance 0, and the rest the dense GLS's with variance 1e-7
    for it (the limit: agreement to about that variance)."""
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 2), only_child=True)
    inputs = tb.random_inputs(rng, tree, STRATEGIES["hhinst"], per_node=False)
    exact = {0: {0: 100.0}, 1: {0: 60.0}, 2: {1: 40.0}}
    est = blue(tree, DOMAIN, inputs, exact_totals=exact)
    for level, known in exact.items():
        for node, total in known.items():
            assert est.cells[level][node].sum() == pytest.approx(total, abs=1e-9)
            assert est.answer_variance(level, "total")[node, 0] == 0.0
        free = np.setdiff1d(np.arange(tree.levels[level].size), list(known))
        assert np.all(est.variance(level, "detailed") > 0)
        if free.size and level:
            assert np.all(est.variance(level, "total")[free] >= 0)
    near = EstimatorInputs(
        tuple(
            tuple(
                QueryEstimate(
                    m.level, m.query, m.noisy, np.where(m.variance == 0, 1e-7, m.variance)
                )
                for m in lv
            )
            for lv in _with_exact_totals(inputs, tree, exact).levels
        )
    )
    dense, cov = tb.dense_gls(tree, near)
    for level in range(tree.n_levels):
        np.testing.assert_allclose(est.cells[level], dense[level], atol=1e-5)
        for query in ("detailed", "hhinst", "total"):
            want = tb.dense_variance(tree, cov, level, query)
            np.testing.assert_allclose(est.answer_variance(level, query), want, atol=1e-5)


def test_only_child_of_an_exact_parent_has_an_exact_total() -> None:
    """A root with one child, the root's total exact: the child's total is the root's, with
    variance 0, and its cells the inverse-variance mean of both (worked by hand: detailed
    only at both, variances 1 and 3; the exact total moves both by the same amount per cell)."""
    tree = Tree(
        (
            Level(0, None, np.array(["root"], dtype=object), np.array([-1])),
            Level(1, "S", np.array(["a"], dtype=object), np.array([0])),
        )
    )
    cells = DOMAIN.size
    y0 = np.arange(cells, dtype=float).reshape(1, -1)
    y1 = y0 + 4.0
    hh = Query.parse("hhinst")
    inputs = EstimatorInputs(
        (
            (QueryEstimate(0, Query(None), y0, np.array([1.0])),),
            (
                QueryEstimate(1, Query(None), y1, np.array([3.0])),
                QueryEstimate(1, hh, hh.answer(y1, DOMAIN), np.array([np.inf])),
            ),
        )
    )
    mean = (3 * y0 + y1) / 4  # = y0 + 1
    total = float(mean.sum()) + cells * 0.5  # half a unit more per cell
    est = blue(tree, DOMAIN, inputs, exact_totals={0: {0: total}})
    for level in (0, 1):
        np.testing.assert_allclose(est.cells[level], mean + 0.5, atol=1e-9)
        assert est.answer_variance(level, "total")[0, 0] == 0.0
        # a cell's variance: 3/4 less the exact total's share (1/cells of it), by hand
        np.testing.assert_allclose(est.cell_variance(level), 0.75 * (1 - 1 / cells), atol=1e-12)


def test_a_plain_strategy_through_the_blocks_is_the_plain_blue() -> None:
    """A recoded query with no information (infinite variance everywhere) sends a plain
    strategy through the blocks: the same estimate and variances as the scalar groups."""
    rng = np.random.default_rng(2)
    tree = tb.random_tree(rng, (2, 3), only_child=True)
    plain = tb.random_inputs(
        rng, tree, [["detailed", "A"], ["total", "H"], ["detailed", "A x C"]], per_node=True
    )
    hh = Query.parse("hhinst")
    extra = QueryEstimate(2, hh, np.zeros((tree.levels[2].size, 3)), np.array([np.inf]))
    blocked = EstimatorInputs(plain.levels[:2] + (plain.levels[2] + (extra,),))
    a, b = blue(tree, DOMAIN, plain), blue(tree, DOMAIN, blocked)
    assert not a.blocks and b.blocks
    for level in range(tree.n_levels):
        np.testing.assert_allclose(b.cells[level], a.cells[level], atol=1e-9)
        for query in ASKED:
            np.testing.assert_allclose(
                b.answer_variance(level, query), a.answer_variance(level, query), rtol=1e-9
            )
            np.testing.assert_allclose(
                b.variance(level, query, subtree=True),
                a.variance(level, query, subtree=True),
                rtol=1e-9,
            )


def test_leaves_that_cannot_identify_their_cells_are_refused() -> None:
    rng = np.random.default_rng(1)
    tree = tb.random_tree(rng, (2,), only_child=False)
    inputs = tb.random_inputs(rng, tree, [["detailed"], ["hhinst", "C"]], per_node=False)
    match = r"level 1 \(L1\), which measures \['hhinst', 'C'\].*Measure 'detailed'"
    with pytest.raises(StrategyError, match=match):
        blue(tree, DOMAIN, inputs)


def test_an_exact_answer_of_a_recoded_query_is_refused() -> None:
    rng = np.random.default_rng(1)
    tree = tb.random_tree(rng, (2,), only_child=False)
    inputs = tb.random_inputs(rng, tree, [["detailed"], ["detailed", "hhinst"]], per_node=False)
    m = inputs.at(1)[1]
    zero = QueryEstimate(1, m.query, m.noisy, np.zeros(1))
    with pytest.raises(StrategyError, match="'hhinst' at level 1.*exact node totals only"):
        blue(tree, DOMAIN, EstimatorInputs((inputs.at(0), (inputs.at(1)[0], zero))))


def test_cell_variances_match_a_simulation_and_intervals_cover_90_percent() -> None:
    """400 seeded replications with ``A x hhinst x C`` measured 16 to 40 times more precisely
    than the cells: a household cell (a group of 1) is then known about as well as its
    group's total, an institutional one (a group of 3) far less. The empirical variance of
    each group's cells matches the stated per-cell variance (ratio within 15%: the pooled
    estimate's spread is about 3% at one sd for independent draws, so the bound holds
    correlated cells too), the stated 90% intervals cover 85-95% of the true cells, and the
    node's one figure (``stderr``: the root mean square over its cells) would fail the same
    bound for the household cells (power: it is off by more than half)."""
    rng = np.random.default_rng(12)
    tree = tb.random_tree(rng, (2, 2), only_child=True)
    truth = tb.truth_of(tree, rng)
    strategy = [
        [("detailed", 2.0), ("total", 1.0)],
        [("detailed", 4.0), ("A x hhinst x C", 0.25)],
        [("detailed", 10.0), ("A x hhinst x C", 0.25)],
    ]
    reps = 400
    errors = {lv: [] for lv in range(tree.n_levels)}
    est = None
    for r in range(reps):
        est = blue(tree, DOMAIN, tb.simulate(tree, truth, strategy, 5000 + r, DOMAIN))
        for lv in range(tree.n_levels):
            errors[lv].append(est.cells[lv] - truth[lv])
    assert est is not None
    group = np.array(DOMAIN.grouping("H", "hhinst"))[None, None, :, None]
    group = np.broadcast_to(group, (1, 2, 6, 3)).reshape(-1)
    covered = count = 0
    for lv in range(1, tree.n_levels):
        err = np.stack(errors[lv])  # (reps, nodes, cells)
        stated = est.cell_variance(lv)  # (nodes, cells)
        rms = est.stderr(lv) ** 2
        for g in range(3):
            cells = group == g
            ratio = (err[:, :, cells] ** 2).mean() / stated[:, cells].mean()
            assert abs(ratio - 1) < 0.15, (lv, g, ratio)
            if g == 0:  # power: the node's one figure is far off for household cells
                assert abs((err[:, :, cells] ** 2).mean() / rms.mean() - 1) > 0.5
        covered += int((np.abs(err) <= 1.6448536269514722 * np.sqrt(stated)[None]).sum())
        count += err.size
    assert 0.85 <= covered / count <= 0.95, covered / count


@pytest.mark.parametrize("name", ["hhinst", "two recoded axes", "nested"])
def test_blocks_on_threads_give_the_same_estimate_bit_for_bit(name: str) -> None:
    """``threads`` solves the independent blocks at once and adds them in block order: the
    estimates, variances and subtree variances are those of one thread exactly, with an
    exact total among the inputs too."""
    rng = np.random.default_rng(7)
    tree = tb.random_tree(rng, (3, 2), only_child=True)
    inputs = tb.random_inputs(rng, tree, STRATEGIES[name], per_node=True)
    exact = {1: {0: 60.0}}
    one = blue(tree, DOMAIN, inputs, exact_totals=exact)
    for threads in (2, 3, 16):
        many = blue(tree, DOMAIN, inputs, exact_totals=exact, threads=threads)
        assert len(many.blocks) > 2
        for level in range(tree.n_levels):
            np.testing.assert_array_equal(many.cells[level], one.cells[level])
            for query in ("detailed", "total", "hhinst"):
                np.testing.assert_array_equal(
                    many.answer_variance(level, query), one.answer_variance(level, query)
                )
            for field in ("block_scale", "block_subtree_scale"):
                ours, theirs = getattr(many, field)[level], getattr(one, field)[level]
                assert len(ours) == len(many.blocks)
                for a, b in zip(ours, theirs, strict=True):
                    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_mean_terms_match_the_explicit_kronecker_products(name: str) -> None:
    """``Block.mean_terms`` (per-axis factors, for the million-cell DHC domain where ``B`` of
    the detailed query has a row per cell) equals the means read off the explicit ``B`` and
    ``d`` of ``answer_terms``, for every block of the strategy and every asked query."""
    queries = [Query.parse(q) for level in STRATEGIES[name] for q in level]
    checked = 0
    for block in blocks_of(DOMAIN, queries):
        for asked in ASKED:
            factors = Query.parse(asked).factors(DOMAIN)
            b, d = block.answer_terms(factors)
            got = block.mean_terms(factors)
            np.testing.assert_allclose(got.gram, b.T @ b / b.shape[0], rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(
                got.gram_abs, np.abs(b).T @ np.abs(b) / b.shape[0], rtol=1e-12, atol=1e-15
            )
            assert got.d_mean == pytest.approx(d.mean(), rel=1e-12, abs=1e-15)
            assert got.d_abs_mean == pytest.approx(np.abs(d).mean(), rel=1e-12, abs=1e-15)
            checked += 1
    assert checked >= 2 * len(ASKED)


def test_trace_with_the_formed_gram_equals_the_one_by_axes() -> None:
    """``mean_variance``'s traces: with the gram formed (``MeanTerms.formed``, small k) and
    contracted axis by axis (large k), both the dense ``trace(kron(parts) @ Phi)``, per
    shared matrix type; a k above ``FORMED_GRAM_BYTES`` forms none."""
    from topdown.blue.blocks import FORMED_GRAM_BYTES, MeanTerms
    from topdown.blue.shared_matrices import SharedMatrices
    from topdown.blue.variance_terms import _trace, _trace_formed

    rng = np.random.default_rng(2)
    parts = tuple(rng.normal(size=(g, g)) for g in (3, 1, 2))
    terms = MeanTerms(parts, tuple(np.abs(p) for p in parts), 1.0, 1.0)
    assert terms.formed is not None and terms.formed is terms.formed  # built once
    phi = rng.normal(size=(5, 6, 6))
    dense = np.kron(np.kron(parts[0], parts[1]), parts[2])
    want = np.array([np.trace(dense @ m) for m in phi])
    index = np.array([4, 0, 0, 2])
    for trace in (_trace(parts, phi), _trace_formed(terms.formed[0], phi)):
        np.testing.assert_allclose(trace, want, rtol=1e-12)
    shared = SharedMatrices(phi, index)
    np.testing.assert_allclose(_trace_formed(terms.formed[0], shared), want[index], rtol=1e-12)
    np.testing.assert_allclose(_trace(parts, shared), want[index], rtol=1e-12)
    g = int(np.sqrt(FORMED_GRAM_BYTES / 8)) + 1  # k x k floats just above the bytes
    big = (np.eye(g),)
    assert MeanTerms(big, big, 1.0, 1.0).formed is None
