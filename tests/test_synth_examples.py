"""The examples/ walk-throughs run (on subsamples, to stay fast) and show what they claim."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from benchmarks.acs import shared_data

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    if not (shared_data() / "adult" / "adult.csv").exists():
        pytest.skip(f"the shared data is not at {shared_data()}")
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_naive_bayes_example():
    result = _load("synth_adult_naive_bayes").main(rows=4000, epsilon=2.0)
    assert result["tvd"] < 0.05 and result["tstr_auc"] > 0.75


def test_fairness_example(tmp_path):
    table = _load("synth_fairness").main(epsilon=1.0, plot=str(tmp_path / "f.png"))
    rare = table[table["value"] == ">50K"].set_index("group")
    # the smallest group over-reports the rare class, the largest under-reports it
    assert (
        rare.loc["Amer-Indian-Eskimo", "p_exponential"]
        > rare.loc["Amer-Indian-Eskimo", "true_rate"]
    )
    assert rare.loc["White", "p_exponential"] < rare.loc["White", "true_rate"]
    assert (tmp_path / "f.png").exists()


def test_crosstab_example():
    summary = _load("synth_crosstab").main(epsilon=1.0, rows=5000)
    assert summary["relative_l1"] < 0.05


def test_dp2pub_example():
    table = _load("synth_dp2pub_acs").main(epsilon=8.0, rows=3000)
    assert set(table.columns) == {"DP2-Pub", "GRR+PRAM floor"}
    assert table.loc[1, "DP2-Pub"] < 0.3


def test_adaptive_example():
    result = _load("synth_adult_adaptive").main(rows=3000, epsilon=2.0, iters=30)
    assert result["tvd2"] < 0.1 and result["tstr_auc"] > 0.75
