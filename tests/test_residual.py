"""Residual measurements (synth._residual, synth.graphical.linear): the contrast basis, the
exact sensitivity against brute force over neighbouring data sets, the shares, the noise (a
statistical test with a power check), the fit of a known model from noise-free residuals, and
``Adaptive(measure="residual")``'s ledger."""

from __future__ import annotations

import functools
import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms.discrete import discrete_gaussian_variance
from mechanisms.ledger import Ledger
from synth import Adaptive, SynthError
from synth._estimate import Measurement, histogram
from synth._residual import (
    _speed_scale,
    basis,
    component_rows,
    component_share,
    contrast_basis,
    measure_residual,
    residual_rho,
)
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
        worst = max(
            worst,
            sum(Fraction(int(a) ** 2) / (2 * s) for a, s in zip(answers, sigma2, strict=True)),
        )
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
    for c in subsets:
        _, rho = measure_residual(codes, sizes, r, [c], sigma2, name="c", ledger=Ledger(), rng=None)
        assert rho == shares[c] / (2 * sigma2)
    # all of them: the marginal's cost
    ledger = Ledger()
    _, rho = measure_residual(codes, sizes, r, subsets, sigma2, name="all", ledger=ledger, rng=None)
    assert rho == 1 / (2 * sigma2) == ledger.total().rho
    assert ledger.entries[0].sensitivity == 1


@pytest.mark.parametrize(
    ("sizes", "components"),
    [((3, 4), [(0, 1)]), ((3, 4), [(1,), (0, 1)]), ((2, 3, 2), [(0, 2), (0, 1, 2), ()])],
)
def test_measure_residual_rho_is_the_brute_force_maximum(sizes, components):
    """The cost measure_residual records, against every neighbouring data set (one record
    added in each cell) with the variances it used (before the sampler's rounding up)."""
    rng = np.random.default_rng(6)
    codes = np.stack([rng.integers(0, s, 30) for s in sizes], axis=1)
    attrs = tuple(range(len(sizes)))
    sigma2 = Fraction(5, 7)
    m, rho = measure_residual(
        codes, sizes, attrs, components, sigma2, name="m", ledger=Ledger(), rng=rng
    )
    q = _kron_rows(m.factors)
    measured = np.isfinite(m.variance).reshape(-1)
    assert measured.sum() == sum(math.prod(sizes[a] - 1 for a in c) for c in components)
    base = histogram(codes, sizes, attrs).reshape(-1).astype(object)
    worst = Fraction(0)
    for cell in itertools.product(*(range(s) for s in sizes)):
        neighbour = np.vstack([codes, np.array(cell)[None, :]])
        moved = histogram(neighbour, sizes, attrs).reshape(-1).astype(object) - base
        loss = Fraction(0)
        for row, on in zip(q, measured, strict=True):
            if on:
                loss += Fraction(int(row.dot(moved)) ** 2, 2 * sum(int(v) ** 2 for v in row))
        worst = max(worst, loss / sigma2)
    assert rho == worst


@pytest.mark.parametrize("tau2", [Fraction(3, 2), Fraction(10**8, 3)])
def test_the_noise_is_discrete_gaussian_with_the_stated_variance_per_answer(tau2):
    """alpha: |z| > 5.3 has probability about 1e-7 under the stated variances; power: the same
    statistic with the variances 30% off in scale (x 1.69 or / 1.69) is far outside. The small
    tau2 is drawn scaled (answers times m, noise at sigma^2 m^2, divided by m), the large not."""
    sizes = (20, 12)
    codes = np.random.default_rng(1).integers(0, 12, (300, 2))
    rng = np.random.default_rng(2)
    truth = None
    ratios = []
    for _ in range(40):
        ledger = Ledger()
        m, rho = measure_residual(
            codes, sizes, (0, 1), [(0, 1)], tau2, name="r", ledger=ledger, rng=rng
        )
        on = np.isfinite(m.variance)
        assert on.sum() == 19 * 11
        if truth is None:
            truth = m.query(histogram(codes, sizes, (0, 1)))
            norms = _row_norms(m.factors)[on]
            scales = np.array([_speed_scale(tau2 * int(v)) for v in norms])
            assert (scales > 1).any() == (tau2 < 10**6)
            expected = [
                discrete_gaussian_variance(tau2 * int(v) * k * k) / (k * k)
                for v, k in zip(norms, scales, strict=True)
            ]
            np.testing.assert_allclose(m.variance[on], expected, rtol=1e-12)
            rho_expected = Fraction(19, 20) * Fraction(11, 12) / (2 * tau2)
            assert ledger.entries[0].budget.rho == rho == rho_expected
        noise = (m.noisy - truth)[on]
        scaled = noise * scales
        assert np.all(np.abs(scaled - np.rint(scaled)) < 1e-6)  # integer noise on the 1/m grid
        ratios.append(noise * noise / m.variance[on])
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
    for c in cliques:  # the components of 2 or more attributes: not the 1-ways' again
        components = [s for k in range(2, len(c) + 1) for s in itertools.combinations(c, k)]
        factors = tuple(basis(sizes[a]) for a in c)
        on = np.zeros([sizes[a] for a in c], dtype=bool)
        for s in components:
            on[component_rows(s, c, sizes)] = True
        probe = LinearMeasurement(c, factors, np.zeros(on.shape), np.ones(on.shape))
        answers = np.where(on, probe.query(total * _marginal(joint, c)), 0.0)
        # variance ||q_k||^2: unit variance per orthonormal coordinate, as measure_residual
        variance = np.where(on, _row_norms(factors) * 1.0, np.inf)
        measurements.append(LinearMeasurement(c, factors, answers, variance))
    model = fit_model(measurements, sizes, iters=2000)
    assert model.total == pytest.approx(total)
    for c in [*cliques, (0, 3), (1, 3)]:
        np.testing.assert_allclose(model.marginal(c), total * _marginal(joint, c), atol=0.05)


def test_identity_factors_fit_as_the_marginal_measurement_does():
    """A linear measurement with identity factors is a marginal measurement: same fit."""
    sizes = (3, 2, 4)
    rng = np.random.default_rng(4)
    tables = {
        c: rng.integers(20, 200, [sizes[a] for a in c]).astype(float) for c in [(0, 1), (1, 2)]
    }
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
    with pytest.raises(SynthError, match=r"variance \(shape \(2,\)\) must be > 0"):
        LinearMeasurement((0,), f, np.zeros(2), np.zeros(2))
    with pytest.raises(SynthError, match=r"not measured, not all"):
        LinearMeasurement((0,), f, np.zeros(2), np.full(2, np.inf))
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
    known = {(a,) for a in range(d)}  # the 1-ways hold every 1-way component
    rounds = len(gen.measured) - d
    assert rounds >= 2
    position = {col: j for j, col in enumerate(gen.columns)}
    entries = [
        e for e in gen.ledger.entries if e.query.startswith("round ") and "measure" in e.query
    ]
    assert len(entries) == rounds
    for step, entry in enumerate(entries, start=1):
        chosen = tuple(position[col] for col in gen.measured[d + step - 1])
        listed = re.search(r"residual components (.*?): answer", entry.note).group(1)
        measured = {
            tuple(int(a) for a in part.split(", ") if a)
            for part in re.findall(r"\{([^}]*)\}", listed)
        }
        every = {s for k in range(1, len(chosen) + 1) for s in itertools.combinations(chosen, k)}
        new = every - known
        # only the components not yet known; all of them (a re-measurement) when none is new
        assert measured == (new or every), (step, chosen, measured)
        known |= measured
    with pytest.raises(SynthError, match=r"measure \('whole'\) must be one of marginal, residual"):
        Adaptive(1, measure="whole")
