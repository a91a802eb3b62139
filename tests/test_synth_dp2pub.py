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
    maximum_likelihood_distribution,
    post_randomization_matrix,
    post_randomize,
    project_simplex,
)
from synth.dp2pub import (
    cluster_attributes,
    entropy,
    entropy_coefficients,
    grr_pram_baseline,
    split_variances,
)
from synth.metrics import marginal_tvds, tvd, tvd_per_attribute

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


def test_maximum_likelihood_by_hand_differs_from_projection():
    """k = 3, e^eps = 2 (p = 1/2, q = 1/4), report frequencies (0.6, 0.4, 0): the inverse
    4 f - 1 = (1.4, 0.6, -1) is off the simplex. Projection: theta = 1/2, (0.9, 0.1, 0).
    Likelihood: pi_3 = 0 and 0.6 / (1 + pi_1) = 0.4 / (2 - pi_1), so (0.8, 0.2, 0); the
    gradient of pi_3 (2/3) is below that of the others (1), so the boundary is optimal."""
    counts = np.array([60, 40, 0])
    assert estimate_distribution(counts, [(3, LN2)]) == pytest.approx([0.9, 0.1, 0.0])
    mle = estimate_distribution(counts, [(3, LN2)], "mle")
    assert mle == pytest.approx([0.8, 0.2, 0.0], abs=1e-6)
    assert maximum_likelihood_distribution(counts, [(3, LN2)]) == pytest.approx(mle)
    # binary, e^eps = 3 (p = 3/4), every report 0: inverse (1.5, -0.5), both give (1, 0)
    mle1 = estimate_distribution(np.array([10, 0]), [(2, LN3)], "mle")
    assert mle1 == pytest.approx([1, 0], abs=1e-6)
    # inside the simplex the likelihood's maximum is the plain inverse (a compound of two)
    joint = np.array([[0.4, 0.1], [0.2, 0.3]])
    lam2 = (joint.reshape(-1) @ compound_matrix([(2, LN3), (2, LN2)])).reshape(2, 2)
    mle2 = estimate_distribution(lam2 * 500, [(2, LN3), (2, LN2)], "mle")
    assert mle2 == pytest.approx(joint, abs=1e-6)
    with pytest.raises(ValueError, match=r"estimator \('em'\) must be one of"):
        estimate_distribution(counts, [(3, LN2)], "em")


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
    # the noisy total (the output size, issue 30 A1) and the reports: epsilon in all
    total, entry = model.ledger.entries
    assert total.query == "total" and total.budget.value == 15
    assert len(model.ledger) == 2 and entry.nodes == 2 and model.ledger.total().value == 300


def test_dp2pub_beats_the_floor_on_a_dependent_pair():
    # at a moderate budget the joint cluster keeps the (a, b) dependence that per-attribute
    # post-randomization loses
    data = _data(6000, seed=1)
    out = DP2Pub(12, k=1, domains=DOMAINS, seed=3).fit_transform(data)
    floor, ledger = grr_pram_baseline(data, 12, domains=DOMAINS, seed=3)
    assert marginal_tvds(data, out, 2)[("a", "b")] < marginal_tvds(data, floor, 2)[("a", "b")]
    # the floor's ledger: the noisy total (the output size, issue 30 A1) and one
    # randomized-response entry, the whole budget; the true count is not disclosed
    assert ledger.total().value == 12 and len(ledger) == 2
    assert [e.query for e in ledger.entries] == ["total", "generalized randomized response"]
    assert [d.name for d in ledger.disclosures] == ["seeded noise"]


def test_dp2pub_people_split_large_epsilon_close_to_truth():
    """split="users": each person of the publication group reports one cluster with the
    whole budget; the clusters nobody reported are drawn from pi. At a large budget the
    marginals (and the dependent pair's joint, one cluster) land close to the truth."""
    data = _data(6000, seed=4)
    model = DP2Pub(300, k=1, domains=DOMAINS, seed=5, split="users")
    out = model.fit_transform(data)
    assert tvd(data, out) < 0.03
    assert any({"a", "b"} <= set(cluster) for cluster in model.clusters)
    assert marginal_tvds(data, out, 2)[("a", "b")] < 0.03
    assert model.ledger.total().value == 300
    assert "report one cluster each" in model.ledger.entries[1].note


def test_dp2pub_bad_input():
    with pytest.raises(SynthError, match=r"randomizer \('kron'\) must be 'joint' or 'attribute'"):
        DP2Pub(1, randomizer="kron")
    with pytest.raises(SynthError, match=r"structure_fraction \(1.5\) must be in \(0, 1\)"):
        DP2Pub(1, structure_fraction=1.5)
    with pytest.raises(SynthError, match=r"epsilon \(-1\) must be > 0"):
        DP2Pub(-1)
    with pytest.raises(
        SynthError, match=r"split \('rows'\) must be one of \('auto', 'budget', 'users'\)"
    ):
        DP2Pub(1, split="rows")
    with pytest.raises(SynthError, match=r"estimator \('em'\) must be one of"):
        DP2Pub(1, estimator="em")
    for bad in ("nan", float("inf"), 0, 1e30, 1e-9):
        with pytest.raises(SynthError, match=r"epsilon \(.*\) must be"):
            DP2Pub(bad)


def test_split_variances_by_hand_and_the_automatic_choice():
    """Two binary clusters with coefficients 1/2 at e^eps = 3. Budget split: e^(eps/2) = sqrt 3,
    p - q = (sqrt 3 - 1) / (sqrt 3 + 1) = 2 - sqrt 3, each cluster (1/2) / (7 - 4 sqrt 3),
    total 7 + 4 sqrt 3 (about 13.93). People split: p - q = 1/2 for half the people, each
    cluster (1/2) / (1/2 x 1/4) = 4, total 8: the people split is chosen. At e^eps = 10^6
    the gaps are about 1 either way and halving the people doubles the variance: budget."""
    budget, users = split_variances(Fraction(LN3), [2, 2], [Fraction(1, 2)] * 2)
    assert budget == pytest.approx(7 + 4 * math.sqrt(3)) and users == pytest.approx(8)
    budget, users = split_variances(Fraction(6 * math.log(10)), [2, 2], [Fraction(1, 2)] * 2)
    assert budget == pytest.approx(1.0, rel=1e-2) and users == pytest.approx(2.0, rel=1e-5)
    # one cluster: the two splits are the same thing
    assert split_variances(Fraction(2), [4], [Fraction(1)]) == pytest.approx(
        split_variances(Fraction(2), [4], [Fraction(1)])[::-1]
    )
    small = DP2Pub(1, k=1, domains=DOMAINS, seed=1, max_cluster_cells=2)
    small.fit_transform(_data(600))
    large = DP2Pub(300, k=1, domains=DOMAINS, seed=1, max_cluster_cells=2)
    large.fit_transform(_data(600))
    assert (small.split_used, large.split_used) == ("users", "budget")


def test_dp2pub_people_split_asks_each_person_once(monkeypatch):
    """split="users": every cluster's reports are made with the whole epsilon, and the
    publication group's people are divided among the clusters (each asked once)."""
    import synth.dp2pub as dp2pub

    calls: list[tuple[int, Fraction]] = []
    real = dp2pub.randomized_response

    def recording(values, domain, epsilon, rng):
        calls.append((len(values), Fraction(epsilon)))
        return real(values, domain, epsilon, rng)

    monkeypatch.setattr(dp2pub, "randomized_response", recording)
    model = DP2Pub(2, k=1, domains=DOMAINS, seed=3, max_cluster_cells=2, split="users")
    # rows=600: the caller's size, so the reports get the whole epsilon (no noisy total)
    model.fit_transform(_data(600), rows=600)
    d = len(DOMAINS)
    structure, publication = calls[:d], calls[d:]
    n_structure = structure[0][0]
    assert all(n == n_structure and e == Fraction(2, d) for n, e in structure)
    assert len(publication) == len(model.clusters) == 3
    assert all(e == 2 for _, e in publication)
    assert sum(n for n, _ in publication) == 600 - n_structure


def test_dp2pub_never_spends_more_than_epsilon(monkeypatch):
    """At the smallest budget accepted (1e-6, three clusters of about 3.3e-7 each, below the
    rounding grid of 1e-6) each person's reports still spend at most epsilon in each group:
    the cluster budgets are never rounded up to the grid (they were raised to 1e-6 each)."""
    import synth.dp2pub as dp2pub

    spent: list[Fraction] = []
    real = dp2pub.randomized_response

    def recording(values, domain, epsilon, rng):
        spent.append(Fraction(epsilon))
        return real(values, domain, epsilon, rng)

    monkeypatch.setattr(dp2pub, "randomized_response", recording)
    eps = Fraction(1, 10**6)
    model = DP2Pub(eps, k=1, domains=DOMAINS, seed=3, max_cluster_cells=2, split="budget")
    model.fit_transform(_data(600), rows=600)  # a size given: no noisy total, every report
    d = len(DOMAINS)
    structure, publication = spent[:d], spent[d:]
    assert len(model.clusters) > 1 and len(publication) >= len(model.clusters)
    assert sum(structure) <= eps and sum(publication) <= eps
    assert model.ledger.total().value == eps


@pytest.mark.parametrize("split", ["budget", "users"])
def test_dp2pub_joint_clusters_unbiased_at_a_moderate_budget(split):
    """A cluster reported jointly has one factor of Q over the compound domain, and its
    counts must be inverted as one flat axis: inverting them on the (2, 2) shape with the
    4-cell q pulled every estimate towards uniform (a mean of 0.15 came out near 0.4 at
    epsilon 1 on NLTCS). Skewed columns at epsilon 3: every 1-way TVD small."""
    rng = np.random.default_rng(7)
    n = 20_000
    a = (rng.random(n) < 0.15).astype(int)
    b = np.where(rng.random(n) < 0.9, a, 1 - a)
    c = (rng.random(n) < 0.3).astype(int)
    data = pd.DataFrame({"a": a, "b": b, "c": c})
    domains = {"a": [0, 1], "b": [0, 1], "c": [0, 1]}
    model = DP2Pub(3, k=1, domains=domains, seed=8, split=split, max_cluster_cells=4)
    out = model.fit_transform(data)
    assert any(len(cluster) == 2 for cluster in model.clusters)
    assert tvd_per_attribute(data, out).max() < 0.04
