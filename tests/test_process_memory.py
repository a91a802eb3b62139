"""numpy's huge-page advice is off while a release runs, while its microdata is expanded and
its folder written, and in the engine's workers, back as it was afterwards, and left alone when the user set NUMPY_MADVISE_HUGEPAGE; a worker fixes glibc's
trim and mmap thresholds."""

from __future__ import annotations

import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown import engine
from topdown.execution import process_memory
from topdown.execution.executors import ProcessExecutor
from topdown.execution.process_memory import ENV, hugepage_advice_off
from topdown.outputs import microdata
from topdown.product import release_folder
from topdown.product.cli import main
from topdown.schema import Attribute, Schema
from topdown.strategy import Strategy
from topdown.support.progress import Progress

switch = process_memory._setter()
pytestmark = pytest.mark.skipif(
    switch is None, reason="this numpy has no run-time huge-page switch (or the user set one)"
)


def advice() -> bool:
    """numpy's current setting (the switch returns the previous one: set it back at once)."""
    assert switch is not None
    current = bool(switch(True))
    switch(current)
    return current


@pytest.fixture
def advice_on():
    assert switch is not None
    before = bool(switch(True))
    yield
    switch(before)


@pytest.mark.parametrize("start", [True, False])
def test_off_inside_and_restored_after(start):
    assert switch is not None
    before = bool(switch(start))
    try:
        with hugepage_advice_off():
            assert advice() is False
        assert advice() is start
        with pytest.raises(RuntimeError), hugepage_advice_off():
            raise RuntimeError("fails inside")
        assert advice() is start
    finally:
        switch(before)


def test_a_users_setting_is_left_alone(monkeypatch, advice_on):
    monkeypatch.setenv(ENV, "1")
    with hugepage_advice_off():
        assert advice() is True
    process_memory.prepare_worker()
    assert advice() is True


def test_release_runs_with_the_advice_off(monkeypatch, advice_on):
    seen = []
    real = engine.measure

    def spy(*args, **kwargs):
        seen.append(advice())
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "measure", spy)
    schema = Schema((Attribute("SEX", values=(1, 2)),), ("REGION",))
    data = pd.DataFrame({"SEX": [1, 2, 2, 1], "REGION": ["x", "x", "y", "y"]})
    strategy = Strategy.from_budgets([1, 1])
    engine.release(data, schema, strategy, seed=3, progress=Progress(enabled=False))
    assert seen == [False]
    assert advice() is True


def test_microdata_and_the_release_folder_are_made_with_the_advice_off(
    monkeypatch, advice_on, tmp_path
):
    seen: list[tuple[str, bool]] = []
    labels, write = microdata._labels_column, release_folder.write_table

    def spy_labels(*args):
        seen.append(("microdata", advice()))
        return labels(*args)

    def spy_write(*args, **kwargs):
        seen.append(("folder", advice()))
        return write(*args, **kwargs)

    monkeypatch.setattr(microdata, "_labels_column", spy_labels)
    monkeypatch.setattr(release_folder, "write_table", spy_write)
    schema = Schema((Attribute("SEX", values=(1, 2)),), ("REGION",))
    data = pd.DataFrame({"SEX": [1, 2, 2, 1], "REGION": ["x", "x", "y", "y"]})
    rel = engine.release(data, schema, Strategy.from_budgets([1, 1]), seed=3)
    _ = rel.microdata  # expanded after the release has returned
    assert seen == [("microdata", False)]
    assert advice() is True
    seen.clear()
    embedded_subset(("01",), rows_per_state=200).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "c.toml").write_text(data_config(3, ("STATE",)), encoding="utf-8")
    assert main(["-q", "run", str(tmp_path / "c.toml"), "--out", str(tmp_path / "out")]) == 0
    assert ("microdata", False) in seen and ("folder", False) in seen
    assert all(on is False for _, on in seen)
    assert advice() is True


def _advice_in_worker(_: object) -> bool:
    return advice()


def test_process_pool_workers_start_with_the_advice_off(advice_on):
    ex = ProcessExecutor(2)
    try:
        assert ex.map(_advice_in_worker, list(range(8))) == [False] * 8
    finally:
        ex.close()


def test_a_worker_fixes_glibcs_thresholds(monkeypatch):
    calls = []
    monkeypatch.setattr(process_memory, "_mallopt", lambda: lambda *a: calls.append(a) or 1)
    monkeypatch.setattr(process_memory, "_setter", lambda: None)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    process_memory.prepare_worker()
    assert calls == [(-1, 256 << 20), (-3, 32 << 20)]  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
    calls.clear()
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000")  # the user's choice stays
    process_memory.prepare_worker()
    assert calls == [(-3, 32 << 20)]
    assert "MALLOC_TRIM_THRESHOLD_" not in process_memory.worker_environ()


@pytest.mark.skipif(process_memory._mallopt() is None, reason="not glibc")
def test_glibc_accepts_the_thresholds():
    mallopt = process_memory._mallopt()
    assert mallopt is not None
    # the values a worker sets are within glibc's limits (mallopt returns 1 on success); this
    # process keeps them afterwards, as a worker would
    assert mallopt(-1, process_memory.TRIM_THRESHOLD) == 1
    assert mallopt(-3, process_memory.MMAP_THRESHOLD) == 1
