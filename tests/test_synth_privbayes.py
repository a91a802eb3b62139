"""Tests for the Bayesian-network helpers and PrivBayes."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chisquare

from mechanisms.rng import make_rng
from synth import PrivBayes, SynthError
from synth._bayesnet import (
    greedy_network,
    markov_blanket,
    mutual_information,
    r_score,
    sample_network,
    to_graph,
)
from synth.metrics import marginal_tvds, tvd
from synth.privbayes import mi_sensitivity

ALPHA = 1e-6


def test_scores_by_hand():
    copy = np.array([[50, 0], [0, 50]])
    independent = np.array([[25, 25], [25, 25]])
    assert mutual_information(copy) == pytest.approx(math.log(2))
    assert mutual_information(independent) == pytest.approx(0.0)
    assert r_score(copy) == pytest.approx(0.5)  # |1/2 - 1/4| * 2 + |0 - 1/4| * 2, halved
    assert r_score(independent) == pytest.approx(0.0)
    # a 3-d table (X, P1, P2): X = P1 xor P2 with uniform parents carries log 2 about them
    xor = np.zeros((2, 2, 2))
    for a in (0, 1):
        for b in (0, 1):
            xor[a ^ b, a, b] = 1
    assert mutual_information(xor) == pytest.approx(math.log(2))


def test_mi_sensitivity_by_hand():
    # n = 2, binary: (1/2) ln 2 + (1/2) ln 2 = ln 2
    assert mi_sensitivity(2, True) == pytest.approx(math.log(2))
    # n = 3, general: (2/3) ln 2 + (2/3) ln 2 = (4/3) ln 2
    assert mi_sensitivity(3, False) == pytest.approx(4 / 3 * math.log(2))
    # rounded up, never down
    assert mi_sensitivity(1000, True) > math.log(1000) / 1000 + 0.999 * math.log(1000 / 999)
    with pytest.raises(SynthError, match=r"n \(1\) must be at least 2"):
        mi_sensitivity(1, True)


def test_markov_blanket_of_a_small_network():
    # A -> C <- B, C -> D, E -> D
    network = [(0, ()), (1, ()), (2, (0, 1)), (4, ()), (3, (2, 4))]
    graph = to_graph(network)
    assert markov_blanket(graph, 0) == {2, 1}  # child C and its other parent B
    assert markov_blanket(graph, 2) == {0, 1, 3, 4}  # parents, child D, D's other parent E
    assert markov_blanket(graph, 3) == {2, 4}
    assert markov_blanket(graph, 4) == {3, 2}


def test_greedy_network_with_argmax_follows_the_scores():
    # scores favour the chain 0 -> 2 -> 1
    table = {(2, (0,)): 3.0, (1, (0,)): 1.0, (1, (2,)): 2.0}

    def score(x, parents):
        return table.get((x, parents), 0.0)

    network = greedy_network([2, 2, 2], 1, score, lambda s: int(np.argmax(s)))
    assert network == [(0, ()), (2, (0,)), (1, (2,))]
    # max_cells excludes every parent set: parents shrink to the empty set
    network = greedy_network([2, 2, 2], 1, score, lambda s: int(np.argmax(s)), max_cells=2)
    assert [p for _, p in network] == [(), (), ()]  # even though 2 cells > max_cells 1


def test_sample_network_deterministic_and_statistical():
    rng = make_rng(7)
    # node 0 ~ (0.2, 0.8); node 1 copies node 0
    network = [(0, ()), (1, (0,))]
    conditionals = {0: np.array([2.0, 8.0]), 1: np.array([[5.0, 0.0], [0.0, 7.0]])}
    codes = sample_network(network, conditionals, 20_000, rng)
    assert (codes[:, 0] == codes[:, 1]).all()
    counts = np.bincount(codes[:, 0], minlength=2)
    # chi-square goodness of fit at alpha 1e-6; power: 0.25 vs 0.2 gives p < 1e-100
    assert chisquare(counts, [4000, 16000]).pvalue > ALPHA
    assert chisquare(counts, [5000, 15000]).pvalue < ALPHA


def _chain(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.85, a % 2, 1 - a % 2)
    c = np.where(rng.random(n) < 0.9, b, rng.integers(0, 2, n))
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": rng.integers(0, 2, n)})


DOMAINS = {"a": [0, 1, 2], "b": [0, 1], "c": [0, 1], "d": [0, 1]}


def test_privbayes_large_epsilon_close_to_truth_and_ledger():
    data = _chain()
    model = PrivBayes(2000, k=2, domains=DOMAINS, seed=3).fit(data)
    synthetic = model.sample(3000)
    assert list(synthetic.columns) == ["a", "b", "c", "d"]
    assert tvd(data, synthetic) < 0.03
    two_way = marginal_tvds(data, synthetic, 2)
    assert two_way[("a", "b")] < 0.04 and two_way[("b", "c")] < 0.04
    # 3 structure choices + d - k = 2 tables; total exactly epsilon
    assert len(model.ledger) == 5 and model.ledger.total().value == 2000
    # sample(3000): a size the caller chose is disclosed (issue 30 A1)
    assert [d.name for d in model.ledger.disclosures] == [
        "seeded noise",
        "number of records",
        "output size",
    ]
    assert model.graph.number_of_nodes() == 4
    assert all(len(parents) <= 2 for _, parents in model.network)


def test_privbayes_bad_input():
    with pytest.raises(SynthError, match=r"k \(-1\) must be an integer >= 0"):
        PrivBayes(1, k=-1)
    with pytest.raises(SynthError, match=r"score \('bic'\) must be 'mi' or 'r'"):
        PrivBayes(1, score="bic")
    with pytest.raises(SynthError, match=r"structure_share \(1\) must be in \(0, 1\)"):
        PrivBayes(1, structure_share=1)
    with pytest.raises(SynthError, match=r"the generator is not fitted"):
        PrivBayes(1).sample(3)


def test_privbayes_r_score_and_gaussian_run():
    data = _chain(800)
    model = PrivBayes(
        Fraction(5), k=1, domains=DOMAINS, seed=4, score="r", mechanism="discrete_gaussian"
    ).fit(data)
    assert model.ledger.total().kind == "zcdp"
    assert model.ledger.total().value == Fraction(25, 2)
    assert len(model.sample(10)) == 10
