"""Tables that would not fit are refused before they are allocated (issue 30 C2).

Before: a crosstab over columns with 50 million cells ended in a numpy allocation error (or a
solve that never ended); now the error names the table's columns, their sizes and the cells.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from synth._domains import SynthError
from synth._estimate import MAX_TABLE_CELLS, check_cells
from synth.crosstab import NoisyCrosstab
from topdown.product.cli import main

WIDE = {"a": list(range(5000)), "b": list(range(5000)), "c": [0, 1]}


def _data() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({c: rng.choice(v, 50) for c, v in WIDE.items()})


def test_a_crosstab_of_50_million_cells_is_refused_before_allocating() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SynthError) as err:
            NoisyCrosstab(1, domains=WIDE, seed=1).fit(_data())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(err.value).startswith(
        "crosstab a x b x c: the table has 50,000,000 cells (5000 x 5000 x 2 values); at most "
        "10,000,000 are measured (each is a variable of the estimation, about 10.0 GB of memory"
    )
    assert "measure fewer columns, or declare coarser domains" in str(err.value)
    assert peak < 50_000_000  # nothing of the table's 400 MB (int64) was allocated


def test_tables_within_the_bound_pass() -> None:
    check_cells((MAX_TABLE_CELLS // 2, 2), [(0, 1)], ["t"])  # exactly the bound
    with pytest.raises(SynthError, match=r"t: the table has 10,000,002 cells \(5000001 x 2"):
        check_cells((MAX_TABLE_CELLS // 2 + 1, 2), [(0, 1)], ["t"])
    with pytest.raises(SynthError, match=r"u: the table has 6,000,000 cells .*, 12,000,000 with"):
        check_cells((3000, 2000), [(0, 1), (0, 1)], ["u", "v"])


def test_the_command_line_names_the_columns(tmp_path: Path, capsys) -> None:
    _data().to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "dom.json").write_text(json.dumps(WIDE))
    argv = ["-q", "synth", "crosstab", str(tmp_path / "d.csv"), "--epsilon", "1"]
    argv += ["--domains", str(tmp_path / "dom.json"), "--out", str(tmp_path / "out.csv")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "crosstab a x b x c: the table has 50,000,000 cells (5000 x 5000 x 2 values)" in err
    assert not (tmp_path / "out.csv").exists()


def test_an_engine_level_that_would_not_fit_is_refused_before_allocating(monkeypatch) -> None:
    """The engine's dense (nodes x cells) histograms: the level, its nodes, the domain and the
    memory are named before np.bincount runs."""
    from topdown import Attribute, Schema
    from topdown.errors import DataError
    from topdown.measurement import tree as tree_module

    monkeypatch.setattr(tree_module, "physical_memory", lambda: 1_000_000)  # a 1 MB machine
    schema = Schema(
        (Attribute("A", values=tuple(range(100))), Attribute("B", values=tuple(range(50)))),
        ("UNIT",),
    )
    data = pd.DataFrame({"UNIT": [f"U{i}" for i in range(200)], "A": 1, "B": 2})
    called = []
    monkeypatch.setattr(tree_module.np, "bincount", lambda *a, **k: called.append(1))
    with pytest.raises(DataError) as err:
        tree_module.build_tree(data, schema)
    assert str(err.value).startswith(
        "level 1 (UNIT) has 200 nodes x 5,000 cells (A (100) x B (50)) = 1,000,000 cells, "
        "about 16 MB to build its histograms, more than this machine's 1 MB"
    )
    assert "or stream the release (stream_by)" in str(err.value) and not called
