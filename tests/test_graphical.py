"""The graphical-model estimator (synth.graphical): inference against a brute-force joint,
the fit against known models, a closed form and the stacked weighted least squares of
synth/_estimate.py, consistency as a property, the size cap, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth._domains import SynthError
from synth._estimate import Measurement, weighted_least_squares
from synth.graphical import (
    GraphicalModel,
    ModelSizeError,
    build_junction_tree,
    estimate_total,
    fit_model,
    largest_clique_cells,
    too_large,
)
from synth.graphical.factor import expand


def _joint(sizes, potentials):
    """The normalised joint of a model given as {sorted clique: log-potential} (brute force)."""
    log = np.zeros(sizes)
    everything = tuple(range(len(sizes)))
    for clique, values in potentials.items():
        log = log + expand(values, clique, everything)
    p = np.exp(log - log.max())
    return p / p.sum()


def _marginal(joint, attrs):
    """The joint's table over ``attrs`` in the given order."""
    keep = sorted(attrs)
    table = joint.sum(axis=tuple(a for a in range(joint.ndim) if a not in keep))
    return np.transpose(table, [keep.index(a) for a in attrs])


def _random_potentials(rng, sizes, cliques, scale=1.0):
    return {c: rng.normal(0, scale, [sizes[a] for a in c]) for c in cliques}


SIZES = (3, 2, 4, 2, 3)
# a cycle (0, 1, 2) closed by pairs, a chain to 3 and a clique with 4: triangulation needed
CLIQUES = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4)]


def test_inference_matches_the_brute_force_joint_on_every_marginal():
    rng = np.random.default_rng(1)
    potentials = _random_potentials(rng, SIZES, CLIQUES)
    tree = build_junction_tree(CLIQUES, SIZES)
    model = GraphicalModel(SIZES, tree, potentials, 500.0)
    joint = _joint(SIZES, potentials)
    for k in (1, 2, 3, 4):
        for attrs in itertools.combinations(range(len(SIZES)), k):
            np.testing.assert_allclose(
                model.probability(attrs), _marginal(joint, attrs), atol=1e-12
            )
    # any axis order, and counts are the total times the probabilities
    np.testing.assert_allclose(model.marginal((4, 0)), 500.0 * _marginal(joint, (4, 0)))
    assert model.probability(()).item() == pytest.approx(1.0)


def test_noise_free_marginals_of_a_known_model_are_reproduced():
    rng = np.random.default_rng(2)
    potentials = _random_potentials(rng, SIZES, CLIQUES, scale=0.7)
    joint = _joint(SIZES, potentials)
    total = 10_000.0
    measurements = [Measurement(c, total * _marginal(joint, c), 1.0) for c in CLIQUES]
    model = fit_model(measurements, SIZES, iters=1000)
    assert model.total == pytest.approx(total)
    for c in CLIQUES:  # measured: reproduced
        np.testing.assert_allclose(model.marginal(c), total * _marginal(joint, c), atol=0.05)
    # not measured: the known model is the fit (the max-entropy model of its own marginals)
    for attrs in [(0, 3), (1, 4), (0, 2, 4)]:
        np.testing.assert_allclose(model.marginal(attrs), total * _marginal(joint, attrs), atol=0.5)


def _chain(seed: int, sizes: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
    """Noisy tables AB (variance 4) and BC (variance 9) and the closed-form optimum of their
    weighted least squares: the B marginal is the mean of the two tables' B margins with
    weights 1 / (v |free cells|), and each table moves evenly along its free axis to meet it.
    Returns y1, y2, x1, x2, b_star."""
    rng = np.random.default_rng(seed)
    a, b, c = sizes
    y1 = rng.uniform(200, 400, (a, b))
    y2 = rng.uniform(300, 500, (b, c))
    w1, w2 = 1 / (4.0 * a), 1 / (9.0 * c)
    b_star = (w1 * y1.sum(axis=0) + w2 * y2.sum(axis=1)) / (w1 + w2)
    x1 = y1 + (b_star - y1.sum(axis=0))[None, :] / a
    x2 = y2 + (b_star - y2.sum(axis=1))[:, None] / c
    return y1, y2, x1, x2, b_star


def test_a_chain_of_two_cliques_fits_the_closed_form():
    """AB (variance v1) and BC (variance v2): the B marginal is the weighted mean of the two
    tables' B margins with weights 1 / (v |free cells|), each table moves evenly along its
    free axis to meet it, and the joint is AB * BC / B."""
    sizes = (3, 4, 2)
    y1, y2, x1, x2, b_star = _chain(3, sizes)
    assert (x1 > 0).all() and (x2 > 0).all()  # interior: the closed form is the optimum
    measurements = [Measurement((0, 1), y1, 4.0), Measurement((1, 2), y2, 9.0)]
    model = fit_model(measurements, sizes, total=float(b_star.sum()), iters=2000)
    np.testing.assert_allclose(model.marginal((0, 1)), x1, atol=1e-3)
    np.testing.assert_allclose(model.marginal((1, 2)), x2, atol=1e-3)
    joint = x1[:, :, None] * x2[None, :, :] / b_star[None, :, None]
    np.testing.assert_allclose(model.marginal((0, 1, 2)), joint, atol=1e-3)


def test_the_logged_loss_falls_at_every_step_to_the_closed_form_optimum(caplog):
    """The debug log carries the objective after each kept step (what the convergence study
    of issue 25 reads): backtracking keeps a step only when the loss falls, and on the chain
    AB, BC of the test above the last value is the closed-form optimum's loss."""
    sizes = (3, 4, 2)
    y1, y2, x1, x2, b_star = _chain(4, sizes)
    optimum = 0.5 * np.sum((x1 - y1) ** 2) / 4.0 + 0.5 * np.sum((x2 - y2) ** 2) / 9.0
    measurements = [Measurement((0, 1), y1, 4.0), Measurement((1, 2), y2, 9.0)]
    with caplog.at_level("DEBUG", logger="synth.graphical.estimation"):
        fit_model(measurements, sizes, total=float(b_star.sum()), iters=2000)
    losses = [
        r.args[1] for r in caplog.records if r.getMessage().startswith("fit_model: iteration")
    ]
    assert len(losses) > 10
    assert all(later <= earlier for earlier, later in zip(losses[:-1], losses[1:], strict=True))
    assert losses[0] > optimum + 1.0  # it started away from the optimum
    assert losses[-1] == pytest.approx(optimum, rel=1e-6, abs=1e-6)


def test_agrees_with_the_stacked_weighted_least_squares_on_a_small_domain():
    """Same objective: on decomposable cliques every consistent set of tables is a
    distribution's marginals, so the two optima coincide once the model's total is the least
    squares' (which leaves the total free). Tolerance: 0.05 counts (of ~50-300) per cell, the
    QP solver's and mirror descent's convergence."""
    rng = np.random.default_rng(4)
    sizes = (3, 3, 2, 2)
    cliques = [(0, 1), (1, 2), (1, 3), (2,)]
    truth = {c: rng.uniform(50, 300, [sizes[a] for a in c]) for c in cliques}
    joint = _joint(sizes, {c: np.log(t) for c, t in truth.items()})
    measurements = [
        Measurement(c, 5000 * _marginal(joint, c) + rng.normal(0, 3, truth[c].shape), v)
        for c, v in zip(cliques, [9.0, 4.0, 16.0, 1.0], strict=True)
    ]
    flat, _ = weighted_least_squares(measurements, sizes)
    tables, start = [], 0
    for m in measurements:
        tables.append(flat[start : start + m.noisy.size].reshape(m.noisy.shape))
        start += m.noisy.size
    assert min(t.min() for t in tables) > 1  # interior optimum
    model = fit_model(measurements, sizes, total=float(tables[0].sum()), iters=3000)
    for m, table in zip(measurements, tables, strict=True):
        np.testing.assert_allclose(model.marginal(m.attrs), table, atol=0.05)


@st.composite
def _problems(draw):
    d = draw(st.integers(2, 5))
    sizes = tuple(draw(st.lists(st.integers(1, 3), min_size=d, max_size=d)))
    subsets = [c for k in (1, 2, 3) for c in itertools.combinations(range(d), k)]
    cliques = draw(st.lists(st.sampled_from(subsets), min_size=1, max_size=5, unique=True))
    seed = draw(st.integers(0, 2**31))
    return sizes, cliques, seed


@settings(max_examples=30, deadline=None)
@given(_problems())
def test_fitted_marginals_agree_on_every_shared_sub_marginal(problem):
    sizes, cliques, seed = problem
    rng = np.random.default_rng(seed)
    measurements = [
        Measurement(c, rng.normal(20, 15, [sizes[a] for a in c]), float(rng.uniform(0.5, 4)))
        for c in cliques
    ]
    model = fit_model(measurements, sizes, iters=15)
    tables = {c: model.marginal(c) for c in cliques}
    for c1, c2 in itertools.combinations(cliques, 2):
        shared = sorted(set(c1) & set(c2))
        left = _marginal_of(tables[c1], c1, shared)
        right = _marginal_of(tables[c2], c2, shared)
        np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9 * model.total)
    for table in tables.values():
        assert table.min() >= 0
        assert table.sum() == pytest.approx(model.total)


def _marginal_of(table, attrs, keep):
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    return table.sum(axis=axes) if axes else table


def test_warm_start_keeps_the_fit_and_total_is_estimated_from_the_noisy_sums():
    rng = np.random.default_rng(5)
    sizes = (2, 3, 2)
    y1 = rng.uniform(50, 100, (2, 3))
    measurements = [Measurement((0, 1), y1, 1.0), Measurement((2,), np.array([80.0, 90.0]), 4.0)]
    # sums 6 cells x var 1 -> var 6; 2 cells x var 4 -> var 8
    expected = (y1.sum() / 6 + 170 / 8) / (1 / 6 + 1 / 8)
    assert estimate_total(measurements) == pytest.approx(expected)
    first = fit_model(measurements, sizes, iters=200)
    again = fit_model(measurements, sizes, iters=0, warm_start=first)
    np.testing.assert_allclose(again.marginal((0, 1)), first.marginal((0, 1)))


def test_the_size_cap_names_the_candidates_that_break_it():
    sizes = (10, 10, 10, 10)
    cliques = [(0, 1), (1, 2)]
    assert largest_clique_cells(cliques, sizes) == 100
    # (0, 2) closes the triangle 0-1-2 (1000 cells); (2, 3) stays a chain; (0, 1) is inside
    assert too_large(cliques, [(0, 2), (2, 3), (0, 1)], sizes, 500) == [(0, 2)]
    with pytest.raises(ModelSizeError, match=r"max_cells \(500\) is smaller than the largest"):
        fit_model(
            [Measurement((0, 1, 2), np.ones((10, 10, 10)), 1.0)], sizes, iters=1, max_cells=500
        )


def test_bad_input_is_refused_with_the_argument_value_and_rule():
    ok = Measurement((0,), np.array([1.0, 2.0]), 1.0)
    with pytest.raises(SynthError, match=r"has shape \(2,\); the domain gives \(3,\)"):
        fit_model([ok], (3,))
    with pytest.raises(SynthError, match=r"variance \(0.0\); it must be > 0"):
        fit_model([Measurement((0,), np.array([1.0, 2.0]), 0.0)], (2,))
    with pytest.raises(SynthError, match=r"distinct positions in \[0, 1\)"):
        fit_model([Measurement((0, 0), np.ones((2, 2)), 1.0)], (2,))
    with pytest.raises(SynthError, match=r"total \(-1.0\) must be a finite number > 0"):
        fit_model([ok], (2,), total=-1.0)
    with pytest.raises(SynthError, match=r"iters \(-1\) must be an integer >= 0"):
        fit_model([ok], (2,), iters=-1)
    with pytest.raises(SynthError, match=r"measurements must not be empty"):
        estimate_total([])
    model = fit_model([ok], (2,), iters=5)
    with pytest.raises(SynthError, match=r"attrs \(\[0, 0\]\) must be distinct"):
        model.marginal((0, 0))


def test_crosstab_with_margins_uses_the_model_and_stays_consistent():
    import pandas as pd

    from synth import NoisyCrosstab

    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"x": rng.integers(0, 3, 400), "y": rng.integers(0, 4, 400)})
    domains = {"x": [0, 1, 2], "y": [0, 1, 2, 3, 4]}
    ct = NoisyCrosstab(2, domains=domains, margins=True, seed=1).fit(frame)
    assert ct.estimator == "graphical"
    assert ct.table is not None and ct.table.dtype.kind == "i" and ct.table.min() >= 0
    assert ct.margin_tables[0].tolist() == ct.table.sum(axis=1).tolist()
    assert ct.margin_tables[1].tolist() == ct.table.sum(axis=0).tolist()
    assert NoisyCrosstab(2, domains=domains, seed=1).estimator == "least_squares"
    with pytest.raises(SynthError, match=r"estimator \('qp'\) must be one of \['auto', "):
        NoisyCrosstab(2, estimator="qp")
