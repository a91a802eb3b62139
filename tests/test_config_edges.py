"""Config edge cases and a full disk, each a clear error naming its source (issue 30 D4).

Before: a 1,000-deep TOML value gave a bare "maximum recursion depth exceeded" and a 400-digit
budget "integer division result too large for a float" (exit 1); a full disk gave the errno
without the file being written.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.outputs.microdata import write_table
from topdown.product.cli import main
from topdown.product.config import ConfigError, load_config

BUDGETS = 'budgets = ["1/2", "1/2"]'


def _config(folder: Path, text: str, name: str = "c.toml") -> Path:
    embedded_subset(("01",), 50).to_csv(folder / "data.csv", index=False)
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


def _run(config: Path, capsys) -> tuple[int, str]:
    code = main(["-q", "run", str(config), "--out", str(config.parent / "rel")])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            data_config(4, ("STATE",), "[executor]\nworkers = " + "[" * 1000 + "]" * 1000 + "\n"),
            "executor.workers",
        ),  # fmt: skip
        (
            data_config(4, ("STATE",), "[executor]\nworkers = [\n" + "{a = [\n" * 500 + "\n"),
            "executor.workers",
        ),  # fmt: skip
    ],
)
def test_a_deeply_nested_value_names_the_file_and_the_key(
    tmp_path: Path, capsys, text: str, where: str
) -> None:
    config = _config(tmp_path, text)
    code, err = _run(config, capsys)
    assert code == 2
    assert (
        f"topdown: error: {config}: {where}: is nested more than 64 levels deep (arrays or "
        "tables within each other)"
    ) in err
    assert "recursion" not in err


def test_a_deeply_nested_json_config_names_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, '{"seed": ' + "[" * 1000 + "]" * 1000 + "}", "c.json")
    with pytest.raises(ConfigError, match=r"c\.json: seed: is nested more than 64 levels deep"):
        load_config(config)


@pytest.mark.parametrize(
    ("budget", "shown"),
    [("9" * 400, "999999...(400 digits)"), (f'"{"9" * 400}"', "'99999999999")],
)
def test_a_400_digit_budget_names_the_file_and_the_key(
    tmp_path: Path, capsys, budget: str, shown: str
) -> None:
    config = _config(
        tmp_path, data_config(4, ("STATE",)).replace(BUDGETS, f'budgets = [{budget}, "1/2"]')
    )
    code, err = _run(config, capsys)
    assert code == 2
    assert f"topdown: error: {config}: strategy.budgets[0]: {shown}" in err
    assert "gives query 'detailed' a budget of about 1e+400 (share 3/4)" in err
    assert "must be in [1e-15, 1e+06]" in err


def test_a_number_beyond_the_digit_limit_names_the_key(tmp_path: Path, capsys) -> None:
    config = _config(
        tmp_path, data_config(4, ("STATE",)).replace(BUDGETS, f"budgets = [{'9' * 5000}, 1]")
    )
    code, err = _run(config, capsys)
    assert code == 2
    assert f"{config}: strategy.budgets: holds a number of 5000 digits; at most 400 are read" in err


def test_a_full_disk_names_the_file_being_written(tmp_path: Path, capsys, monkeypatch) -> None:
    config = _config(tmp_path, data_config(4, ("STATE",)))
    real = pd.DataFrame.to_csv

    def full(self, path=None, *args, **kwargs):
        if path is not None and ".microdata.csv." in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write() reports it
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    code, err = _run(config, capsys)
    assert code == 1
    assert "No space left on device" in err
    assert "microdata.csv" in err, err
    assert not (tmp_path / "rel").exists()
    with pytest.raises(OSError) as caught:  # the table writer itself
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "x" / "microdata.csv")
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "x" / "microdata.csv")
    assert not list((tmp_path / "x").iterdir())  # no temporary file left
