"""The streamed release folder is a complete release: noisy measurements (exact, checked), the
invariants' published values, the ledger's summary, and a report built one part at a time."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset
from test_stream import QUIET, SCHEMA, _geography, _records

from mechanisms.discrete import DiscreteGaussianMechanism
from topdown.product.cli import main
from topdown.product.release_folder import refresh_manifest
from topdown.strategy import LevelStrategy, Query, Strategy
from topdown.streaming.run import release_streamed

#: a streamed release writes its parts as Parquet
pytestmark = pytest.mark.extra("parquet")

PNG = b"\x89PNG\r\n\x1a\n"


# -- the measurements, through the API ------------------------------------------------------
def _exact_strategy() -> Strategy:
    """rho 10^5 per level: the noise variance is below 10^-5, so P(any noise != 0) is below
    exp(-10^4) per answer: the noisy answers are the true ones."""
    queries = ((Query.parse("detailed"), Fraction(2, 3)), (Query.parse("AGE"), Fraction(1, 3)))
    return Strategy(tuple(LevelStrategy(Fraction(10**5), queries) for _ in range(5)))


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    geo = _geography()
    data = _records(geo)
    rel = release_streamed(
        data,
        SCHEMA,
        _exact_strategy(),
        stream_by="COUNTY",
        out=tmp_path_factory.mktemp("exact") / "release",
        geography=geo,
        seed=3,
        progress=QUIET,
    )
    return rel, data


def _true_answers(data: pd.DataFrame, column: str, query: str) -> pd.Series:
    """Each unit's true answers, counted from the records (answer index as in the domain)."""
    answer = data["AGE"] * 2 + data["SEX"] if query == "detailed" else data["AGE"]
    return (
        pd.Series(1, index=pd.MultiIndex.from_arrays([data[column], answer]))
        .groupby(level=[0, 1])
        .sum()
    )


def test_measurement_parts_hold_every_node_answers_and_variance(exact):
    rel, data = exact
    assert rel.check_correctness().ok
    for level in range(1, rel.tree.n_levels):
        column = rel.tree.levels[level].column
        parts = sorted(p.stem for p in rel.measurements_dir(level).iterdir())
        counties = sorted(rel.tree.levels[2].labels.astype(str))
        assert parts == (["top"] if level <= rel.stream_level else counties)
        frame = rel.measurement_table(level)
        for query, answers, share in (("detailed", 8, Fraction(2, 3)), ("AGE", 4, Fraction(1, 3))):
            rows = frame[frame["query"] == query]
            # every node of the level, every answer, once
            assert len(rows) == rel.tree.levels[level].size * answers
            assert not rows.duplicated(["node", "answer"]).any()
            # the variance the discrete Gaussian of rho = 10^5 x share states (below 1/(2 rho))
            mech = DiscreteGaussianMechanism(10**5 * share, l2_sensitivity_squared=1)
            assert (rows["variance"] == float(mech.variance)).all()
            assert 0 <= float(mech.variance) <= 1 / (2 * 10**5 * share)
            # at this budget the noisy answers are the true ones, counted here from the records
            truth = _true_answers(data, column, query)
            got = rows.set_index(["node", "answer"])["noisy"]
            expected = truth.reindex(got.index, fill_value=0)
            assert np.array_equal(got.to_numpy(), expected.to_numpy()), (level, query)


def test_measurement_check_finds_missing_repeated_and_foreign_answers(exact, tmp_path):
    rel, _ = exact
    copy = tmp_path / "copy"
    shutil.copytree(rel.folder, copy)
    moved = dataclasses.replace(rel, folder=copy)
    part = copy / "measurements" / "level_4_BLOCK" / "C03.parquet"
    frame = pd.read_parquet(part)
    frame.iloc[1:].to_parquet(part, index=False)  # the first answer of the first block lost
    report = moved.check_correctness()
    assert not report.ok
    assert any("C03.parquet: query 'detailed': node 'C03T0B0'" in f for f in report.failures)
    frame.assign(variance=frame["variance"] + 1).to_parquet(part, index=False)
    assert any("variance differs" in f for f in moved.check_correctness().failures)
    frame.to_parquet(part, index=False)
    assert moved.check_correctness().ok  # the part restored (as plain strings: still read)
    frame.drop(columns=["variance"]).to_parquet(part, index=False)
    assert any(
        "C03.parquet: has no column(s) ['variance']" in f
        for f in moved.check_correctness().failures
    )
    part.write_text("not parquet")
    assert any("C03.parquet: not a Parquet file" in f for f in moved.check_correctness().failures)
    frame.to_parquet(part, index=False)
    shutil.copy(part, part.with_name("C99.parquet"))
    assert any(
        "parts of no subtree: ['C99.parquet']" in f for f in moved.check_correctness().failures
    )


# -- the folder, through the command line ---------------------------------------------------
@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("stream_folder")
    embedded_subset(("06", "17", "36"), rows_per_state=600).to_csv(base / "data.csv", index=False)
    tail = "[[constraints]]\nsum_equal_real_total = {expr = {true = {}}}\nlevel = 1\n"
    (base / "run.toml").write_text(data_config(5, ("STATE", "PUMA"), tail), encoding="utf-8")
    return base


@pytest.fixture(scope="module")
def folder(project: Path) -> Path:
    out = project / "rel"
    args = ["-q", "run", str(project / "run.toml"), "--out", str(out), "--stream-by", "STATE"]
    assert main(args) == 0
    return out


def test_folder_holds_invariants_ledger_summary_and_subtrees(folder: Path, project: Path):
    data = pd.read_csv(project / "data.csv", dtype={"STATE": str})
    invariants = json.loads((folder / "invariants.json").read_text())
    states = {i["node"]: i["value"] for i in invariants if i["level"] == 1}
    assert states == data.groupby("STATE").size().to_dict()  # each state's true total
    assert [i["value"] for i in invariants if i["level"] == 0] == [len(data)]
    ledger = json.loads((folder / "ledger.json").read_text())
    assert ledger["summary"]["strategy_total"] == "3/2" and ledger["summary"]["private"] is False
    assert json.loads((folder / "config.json").read_text())["seed"] == 5
    subtrees = pd.read_csv(folder / "subtrees.csv", dtype={"subtree": str})
    assert subtrees["subtree"].tolist() == ["06", "17", "36"]
    # no seconds per subtree are published (issue 30 A4: every phase's time grows with the
    # subtree's true number of records); they are diagnostics (--diagnostics DIR)
    assert not [c for c in subtrees.columns if c.endswith(("_wall", "_cpu"))]
    assert list(subtrees.columns) == ["subtree", "nodes_level_2", "records"]
    assert (
        subtrees["records"].sum()
        == pd.read_parquet(folder / "tables" / "level_2_PUMA")["count"].sum()
    )
    manifest = json.loads((folder / "manifest.json").read_text())
    listed = set(manifest["files"])
    assert {"report.html", "invariants.json", "subtrees.csv"} <= listed
    assert "measurements/level_2_PUMA/17.parquet" in listed
    # nor any timing of the run (issue 30 A4): no timings.json, none in the manifest
    assert "timings.json" not in listed and not (folder / "timings.json").exists()
    assert not [k for k in manifest if "timing" in k]


def test_check_verifies_the_invariants_values_not_only_their_hash(folder: Path, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    path = copy / "invariants.json"
    invariants = json.loads(path.read_text())
    for item in invariants:
        if item["level"] == 1 and item["node"] == "17":
            item["value"] += 1
    path.write_text(json.dumps(invariants))
    refresh_manifest(copy, ("invariants.json",))  # a consistent forgery of the hash
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "FAIL constraints and invariants hold" in err and "node '17'" in err


def test_report_has_its_sections_and_plots(folder: Path):
    page = (folder / "report.html").read_text()
    for heading in (
        "Privacy ledger",
        "Budget allocation by level and query",
        "The tree",
        "Published counts by level",
        "Invariants (published exactly)",
        "Noisy measurements on disk",
        "Subtrees (by STATE)",
        "Estimation by level",
        "Files",
    ):
        assert f"<h2>{heading}</h2>" in page, heading
    assert "<h2>Timings</h2>" not in page  # diagnostics, not published (issue 30 A4)
    assert "NOT PRIVATE" in page  # seeded
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    # 3: the subtrees' seconds-against-size plot went with the seconds (issue 30 A4)
    assert len(images) == 3 and all(base64.b64decode(i).startswith(PNG) for i in images)
    # the published totals by level: every level's total is the root's
    total = pd.read_parquet(folder / "tables" / "level_0_root")["count"].sum()
    assert page.count(f"<td>{total}</td>") >= 3


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").is_file(), reason="/usr/bin/chromium is not installed (optional)"
)
def test_report_renders_in_chromium(folder: Path, tmp_path: Path) -> None:
    from benchmarks.check_report_render import render, screenshot_bands

    shot = tmp_path / "shot.png"
    render(folder / "report.html", shot, "/usr/bin/chromium")
    assert min(screenshot_bands(shot)) >= 20  # every part of the page has content, not blank


def test_report_reads_one_part_at_a_time(folder: Path, tmp_path, monkeypatch):
    from topdown.product import stream_report

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    read: list[Path] = []
    original = pd.read_parquet

    def spy(path, *args, **kwargs):
        read.append(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(stream_report.pd, "read_parquet", spy)
    stream_report.build_streamed_report(copy)
    assert read and all(p.is_file() for p in read)  # files, never a level's folder
    assert not any("microdata" in p.parts or "measurements" in p.parts for p in read)


def test_topdown_report_rebuilds_the_streamed_report(folder: Path, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "report.html").write_text("stale")
    assert main(["report", str(copy)]) == 0
    assert "<h2>Published counts by level</h2>" in (copy / "report.html").read_text()
    assert main(["check", str(copy)]) == 0  # re-signed
    assert main(["report", str(copy), "--truth", str(tmp_path / "data.csv")]) == 2
    assert "is a streamed release: it keeps no truth" in capsys.readouterr().err
