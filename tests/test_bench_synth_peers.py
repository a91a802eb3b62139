"""benchmarks/bench_synth.py's peer plumbing: the private-pgm peer's domain file, fits saved by
benchmarks/peer_pgm.py read back, a peer's own time and memory in its row, one peer fit per
seed (a peer used to run once per epsilon, whatever the seeds), all without a peer installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchmarks import bench_synth
from synth import Adaptive


def _small() -> tuple[pd.DataFrame, dict, None]:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "a": rng.integers(0, 3, 200),
            "b": rng.choice(["y", "x"], 200),
            "c": rng.integers(0, 2, 200),
        }
    )
    return frame, {"a": [2, 1, 0]}, None


def test_domain_file_keeps_declared_order_and_sorts_the_rest(tmp_path: Path) -> None:
    frame, domains, _ = _small()
    path = bench_synth._domain_file(frame, domains, tmp_path)
    assert json.loads(path.read_text()) == {"a": ["2", "1", "0"], "b": ["x", "y"], "c": ["0", "1"]}


def test_saved_peer_reads_the_fit_and_its_statistics(tmp_path: Path) -> None:
    frame, domains, _ = _small()
    frame.attrs["name"] = "small"
    synthetic = frame.sample(frac=1.0, random_state=1)
    synthetic.to_csv(tmp_path / "aim_small_s4.csv", index=False)
    stats = {"seconds": 12.5, "cpu_s": 20.0, "peak_mib": 900.0, "epsilon": 1.0}
    (tmp_path / "aim_small_s4.json").write_text("progress\n" + json.dumps(stats) + "\n")
    peer = bench_synth._saved_peer(tmp_path, "aim")
    out, read = peer(frame, domains, 1.0, 4)
    assert read == stats
    assert out.dtypes.to_dict() == frame.dtypes.to_dict()
    pd.testing.assert_frame_equal(out.reset_index(drop=True), synthetic.reset_index(drop=True))
    with pytest.raises(ValueError, match="epsilon 1.0, not 4.0"):
        peer(frame, domains, 4.0, 4)
    with pytest.raises(FileNotFoundError, match="aim_small_s5"):
        peer(frame, domains, 1.0, 5)


def test_a_peer_row_carries_the_peer_process_time_and_memory() -> None:
    frame, _, _ = _small()
    stats = {"seconds": 321.0, "cpu_s": 640.0, "peak_mib": 1500.0}
    row = bench_synth._timed("peer", 1.0, frame, lambda: (frame, stats), None)
    assert row is not None
    assert (row["seconds"], row["cpu_s"], row["peak_mib"]) == (321.0, 640.0, 1500.0)
    assert row["tvd1"] == row["tvd3"] == 0.0  # the real data scored against itself
    own = bench_synth._timed("ours", 1.0, frame, lambda: frame, None)
    assert own is not None and np.isnan(own["peak_mib"]) and own["cpu_s"] >= 0.0


def test_every_peer_runs_once_per_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[float, int]] = []

    def peer(df: pd.DataFrame, domains: dict, eps: float, seed: int) -> tuple:
        calls.append((eps, seed))
        return df, {"seconds": 1.0, "cpu_s": 1.0, "peak_mib": 1.0}

    monkeypatch.setitem(bench_synth.DATASETS, "small", _small)
    table = bench_synth.run(["small"], [1.0, 2.0], [0, 1, 2], {"fake": peer}, [1.0], ["none"])
    assert calls == [(1.0, 0), (1.0, 1), (1.0, 2)]
    fake = table[table["method"] == "fake"]
    assert list(fake["runs"]) == [3]
    assert list(fake["peak_mib"]) == [1.0]


def test_peer_ratios_divide_our_mean_by_each_peer_mean() -> None:
    rows = [
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.02},
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.04},
        {"data": "d", "eps": 1.0, "method": "AIM (private-pgm)", "tvd3": 0.05},
        {"data": "d", "eps": 1.0, "method": "MST (smartnoise)", "tvd3": 0.12},
        {"data": "d", "eps": 4.0, "method": "Adaptive (ours)", "tvd3": 0.01},  # no peer at 4
        {"data": "e", "eps": 1.0, "method": "bootstrap floor", "tvd3": 0.01},
    ]
    table = bench_synth.peer_ratios(rows)
    assert list(table["peer"]) == ["AIM (private-pgm)", "MST (smartnoise)"]
    assert table["ratio_tvd3"].tolist() == pytest.approx([0.6, 0.25])
    assert bench_synth.peer_ratios([]).empty


def test_peer_inputs_are_the_data_and_its_domain_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(bench_synth.DATASETS, "small", _small)
    bench_synth.write_peer_inputs(["small"], tmp_path / "inputs")
    frame, _, _ = _small()
    written = pd.read_csv(tmp_path / "inputs" / "small.csv")
    pd.testing.assert_frame_equal(written, frame)
    values = json.loads((tmp_path / "inputs" / "small.json").read_text())
    assert values == {"a": ["2", "1", "0"], "b": ["x", "y"], "c": ["0", "1"]}


def test_saved_round_records_are_a_second_peer_when_present(tmp_path: Path) -> None:
    frame, domains, _ = _small()
    frame.attrs["name"] = "small"
    first, second = tmp_path / "np", tmp_path / "jax"
    first.mkdir()
    second.mkdir()
    stats = {"seconds": 5.0, "cpu_s": 4.0, "peak_mib": 100.0, "epsilon": 1.0}
    iid, rounded = frame.iloc[:150], frame.iloc[50:]
    iid.to_csv(first / "aim_small_s0.csv", index=False)
    rounded.to_csv(first / "aim_small_s0.round.csv", index=False)
    (first / "aim_small_s0.json").write_text(json.dumps(stats))
    frame.to_csv(second / "aim_small_s1.csv", index=False)  # seed 1: the second folder only
    (second / "aim_small_s1.json").write_text(json.dumps(stats))
    assert list(bench_synth._saved_peers([second])) == ["AIM (private-pgm, saved)"]
    peers = bench_synth._saved_peers([first, second])
    assert list(peers) == ["AIM (private-pgm, saved)", "AIM round (private-pgm, saved)"]
    out, read = peers["AIM round (private-pgm, saved)"](frame, domains, 1.0, 0)
    assert read == stats and len(out) == len(rounded)
    pd.testing.assert_frame_equal(out, rounded.reset_index(drop=True))
    out, _ = peers["AIM (private-pgm, saved)"](frame, domains, 1.0, 1)
    pd.testing.assert_frame_equal(out, frame)
    with pytest.raises(FileNotFoundError, match=r"aim_small_s1\.round\.csv"):
        peers["AIM round (private-pgm, saved)"](frame, domains, 1.0, 1)


def test_adaptive_rows_share_one_fit_and_do_not_depend_on_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fits: list[int] = []

    class Counted(Adaptive):
        def fit(self, data: pd.DataFrame) -> Adaptive:
            fits.append(1)
            return super().fit(data)

    def small_adaptive(eps: float, **kwargs: Any) -> Adaptive:
        return Counted(eps, iters=10, final_iters=20, **kwargs)

    monkeypatch.setattr(bench_synth, "Adaptive", small_adaptive)
    frame, domains, _ = _small()
    runs = bench_synth._adaptive_runs(frame, domains, 2.0, 5)
    assert list(runs) == ["Adaptive (ours, delta 1e-9)", "Adaptive-rounded (ours, delta 1e-9)"]
    rounded, stats = runs["Adaptive-rounded (ours, delta 1e-9)"]()
    iid, _ = runs["Adaptive (ours, delta 1e-9)"]()
    assert fits == [1] and stats["cpu_s"] > 0
    again = bench_synth._adaptive_runs(frame, domains, 2.0, 5)
    iid_first, _ = again["Adaptive (ours, delta 1e-9)"]()
    rounded_second, _ = again["Adaptive-rounded (ours, delta 1e-9)"]()
    pd.testing.assert_frame_equal(iid, iid_first)
    pd.testing.assert_frame_equal(rounded, rounded_second)
    direct = Counted(2.0, iters=10, final_iters=20, delta=1e-9, domains=domains, seed=5)
    # what the row was before: the generator's i.i.d. records
    pd.testing.assert_frame_equal(iid, direct.fit(frame).sample(method="iid"))


def test_peer_ratios_name_each_of_ours() -> None:
    rows = [
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.04},
        {"data": "d", "eps": 1.0, "method": "Adaptive-rounded (ours)", "tvd3": 0.03},
        {"data": "d", "eps": 1.0, "method": "AIM round (private-pgm, saved)", "tvd3": 0.05},
    ]
    table = bench_synth.peer_ratios(rows)
    assert list(table["ours"]) == ["Adaptive (ours)", "Adaptive-rounded (ours)"]
    assert table["ratio_tvd3"].tolist() == pytest.approx([0.8, 0.6])


def test_peer_ratios_compare_on_the_seeds_both_ran() -> None:
    rows = [
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.02, "seed": 0},
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.04, "seed": 1},
        {"data": "d", "eps": 1.0, "method": "Adaptive (ours)", "tvd3": 0.09, "seed": 2},
        {"data": "d", "eps": 1.0, "method": "AIM (private-pgm, saved)", "tvd3": 0.05, "seed": 0},
        {"data": "d", "eps": 1.0, "method": "AIM (private-pgm, saved)", "tvd3": 0.07, "seed": 1},
        {"data": "d", "eps": 1.0, "method": "bootstrap floor", "tvd3": 0.01},
    ]
    table = bench_synth.peer_ratios(rows)
    assert table[["ours", "peer", "seeds"]].values.tolist() == [
        ["Adaptive (ours)", "AIM (private-pgm, saved)", "0 1"]
    ]
    assert table["ratio_tvd3"].tolist() == pytest.approx([0.03 / 0.06])  # seed 2 left out
