"""A streamed release (the two-sweep BLUE, the default estimator) on Dask (a LocalCluster of two
workers) and on a process pool is the serial one, count for count: every table part, every
noisy measurement, every microdata record, the ledger."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from test_stream import QUIET, SCHEMA, _geography, _records, _state_total, _strategy

from topdown.streaming.run import release_streamed

pytest.importorskip("distributed", reason="the 'dask' extra is not installed")


def _files(folder, kind: str) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in (folder / kind).rglob("*.parquet"))


def test_streamed_release_on_dask_equals_serial(cluster, tmp_path):
    geo = _geography()
    data = _records(geo)
    kwargs = dict(
        stream_by="COUNTY",
        geography=geo,
        constraints=_state_total(),
        seed=21,
        progress=QUIET,
        estimator="blue",
    )
    serial = release_streamed(data, SCHEMA, _strategy(), out=tmp_path / "serial", **kwargs)
    on_dask = release_streamed(
        data,
        SCHEMA,
        _strategy(),
        out=tmp_path / "dask",
        executor="dask",
        address=cluster.scheduler_address,
        **kwargs,
    )
    pooled = release_streamed(
        data,
        SCHEMA,
        _strategy(),
        out=tmp_path / "pool",
        executor="processes",
        workers=2,
        **kwargs,
    )
    for other in (on_dask, pooled):
        assert {r.pid for r in other.subtrees} - {os.getpid()}  # the workers ran the subtrees
        assert other.check_correctness().ok
        assert other.ledger.to_dict() == serial.ledger.to_dict()
        assert (other.folder / "ledger.json").read_text() == (
            serial.folder / "ledger.json"
        ).read_text()
        for kind in ("tables", "measurements", "microdata"):
            names = _files(serial.folder, kind)
            assert names == _files(other.folder, kind) and names
            for name in names:
                pd.testing.assert_frame_equal(
                    pd.read_parquet(other.folder / name), pd.read_parquet(serial.folder / name)
                )
