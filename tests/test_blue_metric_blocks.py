"""The passes' metric under ``estimator="blue"`` for recoded strategies
(``topdown.blue.metric.block_metric_weights``): ``sum_q w_q Q_q'Q_q`` over the fed queries
against the dense precision of each node's subtree estimate (``test_blue``'s reference), on the
recoded domain of ``test_blue_recodes``.

Where the subtree precision is such a sum (every level measures the same queries with the same
variances and every parent has as many children: then ``Lambda_parent = Pi + n Lambda_child``
stays in the span of the ``Q'Q``) the metric must equal it; on irregular trees with per-node
variances it cannot, and the weights must be the closest in the module's relative sense, which
is checked here against a dense non-negative least squares built from the cell-space matrices.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_blue as tb
import test_blue_recodes as tr
from scipy.optimize import nnls

from topdown.blue.blocks import blocks_of
from topdown.blue.estimate import blue, blue_inputs
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.tree import Level, Tree
from topdown.strategy import Query

DOMAIN = tr.DOMAIN

#: The same queries at every level: the subtree precision is then within the fed queries' span
STRATEGIES = {
    "nested recode": ["detailed", "H:gq", "hhinst"],
    "two recoded axes": ["detailed", "hhinst x C:c2", "C:c2"],
    "hhinst-like": ["detailed", "total", "hhinst", "A x hhinst", "A x C"],
}


@pytest.fixture(autouse=True)
def _domain(monkeypatch) -> None:
    """``test_blue``'s dense reference reads its module's DOMAIN: the recoded one."""
    monkeypatch.setattr(tb, "DOMAIN", DOMAIN)


def regular_tree(children: tuple[int, ...]) -> Tree:
    """Root, then levels where every parent has ``children[l]`` children (1: only children)."""
    levels = [Level(0, None, np.array(["root"], dtype=object), np.array([-1]))]
    for number, k in enumerate(children, start=1):
        parent = np.repeat(np.arange(levels[-1].size), k)
        labels = np.array([f"L{number}_{i}" for i in range(len(parent))], dtype=object)
        levels.append(Level(number, f"L{number}", labels, parent))
    return Tree(tuple(levels))


def metric(fed: EstimatorInputs, level: int, node: int) -> np.ndarray:
    """The passes' quadratic form at one node: ``sum_q Q'Q / fed variance`` (cells x cells)."""
    out = np.zeros((DOMAIN.size, DOMAIN.size))
    for m in fed.at(level):
        var = np.broadcast_to(m.variance, (fed.at(level)[0].noisy.shape[0],))[node]
        if np.isfinite(var) and var > 0:
            q = m.query.matrix(DOMAIN).toarray()
            out += q.T @ q / var
    return out


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("children", [(2, 3), (1, 2, 2)])
def test_fed_weights_make_the_passes_metric_the_subtree_precision(
    name: str, children: tuple[int, ...]
) -> None:
    """Every node of every level: the metric is the dense subtree precision (it was each
    answer's own variance before, which counts a parent's information once per fed query:
    off by tens of percent above the leaves)."""
    rng = np.random.default_rng(len(children))
    tree = regular_tree(children)
    inputs = tb.random_inputs(rng, tree, [STRATEGIES[name]] * tree.n_levels, per_node=False)
    fed = blue_inputs(inputs, blue(tree, DOMAIN, inputs))
    for level in range(tree.n_levels):
        for node in range(tree.levels[level].size):
            dense = tb._subtree_precision(tree, inputs, level, node)
            np.testing.assert_allclose(
                metric(fed, level, node), dense, rtol=1e-7, atol=1e-9 * np.abs(dense).max()
            )


def test_leaves_are_fed_their_own_measurements_weights() -> None:
    """A worked case: a leaf's subtree is itself, so each fed query's variance is the
    variance it was measured with (the detailed cells, the total and ``A x hhinst``)."""
    rng = np.random.default_rng(3)
    tree = tb.random_tree(rng, (2,), only_child=False)
    inputs = tb.random_inputs(rng, tree, tr.STRATEGIES["hhinst"][:2], per_node=False)
    est = blue(tree, DOMAIN, inputs)
    fed = blue_inputs(inputs, est)
    assert [m.query.name for m in fed.at(1)] == ["detailed", "total", "A x hhinst"]
    for m in fed.at(1):
        raw = inputs.get(1, m.query.name)
        assert raw is not None
        np.testing.assert_allclose(m.variance, np.broadcast_to(raw.variance, m.variance.shape))
        np.testing.assert_allclose(m.noisy, m.query.answer(est.cells[1], DOMAIN))


def test_an_exact_root_total_is_left_out_of_the_metric() -> None:
    """An invariant's total at the root: its subtree covariance is 0 along the node total, so
    the equations leave that direction out (the passes hold it as a constraint, and the total
    is fed with weight 0). Off it, conditioning on the total leaves the precision the one
    without the invariant, restricted: the metric must be that, exactly, here."""
    rng = np.random.default_rng(5)
    tree = regular_tree((2, 2))
    inputs = tb.random_inputs(rng, tree, [STRATEGIES["hhinst-like"]] * 3, per_node=False)
    exact = {0: {0: 123.0}}
    fed = blue_inputs(inputs, blue(tree, DOMAIN, inputs, exact_totals=exact), exact)
    root_total = fed.get(0, "total")
    assert root_total is not None and np.isinf(root_total.variance[0])
    off = np.eye(DOMAIN.size) - np.full((DOMAIN.size, DOMAIN.size), 1.0 / DOMAIN.size)
    dense = tb._subtree_precision(tree, inputs, 0, 0)
    np.testing.assert_allclose(
        off @ metric(fed, 0, 0) @ off, off @ dense @ off, atol=1e-9 * np.abs(dense).max()
    )


def _block_projectors(queries: list[str]) -> list[tuple[np.ndarray, int]]:
    """Each block's cell-space projector and its number of copies (dense, per axis the
    contrast projector or ``U U'``, Kronecker)."""
    blocks = blocks_of(DOMAIN, [Query.parse(q) for q in queries])
    out = []
    for block in blocks:
        p = np.ones((1, 1))
        for i, split in enumerate(block.splits):
            u = split.basis()
            p = np.kron(p, split.contrast() if i in block.contrast else u @ u.T)
        out.append((p, block.copies))
    return out


def _criterion(
    fed_grams: list[np.ndarray], cov: np.ndarray, target: np.ndarray, blocks
) -> tuple[np.ndarray, np.ndarray, float]:
    """The relative criterion as a quadratic in w: sum over blocks of ``|C^1/2 (sum_q w_q
    G_q - Lambda) C^1/2|_F^2`` on one copy, i.e. ``tr(C R C R) / copies`` in cell space."""
    n = len(fed_grams)
    h_mat, h_vec, const = np.zeros((n, n)), np.zeros(n), 0.0
    for p, copies in blocks:
        c = p @ cov @ p
        cg = [c @ g for g in fed_grams]
        cl = c @ target
        for a in range(n):
            h_vec[a] += np.trace(cg[a] @ cl) / copies
            for b in range(n):
                h_mat[a, b] += np.trace(cg[a] @ cg[b]) / copies
        const += np.trace(cl @ cl) / copies
    return h_mat, h_vec, const


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_on_irregular_trees_the_weights_are_the_closest(name: str, seed: int) -> None:
    """Irregular trees (only children, 1-3 children) and per-node variances: the subtree
    precision is out of reach, and the weights must reach the dense optimum of the relative
    criterion (to 1e-6 of its value). The old weights (each answer's own variance) must
    be measurably worse there (power: the check can fail)."""
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 2), only_child=True)
    queries = STRATEGIES[name]
    inputs = tb.random_inputs(rng, tree, [queries] * 3, per_node=True)
    est = blue(tree, DOMAIN, inputs)
    fed = blue_inputs(inputs, est)
    blocks = _block_projectors(queries)
    gap = 0.0
    for level in range(tree.n_levels - 1):  # the leaves are exact (the test above)
        for node in range(tree.levels[level].size):
            target = tb._subtree_precision(tree, inputs, level, node)
            cov = np.linalg.inv(target)
            grams = []
            for m in fed.at(level):
                q = m.query.matrix(DOMAIN).toarray()
                grams.append(q.T @ q)
            h_mat, h_vec, const = _criterion(grams, cov, target, blocks)
            root = np.linalg.cholesky(h_mat + 1e-12 * np.trace(h_mat) * np.eye(len(grams)))
            best_w, _ = nnls(root.T, np.linalg.solve(root, h_vec))
            best = best_w @ h_mat @ best_w - 2 * h_vec @ best_w + const
            got_w = np.array([1.0 / m.variance[node] for m in fed.at(level)])
            got = got_w @ h_mat @ got_w - 2 * h_vec @ got_w + const
            assert got <= best + 1e-6 * const
            old_w = np.array(
                [1.0 / est.variance(level, m.query, subtree=True)[node] for m in fed.at(level)]
            )
            old = old_w @ h_mat @ old_w - 2 * h_vec @ old_w + const
            gap = max(gap, old - got)
    assert gap > 0.1
