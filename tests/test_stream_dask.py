"""A streamed release on Dask (a LocalCluster of two workers) is the serial one, count for count:
every table part, every noisy measurement, every microdata record, the ledger."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from test_stream import QUIET, SCHEMA, _geography, _records, _state_total, _strategy

from topdown.stream import release_streamed

pytest.importorskip("distributed", reason="the 'dask' extra is not installed")


def _files(folder, kind: str) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in (folder / kind).rglob("*.parquet"))


def test_streamed_release_on_dask_equals_serial(cluster, tmp_path):
    geo = _geography()
    data = _records(geo)
    kwargs = dict(
        stream_by="COUNTY", geography=geo, constraints=_state_total(), seed=21, progress=QUIET
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
    assert {r.pid for r in on_dask.subtrees} - {os.getpid()}  # the workers ran the subtrees
    assert on_dask.check_correctness().ok
    assert on_dask.ledger.to_dict() == serial.ledger.to_dict()
    for kind in ("tables", "measurements", "microdata"):
        names = _files(serial.folder, kind)
        assert names == _files(on_dask.folder, kind) and names
        for name in names:
            pd.testing.assert_frame_equal(
                pd.read_parquet(on_dask.folder / name), pd.read_parquet(serial.folder / name)
            )
