"""Streamed releases (topdown.streaming.run): correct, the unstreamed ledger, reproducible on any
executor and input form, and clear errors."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from constraints.logical_expressions.atomic import TrueExpression
from topdown import Attribute, Schema, Strategy, release
from topdown.errors import DataError, HierarchyError, ReleaseError, StrategyError
from topdown.strategy import LevelStrategy, Query
from topdown.streaming.partitions import partitions
from topdown.streaming.run import release_streamed
from topdown.support.progress import Progress

#: a streamed release writes its parts as Parquet
pytestmark = pytest.mark.extra("parquet")

QUIET = Progress(enabled=False)


def _geography(n_counties: int = 9) -> pd.DataFrame:
    """STATE (2) > COUNTY (n_counties) > TRACT (2-3 per county) > BLOCK (1-3 per tract);
    county C08 has a single tract (an only child) and C00 no records at all."""
    rows = []
    for c in range(n_counties):
        state = "S0" if c < n_counties // 2 else "S1"
        for t in range(1 if c == 8 else 2 + c % 2):
            for b in range(1 + (c + t) % 3):
                rows.append((state, f"C{c:02d}", f"C{c:02d}T{t}", f"C{c:02d}T{t}B{b}"))
    return pd.DataFrame(rows, columns=["STATE", "COUNTY", "TRACT", "BLOCK"])


def _records(geography: pd.DataFrame, n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    blocks = geography[geography["COUNTY"] != "C00"]
    pick = blocks.iloc[rng.integers(0, len(blocks), n)].reset_index(drop=True)
    return pick.assign(AGE=rng.integers(0, 4, n), SEX=rng.integers(0, 2, n))


SCHEMA = Schema(
    (Attribute("AGE", values=(0, 1, 2, 3)), Attribute("SEX", values=(0, 1))),
    ("STATE", "COUNTY", "TRACT", "BLOCK"),
)


def _strategy() -> Strategy:
    queries = ((Query.parse("detailed"), Fraction(2, 3)), (Query.parse("AGE"), Fraction(1, 3)))
    return Strategy(tuple(LevelStrategy(Fraction(1, 2), queries) for _ in range(5)))


def _state_total() -> ConstraintSet:
    return ConstraintSet().add(SumEqualRealTotal(TrueExpression()), level=1)


@pytest.fixture(scope="module")
def geo() -> pd.DataFrame:
    return _geography()


@pytest.fixture(scope="module")
def data(geo) -> pd.DataFrame:
    return _records(geo)


@pytest.fixture(scope="module")
def streamed(geo, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / "release"
    return release_streamed(
        data,
        SCHEMA,
        _strategy(),
        stream_by="COUNTY",
        out=out,
        geography=geo,
        constraints=_state_total(),
        seed=11,
        progress=QUIET,
    )


def _all_tables(rel) -> dict[int, pd.DataFrame]:
    return {lv: rel.table(lv) for lv in range(rel.tree.n_levels)}


def _dense(rel, level: int) -> np.ndarray:
    """A whole level's counts from its concatenated table (independent of ``counts``)."""
    frame = rel.table(level)
    labels = pd.Index(rel.tree.levels[level].labels.astype(str))
    out = np.zeros((labels.size, 8), dtype=np.int64)
    cell = frame["AGE"].to_numpy() * 2 + frame["SEX"].to_numpy()
    np.add.at(out, (labels.get_indexer(frame["node"]), cell), frame["count"].to_numpy())
    return out


def test_streamed_release_is_consistent_nonnegative_integer(streamed, data):
    rel = streamed
    assert rel.check_correctness().ok, str(rel.check_correctness())
    dense = [_dense(rel, lv) for lv in range(rel.tree.n_levels)]
    for level in range(1, rel.tree.n_levels):
        sums = np.zeros_like(dense[level - 1])
        np.add.at(sums, rel.tree.levels[level].parent, dense[level])
        assert np.array_equal(sums, dense[level - 1]), level
    for frame in _all_tables(rel).values():
        assert np.issubdtype(frame["count"].dtype, np.integer) and (frame["count"] > 0).all()
    # the invariant: the states' totals are exact
    true_states = data.groupby("STATE").size().sort_index().to_numpy()
    assert np.array_equal(dense[1].sum(axis=1), true_states)
    micro = rel.microdata()
    assert len(micro) == dense[-1].sum() and set(micro.columns) >= {"BLOCK", "AGE", "SEX"}


def test_subtree_tables_concatenate_to_the_full_level(streamed):
    rel = streamed
    for level in range(rel.stream_level + 1, rel.tree.n_levels):
        parts = [rel.counts(level, label) for label in ("C00", "C01", "C08")]
        nodes = np.concatenate([rel.nodes_of(level, label) for label in ("C00", "C01", "C08")])
        assert np.array_equal(np.concatenate(parts), _dense(rel, level)[nodes])
        # every node of the level belongs to exactly one subtree
        every = np.concatenate(
            [rel.nodes_of(level, c) for c in rel.tree.levels[rel.stream_level].labels]
        )
        assert np.array_equal(np.sort(every), np.arange(rel.tree.levels[level].size))
    # the county without records still has its units, released consistently with its total
    assert rel.counts(3, "C00").sum() == rel.counts(2)[0].sum()


def test_ledger_equals_the_unstreamed_release(streamed, geo, data):
    unstreamed = release(
        data,
        SCHEMA,
        _strategy(),
        geography=geo,
        constraints=_state_total(),
        seed=11,
        progress=QUIET,
    )
    assert streamed.ledger.to_dict() == unstreamed.ledger.to_dict()
    lower = [e for e in streamed.ledger.entries if e.level > streamed.stream_level]
    # one entry per (level, query) for all the level's nodes: parallel composition
    assert [(e.level, e.query, e.nodes) for e in lower] == [
        (lv, q, streamed.tree.levels[lv].size) for lv in (3, 4) for q in ("detailed", "AGE")
    ]
    assert streamed.ledger.total().rho == Fraction(5, 2)


def test_same_seed_same_release_on_serial_processes_and_parquet(streamed, geo, data, tmp_path):
    # the records as Parquet partitions, one file per county, in an order of their own
    folder = tmp_path / "records"
    folder.mkdir()
    for i, (_, rows) in enumerate(data.groupby("COUNTY")):
        rows.to_parquet(folder / f"part{(7 * i) % 11:02d}.parquet", index=False)
    kwargs = dict(
        stream_by="COUNTY",
        geography=geo,
        constraints=_state_total(),
        seed=11,
        progress=QUIET,
    )
    again = release_streamed(data, SCHEMA, _strategy(), out=tmp_path / "a", **kwargs)
    pooled = release_streamed(
        folder, SCHEMA, _strategy(), out=tmp_path / "b", executor="processes", workers=2, **kwargs
    )
    assert any(r.pid != os.getpid() for r in pooled.subtrees)  # the pool ran subtrees
    for level in range(streamed.tree.n_levels):
        base = streamed.table(level)
        pd.testing.assert_frame_equal(again.table(level), base)
        pd.testing.assert_frame_equal(pooled.table(level), base)
    other = release_streamed(data, SCHEMA, _strategy(), out=tmp_path / "c", **kwargs | {"seed": 12})
    assert not other.table(4).equals(streamed.table(4))


def test_bad_stream_level_estimator_and_invariant(geo, data, tmp_path):
    def run(**kwargs):
        args = dict(stream_by="COUNTY", out=tmp_path / "x", geography=geo, seed=1, progress=QUIET)
        return release_streamed(data, SCHEMA, _strategy(), **(args | kwargs))

    with pytest.raises(HierarchyError, match=r"stream_by \('AGE'\) must be one of the hierarchy"):
        run(stream_by="AGE")
    with pytest.raises(HierarchyError, match=r"stream_by \('BLOCK'\) is the leaf level"):
        run(stream_by="BLOCK")
    with pytest.raises(StrategyError, match=r"estimator \('gls'\) is unknown"):
        run(estimator="gls")
    below = ConstraintSet().add(SumEqualRealTotal(TrueExpression()), level=3)
    with pytest.raises(StrategyError, match=r"applies below the stream level \(2\)"):
        run(constraints=below)
    with pytest.raises(HierarchyError, match=r"level 2 \(COUNTY\) has 9 nodes x 8 cells > max"):
        run(max_subtree_cells=40)  # the top levels are dense for the whole tree
    with pytest.raises(HierarchyError, match=r"subtree 'S0': level 4 \(BLOCK\) has \d+ nodes"):
        run(stream_by="STATE", max_subtree_cells=100)
    assert not (tmp_path / "x").exists()  # nothing half written
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old.txt").write_text("an earlier file")
    with pytest.raises(ReleaseError, match=r"exists; give a new \(or empty\) folder"):
        run()


def test_bad_partitions(geo, data, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    data.iloc[:100].to_parquet(folder / "a.parquet", index=False)
    with pytest.raises(DataError, match=r"holds \d+ units of 'COUNTY'"):
        partitions(folder, "COUNTY")
    with pytest.raises(DataError, match=r"data has no column 'REGION' \(stream_by\)"):
        partitions(data, "REGION")
    stray = data.assign(COUNTY="C99")
    with pytest.raises(HierarchyError, match="'C99', which the geography does not list"):
        release_streamed(
            stray, SCHEMA, _strategy(), stream_by="COUNTY", out=tmp_path / "y", geography=geo
        )


def test_csv_microdata_with_numeric_looking_labels_checks(tmp_path):
    """Microdata written as CSV are read back as text: block labels such as "0100" stay labels
    (read as numbers they became 100, outside every subtree, and a correct release failed)."""
    geo = _geography(4)
    geo["BLOCK"] = [f"{i:04d}" for i in range(len(geo))]
    data = _records(geo, n=500)
    rel = release_streamed(
        data,
        SCHEMA,
        _strategy(),
        stream_by="COUNTY",
        out=tmp_path / "release",
        geography=geo,
        seed=3,
        progress=QUIET,
        microdata_format="csv",
    )
    assert (tmp_path / "release" / "microdata" / "C01.csv").exists()
    report = rel.check_correctness()
    assert report.ok, report.failures
    micro = rel.microdata("C01")
    assert micro["BLOCK"].str.len().eq(4).all()


def test_two_units_with_one_file_name_are_refused(tmp_path):
    """ "C/01" and "C_01" would both write C_01.parquet: the second would overwrite the first."""
    geo = _geography(4)
    geo["COUNTY"] = geo["COUNTY"].replace({"C01": "C/01", "C02": "C_01"})
    data = _records(geo, n=200)
    out = tmp_path / "release"
    with pytest.raises(HierarchyError, match=r"'C/01' and 'C_01' would write to the same file"):
        release_streamed(
            data, SCHEMA, _strategy(), stream_by="COUNTY", out=out, geography=geo, progress=QUIET
        )
    assert not out.exists() or not any(out.iterdir())  # nothing left behind
