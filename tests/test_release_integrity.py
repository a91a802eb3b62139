"""Privacy labelling and ledger integrity of release folders (issue 12, items 1-5 and 12).

A seeded release must say so wherever it is read (ledger, config.json, manifest, report,
``topdown check``), from the one noise source ``release()`` records; ``topdown report`` must
re-sign only what it rebuilt; ``topdown check`` must refuse manifest paths that leave the folder
and report files the manifest does not list.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from mechanisms.errors import BudgetError
from mechanisms.ledger import Ledger, NoiseSource
from topdown import Attribute, Schema, Strategy, release
from topdown.product.cli import main
from topdown.product.config import load_config
from topdown.product.release_folder import load_release, write_release_folder
from topdown.product.report import build_report

CONFIG = data_config(
    5,
    ("STATE",),
    "[[constraints]]\nsum_equal_real_total = {expr = {true = {}}}\nlevel = 0\n"
    "[metrics]\ntruth = true\n",
)


def _project(folder: Path, config: str = CONFIG) -> Path:
    embedded_subset(("01", "08"), rows_per_state=300).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(config, encoding="utf-8")
    return folder / "c.toml"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("seeded")
    assert main(["-q", "run", str(_project(base)), "--out", str(base / "rel")]) == 0
    return base / "rel"


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# -- 1, 2: the noise source ------------------------------------------------------------------
def _api_release(seed: int | None):
    df = embedded_subset(("01",), rows_per_state=200)
    schema = Schema((Attribute("SEX", values=(1, 2)),), hierarchy=("STATE",))
    return release(df, schema, Strategy.from_budgets(["1/2", "1/2"]), seed=seed)


def test_every_seeded_release_warns_and_carries_its_seed(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        first, second = _api_release(1), _api_release(2)
    warnings = [r.message for r in caplog.records if "seeded noise" in r.message]
    assert len(warnings) == 2, "the second seeded release in a process warns too"
    assert "seed 2" in warnings[1]
    assert second.noise == NoiseSource("seeded", 2) == second.ledger.noise
    assert first.noise == NoiseSource("seeded", 1)
    assert not second.ledger.private
    secure = _api_release(None)
    assert secure.noise == NoiseSource("secure") and secure.ledger.private
    assert "seeded noise" not in [d.name for d in secure.ledger.disclosures]


def test_writer_labels_the_folder_from_the_release_not_the_config(
    seeded: Path, tmp_path: Path
) -> None:
    """A config that says "secure" cannot mislabel a seeded release (and the metrics passed
    through the Python API are recorded as a disclosure by the writer itself)."""
    cfg = load_config(seeded / "config.json")
    secure_cfg = cfg.__class__(**{**cfg.__dict__, "seed": None})
    df = pd.read_csv(seeded.parent / "data.csv", dtype={"STATE": str, "PUMA": str})
    rel = release(df, cfg.schema, cfg.strategy, constraints=cfg.constraints, seed=9)
    out = write_release_folder(
        rel, secure_cfg, tmp_path / "api", metrics=rel.metrics(df), report=build_report
    )
    assert _json(out / "config.json")["seed"] == 9
    assert _json(out / "manifest.json")["noise"].startswith("seed 9: reproducible, NOT PRIVATE")
    ledger = _json(out / "ledger.json")
    assert ledger["noise"] == {"kind": "seeded", "seed": 9}
    names = [d["name"] for d in ledger["disclosures"]]
    assert names.count("seeded noise") == 1 and names.count("evaluation metrics") == 1
    assert "NOT PRIVATE" in (out / "report.html").read_text()


def test_seeded_folder_is_reported_not_private(seeded: Path, capsys) -> None:
    ledger = _json(seeded / "ledger.json")
    assert ledger["summary"]["epsilon_at_delta"] is None  # no epsilon stated as if it held
    seeded_disclosure = [d for d in ledger["disclosures"] if d["name"] == "seeded noise"]
    assert "recover every true answer" in seeded_disclosure[0]["description"]
    assert main(["check", str(seeded)]) == 0  # consistent, but...
    out, err = capsys.readouterr()
    assert "NOT PRIVATE" in out and "WARNING: NOT PRIVATE: noise: seed 5" in err


def test_check_fails_when_the_noise_record_is_removed_or_contradicted(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    copy = _copy(seeded, tmp_path)
    config = _json(copy / "config.json")
    (copy / "config.json").write_text(json.dumps(dict(config, seed="none")))
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "config.json: seed is 'none', the ledger records 'seed 5" in err
    ledger = _json(copy / "ledger.json")
    del ledger["noise"]
    (copy / "ledger.json").write_text(json.dumps(ledger))
    assert main(["check", str(copy)]) == 1
    assert "does not record its noise source" in capsys.readouterr().err


def test_ledger_round_trips_its_noise_source() -> None:
    ledger = Ledger(NoiseSource("seeded", 3))
    again = Ledger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert again == ledger and again.noise == NoiseSource("seeded", 3)
    assert [d.name for d in again.disclosures] == ["seeded noise"]
    assert Ledger.from_dict(Ledger(NoiseSource("secure")).to_dict()).private
    with pytest.raises(BudgetError, match=r"non-negative integer seed; got -1"):
        NoiseSource("seeded", -1)
    with pytest.raises(BudgetError, match=r"already records noise"):
        ledger.set_noise(NoiseSource("secure"))


# -- 3: report re-signs only what it rebuilt --------------------------------------------------
def test_report_without_truth_refuses_a_stripped_ledger(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    copy = _copy(seeded, tmp_path)
    ledger = _json(copy / "ledger.json")
    ledger["invariants"], ledger["disclosures"] = [], []
    (copy / "ledger.json").write_text(json.dumps(ledger))
    assert main(["-q", "report", str(copy)]) == 1
    assert "ledger.json: content differs" in capsys.readouterr().err
    assert main(["check", str(copy)]) == 1  # still caught: nothing was re-signed


def test_report_without_truth_refuses_changed_metrics(seeded: Path, tmp_path: Path) -> None:
    copy = _copy(seeded, tmp_path)
    (copy / "metrics.csv").write_text("level,query,estimator,mae\n0,total,release,0\n")
    assert main(["-q", "report", str(copy)]) == 1
    (copy / "report.html").write_text("<p>edited</p>")
    shutil.copy(seeded / "metrics.csv", copy / "metrics.csv")
    assert main(["-q", "report", str(copy)]) == 0  # only report.html differed: rebuilt
    assert "Privacy ledger" in (copy / "report.html").read_text()
    assert main(["check", str(copy)]) == 0


def test_report_with_truth_twice_records_the_disclosure_once(seeded: Path, tmp_path: Path) -> None:
    copy = _copy(seeded, tmp_path)
    truth = str(seeded.parent / "data.csv")
    for _ in range(2):
        assert main(["-q", "report", str(copy), "--truth", truth]) == 0
    names = [d["name"] for d in _json(copy / "ledger.json")["disclosures"]]
    assert names.count("evaluation metrics") == 1
    assert main(["check", str(copy)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (copy / "metrics.csv").stat().st_mode & 0o777 == 0o666 & ~umask  # rebuilt: same mode


# -- 5: check and the manifest ---------------------------------------------------------------
def test_check_refuses_a_manifest_path_outside_the_folder(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    copy = _copy(seeded, tmp_path)
    (tmp_path / "outside.txt").write_text("not part of the release")
    manifest = _json(copy / "manifest.json")
    manifest["files"]["../outside.txt"] = {
        "bytes": 23,
        "sha256": __import__("hashlib").sha256(b"not part of the release").hexdigest(),
    }
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["check", str(copy)]) == 1
    assert "../outside.txt: the manifest names a path outside the release folder" in (
        capsys.readouterr().err
    )


def test_check_reports_files_the_manifest_does_not_list(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    copy = _copy(seeded, tmp_path)
    (copy / "tables" / "extra.csv").write_text("node,count\nx,1\n")
    assert main(["check", str(copy)]) == 1
    assert "tables/extra.csv: in the folder but not listed in the manifest" in (
        capsys.readouterr().err
    )


# -- 11: messages from check -----------------------------------------------------------------
def test_check_names_a_bad_count_and_a_bad_measurement(
    seeded: Path, tmp_path: Path, capsys
) -> None:
    copy = _copy(seeded, tmp_path)
    table = copy / "tables" / "level_1_STATE.csv"
    frame = pd.read_csv(table, dtype=str, keep_default_na=False)
    frame.loc[2, "count"] = "abc"
    frame.to_csv(table, index=False)
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "tables/level_1_STATE.csv: column 'count' at line 4 holds 'abc', not a number" in err
    assert "e+18" not in err and "RuntimeWarning" not in err
    shutil.copy(seeded / "tables" / "level_1_STATE.csv", table)
    frame = pd.read_csv(copy / "measurements.csv", dtype=str, keep_default_na=False)
    frame.loc[0, "noisy"] = "abc"
    frame.to_csv(copy / "measurements.csv", index=False)
    assert main(["check", str(copy)]) == 1
    assert "measurements.csv: column 'noisy' at line 2 holds 'abc'" in capsys.readouterr().err


def test_check_says_a_replaced_config_changed(seeded: Path, tmp_path: Path, capsys) -> None:
    copy = _copy(seeded, tmp_path)
    (copy / "config.json").write_text('{"seed": 1}')
    assert main(["check", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "config.json changed after release" in err


def test_check_on_a_file(seeded: Path, capsys) -> None:
    assert main(["check", str(seeded / "ledger.json")]) == 2
    assert "is a file, not a release folder" in capsys.readouterr().err


# -- 12: one mode for the folder -------------------------------------------------------------
def test_one_file_mode_for_the_whole_folder(seeded: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    modes = {
        p.relative_to(seeded).as_posix(): p.stat().st_mode & 0o777
        for p in seeded.rglob("*")
        if p.is_file()
    }
    assert set(modes.values()) == {0o666 & ~umask}, modes


def test_load_release_keeps_the_noise_source(seeded: Path) -> None:
    rel, _ = load_release(seeded)
    assert rel.noise == NoiseSource("seeded", 5)
