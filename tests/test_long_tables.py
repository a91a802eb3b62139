"""Long (sparse) tables where a level's wide table would not fit (issue 31, item 3).

A DHC tract level is 400 nodes x 1,227,744 cells: its wide table, its int64 counts and its
measurement file as one frame do not fit in memory, while its nonzero cells are at most its
population. These tests lower the thresholds so that a small release crosses them, and check
that the release folder is written and read back part by part, never through the wide table,
with the same files and counts as under the default thresholds.
"""

from __future__ import annotations

import filecmp
import importlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown import Attribute, Schema, Strategy, release
from topdown.errors import ReleaseError
from topdown.measurement import measure
from topdown.measurement.tree import build_tree
from topdown.outputs.microdata import write_csv_parts, write_table
from topdown.product import measurement_file
from topdown.product.cli import main
from topdown.product.release_folder import _differing_nodes, load_release
from topdown.release import Release

CONFIG = data_config(7, ("STATE", "PUMA"))
#: the module (``topdown.release`` the name is the function ``release``)
release_module = importlib.import_module("topdown.release")


def _run(base: Path, name: str) -> Path:
    base.mkdir(exist_ok=True)
    if not (base / "data.csv").exists():
        embedded_subset(("01", "08"), rows_per_state=400).to_csv(base / "data.csv", index=False)
        (base / "c.toml").write_text(CONFIG, encoding="utf-8")
    out = base / name
    assert main(["-q", "run", str(base / "c.toml"), "--out", str(out)]) == 0
    return out


def test_folder_past_the_thresholds_is_long_and_the_same(tmp_path: Path, monkeypatch) -> None:
    """With every threshold at its floor the folder is written without the wide builder, the
    measurement file in parts of 7 rows and read back 5 rows at a time: its files are those of
    the default run on the same seed, its counts the same, and ``topdown check`` passes."""
    default = _run(tmp_path, "default")

    def refuse(self: Release, level: int) -> None:
        raise AssertionError(f"the wide table of level {level} was built")

    with monkeypatch.context() as m:
        m.setattr(release_module, "WIDE_TABLE_MAX_VALUES", 0)
        m.setattr(Release, "wide_table", refuse)
        m.setattr(measure, "FRAME_ROWS", 7)
        m.setattr(measurement_file, "MEASUREMENT_ROWS", 5)
        m.setattr(measurement_file, "MEASUREMENT_BYTES", 64)
        long = _run(tmp_path, "long")
        for name in ("measurements.csv", "tables/level_2_PUMA.csv", "microdata.csv"):
            assert filecmp.cmp(default / name, long / name, shallow=False), name
        rel_long, _ = load_release(long)
        assert main(["check", str(long)]) == 0
    rel_default, _ = load_release(default)
    for a, b in zip(rel_default.counts, rel_long.counts, strict=True):
        assert np.array_equal(a, b)
    # read back in the narrowest type that holds them, as the release kept them
    assert rel_long.counts[-1].dtype.itemsize < 8
    for a, b in zip(rel_default.measurements.levels, rel_long.measurements.levels, strict=True):
        for ma, mb in zip(a, b, strict=True):
            assert np.array_equal(ma.noisy, mb.noisy) and ma.variance == mb.variance


def test_measurement_parts_make_the_whole_file(tmp_path: Path) -> None:
    df = embedded_subset(("01", "08"), rows_per_state=100)
    schema = Schema((Attribute("SEX", values=(1, 2)),), ("STATE",))
    rel = release(df, schema, Strategy.from_budgets([1, 1]), seed=3)
    frames = list(rel.measurements.frames(rel.tree, max_rows=3))
    assert max(len(f) for f in frames) <= 3 and len(frames) > 2
    write_table(rel.measurements.to_frame(rel.tree), tmp_path / "whole.csv")
    write_csv_parts(rel.measurements.frames(rel.tree, max_rows=3), tmp_path / "parts.csv")
    assert (tmp_path / "whole.csv").read_bytes() == (tmp_path / "parts.csv").read_bytes()


def test_wide_table_refused_past_the_threshold(monkeypatch) -> None:
    df = embedded_subset(("01", "08"), rows_per_state=100)
    schema = Schema((Attribute("SEX", values=(1, 2)),), ("STATE",))
    rel = release(df, schema, Strategy.from_budgets([1, 1]), seed=3)
    wide = rel.tables[1]
    long = rel.long_table(1)
    expected = np.zeros((2, 2), dtype=np.int64)
    nodes = list(wide.index)
    for row in long.itertuples():
        expected[nodes.index(row.node), (1, 2).index(row.SEX)] = row.count
    assert np.array_equal(wide.to_numpy(), expected) and expected.sum() == 200
    monkeypatch.setattr(release_module, "WIDE_TABLE_MAX_VALUES", 3)  # the root's 2 fit
    assert rel.tables[0].shape == (1, 2)
    with pytest.raises(ReleaseError, match=r"level 1's wide table \(2 nodes x 2 cells = 4 values"):
        rel.tables[1]
    with pytest.raises(ReleaseError, match=r"Release.long_table\(1\)"):
        rel.wide_table(1)
    assert list(rel.tables) == [0, 1] and len(rel.tables) == 2


def test_microdata_check_in_long_form_names_the_differing_units() -> None:
    counts = np.array([[0, 2, 1], [1, 0, 0], [0, 0, 0]], dtype=np.int8)
    node = np.array([0, 0, 0, 1])
    cell = np.array([1, 1, 2, 0])
    assert _differing_nodes(node, cell, counts).tolist() == []
    # one record moved from unit 0 to unit 2, and one missing from unit 1
    assert _differing_nodes(np.array([0, 2, 0]), np.array([1, 1, 2]), counts).tolist() == [
        0,
        1,
        2,
    ]
    # a negative count is never matched by records
    bad = counts.copy()
    bad[2, 2] = -1
    assert _differing_nodes(node, cell, bad).tolist() == [2]


def test_histograms_from_the_occupied_cells_equal_a_bincount() -> None:
    """``build_tree`` writes each level's histograms at the records' cells only (no int64
    array of every cell): the same counts as a bincount over the level, in the narrowest
    type that holds them."""
    rng = np.random.default_rng(11)
    n = 3000
    df = pd.DataFrame(
        {
            "C": rng.choice(["a", "b", "c"], n),
            "T": rng.integers(0, 7, n).astype(str),
            "X": rng.integers(0, 5, n),
            "Y": rng.integers(0, 4, n),
        }
    )
    df.loc[:399, ["C", "T", "X", "Y"]] = ["a", "0", 0, 0]  # one cell of 400+: int16
    df["T"] = df["C"] + df["T"]
    schema = Schema(
        (Attribute("X", values=tuple(range(5))), Attribute("Y", values=tuple(range(4)))),
        ("C", "T"),
    )
    tree, truth = build_tree(df, schema)
    cells = schema.encode_cells(df)
    for lv, counts in zip(tree.levels, truth.counts, strict=True):
        column = lv.column
        node = (
            np.zeros(n, dtype=np.int64)
            if column is None
            else np.searchsorted(lv.labels.astype(str), df[column].astype(str).to_numpy())
        )
        expected = np.bincount(node * 20 + cells, minlength=lv.size * 20).reshape(lv.size, 20)
        assert np.array_equal(counts, expected)
        assert counts.dtype == (np.int16 if expected.max() > 127 else np.int8)
    assert truth.counts[0].dtype == np.int16 and truth.counts[2].max() >= 400
