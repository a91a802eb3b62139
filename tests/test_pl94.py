"""The PL94-shaped generator: deterministic, the declared shape, a valid tree."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from benchmarks.pl94 import (
    CENRACE_OF_MASK,
    EMPTY_BLOCKS,
    PRODUCTION_RHO,
    make_state,
    pl94_schema,
    production_strategy,
)
from topdown.measurement.tree import build_tree


@pytest.fixture(scope="module")
def state():
    return make_state(30_000, seed=3)


def test_same_seed_same_state_other_seed_other_state(state):
    again = make_state(30_000, seed=3)
    assert state.records.equals(again.records)
    assert state.geography.equals(again.geography)
    assert not make_state(30_000, seed=4).records.equals(state.records)


def test_shape(state):
    assert state.persons == 30_000
    # the medium state's ratios (3 million persons: 60,000 blocks, 1,600 tracts ...)
    assert state.units == {
        "STATE": 1,
        "COUNTY": 1,
        "TRACT_GROUP": 8,
        "TRACT": 16,
        "BLOCK_GROUP": 45,
        "BLOCK": 600,
    }
    sizes = state.records.groupby("BLOCK", observed=False).size()
    assert len(sizes) == 600
    assert np.mean(sizes == 0) == pytest.approx(EMPTY_BLOCKS, abs=0.01)
    assert sizes.max() > 10 * sizes[sizes > 0].median()  # skewed sizes
    gq_blocks = state.records.groupby("BLOCK", observed=False)["HHGQ"].max() > 0
    assert 0.003 <= gq_blocks.mean() <= 0.04
    r = state.records
    assert set(r["RACE"]) <= set(range(1, 64)) and r["RACE"].nunique() > 20
    assert set(r["HHGQ"]) <= set(range(8)) and set(r["VOTING_AGE"]) == {0, 1}
    assert 0.6 < r["VOTING_AGE"].mean() < 0.9


def test_race_is_coded_as_the_das_cenrace(state):
    """Codes 1..6 are the races alone, then the pairs, ... in the DAS's cenrace.py order (worked
    by hand from its level list: white-black is index 6, white-aian 7, white-black-aian 21,
    black-aian-asian 31, all six 62; codes are index + 1)."""
    assert [CENRACE_OF_MASK[1 << race] for race in range(6)] == [1, 2, 3, 4, 5, 6]
    white, black, aian, asian = 1, 2, 4, 8
    assert CENRACE_OF_MASK[white | black] == 7
    assert CENRACE_OF_MASK[white | aian] == 8
    assert CENRACE_OF_MASK[white | black | aian] == 22
    assert CENRACE_OF_MASK[black | aian | asian] == 32
    assert CENRACE_OF_MASK[63] == 63
    assert sorted(CENRACE_OF_MASK[1:]) == list(range(1, 64))
    # the data follow it: White alone (share 0.62) is code 1, Asian alone (0.06) outnumbers
    # AIAN alone (0.012), and the two-or-more-race codes are rarer than White alone
    race = state.records["RACE"].to_numpy()
    assert np.mean(race == 1) > 0.4
    assert np.sum(race == 4) > 2 * np.sum(race == 3)
    assert np.mean(race >= 7) < np.mean(race == 1) / 4


def test_schema_and_geography_build_a_tree(state):
    schema = pl94_schema()
    assert schema.domain.size == 2016
    tree, truth = build_tree(state.records, schema, geography=state.geography)
    assert [lv.size for lv in tree.levels] == [1, 1, 1, 16, 45, 600]
    assert truth.counts[-1].sum() == 30_000
    with_groups = pl94_schema(tract_groups=True)
    tree, _ = build_tree(state.records, with_groups, geography=state.geography)
    assert [lv.size for lv in tree.levels] == [1, 1, 1, 8, 16, 45, 600]


def test_production_strategy_spends_rho_2_56():
    for groups in (False, True):
        strategy = production_strategy(groups)
        assert strategy.total() == PRODUCTION_RHO == Fraction(256, 100)
        assert len(strategy.levels) == (7 if groups else 6)


def test_too_small_is_refused():
    with pytest.raises(ValueError, match=r"persons \(10\) must be at least 1000"):
        make_state(10)
