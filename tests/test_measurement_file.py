"""measurements.csv read back by Arrow's reader and by pandas': the same answers, the same errors.

``topdown.product.measurement_file`` reads the file with Arrow when pyarrow is installed and
falls back to pandas (and reads a file Arrow cannot type again with pandas, for its messages).
Each test runs both readers on the same bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import data_config, embedded_subset

from topdown.errors import ReleaseError
from topdown.product import measurement_file
from topdown.product.cli import main
from topdown.product.measurement_file import measurement_answers
from topdown.product.release_folder import load_release

pytest.importorskip("pyarrow")

HEADER = "level,node,query,answer,noisy,variance\n"


def _rows(level: int, node: str, query: str, noisy: list[int], variance: str) -> str:
    return "".join(f"{level},{node},{query},{i},{v},{variance}\n" for i, v in enumerate(noisy))


def _file(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "rel"
    folder.mkdir(exist_ok=True)
    (folder / "measurements.csv").write_text(HEADER + body, encoding="utf-8")
    return folder


@pytest.fixture(params=["arrow", "pandas"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once with Arrow's reader, once as without pyarrow (pandas')."""
    if request.param == "pandas":
        monkeypatch.setattr(measurement_file, "is_installed", lambda module: False)
    else:  # Arrow's path reads a good file without pandas' reader
        monkeypatch.setattr(measurement_file, "MEASUREMENT_BYTES", 64)  # many small batches

        def no_pandas(*args: object, **kwargs: object) -> None:
            raise AssertionError("pandas' reader ran on a file Arrow reads")

        monkeypatch.setattr(measurement_file.pd, "read_csv", no_pandas)
    monkeypatch.setattr(measurement_file, "MEASUREMENT_ROWS", 3)
    return str(request.param)


def test_answers_per_level_and_query_in_file_order(tmp_path: Path, reader: str) -> None:
    """Two nodes' answers of two queries, the keys interleaved row by row at level 1 (a file
    the release never writes, read the same), big and negative values, three variances."""
    big = [2**40, -(2**62), 7]
    body = (
        _rows(0, "root", "total", [5], "2.0")
        + _rows(0, "root", "detailed", [-3, 0, 4, 120], "0.5")
        + "".join(
            f"1,{node},detailed,{i},{10 * j + i},1e-07\n1,{node},total,0,{j - 1},1e-07\n"
            for j, node in enumerate(["01", "02"])
            for i in range(2)
        )
        + _rows(2, "x", "total", big, "136.986301369863")
    )
    answers, variances = measurement_answers(_file(tmp_path, body))
    assert list(answers) == [
        ("0", "total"),
        ("0", "detailed"),
        ("1", "detailed"),
        ("1", "total"),
        ("2", "total"),
    ]
    assert answers[("0", "detailed")].tolist() == [-3, 0, 4, 120]
    assert answers[("0", "detailed")].dtype == np.int8  # the narrowest type, as kept
    assert answers[("1", "detailed")].tolist() == [0, 1, 10, 11]
    assert answers[("1", "total")].tolist() == [-1, -1, 0, 0]
    assert answers[("2", "total")].tolist() == big
    assert answers[("2", "total")].dtype == np.int64
    assert variances == {
        ("0", "total"): 2.0,
        ("0", "detailed"): 0.5,
        ("1", "detailed"): 1e-07,
        ("1", "total"): 1e-07,
        ("2", "total"): 136.986301369863,
    }


def test_a_written_measurement_file_reads_the_same_both_ways(tmp_path: Path) -> None:
    """A file as the release writes it (random answers of three levels): both readers give
    the same arrays, of the same types."""
    rng = np.random.default_rng(3)
    body = "".join(
        _rows(level, f"n{node}", query, rng.integers(-500, 500, size).tolist(), "4.9")
        for level in range(3)
        for node in range(level + 1)
        for query, size in (("total", 1), ("SEX x AGE", 40), ("detailed", 700))
    )
    folder = _file(tmp_path, body)
    arrow = measurement_answers(folder)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(measurement_file, "is_installed", lambda module: False)
        pandas = measurement_answers(folder)
    assert arrow[1] == pandas[1]
    assert list(arrow[0]) == list(pandas[0])
    for key, values in arrow[0].items():
        assert values.dtype == pandas[0][key].dtype
        assert np.array_equal(values, pandas[0][key])


@pytest.mark.parametrize(
    "bad, message",
    [
        ("0,root,total,0,abc,2.0\n", "column 'noisy' at line 3 holds 'abc', not a number"),
        ("0,root,total,0,,2.0\n", "column 'noisy' at line 3 holds '', not a number"),
        ("0,root,total,0,NA,2.0\n", "column 'noisy' at line 3 holds 'NA', not a number"),
        ("0,root,total,0,3.5,2.0\n", "column 'noisy' at line 3 holds '3.5', not a 64-bit integer"),
        ("0,root,total,0,1e19,2.0\n", "holds '1e19', not a 64-bit integer"),
        ("0,root,total,0,4,nan\n", "column 'variance' at line 3 holds 'nan', not a number"),
        ("0,root,total,0,4,inf\n", "column 'variance' at line 3 holds 'inf', not a number"),
        ("0,root,total,0,4,x\n", "column 'variance' at line 3 holds 'x', not a number"),
    ],
)
def test_a_bad_value_is_the_same_error_from_either_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, message: str
) -> None:
    folder = _file(tmp_path, "0,root,total,0,4,2.0\n" + bad)
    errors = []
    for installed in (True, False):
        monkeypatch.setattr(measurement_file, "is_installed", lambda module, i=installed: i)
        with pytest.raises(ReleaseError) as err:
            measurement_answers(folder)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith("measurements.csv: ") and message in errors[0]


def test_a_float_written_integer_falls_back_to_pandas(tmp_path: Path) -> None:
    """``3.0`` is not an int64 to Arrow; pandas' rule accepts it: read again by pandas."""
    answers, _ = measurement_answers(_file(tmp_path, "0,root,total,0,3.0,2.0\n"))
    assert answers[("0", "total")].tolist() == [3]


@pytest.mark.parametrize("column", ["level", "query", "noisy", "variance"])
def test_a_missing_column_is_named_by_either_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str
) -> None:
    frame = pd.DataFrame(
        {"level": [0], "node": ["root"], "query": ["total"], "answer": [0], "noisy": [4]}
    ).assign(variance=2.0)
    folder = tmp_path / "rel"
    folder.mkdir()
    frame.drop(columns=[column]).to_csv(folder / "measurements.csv", index=False)
    for installed in (True, False):
        monkeypatch.setattr(measurement_file, "is_installed", lambda module, i=installed: i)
        with pytest.raises(ReleaseError, match=f"measurements.csv: has no column '{column}'"):
            measurement_answers(folder)


def test_a_missing_file_is_named(tmp_path: Path, reader: str) -> None:
    with pytest.raises(ReleaseError, match="lacks measurements.csv"):
        measurement_answers(tmp_path)


# -- measurements.parquet ([output] format = "parquet") -------------------------------------
PARQUET = '[output]\nformat = "parquet"\n'


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same seeded release written as CSV and as Parquet (same noise: same seed)."""
    base = tmp_path_factory.mktemp("formats")
    embedded_subset(("01", "08"), rows_per_state=300).to_csv(base / "data.csv", index=False)
    out = []
    for name, tail in (("csv", ""), ("parquet", PARQUET)):
        (base / f"{name}.toml").write_text(data_config(6, ("STATE", "PUMA"), tail))
        argv = ["-q", "run", str(base / f"{name}.toml"), "--out", str(base / name)]
        assert main(argv) == 0
        out.append(base / name)
    return out[0], out[1]


def test_a_parquet_folder_holds_the_same_measurements(both: tuple[Path, Path]) -> None:
    csv, parquet = both
    assert (csv / "measurements.csv").is_file() and not (csv / "measurements.parquet").exists()
    assert (parquet / "measurements.parquet").is_file()
    assert not (parquet / "measurements.csv").exists()
    want, got = measurement_answers(csv), measurement_answers(parquet)
    assert got[1] == want[1] and list(got[0]) == list(want[0])
    for key, values in want[0].items():
        assert got[0][key].dtype == values.dtype and np.array_equal(got[0][key], values)
    frame = pd.read_parquet(parquet / "measurements.parquet")
    assert list(frame.columns) == ["level", "node", "query", "variance", "noisy"]
    rows = pd.read_csv(csv / "measurements.csv", dtype={"node": str})
    assert len(frame) == len(rows.groupby(["level", "node", "query"]))
    assert sum(len(v) for v in frame["noisy"]) == len(rows)


def test_a_parquet_folder_passes_check_and_report(both: tuple[Path, Path], tmp_path: Path) -> None:
    _, parquet = both
    assert main(["-q", "check", str(parquet)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(parquet, copy)
    assert main(["-q", "report", str(copy), "--truth", str(parquet.parent / "data.csv")]) == 0
    assert main(["-q", "check", str(copy)]) == 0


def test_an_older_parquet_folder_with_measurements_csv_is_read(
    both: tuple[Path, Path], tmp_path: Path
) -> None:
    """Before format 3 a Parquet folder held measurements.csv: still read and checked."""
    csv, parquet = both
    old = tmp_path / "old"
    shutil.copytree(parquet, old)
    (old / "measurements.parquet").unlink()
    shutil.copy(csv / "measurements.csv", old / "measurements.csv")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["files"]["measurements.parquet"]
    manifest["files"]["measurements.csv"] = json.loads((csv / "manifest.json").read_text())[
        "files"
    ]["measurements.csv"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert main(["-q", "check", str(old)]) == 0
    rel, _ = load_release(old, whole_blue=False)
    again, _ = load_release(parquet, whole_blue=False)
    for a, b in zip(rel.measurements.levels, again.measurements.levels, strict=True):
        for ma, mb in zip(a, b, strict=True):
            assert np.array_equal(ma.noisy, mb.noisy) and ma.variance == mb.variance


def _rewrite(path: Path, change) -> None:
    import pyarrow.parquet as pq

    pq.write_table(change(pq.read_table(path)), path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.drop_columns(["variance"]), "has no column 'variance'"),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("noisy"),
                "noisy",
                t["noisy"].cast(pa_list_of_floats()),
            ),
            "column 'noisy' holds list<.*: double>, not lists of integers",
        ),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("variance"),
                "variance",
                _nan_first(t["variance"]),
            ),
            "a variance is not a finite number",
        ),
    ],
)
def test_a_bad_parquet_measurement_file_is_named(
    both: tuple[Path, Path], tmp_path: Path, change, message: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(both[1], copy)
    _rewrite(copy / "measurements.parquet", change)
    with pytest.raises(ReleaseError, match=f"measurements.parquet: {message}"):
        measurement_answers(copy)


def pa_list_of_floats():
    import pyarrow as pa

    return pa.list_(pa.float64())


def _nan_first(column):
    import pyarrow as pa

    values = column.to_numpy().copy()
    values[0] = np.nan
    return pa.array(values)
