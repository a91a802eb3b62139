"""Headline accuracy figures (issue 26): the Census Bureau's PL94 figures in the metrics, the
release folder's headline.csv and the report.

Worked by hand on a 2 x 3 domain; then a small PL94-shaped release made with the preset, whose
figures are recomputed here from the records with pandas (not through the engine's tree).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.pl94 import make_state, state_total_invariant
from constraints import Domain, Equal, TrueExpression
from topdown import release
from topdown.errors import OptionsError
from topdown.outputs.headline import HeadlineFigure, headline_table
from topdown.presets import census2020_pl94, headline_figures
from topdown.presets.census2020_pl94 import RACE_ALONE, pl94_headline
from topdown.product.cli import main
from topdown.schema import Attribute, Schema


def test_headline_table_worked_by_hand() -> None:
    d = Domain({"VOTINGAGE": [0, 1], "CENRACE": [1, 2, 3]})  # cells (va, race), va-major
    released = [np.array([[1, 2, 3, 4, 5, 6]]), np.array([[1, 0, 0, 2, 0, 0], [0, 2, 3, 2, 5, 6]])]
    truth = [np.array([[1, 2, 3, 4, 5, 7]]), np.array([[0, 0, 0, 2, 0, 1], [1, 2, 3, 4, 4, 6]])]
    figures = [
        HeadlineFigure("total", TrueExpression()),
        HeadlineFigure("18+", Equal("VOTINGAGE", 1)),
        HeadlineFigure("race 2", Equal("CENRACE", 2), (1,)),
    ]
    t = headline_table(d, released, truth, figures, ["US", "TRACT"])
    got = {(r.figure, r.geolevel): (r.nodes, r.mae, r.mean_true) for r in t.itertuples()}
    assert got == {
        # root: released total 21, 18+ 15; true 22, 16
        ("total", "US"): (1, 1.0, 22.0),
        ("18+", "US"): (1, 1.0, 16.0),
        # tracts: released totals 3, 18; true 3, 20 -> |0|, |2|
        ("total", "TRACT"): (2, 1.0, 11.5),
        # released 18+ 2, 13; true 3, 14
        ("18+", "TRACT"): (2, 1.0, 8.5),
        # race 2 (cells 1 and 4): released 0, 7; true 0, 6
        ("race 2", "TRACT"): (2, 0.5, 3.0),
    }


def test_a_figure_beyond_the_release_or_malformed_is_refused() -> None:
    d = Domain({"A": [0, 1]})
    counts = [np.array([[1, 2]])]
    with pytest.raises(OptionsError, match=r"'x': levels \[2\] are beyond the release's 1 levels"):
        headline_table(d, counts, counts, [HeadlineFigure("x", TrueExpression(), (2,))])
    with pytest.raises(OptionsError, match=r"cells \('A'\) must be an expression"):
        HeadlineFigure("x", "A")  # type: ignore[arg-type]
    with pytest.raises(OptionsError, match=r"levels \(\(-1,\)\) must be level numbers"):
        HeadlineFigure("x", TrueExpression(), (-1,))


def test_pl94_hook_gives_the_census_figures_and_nothing_to_other_schemas() -> None:
    schema, _ = census2020_pl94(("STATE", "COUNTY", "TRACT", "BLOCK_GROUP"))
    figures = pl94_headline(schema)
    assert [f.name for f in figures[:2]] == ["Total population", "Voting-age population"]
    assert figures[0].levels is None and figures[1].levels is None
    assert figures[1].cells == Equal("VOTINGAGE", 1)
    races = figures[2:]
    assert [f.name for f in races] == list(RACE_ALONE)
    assert [f.cells for f in races] == [Equal("CENRACE", c) for c in range(1, 7)]
    assert {f.levels for f in races} == {(3,)}  # TRACT is the third column: level 3
    # another race coding (bit masks: Asian alone is 8), and an explicit tract level
    masks = pl94_headline(schema, race_alone={"White alone": 1, "Asian alone": 8}, tract_level=2)
    assert [(f.name, f.cells, f.levels) for f in masks[2:]] == [
        ("White alone", Equal("CENRACE", 1), (2,)),
        ("Asian alone", Equal("CENRACE", 8), (2,)),
    ]
    # no tract column: the race figures are left out
    county, _ = census2020_pl94(("STATE", "COUNTY"))
    assert [f.name for f in pl94_headline(county)] == ["Total population", "Voting-age population"]
    other = Schema((Attribute("SEX", values=(1, 2)),), ("STATE", "TRACT"))
    assert pl94_headline(other) == () and headline_figures(other) == ()
    assert headline_figures(schema) == figures


@pytest.fixture(scope="module")
def small_state():
    return make_state(1_000, seed=3)


def _true_figures(records: pd.DataFrame, column: str, mask: pd.Series) -> pd.Series:
    """The true count per node of ``column`` of the records selected by ``mask``."""
    return records[mask].groupby(records[column].astype(str)).size()


def test_metrics_of_a_small_pl94_release_match_the_records(small_state) -> None:
    schema, strategy = census2020_pl94(("STATE", "COUNTY", "TRACT"))
    geography = small_state.geography[list(schema.hierarchy)].drop_duplicates()
    rel = release(
        small_state.records,
        schema,
        strategy,
        constraints=state_total_invariant(),
        seed=4,
        geography=geography,
    )
    figures = headline_figures(schema)
    table = rel.metrics(small_state.records, headline=figures).headline
    records = small_state.records
    every = pd.Series(True, index=records.index)
    expected = {
        "Total population": every,
        "Voting-age population": records["VOTING_AGE"] == 1,
        **{name: records["RACE"] == code for name, code in RACE_ALONE.items()},
    }
    d = schema.domain
    for level, column in ((1, "STATE"), (2, "COUNTY"), (3, "TRACT")):
        labels = [str(v) for v in rel.tree.levels[level].labels]
        for fig in figures:
            if fig.levels is not None and level not in fig.levels:
                assert table[(table.figure == fig.name) & (table.level == level)].empty
                continue
            true = _true_figures(records, column, expected[fig.name]).reindex(labels).fillna(0)
            released = rel.counts[level][:, fig.cells.mask(d)].sum(axis=1)
            (row,) = table[(table.figure == fig.name) & (table.level == level)].itertuples()
            assert row.geolevel == column and row.nodes == len(labels)
            assert row.mae == pytest.approx(np.abs(released - true.to_numpy()).mean())
            assert row.mean_true == pytest.approx(true.mean())
    # the state total is invariant: its figure carries no error
    (state,) = table[(table.figure == "Total population") & (table.level == 1)].itertuples()
    assert state.mae == 0.0
    assert set(table.figure) == set(expected)


CONFIG = """
seed = 5
[data]
path = "persons.csv"
[schema]
hierarchy = ["STATE", "COUNTY", "TRACT"]
[strategy]
preset = "census2020_pl94"
[metrics]
truth = true
"""


def test_release_folder_and_report_show_the_figures(small_state, tmp_path: Path) -> None:
    small_state.records.to_csv(tmp_path / "persons.csv", index=False)
    (tmp_path / "c.toml").write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "rel"
    assert main(["-q", "run", str(tmp_path / "c.toml"), "--out", str(out)]) == 0
    table = pd.read_csv(out / "headline.csv")
    assert list(table.columns) == ["figure", "level", "geolevel", "nodes", "mae", "mean_true"]
    assert len(table) == 2 * 4 + 6  # total and 18+ at 4 levels, 6 races at the tract
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Headline accuracy figures</h2>" in html
    assert "Native Hawaiian and Other Pacific Islander alone" in html
    section = html[html.index("<h2>Headline accuracy figures</h2>") :]
    section = section[: section.index("</section>")]
    for row in table.itertuples():  # every figure's row, its MAE as the table prints it
        assert f"<td>{row.figure}</td>" in section
        assert f"<td>{row.mae:.3f}</td>" in section
    ledger = json.loads((out / "ledger.json").read_text(encoding="utf-8"))
    assert "headline.csv" in json.dumps(ledger["disclosures"])
    assert main(["-q", "check", str(out)]) == 0
    # rebuilt from the truth, the same figures; the folder still checks
    before = table.copy()
    assert main(["-q", "report", str(out), "--truth", str(tmp_path / "persons.csv")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "headline.csv"), before)
    assert main(["-q", "check", str(out)]) == 0
