"""Tests for the exponential-mechanism fairness analysis."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from synth import SynthError
from synth.fairness import exponential_disparity, group_epsilons, plot_disparity


def _population() -> pd.DataFrame:
    # majority: 1000 people, 5% rare; minority: 20 people, 5% rare (1 person)
    groups = ["major"] * 1000 + ["minor"] * 20
    values = ["rare"] * 50 + ["common"] * 950 + ["rare"] * 1 + ["common"] * 19
    return pd.DataFrame({"group": groups, "value": values})


def test_group_epsilons_by_hand():
    sizes = {"a": 30, "b": 10}
    assert group_epsilons(sizes, Fraction(2), "size") == {"a": Fraction(3, 2), "b": Fraction(1, 2)}
    assert group_epsilons(sizes, Fraction(2), "equal") == {"a": 1, "b": 1}
    assert group_epsilons(sizes, Fraction(2), "full") == {"a": 2, "b": 2}
    with pytest.raises(SynthError, match=r"split \('x'\) must be one of"):
        group_epsilons(sizes, Fraction(1), "x")


def test_minority_over_reported_majority_under_reported_by_hand():
    table = exponential_disparity(_population(), "group", "value", 1)
    rare = table[table["value"] == "rare"].set_index("group")
    # minority: eps 20/1020, P(rare) = 1 / (1 + exp(eps * (19 - 1) / 2))
    eps_minor = 20 / 1020
    assert rare.loc["minor", "p_exponential"] == pytest.approx(1 / (1 + math.exp(eps_minor * 9)))
    assert rare.loc["minor", "p_exponential"] > 0.4 > 0.05 == rare.loc["minor", "true_rate"]
    # majority: eps 1000/1020, P(rare) = 1 / (1 + exp(eps * 900 / 2)) ~ 0
    assert rare.loc["major", "p_exponential"] < 1e-100
    # permute-and-flip with two values: P(rare) = p_rare * 1/2 (visited first, flip passes)
    p_rare = math.exp(-eps_minor * 9)
    assert rare.loc["minor", "p_permute_flip"] == pytest.approx(p_rare / 2)
    assert rare.loc["minor", "p_permute_flip"] < rare.loc["minor", "p_exponential"]
    assert table.groupby("group")["p_exponential"].sum().to_numpy() == pytest.approx([1.0, 1.0])


def test_many_values_use_exact_samples_for_permute_and_flip(tmp_path):
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"g": rng.integers(0, 2, 400), "v": rng.integers(0, 10, 400)})
    table = exponential_disparity(data, "g", "v", 0.5, split="full", draws=40, seed=1)
    assert len(table) == 20
    sums = table.groupby("group")["p_permute_flip"].sum()
    assert sums.to_numpy() == pytest.approx([1.0, 1.0])
    # 40 draws give multiples of 1/40 (Monte Carlo, not enumeration)
    scaled = table["p_permute_flip"].to_numpy() * 40
    assert np.allclose(scaled, np.round(scaled))
    fig = plot_disparity(table, 3, str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").stat().st_size > 1000
    assert fig is not None
    with pytest.raises(SynthError, match=r"group \('nope'\) is not a column of the data"):
        exponential_disparity(data, "nope", "v", 1)
