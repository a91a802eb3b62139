"""Tests for synth.metrics, synth._domains and the shared estimator of the generators."""

from __future__ import annotations

import logging
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from mechanisms.ledger import Ledger
from mechanisms.rng import make_rng
from synth._domains import SynthError, decode, encode, resolve_domains
from synth._estimate import (
    Measurement,
    consistent_tables,
    largest_remainder,
    marginalize,
    measure_marginals,
    split_budget,
)
from synth.metrics import auc, marginal_tvd, marginal_tvds, tstr_accuracy, tvd, tvd_per_attribute
from topdown.errors import DataError


def test_tvd_by_hand():
    a = pd.DataFrame({"x": [0, 0, 1, 1], "y": ["a", "a", "a", "b"]})
    b = pd.DataFrame({"x": [0, 1, 1, 1], "y": ["a", "a", "a", "a"]})
    # x: |1/2 - 1/4| + |1/2 - 3/4| = 1/2 -> 1/4; y: |3/4 - 1| + |1/4 - 0| = 1/2 -> 1/4
    per = tvd_per_attribute(a, b)
    assert per.to_dict() == pytest.approx({"x": 0.25, "y": 0.25})
    assert tvd(a, b) == pytest.approx(0.25)
    assert tvd(a, a) == 0.0
    # a declared domain with a value absent from both frames changes nothing
    assert tvd(a, b, domains={"x": [0, 1, 2]}) == pytest.approx(0.25)
    with pytest.raises(SynthError, match=r"column 'x' has values outside domains\['x'\]"):
        tvd(a, b, domains={"x": [0]})


def test_marginal_tvd_by_hand():
    a = pd.DataFrame({"x": [0, 1], "y": [0, 1]})
    b = pd.DataFrame({"x": [0, 1], "y": [1, 0]})
    # one-way marginals identical, the 2-way ones disjoint
    assert tvd(a, b) == 0.0
    assert marginal_tvds(a, b, 2).tolist() == [1.0]
    table = marginal_tvd(a, b, k=(1, 2))
    assert table.loc[1, "mean"] == 0.0 and table.loc[2, "max"] == 1.0
    assert table.loc[2, "count"] == 1
    with pytest.raises(SynthError, match=r"k \(3\) must be at most the number of columns \(2\)"):
        marginal_tvds(a, b, 3)


def test_three_way_tvd_by_hand_a_pairwise_model_misses_xor():
    """The k-way TVD is half the L1 distance of the normalised k-way tables, averaged over
    all k-subsets. z = x xor y with x, y independent: every pair is independent, so any model
    built from pairs (a tree, MST) can at best give the product distribution, uniform on the
    8 cells, while the truth is uniform on 4 of them: 1/2 (4 x 1/8 + 4 x 1/8) = 1/2 in the
    only 3-way marginal, though every 1- and 2-way marginal agrees exactly."""
    truth = pd.DataFrame({"x": [0, 0, 1, 1], "y": [0, 1, 0, 1], "z": [0, 1, 1, 0]})
    product = pd.DataFrame(
        [(x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)], columns=["x", "y", "z"]
    )
    table = marginal_tvd(truth, product, k=(1, 2, 3))
    assert table["mean"].tolist() == [0.0, 0.0, 0.5] and table["count"].tolist() == [3, 3, 1]
    # four columns: three of the four 3-way subsets hold w, each off by 1/4 (one row moved)
    a = truth.assign(w=[0, 0, 0, 0])
    b = truth.assign(w=[0, 0, 0, 1])  # (x, y, w) = (1, 1, 1) instead of (1, 1, 0)
    three = marginal_tvds(a, b, 3)
    assert three[("x", "y", "z")] == 0.0 and three[("x", "y", "w")] == pytest.approx(0.25)
    assert three.mean() == pytest.approx(0.25 * 3 / 4)  # every subset with w is off by 1/4


def test_auc_by_hand():
    assert auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)


def test_tstr_learns_a_deterministic_rule():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, 600)
    frame = pd.DataFrame({"x": x, "noise": rng.integers(0, 2, 600), "y": (x == 2).astype(int)})
    scores = tstr_accuracy(frame, frame, "y")
    assert scores["tstr_accuracy"] == 1.0 and scores["trtr_accuracy"] == 1.0
    assert scores["tstr_auc"] == 1.0
    # a synthetic set whose labels ignore x scores at chance level on the real labels
    shuffled = frame.assign(y=rng.permutation(frame["y"].to_numpy()))
    assert tstr_accuracy(shuffled, frame, "y")["tstr_auc"] < 0.7


def test_domains_declared_inferred_and_disclosed(caplog):
    data = pd.DataFrame({"a": [2, 1, 2], "b": ["x", "y", "x"]})
    ledger = Ledger()
    with caplog.at_level(logging.WARNING):
        domains = resolve_domains(data, {"a": [1, 2, 3]}, ledger)
    assert domains == {"a": [1, 2, 3], "b": ["x", "y"]}
    assert [d.name for d in ledger.disclosures] == ["domains inferred from the data"]
    assert "['b']" in ledger.disclosures[0].description
    assert "disclosure" in caplog.text
    codes = encode(data, domains, ["a", "b"])
    assert codes.tolist() == [[1, 0], [0, 1], [1, 0]]
    assert decode(codes, domains, ["a", "b"]).equals(data)
    # all declared: nothing disclosed
    quiet = Ledger()
    resolve_domains(data, {"a": [1, 2], "b": ["x", "y"]}, quiet)
    assert quiet.disclosures == ()


def test_domains_bad_input():
    data = pd.DataFrame({"a": [2, 1, None]})
    with pytest.raises(DataError, match=r"column 'a' has 1 missing values"):
        resolve_domains(data, None, Ledger())
    data = pd.DataFrame({"a": [2, 1, 5]})
    with pytest.raises(DataError, match=r"column 'a' has values \[5\] outside its declared domain"):
        resolve_domains(data, {"a": [1, 2]}, Ledger())
    with pytest.raises(SynthError, match=r"domains names columns \['z'\] that are not in the data"):
        resolve_domains(data, {"z": [1]}, Ledger())
    with pytest.raises(SynthError, match=r"domains\['a'\] \(\[1, 1, 2, 5\]\) repeats a value"):
        resolve_domains(data, {"a": [1, 1, 2, 5]}, Ledger())
    with pytest.raises(DataError, match=r"original \(list\) must be a pandas DataFrame"):
        tvd([1], data)  # type: ignore[arg-type]


def test_largest_remainder_by_hand():
    assert largest_remainder(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    assert largest_remainder(np.array([0.5, 0.3, 0.2]), 7).tolist() == [4, 2, 1]
    assert largest_remainder(np.array([0.0, 0.0]), 3).sum() == 3  # uniform when empty
    assert largest_remainder(np.array([2.0, 5.0]), 0).tolist() == [0, 0]


def test_consistent_tables_hand_worked():
    # two (A, class) tables that disagree on the class totals (class 0: 10 vs 14)
    t1 = Measurement((0, 2), np.array([[4, 6], [6, 4]]), 1.0)  # class totals 10, 10
    t2 = Measurement((1, 2), np.array([[7, 5], [7, 5]]), 1.0)  # class totals 14, 10
    tables = consistent_tables([t1, t2], (2, 2, 2))
    c1, c2 = tables[0].sum(axis=0), tables[1].sum(axis=0)
    assert c1.tolist() == c2.tolist()
    # equal weights: the least-squares class total is the average, 12 and 10
    assert c1.tolist() == [12, 10]
    assert tables[0].dtype == np.int64 and (tables[0] >= 0).all()


def test_consistent_tables_negative_noise_and_overlap():
    # a chain (a), (b, a), (c, a, b): every shared sub-marginal agrees after estimation
    rng = make_rng(3)
    codes = np.column_stack(
        [rng.integers(0, 2, 300), rng.integers(0, 3, 300), rng.integers(0, 2, 300)]
    )
    sizes = (2, 3, 2)
    ledger = Ledger()
    budgets = split_budget(Fraction(1, 2), "discrete_laplace", [Fraction(1, 3)] * 3)
    measured = measure_marginals(
        codes,
        sizes,
        [(0,), (1, 0), (2, 0, 1)],
        budgets,
        names=["a", "ba", "cab"],
        ledger=ledger,
        rng=rng,
    )
    assert len(ledger) == 3 and ledger.total().value == Fraction(1, 2)
    t_a, t_ba, t_cab = consistent_tables(measured, sizes)
    assert (t_ba >= 0).all() and (t_cab >= 0).all()
    assert marginalize(t_ba, (1, 0), (0,)).tolist() == t_a.tolist()
    assert marginalize(t_cab, (2, 0, 1), (1, 0)).tolist() == t_ba.tolist()
