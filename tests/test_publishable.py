"""A folder holding non-private figures says so (issue 30 A5).

With truth metrics on, metrics.csv, bias_by_size.csv and the report hold figures computed
from the confidential data. The ledger's summary says ``"private": false`` and names them
(``not_publishable``), ``topdown check`` says "not publishable as is: FILE", and the report
says it in its first section. A folder without truth figures is unchanged: private, silent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import SMALL_CONFIG, small_project

from topdown.product.cli import main

SECURE = SMALL_CONFIG.replace("seed = 7\n", "")
FILES = ["metrics.csv", "bias_by_size.csv", "headline.csv", "report.html"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("publishable")
    out = {}
    for name, config in (
        ("truth", SECURE),
        ("clean", SECURE.replace("[metrics]\ntruth = true\n", "")),
    ):
        folder = base / name
        folder.mkdir()
        path = small_project(folder, config)
        assert main(["-q", "run", str(path), "--out", str(folder / "rel")]) == 0
        out[name] = folder / "rel"
    return out


def test_truth_metrics_make_the_folder_not_private(folders, capsys) -> None:
    rel = folders["truth"]
    assert (rel / "metrics.csv").is_file()
    summary = json.loads((rel / "ledger.json").read_text())["summary"]
    # the noise is secure, so the epsilon holds for the other files; the folder is not
    assert summary["epsilon_at_delta"] is not None
    assert summary["private"] is False and summary["not_publishable"] == FILES
    capsys.readouterr()
    assert main(["check", str(rel)]) == 0
    captured = capsys.readouterr()
    assert f"not publishable as is: {', '.join(FILES)}" in captured.out
    assert "WARNING: not publishable as is: metrics.csv" in captured.err
    page = (rel / "report.html").read_text()
    first = page.index("<section>")
    assert "NOT PUBLISHABLE AS IS" in page[first : page.index("</section>", first)]


def test_a_folder_without_truth_is_private_and_check_is_silent(folders, capsys) -> None:
    rel = folders["clean"]
    assert not (rel / "metrics.csv").exists()
    summary = json.loads((rel / "ledger.json").read_text())["summary"]
    assert summary["private"] is True and "not_publishable" not in summary
    capsys.readouterr()
    assert main(["check", str(rel)]) == 0
    captured = capsys.readouterr()
    assert "not publishable" not in captured.out + captured.err
    assert "NOT PUBLISHABLE" not in (rel / "report.html").read_text()
