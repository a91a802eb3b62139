"""benchmarks/bench_synth.py's peer plumbing: the private-pgm peer's domain file, fits saved by
benchmarks/peer_pgm.py read back, a peer's own time and memory in its row, one peer fit per
seed (a peer used to run once per epsilon, whatever the seeds), all without a peer installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import bench_synth


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
