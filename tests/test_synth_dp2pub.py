"""Tests for DP2-Pub's steps (randomized-response matrices, simplex projection, invariant
PRAM, Markov-blanket clusters, entropy coefficients) and the whole pipeline."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chisquare

from mechanisms.randomized_response import transition_matrix
from mechanisms.rng import make_rng
from synth import DP2Pub, SynthError
from synth._pram import (
    compound_matrix,
    estimate_distribution,
    grr_inverse,
    post_randomization_matrix,
    post_randomize,
    project_simplex,
)
from synth.dp2pub import cluster_attributes, entropy, entropy_coefficients, grr_pram_baseline
from synth.metrics import marginal_tvds, tvd

ALPHA = 1e-6
LN2, LN3 = math.log(2), math.log(3)


def test_rr_matrix_and_its_inverse_by_hand():
    # k = 3, e^eps = 2: p = 1/2, q = 1/4, inverse (I - J/4) / (1/4) = 4I - J
    inverse = grr_inverse(3, LN2)
    assert inverse == pytest.approx(np.array([[3, -1, -1], [-1, 3, -1], [-1, -1, 3]]))
    assert transition_matrix(3, LN2) @ inverse == pytest.approx(np.eye(3))
    # compound of two binary attributes at e^eps = 3 (p = 3/4): the Kronecker product
    q2 = np.array([[0.75, 0.25], [0.25, 0.75]])
    assert compound_matrix([(2, LN3), (2, LN3)]) == pytest.approx(np.kron(q2, q2))


def test_project_simplex_by_hand_not_shift_and_renormalise():
    assert project_simplex(np.array([0.5, 0.5])) == pytest.approx([0.5, 0.5])
    assert project_simplex(np.array([1.2, -0.2])) == pytest.approx([1.0, 0.0])
    # theta = 0.1: [0.6, 0.4, 0]; shifting by the minimum and renormalising would give
    # [0.5625, 0.4375, 0]
    assert project_simplex(np.array([0.7, 0.5, -0.2])) == pytest.approx([0.6, 0.4, 0.0])


def test_estimate_distribution_inverts_exact_expected_counts():
    pi = np.array([0.5, 0.3, 0.2])
    lam = pi @ transition_matrix(3, LN2)  # 0.25 + 0.25 pi
    assert lam == pytest.approx([0.375, 0.325, 0.3])
    assert estimate_distribution(lam * 1000, [(3, LN2)]) == pytest.approx(pi)
    # a compound of two components, inverted axis by axis
    joint = np.array([[0.4, 0.1], [0.2, 0.3]])
    lam2 = (joint.reshape(-1) @ compound_matrix([(2, LN3), (2, LN2)])).reshape(2, 2)
    assert estimate_distribution(lam2 * 500, [(2, LN3), (2, LN2)]) == pytest.approx(joint)


def test_post_randomization_matrix_keeps_pi_invariant():
    pi = np.array([0.6, 0.3, 0.1])
    q = transition_matrix(3, LN2)
    q_post = post_randomization_matrix(q, pi)
    assert q_post.sum(axis=1) == pytest.approx(np.ones(3))
    assert (pi @ q) @ q_post == pytest.approx(pi)
    # a value with probability 0 under pi is never released
    q_post = post_randomization_matrix(transition_matrix(2, LN3), np.array([1.0, 0.0]))
    assert q_post == pytest.approx(np.array([[1.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("factors", [[(4, LN3)], [(2, LN3), (2, LN2)]])
def test_post_randomize_follows_q_prime(factors):
    # reports all equal to j = 1: released values follow row 1 of Q' (closed form for one
    # component, Kronecker columns for two); chi-square at alpha 1e-6
    pi = np.array([0.1, 0.2, 0.3, 0.4])
    rng = make_rng(11)
    released = post_randomize(np.ones(40_000, dtype=np.int64), pi, factors, rng)
    row = post_randomization_matrix(compound_matrix(factors), pi)[1]
    counts = np.bincount(released, minlength=4)
    assert chisquare(counts, row * 40_000).pvalue > ALPHA
    # power: pi itself (no conditioning on the report) is rejected
    assert chisquare(counts, pi * 40_000).pvalue < ALPHA


def test_entropy_and_coefficients_by_hand():
    assert entropy(np.array([1, 1, 1, 1])) == pytest.approx(math.log(4))
    assert entropy(np.array([5, 0])) == 0.0
    # H = (1, 3): 1/4 + 3/8 = 5/8 and 1/4 + 1/8 = 3/8 (lower entropy, more budget)
    assert entropy_coefficients([1.0, 3.0]) == [Fraction(5, 8), Fraction(3, 8)]
    assert entropy_coefficients([2.0]) == [Fraction(1)]
    assert entropy_coefficients([0.0, 0.0, 0.0]) == [
        Fraction(3333, 10**4),
        Fraction(3333, 10**4),
        Fraction(3334, 10**4),
    ]
    assert sum(entropy_coefficients([0.3, 1.7, 2.2, 0.01])) == 1
    with pytest.raises(SynthError, match=r"cluster_entropies \(\[\]\) must not be empty"):
        entropy_coefficients([])


def test_clusters_from_markov_blankets_by_hand():
    # A -> C <- B, C -> D <- E (A=0, B=1, C=2, D=3, E=4), added in order 0, 1, 2, 4, 3
    network = [(0, ()), (1, ()), (2, (0, 1)), (4, ()), (3, (2, 4))]
    assert cluster_attributes(network, [2] * 5, 8) == [[0, 1, 2], [4, 3]]
    assert cluster_attributes(network, [2] * 5, 4) == [[0, 1], [2, 4], [3]]
    assert cluster_attributes(network, [2] * 5, 1) == [[0], [1], [2], [4], [3]]


def _data(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = np.where(rng.random(n) < 0.9, a, 1 - a)
    c = rng.integers(0, 3, n)
    return pd.DataFrame({"a": a, "b": b, "c": c})


DOMAINS = {"a": [0, 1], "b": [0, 1], "c": [0, 1, 2]}


def test_dp2pub_large_epsilon_close_to_truth():
    data = _data()
    model = DP2Pub(300, k=1, domains=DOMAINS, seed=2)
    out = model.fit_transform(data)
    assert list(out.columns) == ["a", "b", "c"] and len(out) == len(data)
    assert tvd(data, out) < 0.03
    assert marginal_tvds(data, out, 2)[("a", "b")] < 0.03
    # the dependent pair a, b ends up in one cluster
    assert any({"a", "b"} <= set(cluster) for cluster in model.clusters)
    assert sum(model.coefficients) == 1
    entry = model.ledger.entries[0]
    assert len(model.ledger) == 1 and entry.nodes == 2 and model.ledger.total().value == 300


def test_dp2pub_beats_the_floor_on_a_dependent_pair():
    # at a moderate budget the joint cluster keeps the (a, b) dependence that per-attribute
    # post-randomization loses
    data = _data(6000, seed=1)
    out = DP2Pub(12, k=1, domains=DOMAINS, seed=3).fit_transform(data)
    floor = grr_pram_baseline(data, 12, domains=DOMAINS, seed=3)
    assert marginal_tvds(data, out, 2)[("a", "b")] < marginal_tvds(data, floor, 2)[("a", "b")]


def test_dp2pub_bad_input():
    with pytest.raises(SynthError, match=r"randomizer \('kron'\) must be 'joint' or 'attribute'"):
        DP2Pub(1, randomizer="kron")
    with pytest.raises(SynthError, match=r"structure_fraction \(1.5\) must be in \(0, 1\)"):
        DP2Pub(1, structure_fraction=1.5)
    with pytest.raises(SynthError, match=r"epsilon \(-1\) must be > 0"):
        DP2Pub(-1)


def test_dp2pub_never_spends_more_than_epsilon(monkeypatch):
    """At a budget far below the rounding grid (1e-9 over several clusters) each person's
    reports still spend at most epsilon in each group: the cluster budgets are never rounded
    up to the grid (they were raised to 1e-6 each, 1,000 times the ledger's total)."""
    import synth.dp2pub as dp2pub

    spent: list[Fraction] = []
    real = dp2pub.randomized_response

    def recording(values, domain, epsilon, rng):
        spent.append(Fraction(epsilon))
        return real(values, domain, epsilon, rng)

    monkeypatch.setattr(dp2pub, "randomized_response", recording)
    eps = Fraction(1, 10**9)
    model = DP2Pub(eps, k=1, domains=DOMAINS, seed=3, max_cluster_cells=2)
    model.fit_transform(_data(600))
    d = len(DOMAINS)
    structure, publication = spent[:d], spent[d:]
    assert len(model.clusters) > 1 and len(publication) >= len(model.clusters)
    assert sum(structure) <= eps and sum(publication) <= eps
    assert model.ledger.total().value == eps
