"""The HTML report: embedded PNG plots, sections, and (with Chromium) a rendered screenshot."""

from __future__ import annotations

import base64
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product.cli import main
from topdown.product.report import build_report

ROOT = Path(__file__).resolve().parents[1]
CONFIG = data_config(11, ("STATE",), "[metrics]\ntruth = true\n")


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:

    base = tmp_path_factory.mktemp("report")
    embedded_subset(("01", "08", "13")).to_csv(base / "data.csv", index=False)
    (base / "c.toml").write_text(CONFIG)
    assert main(["-q", "run", str(base / "c.toml"), "--out", str(base / "rel")]) == 0
    return base / "rel"


def _pngs(html: str) -> list[bytes]:
    return [
        base64.b64decode(d)
        for d in re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', html)
    ]


def test_report_embeds_four_valid_pngs(release_dir: Path) -> None:
    html = (release_dir / "report.html").read_text()
    pngs = _pngs(html)
    assert len(pngs) == 4
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") and len(p) > 5000 for p in pngs)
    for heading in (
        "Privacy ledger",
        "Budget allocation",
        "Error by level",
        "Bias by node size",
        "Estimation by level",
    ):
        assert heading in html
    assert "<th>total rho (nominal)</th><td>1 (1.0)</td>" in html  # 1/2 + 1/2, seeded
    assert "<p class=danger><strong>NOT PRIVATE.</strong> Noise: seed 11" in html
    assert "<th>epsilon at delta = 1e-10</th><td>none holds</td>" in html
    assert 'src="http' not in html and "<script" not in html  # self-contained


def test_report_without_metrics_says_so(release_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "rel"
    shutil.copytree(release_dir, copy)
    (copy / "metrics.csv").unlink()
    (copy / "bias_by_size.csv").unlink()
    html = build_report(copy).read_text()
    assert len(_pngs(html)) == 2 and "No truth was given" in html


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").is_file(), reason="/usr/bin/chromium is not installed (optional)"
)
def test_report_renders_in_chromium(release_dir: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "check_report_render", ROOT / "benchmarks" / "check_report_render.py"
    )
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    shot = tmp_path / "shot.png"
    checker.render(release_dir / "report.html", shot, "/usr/bin/chromium")
    bands = checker.screenshot_bands(shot)
    assert min(bands) >= 20, bands  # every part of the page has content, not a blank area
    assert len(checker.embedded_pngs((release_dir / "report.html").read_text())) == 4
