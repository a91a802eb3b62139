"""The lean BLUE (topdown.blue.estimate): the leaf level kept as its subtree estimates and made final on
demand, the passes fed the raw leaf measurements where that is exact, and the release's counts
unchanged by it."""

from __future__ import annotations

import numpy as np
import pytest
from test_blue import DOMAIN, random_tree

from topdown.blue.estimate import blue, blue_inputs
from topdown.estimation.estimate import estimate
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Tree
from topdown.strategy import Query

STRATEGIES = {
    "detailed only": ["detailed"],
    "detailed plus total": ["detailed", "total"],
    "detailed, total and a marginal": ["detailed", "total", "A x B"],
}


def noisy_inputs(rng: np.random.Generator, tree: Tree, names: list[str]) -> EstimatorInputs:
    """Integer answers: consistent Poisson counts (many zeros) plus rounded normal noise of a
    per-level variance, as the measurement step gives."""
    leaves = rng.poisson(1.5, (tree.levels[-1].size, DOMAIN.size))
    anc = tree.ancestors(tree.n_levels - 1)
    levels = []
    for level in range(tree.n_levels):
        truth = np.zeros((tree.levels[level].size, DOMAIN.size), dtype=np.int64)
        np.add.at(truth, anc[level], leaves)
        var = float(rng.uniform(0.5, 6.0))
        row = []
        for name in names:
            q = Query.parse(name)
            exact = q.answer(truth, DOMAIN)
            noise = np.round(rng.normal(0.0, np.sqrt(var), exact.shape)).astype(np.int64)
            row.append(QueryEstimate(level, q, (exact + noise).astype(np.int16), np.array([var])))
        levels.append(tuple(row))
    return EstimatorInputs(tuple(levels))


def final_inputs(inputs: EstimatorInputs, tree: Tree, fed: EstimatorInputs) -> EstimatorInputs:
    """What the passes were fed before the lean BLUE: every level's final BLUE (of the cells,
    the totals and each measured marginal), with the weights ``fed`` gives them."""
    est = blue(tree, DOMAIN, inputs)
    levels = []
    for level, lv in enumerate(inputs.levels):
        names = ["detailed", "total"] + [
            m.query.name for m in lv if m.query.name not in ("detailed", "total")
        ]
        cells = est.cells_at(level)
        levels.append(
            tuple(
                QueryEstimate(
                    level,
                    Query.parse(n),
                    Query.parse(n).answer(cells, DOMAIN).astype(float),
                    _variance(fed, level, n),
                )
                for n in names
            )
        )
    return EstimatorInputs(tuple(levels))


def _variance(fed: EstimatorInputs, level: int, name: str) -> np.ndarray:
    got = fed.get(level, name)
    assert got is not None
    return got.variance


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", range(4))
def test_release_counts_are_those_of_the_final_blue_inputs(name: str, seed: int) -> None:
    """On random trees (only children in every other seed) the passes give the same integer (up to rounding ties)
    counts from the lean inputs (the raw leaf measurements under a detailed-only strategy) as
    from every level's final BLUE."""
    rng = np.random.default_rng(100 + seed)
    tree = random_tree(rng, (3, 3), only_child=seed % 2 == 0)
    inputs = noisy_inputs(rng, tree, STRATEGIES[name])
    lean = blue_inputs(inputs, blue(tree, DOMAIN, inputs))
    before = final_inputs(inputs, tree, lean)
    first_pass: dict[int, tuple[str, ...]] = {}
    counts, _ = estimate(tree, DOMAIN, lean, first_pass=first_pass)
    reference, _ = estimate(tree, DOMAIN, before, first_pass=first_pass)
    for level in range(tree.n_levels):
        # the same L2 answers in exact arithmetic (the final BLUE shifts each child by the
        # same vector per family); a rounding tie (equal fractional parts) may break either
        # way on round-off, so a unit either way
        assert np.abs(counts[level].astype(int) - reference[level]).max() <= 1
        mismatched = (counts[level] != reference[level]).mean()
        assert mismatched <= 0.1, mismatched


def test_one_group_keeps_the_leaves_raw_and_makes_them_final_on_demand() -> None:
    rng = np.random.default_rng(7)
    tree = random_tree(rng, (3, 3), only_child=True)
    inputs = noisy_inputs(rng, tree, ["detailed"])
    est = blue(tree, DOMAIN, inputs)
    last = tree.n_levels - 1
    raw = inputs.at(last)[0].noisy
    assert est.leaf_shift is not None and est.holds_subtree(last)
    assert est.fitted[last] is raw  # held without a copy
    fed = blue_inputs(inputs, est).get(last, "detailed")
    assert fed is not None and np.shares_memory(fed.noisy, raw) and fed.noisy.dtype == np.int16
    cells = est.cells_at(last)
    # consistent with the (final) parents, and equal by blocks of nodes and by totals
    sums = np.zeros_like(est.cells_at(last - 1))
    np.add.at(sums, tree.levels[last].parent, cells)
    np.testing.assert_allclose(sums, est.cells_at(last - 1), atol=1e-9)
    np.testing.assert_allclose(est.cells_at(last, slice(2, 5)), cells[2:5])
    np.testing.assert_allclose(est.totals_at(last), cells.sum(axis=1), atol=1e-9)
    total = blue_inputs(inputs, est).get(last, "total")
    assert total is not None
    np.testing.assert_array_equal(total.noisy[:, 0], raw.sum(axis=1))


def test_several_groups_hold_the_final_blue() -> None:
    rng = np.random.default_rng(8)
    tree = random_tree(rng, (2, 3), only_child=False)
    inputs = noisy_inputs(rng, tree, ["detailed", "total"])
    est = blue(tree, DOMAIN, inputs)
    assert est.leaf_shift is None and len(est.groups) == 2
    last = tree.n_levels - 1
    fed = blue_inputs(inputs, est).get(last, "detailed")
    assert fed is not None and fed.noisy.dtype == float
    np.testing.assert_allclose(fed.noisy, est.cells_at(last))
