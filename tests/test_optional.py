"""Optional extras: a clear error naming the extra when one is missing, and the parts working
when it is installed (the ``dask`` executor, Parquet input and output)."""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from topdown.execution.executors import make_executor
from topdown.measurement.read import read_data
from topdown.outputs.microdata import write_table
from topdown.support.optional import EXTRAS, MissingDependencyError, is_installed, require

ROOT = Path(__file__).resolve().parents[1]


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled: a None entry in sys.modules fails both import and
    find_spec, as an absent package does."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_is_installed_finds_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    assert is_installed("numpy")
    assert not is_installed("surely_not_a_module_name")
    assert is_installed("pyarrow") == (
        __import__("importlib.util").util.find_spec("pyarrow") is not None
    )
    assert "pyarrow" not in sys.modules  # looked up, not imported
    with pytest.raises(ValueError, match=r"module \('dask.distributed'\) must be a top-level"):
        is_installed("dask.distributed")


def test_extras_match_pyproject() -> None:
    """The helper's extras are declared in pyproject.toml, install the modules it checks, and
    are not in the base dependencies (which is what makes them optional)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["dask"] == ["dask[distributed]>=2024.1"]
    assert extras["parquet"] == ["pyarrow>=14"]
    assert set(EXTRAS) <= set(extras)
    base = " ".join(project["dependencies"])
    assert "dask" not in base and "pyarrow" not in base


@pytest.mark.parametrize(
    ("extra", "hidden", "missing"),
    [
        ("parquet", ("pyarrow",), "pyarrow, which is"),
        pytest.param(
            "dask", ("distributed",), "distributed, which is", marks=pytest.mark.extra("dask")
        ),
        ("dask", ("dask", "distributed"), "dask and distributed, which are"),
    ],
)
def test_require_names_the_missing_modules_and_the_command(
    monkeypatch: pytest.MonkeyPatch, extra: str, hidden: tuple[str, ...], missing: str
) -> None:
    hide(monkeypatch, *hidden)
    with pytest.raises(MissingDependencyError) as info:
        require(extra, "the thing")
    assert str(info.value) == (
        f"the thing needs {missing} not installed; install the {extra!r} extra: "
        f'pip install "topdown-dp[{extra}]"'
    )
    assert isinstance(info.value, ImportError)


def test_require_passes_when_installed_and_rejects_unknown_extras() -> None:
    for extra, modules in EXTRAS.items():
        if all(is_installed(m) for m in modules):
            require(extra, "x")  # no error
    with pytest.raises(ValueError, match=r"extra \('gpu'\) is unknown; known extras are"):
        require("gpu", "x")


def test_dask_executor_without_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "dask", "distributed")
    with pytest.raises(MissingDependencyError, match=r'pip install "topdown-dp\[dask\]"'):
        make_executor("dask")


def test_parquet_without_pyarrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    frame = pd.DataFrame({"A": [1, 2]})
    hide(monkeypatch, "pyarrow")
    with pytest.raises(MissingDependencyError, match=r"^writing Parquet output needs pyarrow"):
        write_table(frame, tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == []  # refused before any temporary file
    (tmp_path / "in.parquet").write_bytes(b"PAR1")
    with pytest.raises(MissingDependencyError, match=r"^reading Parquet data needs pyarrow"):
        read_data(tmp_path / "in.parquet")


def test_parquet_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the 'parquet' extra is not installed")
    frame = pd.DataFrame({"PUMA": ["0100100", "0100200"], "AGEP": [5, 70], "SEX": [1, 2]})
    path = write_table(frame, tmp_path / "micro.parquet")
    back = read_data(path)
    pd.testing.assert_frame_equal(back, frame)
    # a CSV with the same content reads back with the same values (the suffix decides)
    csv = write_table(frame, tmp_path / "micro.csv")
    assert read_data(csv, dtype={"PUMA": str}).equals(frame)


def test_dask_executor_runs_tasks() -> None:
    """A local cluster runs the tasks in order, and starts while Dask's default HTTP port is
    taken (another run's cluster): before, that warned and, with warnings as errors, failed."""
    pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
    with contextlib.ExitStack() as stack:
        busy = stack.enter_context(socket.socket())
        with contextlib.suppress(OSError):  # already taken by something else: just as good
            busy.bind(("0.0.0.0", 8787))
            busy.listen()
        executor = make_executor("dask", workers=1)
        try:
            out = executor.map(abs, [-3, 1, -2])
        finally:
            executor.close()
    assert list(out) == [3, 1, 2]
    assert np.array_equal(out, [3, 1, 2])
