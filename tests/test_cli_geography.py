"""``[schema] geography``: a CLI release declares its published units (issue 30 A7).

Without it the units are read from the data and the ledger discloses that each has a record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.product.cli import main

EMPTY_PUMA = "99999"  # a published unit with no record


def _project(folder: Path, geography_line: str, *, units: pd.DataFrame | None = None) -> Path:
    data = embedded_subset(("06", "17"), rows_per_state=300)
    data.to_csv(folder / "data.csv", index=False)
    if units is not None:
        units.to_csv(folder / "units.csv", index=False)
    text = data_config(3, ("STATE", "PUMA")).replace(
        'hierarchy = ["STATE", "PUMA"]\n', f'hierarchy = ["STATE", "PUMA"]\n{geography_line}\n'
    )
    config = folder / "geo.toml"
    config.write_text(text, encoding="utf-8")
    return config


def _units() -> pd.DataFrame:
    """Every unit of the data, plus one with no record."""
    data = embedded_subset(("06", "17"), rows_per_state=300)
    units = data[["STATE", "PUMA"]].drop_duplicates().sort_values(["STATE", "PUMA"])
    extra = pd.DataFrame({"STATE": ["17"], "PUMA": [EMPTY_PUMA]})
    return pd.concat([units, extra], ignore_index=True)


def _disclosures(folder: Path) -> list[str]:
    ledger = json.loads((folder / "ledger.json").read_text())
    return [d["name"] for d in ledger["disclosures"]]


def test_a_declared_unit_file_is_published_and_nothing_is_disclosed(tmp_path: Path) -> None:
    config = _project(tmp_path, 'geography = "units.csv"', units=_units())
    out = tmp_path / "rel"
    assert main(["-q", "run", str(config), "--out", str(out)]) == 0
    assert "units read from data" not in _disclosures(out)
    hierarchy = pd.read_csv(out / "hierarchy.csv", dtype=str)
    assert EMPTY_PUMA in set(hierarchy["node"])  # the empty unit is published, with its zeros
    resolved = json.loads((out / "config.json").read_text())
    assert resolved["schema"]["geography"] == str((tmp_path / "units.csv").resolve())
    assert main(["-q", "check", str(out)]) == 0
    # the same run without the key discloses the units (what the key avoids)
    plain = _project(tmp_path, "")
    assert main(["-q", "run", str(plain), "--out", str(tmp_path / "plain")]) == 0
    assert "units read from data" in _disclosures(tmp_path / "plain")


@pytest.mark.extra("parquet")  # a streamed release writes Parquet parts
def test_inline_units_and_a_streamed_run(tmp_path: Path) -> None:
    rows = ", ".join(
        f'{{STATE = "{s}", PUMA = "{p}"}}' for s, p in _units().itertuples(index=False)
    )
    config = _project(tmp_path, f"geography = [{rows}]")
    out = tmp_path / "rel"
    assert main(["-q", "run", str(config), "--out", str(out)]) == 0
    assert "units read from data" not in _disclosures(out)
    streamed = tmp_path / "streamed"
    assert main(["-q", "run", str(config), "--stream-by", "STATE", "--out", str(streamed)]) == 0
    assert "units read from data" not in _disclosures(streamed)


def test_a_unit_of_the_data_missing_from_the_list_is_a_clear_error(tmp_path: Path, capsys) -> None:
    units = _units()
    victim = units[units["STATE"] == "17"]["PUMA"].iloc[0]  # a unit that has records
    units = units[units["PUMA"] != victim]
    config = _project(tmp_path, 'geography = "units.csv"', units=units)
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert f"{config}: schema.geography: does not hold the data's units" in err
    assert "record(s) in units the geography does not list" in err
    assert repr(victim) in err
    assert not (tmp_path / "rel").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('geography = "nowhere.csv"', r"schema\.geography: file '.*nowhere\.csv' does not exist"),
        ("geography = 3", r"schema\.geography: must be a file path .* got 3"),
        (
            'geography = [{STATE = "06"}]',
            r"schema\.geography\[0\]: must be a table with exactly the keys \['STATE', 'PUMA'\]",
        ),
        (
            'geography = [{STATE = "01", PUMA = 1.5}]',
            r"schema\.geography\[0\]\.PUMA: must be a non-empty string or an integer; got 1\.5",
        ),
        (
            'geography = [{STATE = "01", PUMA = "1"}, {STATE = "01", PUMA = "1"}]',
            r"schema\.geography: the inline list lists 1 unit\(s\) twice, first \['01', '1'\]",
        ),
    ],
)
def test_bad_geography_values_name_the_key(tmp_path: Path, capsys, line: str, message: str) -> None:
    config = _project(tmp_path, line)
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert str(config) in err
    assert re.search(message, err), err


def test_a_unit_file_without_a_hierarchy_column_names_it(tmp_path: Path, capsys) -> None:
    config = _project(tmp_path, 'geography = "units.csv"', units=_units()[["STATE"]])
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert "schema.geography:" in err and "lacks the hierarchy column(s) ['PUMA']" in err
