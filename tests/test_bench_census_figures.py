"""``bench_estimators.py --data pl94 --strategy census2020``: the production preset on the
PL94-shaped state, with the Census Bureau's accuracy figures per estimator (issue 26)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import bench_estimators as bench
from topdown.presets.census2020_pl94 import RACE_ALONE


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    args = argparse.Namespace(
        rounding="auto",
        strategy="census2020",
        pl94_persons=1_000,
        seeds=2,
        census=True,
        estimators=["topdown", "blue"],
        few_nodes=16,
    )
    options = bench.EstimateOptions(solver=bench.SolverChoice.of({"rounding": "auto"}))
    data, _ = bench.run_census2020(args, options)
    return data


def test_every_estimator_level_and_figure_is_there(raw) -> None:
    census = raw[raw["bin"] == bench.CENSUS_BIN]
    assert set(census["estimator"]) == {"noisy", "clipped", "census", "topdown", "blue"}
    assert set(census["level"]) == set(range(6))  # US, state, county, tract, block group, block
    at_tract = set(census[census["level"] == 3]["what"])
    assert {"total", "voting age 18+", "race alone", "query HHGQ:hhinst"} <= at_tract
    assert {f"alone: {name}" for name in RACE_ALONE} <= at_tract
    assert not any(census[census["level"] != 3]["what"].str.startswith("alone: "))


def test_census_total_figure_equals_the_benchmarks_own_total(raw) -> None:
    """Two routes to one number: the Census's total-population MAE and the benchmark's own
    total MAE (from the estimator's cells) for the integer estimators."""
    keys = ["estimator", "level", "seed"]
    fig = raw[(raw["bin"] == bench.CENSUS_BIN) & (raw["what"] == "total")].set_index(keys)
    own = raw[(raw["bin"] == "all") & (raw["what"] == "total")].set_index(keys)
    for est in ("census", "topdown", "blue"):
        a, b = fig.loc[est]["mae"].sort_index(), own.loc[est]["mae"].sort_index()
        assert len(a) == 12
        assert a.to_numpy() == pytest.approx(b.to_numpy())


def test_the_table_pairs_blue_with_topdown(raw) -> None:
    table = bench.census_table(raw)
    assert "blue - topdown" in table.columns
    row = table.loc[(3, "alone: White alone")]
    assert row["blue - topdown"].split()[-1] in ("better", "same", "WORSE")


def test_census2020_needs_pl94_data(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--data", "acs", "--strategy", "census2020", "--out", str(tmp_path / "x")])
    assert "--strategy census2020 runs on --data pl94 only" in capsys.readouterr().err
