"""Bad input to ``topdown run``: one clear message on stderr, the right exit code, nothing left behind.

Each case edits a small valid project (config + data), runs ``topdown.product.cli.main`` in-process and
checks the exit code (2 for usage, config and input-data errors), the message (file, key or
column, value, rule), that there is no traceback, and that no output or temporary folder exists.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import SEX_AGE, embedded_subset

from topdown.product.cli import main

CONFIG = (
    """
seed = 3
[data]
path = "data.csv"
[schema]
hierarchy = ["STATE", "PUMA"]
"""
    + SEX_AGE
    + """[strategy]
mechanism = "discrete_gaussian"
budgets = ["1/2", "1/2", "1/2"]
[solver]
name = "auto"
[executor]
name = "serial"
"""
)


def _data() -> pd.DataFrame:
    return embedded_subset(("01", "08"), rows_per_state=300)


def _project(folder: Path, config: str = CONFIG, data: pd.DataFrame | None = None) -> Path:
    (data if data is not None else _data()).to_csv(folder / "data.csv", index=False)
    path = folder / "config.toml"
    path.write_text(config, encoding="utf-8")
    return path


def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return edit


def _with_nan(df: pd.DataFrame) -> pd.DataFrame:
    df = df.astype({"SEX": float})
    df.loc[5, "SEX"] = float("nan")
    return df


def _not_a_tree(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[0, "STATE"] = "08"  # a PUMA of state 01 now also sits under state 08
    return df


def _outside(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[3, "SEX"] = 3
    return df


# (id, config edit, data edit, words the message must contain)
CASES = [
    (
        "missing data file",
        _replace('path = "data.csv"', 'path = "nope.csv"'),
        None,
        ["nope.csv", "does not exist"],
    ),
    (
        "missing column",
        _replace('column = "AGEP"', 'column = "AGE_YEARS"'),
        None,
        ["AGE_YEARS", "lacks column"],
    ),
    (
        "value outside domain",
        None,
        _outside,
        ["data.csv", "'SEX'", "outside the declared domain", "[3]", "schema.attributes[0]"],
    ),
    ("NaN", None, _with_nan, ["data.csv", "'SEX'", "NaN", "row(s) [5]"]),
    (
        "not a tree",
        None,
        _not_a_tree,
        ["data.csv", "'PUMA' is not a tree", "'01-01301' under ['01', '08']"],
    ),
    (
        "zero budget",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = ["1/2", 0, "1/2"]'),
        None,
        ["config.toml", "strategy.budgets[1]", "must be > 0"],
    ),
    (
        "negative budget",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = ["1/2", "1/2", -0.5]'),
        None,
        ["strategy.budgets[2]", "must be > 0"],
    ),
    (
        "non-numeric budget",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = ["half", "1/2", "1/2"]'),
        None,
        ["strategy.budgets[0]", "'half'", "finite number"],
    ),
    (
        "budget count",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = ["1/2", "1/2"]'),
        None,
        ["config.toml", "strategy.budgets", "gives 2 level(s) but the hierarchy has 3"],
    ),
    (
        "unknown mechanism",
        _replace('mechanism = "discrete_gaussian"', 'mechanism = "gaussian_noise"'),
        None,
        ["strategy.mechanism", "'gaussian_noise'", "discrete_laplace"],
    ),
    (
        "unknown solver",
        _replace('name = "auto"', 'name = "gurobi9"'),
        None,
        ["solver.name", "'gurobi9'", "highs"],
    ),
    (
        "unknown executor",
        _replace('name = "serial"', 'name = "spark"'),
        None,
        ["executor.name", "'spark'", "dask"],
    ),
    (
        "unknown key",
        _replace("[solver]", "[solver]\ntimeout = 3"),
        None,
        ["solver.timeout", "unknown key"],
    ),
    (
        "constraint unknown attribute",
        lambda t: t + '[[constraints]]\nstructural_zero = {expr = {equal = ["RACE", 1]}}\n',
        None,
        ["constraints[0].structural_zero.expr.equal", "'RACE'", "is not in the domain"],
    ),
    (
        "constraint unknown value",
        lambda t: t + '[[constraints]]\nsum_equal = {expr = {equal = ["SEX", 3]}, value = 0}\n',
        None,
        ["constraints[0].sum_equal.expr.equal", "value 3", "[1, 2]"],
    ),
    (
        "contradictory constraints",
        lambda t: (
            t + "[[constraints]]\nsum_equal = {expr = {true = {}}, value = 0}\n"
            '[[constraints]]\nsum_greater_equal = {expr = {equal = ["SEX", 1]}, value = 5}\n'
        ),
        None,
        ["constraints", "contradictory"],
    ),
    (
        "constraint unknown node",
        lambda t: (
            t
            + '[[constraints]]\nsum_less_equal = {expr = {true = {}}, value = 9}\nlevel = 1\nnodes = ["99"]\n'
        ),
        None,
        ["constraints", "'99'"],
    ),
    ("invalid toml", lambda t: t + "strategy = [[[\n", None, ["config.toml", "not valid TOML"]),
    (
        "tiny budget",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = [1e-300, "1/2", "1/2"]'),
        None,
        ["config.toml", "strategy.budgets[0]", "1e-300", "must be in [1e-15, 1e+06]"],
    ),
    (
        "huge budget",
        _replace('budgets = ["1/2", "1/2", "1/2"]', 'budgets = ["1/2", "1/2", 1e308]'),
        None,
        ["strategy.budgets[2]", "1e+308", "must be in [1e-15, 1e+06]"],
    ),
    (
        "missing truth file",
        lambda t: t + '[metrics]\ntruth = "missing.csv"\n',
        None,
        ["config.toml", "metrics.truth", "missing.csv", "does not exist"],
    ),
    (
        "duplicate column header",
        None,
        lambda df: df.assign(AGEP2=df["SEX"]).rename(columns={"AGEP2": "SEX"}),
        ["data.csv", "['SEX'] more than once"],
    ),
    (
        "derived column overwrites a different one",
        _replace("[schema]", '[data.derive]\nSTATE = {from = "PUMA", slice = [3, 5]}\n[schema]'),
        None,
        ["derived column 'STATE'", "from 'PUMA'", "overwrite the data's own column 'STATE'"],
    ),
    (
        "one float outside the domain",
        None,
        lambda df: df.astype({"SEX": float}).assign(
            SEX=lambda d: d["SEX"].where(d.index != 7, 1.5)
        ),
        ["'SEX' has 1 row(s) with values outside", "[1.5]", "row(s) [7]"],
    ),
    (
        "empty hierarchy label",
        None,
        lambda df: df.assign(PUMA=df["PUMA"].where(df.index != 10, "")),
        ["'PUMA'", "row(s) [10]"],
    ),
]


@pytest.mark.parametrize(
    "edit_config,edit_data,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input(tmp_path: Path, capsys, edit_config, edit_data, words) -> None:
    config = _project(
        tmp_path,
        edit_config(CONFIG) if edit_config else CONFIG,
        edit_data(_data()) if edit_data else None,
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["-q", "run", str(config), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("topdown: error:")]
    assert len(lines) == 1, err
    for word in words:
        assert word in err, (word, err)
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing is left behind"


def test_empty_and_unreadable_csv(tmp_path: Path, capsys) -> None:
    config = _project(tmp_path)
    (tmp_path / "data.csv").write_text("")
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "data.csv" in (err := capsys.readouterr().err) and "empty" in err
    (tmp_path / "data.csv").write_text("STATE,PUMA,SEX,AGEP\n")
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "no rows" in capsys.readouterr().err
    (tmp_path / "data.csv").write_bytes(b"\x00\xff\xfe" * 100)
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "data.csv" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_config_and_existing_output(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in capsys.readouterr().err
    config = _project(tmp_path)
    (tmp_path / "out").mkdir()
    assert main(["-q", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert list((tmp_path / "out").iterdir()) == []


def test_bad_overrides(tmp_path: Path, capsys) -> None:
    config = _project(tmp_path)
    assert main(["-q", "run", str(config), "--executor", "spark"]) == 2
    assert "--executor" in capsys.readouterr().err
    assert main(["-q", "run", str(config), "--seed", "x"]) == 2
    assert "--seed" in capsys.readouterr().err
    assert main(["-q", "run", str(config), "--seed", "-1", "--out", str(tmp_path / "o")]) == 2
    assert "--seed: must be a non-negative integer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_output_folder_holding_the_inputs_is_refused(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``--out . --overwrite`` in the project folder would delete the config and the data."""
    config = _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["-q", "run", "config.toml", "--out", ".", "--overwrite"]) == 2
    assert "holds the input" in capsys.readouterr().err
    assert main(["-q", "run", str(config), "--out", str(tmp_path.parent), "--overwrite"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_unwritable_output_parent_is_refused_before_any_work(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import topdown.product.cli as cli
    import topdown.product.output_claim as output_claim

    config = _project(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes anywhere: deny it the way the kernel would a user
        real = os.access
        monkeypatch.setattr(
            output_claim.os, "access", lambda p, m: Path(p) != locked and real(p, m)
        )

    def no_reading(*args, **kwargs):
        raise AssertionError("the data was read before the output was checked")

    monkeypatch.setattr(cli, "load_data", no_reading)
    try:
        assert main(["-q", "run", str(config), "--out", str(locked / "rel")]) == 2
        assert f"the parent folder of the output '{locked}' is not writable" in (
            capsys.readouterr().err
        )
    finally:
        locked.chmod(0o700)


def test_disk_full_names_the_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    import topdown.product.release_folder as release_folder

    config = _project(tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(release_folder, "write_table", full)
    out = tmp_path / "out"
    assert main(["-q", "run", str(config), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"writing the release folder '{out}' failed" in err and "No space left" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "data.csv"]


def test_verbose_shows_the_traceback(tmp_path: Path, capsys) -> None:
    config = _project(tmp_path, _replace('path = "data.csv"', 'path = "nope.csv"')(CONFIG))
    assert main(["-v", "run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "Traceback" in capsys.readouterr().err
