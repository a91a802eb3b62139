"""Bad input to the Python API: messages that name the argument, before any noise is drawn."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import embedded_subset

from mechanisms.errors import BudgetError
from topdown import Attribute, Schema, Strategy, TopDown, release
from topdown.errors import DataError
from topdown.product.release_folder import _write_json


@pytest.mark.parametrize(
    "data,shown",
    [
        ([1, 2], "[1, 2], a list"),
        (np.zeros(3), "a ndarray"),
        (None, "None, a NoneType"),
        (42, "42"),
    ],
)
def test_topdown_data_must_be_a_path_or_a_frame(data, shown) -> None:
    with pytest.raises(
        DataError, match="must be a path to a CSV or Parquet file, or a pandas"
    ) as e:
        TopDown(data, ["STATE"], ["SEX"], domain={"SEX": [1, 2]})
    assert shown in str(e.value)


def test_topdown_hierarchy_as_a_string_is_refused() -> None:
    df = embedded_subset(("01",), rows_per_state=50)
    with pytest.raises(DataError, match=r"hierarchy \('STATE'\) must be a list of column names"):
        TopDown(df, "STATE", ["SEX"], domain={"SEX": [1, 2]})
    with pytest.raises(DataError, match=r"queries \('SEX'\) must be a list"):
        TopDown(df, ["STATE"], "SEX", domain={"SEX": [1, 2]})


def _small():
    df = embedded_subset(("01",), rows_per_state=100)
    return df, Schema((Attribute("SEX", values=(1, 2)),), hierarchy=("STATE",))


def test_unknown_solver_is_refused_before_measuring(caplog) -> None:
    df, schema = _small()
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(Exception, match="solver .nope. is not a registered solver"),
    ):
        release(df, schema, Strategy.from_budgets([1, 1]), solver="nope")
    assert not [r for r in caplog.records if "measured level" in r.getMessage()]


@pytest.mark.parametrize("budget", ["1e-300", "1e308"])
def test_budgets_outside_the_samplers_range(budget: str) -> None:
    df, schema = _small()
    with pytest.raises(
        BudgetError, match=r"level 0 query 'detailed'.*must be in \[1e-15, 1e\+06\]"
    ):
        release(df, schema, Strategy.from_budgets([budget, 1]), seed=1)


def test_json_is_standard(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    _write_json(path, {"a": float("inf"), "b": [np.float64("nan"), 1.5]})
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"a": None, "b": [None, 1.5]}
