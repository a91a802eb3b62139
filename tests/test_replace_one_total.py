"""Under replace-one neighbours the root's total has sensitivity 0 (issue 30 A8, first half).

One record replaced by another never changes the number of records, so the whole total is
public under that notion; a marginal's L1 sensitivity (2) only bounds it. Checked against
brute-force neighbours, and the ledger and log of a replace_one release say it.
"""

from __future__ import annotations

import logging
from fractions import Fraction

import numpy as np
import pytest
from test_engine import seed_data

from mechanisms.discrete import sensitivity
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
    assert "its true sensitivity is 0" in root_total.note
    # a total below the root is not whole: a replaced person may move between units
    lower = [e for e in rel.ledger.entries if e.level > 0 and e.query == "total"]
    assert lower and all("sensitivity is 0" not in e.note for e in lower)
    assert any("sensitivity is 0 (it is public)" in r.getMessage() for r in caplog.records)
    plain = release(seed_data(300), schema, _strategy("add_remove"), seed=1)
    assert all("sensitivity is 0" not in e.note for e in plain.ledger.entries)
