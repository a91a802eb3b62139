"""Residual measurements (synth._residual, synth.graphical.linear): the contrast basis, the
exact sensitivity against brute force over neighbouring data sets, the shares, the noise (a
statistical test with a power check), the fit of a known model from noise-free residuals, and
``Adaptive(measure="residual")``'s ledger."""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms.discrete import discrete_gaussian_variance
from mechanisms.ledger import Ledger
from synth import Adaptive, SynthError
from synth._estimate import Measurement, histogram
from synth._residual import component_share, contrast_basis, measure_residual, residual_rho
from synth.graphical import LinearMeasurement, fit_model
from synth.graphical.factor import expand


@pytest.mark.parametrize("n", range(1, 14))
def test_contrast_basis_is_orthogonal_integer_and_spans_the_contrasts(n):
    basis = contrast_basis(n)
    assert basis.shape == (n - 1, n) and basis.dtype == np.int64
    gram = basis @ basis.T
    assert np.all(gram == np.diag(np.diag(gram)))  # orthogonal rows
    assert np.all(basis.sum(axis=1) == 0)  # orthogonal to the all-ones vector
    assert np.linalg.matrix_rank(basis) == n - 1
    distinct = len(set(np.diag(gram).tolist()))
    assert distinct <= 2 * max(1, math.ceil(math.log2(n)))  # few sampler calls


def _row_norms(factors):
    """Each Kronecker row's squared norm, shaped as the answers."""
    return functools.reduce(np.multiply.outer, [(f * f).sum(axis=1) for f in factors])


def _kron_rows(factors):
    """The full Kronecker matrix (rows x cells) of ``factors``, as Python ints."""
    matrix = np.ones((1, 1), dtype=object)
    for f in factors:
        matrix = np.kron(matrix, f.astype(object))
    return matrix


@pytest.mark.parametrize("sizes", [(2,), (5,), (2, 3), (3, 4, 2), (2, 2, 2), (1 + 6, 3)])
def test_rho_is_the_brute_force_maximum_over_neighbouring_data_sets(sizes):
    """Add one record to a data set in every possible cell: the answers move by that cell's
    column of Q; the zCDP cost is the largest sum of squared moves over 2 sigma_k^2."""
    rng = np.random.default_rng(0)
    codes = np.stack([rng.integers(0, s, 40) for s in sizes], axis=1)
    attrs = tuple(range(len(sizes)))
    factors = [contrast_basis(s) for s in sizes]
    q = _kron_rows(factors)
    tau2 = Fraction(7, 3)
    sigma2 = [tau2 * sum(int(v) ** 2 for v in row) for row in q]
    base = histogram(codes, sizes, attrs).reshape(-1).astype(object)
    worst = Fraction(0)
    for cell in itertools.product(*(range(s) for s in sizes)):
        neighbour = np.vstack([codes, np.array(cell)[None, :]])
        moved = histogram(neighbour, sizes, attrs).reshape(-1).astype(object) - base
        answers = q.dot(moved)
        worst = max(worst, sum(Fraction(int(a) ** 2) / (2 * s) for a, s in zip(answers, sigma2)))
    assert residual_rho(factors, tau2) == worst
    # the orthonormal column norms: prod (n - 1) / n
    assert worst == math.prod(Fraction(s - 1, s) for s in sizes) / (2 * tau2)


def test_component_shares_sum_to_one_and_measure_a_marginal_for_its_budget():
    sizes = (3, 2, 5)
    r = (0, 1, 2)
    subsets = [c for k in range(4) for c in itertools.combinations(r, k)]
    shares = {c: component_share(c, r, sizes) for c in subsets}
    assert sum(shares.values()) == 1
    assert shares[()] == Fraction(1, 30) and shares[(0, 2)] == Fraction(2, 3) * Fraction(4, 5) / 2
    # measuring components within r at per-cell sigma^2 costs each share of 1 / (2 sigma^2)
    codes = np.zeros((5, 3), dtype=np.int64)
    sigma2 = Fraction(11, 4)
    for c in subsets[1:]:
        outside = math.prod(sizes[a] for a in r if a not in c)
        _, rho = measure_residual(
            codes, sizes, c, sigma2 * outside, name=f"{c}", ledger=Ledger(), rng=None
        )
        assert rho == shares[c] / (2 * sigma2)


def test_the_noise_is_discrete_gaussian_with_the_stated_variance_per_answer():
    """alpha: |z| > 5.3 has probability about 1e-7 under the stated variances; power: the same
    statistic with the variances 30% off in scale (x 1.69 or / 1.69) is far outside."""
    sizes = (20, 12)
    codes = np.random.default_rng(1).integers(0, 12, (300, 2))
    tau2 = Fraction(3, 2)
    rng = np.random.default_rng(2)
    truth = None
    ratios, stated = [], []
    for draw in range(40):
        ledger = Ledger()
        m, rho = measure_residual(codes, sizes, (0, 1), tau2, name="r", ledger=ledger, rng=rng)
        if truth is None:
            truth = m.query(histogram(codes, sizes, (0, 1)))
            norms = _row_norms(m.factors)
            expected = [discrete_gaussian_variance(tau2 * int(v)) for v in norms.reshape(-1)]
            np.testing.assert_allclose(m.variance.reshape(-1), expected, rtol=1e-12)
            assert ledger.entries[0].budget.rho == rho == Fraction(19, 20) * Fraction(11, 12) / 3
        noise = m.noisy - truth
        assert np.all(noise == np.rint(noise))  # integer answers, integer noise
        ratios.append((noise * noise / m.variance).reshape(-1))
        stated.append(m.variance.reshape(-1))
    squares = np.concatenate(ratios)
    n = squares.size

    def z(scale: float) -> float:
        # E[X^2 / v] = 1; Var = E[X^4] / v^2 - 1, about 2 for a Gaussian (bounded here by 3)
        values = squares / scale
        return float((values.mean() - 1) / math.sqrt(values.var() / n))

    assert abs(z(1.0)) < 5.3
    assert abs(z(1.69)) > 5.3 and abs(z(1 / 1.69)) > 5.3


def _joint(sizes, potentials):
    log = np.zeros(sizes)
    everything = tuple(range(len(sizes)))
    for clique, values in potentials.items():
        log = log + expand(values, clique, everything)
    p = np.exp(log - log.max())
    return p / p.sum()


def _marginal(joint, attrs):
    return joint.sum(axis=tuple(a for a in range(joint.ndim) if a not in attrs))


def test_noise_free_residuals_reproduce_a_known_model():
    """Every clique measured only through its residual components (each component once, none
    as a whole marginal) and the 1-ways for the total: the fit is the known model."""
    sizes = (3, 2, 4, 3)
    cliques = [(0, 1, 2), (2, 3)]
    rng = np.random.default_rng(3)
    potentials = {c: rng.normal(0, 0.8, [sizes[a] for a in c]) for c in cliques}
    joint = _joint(sizes, potentials)
    total = 5000.0
    measurements: list[Measurement | LinearMeasurement] = [
        Measurement((a,), total * _marginal(joint, (a,)), 1.0) for a in range(len(sizes))
    ]
    components = sorted(
        {s for c in cliques for k in (2, 3) for s in itertools.combinations(c, k)}
    )
    for s in components:
        factors = tuple(contrast_basis(sizes[a]) for a in s)
        exact = LinearMeasurement(s, factors, np.zeros([f.shape[0] for f in factors]),
                                  np.ones([f.shape[0] for f in factors]))
        answers = exact.query(total * _marginal(joint, s))
        # variance ||q_k||^2: unit variance per orthonormal coordinate, as measure_residual
        measurements.append(LinearMeasurement(s, factors, answers, _row_norms(factors) * 1.0))
    model = fit_model(measurements, sizes, iters=2000)
    assert model.total == pytest.approx(total)
    for c in [*cliques, (0, 3), (1, 3)]:
        np.testing.assert_allclose(model.marginal(c), total * _marginal(joint, c), atol=0.05)


def test_identity_factors_fit_as_the_marginal_measurement_does():
    """A linear measurement with identity factors is a marginal measurement: same fit."""
    sizes = (3, 2, 4)
    rng = np.random.default_rng(4)
    tables = {c: rng.integers(20, 200, [sizes[a] for a in c]).astype(float) for c in [(0, 1), (1, 2)]}
    plain = [Measurement(c, t, 2.0) for c, t in tables.items()]
    eye = [
        LinearMeasurement(c, tuple(np.eye(sizes[a]) for a in c), t, np.full(t.shape, 2.0))
        for c, t in tables.items()
    ]
    first = fit_model(plain, sizes, iters=300)
    second = fit_model([plain[0], eye[1]], sizes, iters=300, total=first.total)
    np.testing.assert_allclose(second.marginal((0, 1, 2)), first.marginal((0, 1, 2)), atol=1e-3)


def test_bad_linear_measurements_are_refused():
    f = (contrast_basis(3),)
    with pytest.raises(SynthError, match=r"attrs \(\(1, 0\)\) must be sorted distinct"):
        LinearMeasurement((1, 0), f + f, np.zeros((2, 2)), np.ones((2, 2)))
    with pytest.raises(SynthError, match=r"noisy has shape \(3,\); the factors' rows give \(2,\)"):
        LinearMeasurement((0,), f, np.zeros(3), np.ones(3))
    with pytest.raises(SynthError, match=r"variance .* must be finite and > 0"):
        LinearMeasurement((0,), f, np.zeros(2), np.zeros(2))
    bad = LinearMeasurement((0,), f, np.zeros(2), np.ones(2))
    with pytest.raises(SynthError, match=r"factor has 3 columns; the domain gives 4"):
        fit_model([Measurement((0,), np.ones(4), 1.0), bad], (4,))
    with pytest.raises(SynthError, match=r"must include a marginal"):
        fit_model([bad], (3,))
    with pytest.raises(SynthError, match=r"n \(0\) must be an integer >= 1"):
        contrast_basis(0)


def test_adaptive_residual_spends_rho_exactly_and_measures_only_what_is_not_known():
    rng = np.random.default_rng(5)
    n = 1500
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 3, n))
    c = rng.integers(0, 2, n)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "d": (a + c) % 2})
    gen = Adaptive(1, delta=1e-6, seed=3, iters=15, final_iters=30, measure="residual")
    gen.fit(frame)
    assert gen.ledger.total().rho == gen.rho  # exact: the components' shares add up
    d = len(gen.columns)
    known = {(col,) for col in gen.columns}  # the 1-ways hold every 1-way component
    rounds = len(gen.measured) - d
    assert rounds >= 2
    for step in range(1, rounds + 1):
        chosen = gen.measured[d + step - 1]
        prefix = f"round {step}: measure {' x '.join(chosen)} (residual "
        measured = {
            tuple(e.query[len(prefix) : -1].split(" x "))
            for e in gen.ledger.entries
            if e.query.startswith(prefix)
        }
        every = {s for k in range(1, len(chosen) + 1) for s in itertools.combinations(chosen, k)}
        new = every - known
        # only the components not yet known; all of them (a re-measurement) when none is new
        assert measured == (new or every), (step, chosen, measured)
        known |= measured
    with pytest.raises(SynthError, match=r"measure \('whole'\) must be one of marginal, residual"):
        Adaptive(1, measure="whole")
