"""Under replace-one neighbours the root's total has sensitivity 0 (issue 30 A8, first half).

One record replaced by another never changes the number of records, so the whole total is
public under that notion; a marginal's L1 sensitivity (2) only bounds it. Checked against
brute-force neighbours; the ledger of a replace_one release records that entry with
sensitivity 0 and charges it nothing (its noise is still drawn), and the log says so.
"""

from __future__ import annotations

import dataclasses
import logging
from fractions import Fraction

import numpy as np
import pytest
from test_engine import seed_data

from mechanisms.discrete import sensitivity
from mechanisms.ledger import Ledger
from topdown import Attribute, Query, Schema, Strategy, release


def test_sensitivity_of_the_whole_total() -> None:
    assert sensitivity("replace_one", whole_total=True) == (0, 0)
    assert sensitivity("add_remove", whole_total=True) == (1, 1)
    # marginals keep theirs
    assert sensitivity("replace_one") == (2, 2) and sensitivity("add_remove") == (1, 1)


def _marginal(codes: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    hist = np.zeros(shape, dtype=np.int64)
    np.add.at(hist, tuple(codes.T), 1)
    drop = tuple(a for a in range(len(shape)) if a not in axes)
    return hist.sum(axis=drop)


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
def test_brute_force_neighbours_match_the_sensitivities(neighbouring: str) -> None:
    """2,000 random neighbours of random data (geography x 2 attributes): the largest change
    of the whole total and of every marginal equals the stated sensitivity (attained)."""
    rng = np.random.default_rng(30)
    shape = (4, 3, 2)  # unit, A, B
    worst: dict[tuple[int, ...], int] = {}
    for _ in range(2000):
        n = int(rng.integers(1, 12))
        codes = np.column_stack([rng.integers(0, k, n) for k in shape])
        if neighbouring == "replace_one":
            other = codes.copy()
            other[int(rng.integers(0, n))] = [rng.integers(0, k) for k in shape]
        else:
            other = np.vstack([codes, [[rng.integers(0, k) for k in shape]]])
        for axes in [(), (0,), (1,), (0, 1), (0, 1, 2)]:
            diff = np.abs(_marginal(codes, shape, axes) - _marginal(other, shape, axes)).sum()
            worst[axes] = max(worst.get(axes, 0), int(diff))
    l1_total = sensitivity(neighbouring, whole_total=True)[0]
    l1 = sensitivity(neighbouring)[0]
    assert worst[()] == l1_total
    assert all(worst[axes] == l1 for axes in worst if axes)


def _strategy(neighbouring: str) -> Strategy:
    queries = [(Query.parse("detailed"), Fraction(3, 4)), (Query.parse("total"), Fraction(1, 4))]
    return Strategy.from_budgets(
        ["1", "1", "1"], mechanism="discrete_laplace", neighbouring=neighbouring, queries=queries
    )


def test_a_replace_one_release_says_the_root_total_costs_nothing(caplog) -> None:
    schema = Schema(
        (Attribute("AGE", bins=(0, 18, 65, 116)), Attribute("SEX", values=(1, 2))),
        ("REGION", "STATE"),
    )
    with caplog.at_level(logging.WARNING):
        rel = release(seed_data(300), schema, _strategy("replace_one"), seed=1)
    (root_total,) = [e for e in rel.ledger.entries if e.level == 0 and e.query == "total"]
    assert "its sensitivity is 0" in root_total.note and "charged nothing" in root_total.note
    # a total below the root is not whole: a replaced person may move between units
    lower = [e for e in rel.ledger.entries if e.level > 0 and e.query == "total"]
    assert lower and all("sensitivity is 0" not in e.note for e in lower)
    assert any("sensitivity is 0 (it is public)" in r.getMessage() for r in caplog.records)
    plain = release(seed_data(300), schema, _strategy("add_remove"), seed=1)
    assert all("sensitivity is 0" not in e.note for e in plain.ledger.entries)


def _schema() -> Schema:
    return Schema(
        (Attribute("AGE", bins=(0, 18, 65, 116)), Attribute("SEX", values=(1, 2))),
        ("REGION", "STATE"),
    )


@pytest.mark.parametrize("mechanism", ["discrete_laplace", "discrete_gaussian"])
def test_the_root_total_under_replace_one_is_recorded_at_sensitivity_0_and_not_charged(
    mechanism: str,
) -> None:
    """Budgets 1, 1, 1 with shares 3/4 detailed, 1/4 total: the ledger's total is 3 - 1/4 (the
    root total's share is not charged), the sum of the other entries exactly; the entries'
    budgets still add up to the strategy's 3, and the root total's noise is drawn."""
    queries = [(Query.parse("detailed"), Fraction(3, 4)), (Query.parse("total"), Fraction(1, 4))]
    strategy = Strategy.from_budgets(
        ["1", "1", "1"], mechanism=mechanism, neighbouring="replace_one", queries=queries
    )
    rel = release(seed_data(300), _schema(), strategy, seed=1)
    entries = rel.ledger.entries
    (root_total,) = [e for e in entries if e.level == 0 and e.query == "total"]
    others = [e for e in entries if e is not root_total]
    assert root_total.sensitivity == 0 and not root_total.charged
    assert all(e.charged and e.sensitivity > 0 for e in others)
    assert rel.ledger.total().value == sum(e.budget.value for e in others) == Fraction(11, 4)
    assert rel.ledger.calibrated_total().value == strategy.total() == 3
    assert rel.ledger.by_level()[0].value == Fraction(3, 4)
    assert rel.ledger.to_dict()["total"]["budget"] == "11/4"
    assert rel.check_correctness().ok, rel.check_correctness()
    # the noise is drawn as configured: the measured root total is not the true 300 every time
    (measured,) = [m for m in rel.measurements.levels[0] if m.query.name == "total"]
    assert measured.variance > 0 and measured.budget == root_total.budget
    values = {
        int(m.noisy.sum())
        for s in range(8)
        for m in release(seed_data(300), _schema(), strategy, seed=s).measurements.levels[0]
        if m.query.name == "total"
    }
    assert len(values) > 1  # 8 draws all equal has probability < 0.4^7 under either mechanism


def test_add_remove_charges_the_root_total_at_sensitivity_1() -> None:
    strategy = _strategy("add_remove")
    rel = release(seed_data(300), _schema(), strategy, seed=1)
    (root_total,) = [e for e in rel.ledger.entries if e.level == 0 and e.query == "total"]
    assert root_total.sensitivity == 1 and root_total.charged
    assert all(e.charged for e in rel.ledger.entries)
    assert rel.ledger.total().value == strategy.total() == 3


def test_check_refuses_an_uncharged_entry_that_is_not_the_replace_one_root_total() -> None:
    """A ledger read from a folder cannot drop a cost by writing sensitivity 0 on an entry."""
    rel = release(seed_data(300), _schema(), _strategy("replace_one"), seed=1)
    data = rel.ledger.to_dict()
    (lower,) = [e for e in data["entries"] if e["level"] == 1 and e["query"] == "detailed"]
    lower["sensitivity"] = "0/1"
    forged = Ledger.from_dict(data)
    rel_forged = dataclasses.replace(rel, ledger=forged)
    failures = rel_forged._ledger_failures()
    assert failures == [
        "ledger entry 'detailed' at level 1 records sensitivity 0 (uncharged); only the root's "
        "total under replace_one neighbours has sensitivity 0"
    ]
    assert rel._ledger_failures() == []
