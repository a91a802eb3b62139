"""Tables that would not fit are refused before they are allocated (issue 30 C2).

Before: a crosstab over columns with 50 million cells ended in a numpy allocation error (or a
solve that never ended); now the error names the table's columns, their sizes and the cells.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from synth._bayesnet import sample_network
from synth._domains import SynthError
from synth._estimate import MAX_TABLE_CELLS, check_cells, histogram
from synth.adaptive import Adaptive
from synth.crosstab import NoisyCrosstab
from synth.metrics import _tvd_tables, marginal_tvds
from synth.privbayes import PrivBayes
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


#: two columns of 20,000 values each (issue 30 C2): their 2-way table has 4e8 cells
HUGE = {"x": list(range(20_000)), "y": list(range(20_000))}


def _huge_data(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({c: rng.choice(v, n) for c, v in HUGE.items()})


def _peak(run) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def test_sampling_a_wide_column_needs_no_records_x_values_temporary() -> None:
    """2,000 records of a 20,000-value column: the sampler compared every record with every
    value (a 2,000 x 20,000 float table, 320 MB, and 8.8 GiB for 59,220 records)."""
    rng = np.random.default_rng(3)
    conditionals = {0: rng.random(20_000), 1: rng.random(20_000)}
    network = [(0, ()), (1, ())]
    codes, peak = _peak(lambda: sample_network(network, conditionals, 2000, rng))
    assert codes.shape == (2000, 2) and peak < 20_000_000, peak


def test_the_sampler_draws_what_comparing_with_every_value_draws() -> None:
    """Against the direct count of cdf entries <= u (the code before), over random networks
    with parents, empty configurations (uniform) and zero cells: the same codes."""
    for seed in range(30):
        rng = np.random.default_rng(seed)
        sizes = [int(s) for s in rng.integers(1, 6, 3)]
        network = [(0, ()), (1, (0,)), (2, (0, 1))]
        conditionals = {
            x: rng.integers(0, 3, (sizes[x], *[sizes[p] for p in parents])).astype(float)
            for x, parents in network
        }
        got = sample_network(network, conditionals, 200, np.random.default_rng(seed))
        want = np.zeros((200, 3), dtype=np.int64)
        draws = np.random.default_rng(seed)
        for x, parents in network:
            cond = conditionals[x]
            flat = cond.reshape(sizes[x], -1).T
            sums = flat.sum(axis=1, keepdims=True)
            flat = np.where(sums > 0, flat / np.where(sums > 0, sums, 1.0), 1.0 / sizes[x])
            config = (
                np.ravel_multi_index(tuple(want[:, p] for p in parents), cond.shape[1:])
                if parents
                else np.zeros(200, dtype=np.int64)
            )
            cdf = np.cumsum(flat, axis=1)
            u = draws.random(200) * cdf[config, -1]
            want[:, x] = np.minimum((u[:, None] >= cdf[config]).sum(axis=1), sizes[x] - 1)
        assert np.array_equal(got, want), seed


@pytest.mark.parametrize("method", ["privbayes", "adaptive"])
def test_two_20000_value_columns_are_synthesised_within_bounded_memory(
    tmp_path: Path, capsys, method: str
) -> None:
    """They ran out of memory (8.82 GiB in PrivBayes's sampler, 2.98 GiB for Adaptive's true
    2-way table); now every table built is within the bound: PrivBayes's are its columns'
    20,000-cell tables, Adaptive never builds the 4e8-cell table it cannot measure."""
    _huge_data().to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "dom.json").write_text(json.dumps(HUGE))
    argv = ["synth", method, str(tmp_path / "d.csv"), "--epsilon", "1", "--seed", "2"]
    argv += ["--domains", str(tmp_path / "dom.json"), "--out", str(tmp_path / "out.csv")]
    code, peak = _peak(lambda: main(argv))
    err = capsys.readouterr().err
    assert code == 0, err
    assert peak < 500_000_000, peak
    assert list(pd.read_csv(tmp_path / "out.csv").columns) == ["x", "y"]
    if method == "adaptive":
        assert "1 workload marginal(s) exceed max_cells (100000 cells)" in err
        assert "x x y (400000000 cells)" in err


def test_caps_above_the_bound_are_refused() -> None:
    with pytest.raises(SynthError, match=r"max_cells \(100,000,000\) must be at most 10,000,000"):
        PrivBayes(1, max_cells=10**8)
    with pytest.raises(SynthError, match=r"max_model_cells \(20,000,000\) must be at most"):
        Adaptive(1, max_model_cells=2 * 10**7)
    PrivBayes(1, max_cells=MAX_TABLE_CELLS)
    Adaptive(1, max_cells=MAX_TABLE_CELLS, max_model_cells=MAX_TABLE_CELLS)


def test_marginal_tvds_over_occupied_cells_equal_the_dense_tables() -> None:
    """The report's k-way TVDs no longer build dense tables (4e8 cells for two 20,000-value
    columns): over 40 random pairs of frames, the same value as the dense computation."""
    for seed in range(40):
        rng = np.random.default_rng(seed)
        sizes = [int(s) for s in rng.integers(1, 5, 3)]
        lengths = [int(n) for n in rng.integers(1, 30, 2)]
        frames = [
            pd.DataFrame({c: rng.integers(0, s, n) for c, s in zip("abc", sizes, strict=True)})
            for n in lengths
        ]
        domains = {c: list(range(s)) for c, s in zip("abc", sizes, strict=True)}
        for k in (1, 2, 3):
            got = marginal_tvds(frames[0], frames[1], k, domains)
            a = np.column_stack([frames[0][c] for c in "abc"]).astype(np.int64).reshape(-1, 3)
            b = np.column_stack([frames[1][c] for c in "abc"]).astype(np.int64).reshape(-1, 3)
            for attrs, value in zip(itertools.combinations(range(3), k), got, strict=True):
                dense = _tvd_tables(histogram(a, sizes, attrs), histogram(b, sizes, attrs))
                assert value == pytest.approx(dense, abs=1e-12), (seed, attrs)


def test_privbayes_total_is_unbiased_on_wide_sparse_columns() -> None:
    """300 records over two 2,000-value columns: the default size was the non-negative tables'
    sum, about 300 + 2,000 x E[max(0, noise)] per table (57,592 at 20,000 values). Now the raw
    sums' combination: over 20 seeds, a z-test of mean 300 at alpha = 0.001 (|z| < 3.29). Power:
    the old bias (thousands) is over 10 standard errors of the mean here."""
    domains = {"x": list(range(2000)), "y": list(range(2000))}
    rng = np.random.default_rng(5)
    data = pd.DataFrame({c: rng.choice(v, 300) for c, v in domains.items()})
    totals = np.array(
        [PrivBayes(1, domains=domains, seed=s).fit(data).total for s in range(20)], dtype=float
    )
    standard_error = totals.std(ddof=1) / np.sqrt(len(totals))
    assert abs(totals.mean() - 300) < 3.29 * standard_error, (totals.mean(), standard_error)
    assert standard_error < 200, standard_error  # and precise enough that a bias would show
