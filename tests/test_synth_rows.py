"""``--rows`` and a generator's ``n`` are checked before anything is fitted (issue 30 C2).

Before: ``--rows 0`` ended in the report's "other (shape (0, 2)) must have at least one row";
``--rows 100000000000`` fitted the model, then failed in numpy ("Unable to allocate 1.46 TiB").
Now a size below 1 (on the command line) or beyond what memory holds (``max_rows``: 16 bytes a
cell in half the physical memory) is a usage error naming the option and the limit.
"""

from __future__ import annotations

import pandas as pd
import pytest
from cli_helpers import synth_files

import synth.class_conditional as class_conditional
from synth import DP2Pub, PrivBayes, generate
from synth._domains import SynthError
from synth.class_conditional import CELL_BYTES, ClassConditional, check_rows, max_rows
from topdown.product.cli import main

HUGE = 10**11
DF = pd.DataFrame({"a": [0, 1] * 20, "b": [0, 1, 2, 2] * 10})


@pytest.fixture
def argv(tmp_path):
    data, domains = synth_files(tmp_path)
    return ["synth", "classcond", str(data), "--epsilon", "1", "--domains", str(domains)]


@pytest.fixture
def never_fit(monkeypatch):
    """A fit that fails the test: the size is to be refused before any fitting."""

    def fit(self, data):
        raise AssertionError("fitted before the size was checked")

    monkeypatch.setattr(ClassConditional, "fit", fit)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("0", "--rows (0) must be an integer >= 1"),
        ("-3", "--rows (-3) must be an integer >= 1"),
        ("2.5", "argument --rows: invalid int value: '2.5'"),
        ("ten", "argument --rows: invalid int value: 'ten'"),
        (str(HUGE), f"--rows ({HUGE}) is more rows than this machine holds: at most"),
    ],
)
def test_a_bad_rows_is_a_usage_error(argv, tmp_path, capsys, never_fit, rows, message) -> None:
    out = tmp_path / "out.csv"
    assert main([*argv, "--out", str(out), "--rows", rows]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists()


def test_the_limit_counts_the_datas_columns(argv, tmp_path, capsys, never_fit) -> None:
    """Between the one-column bound and the two-column bound: refused once the data is read."""
    rows = max_rows(1) - 1
    assert main([*argv, "--out", str(tmp_path / "o.csv"), "--rows", str(rows)]) == 2
    assert f"at most {max_rows(2):,} rows of 2 column(s)" in capsys.readouterr().err


def test_max_rows_is_half_the_memory_at_16_bytes_a_cell(monkeypatch) -> None:
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1 << 20}  # 4 GiB
    monkeypatch.setattr(class_conditional.os, "sysconf", pages.__getitem__)
    assert CELL_BYTES == 16
    assert max_rows(1) == (2 << 30) // 16
    assert max_rows(4) == (2 << 30) // 64
    assert check_rows(max_rows(4), columns=4) == max_rows(4)
    with pytest.raises(SynthError, match=r"n \(33554433\) is more rows than this machine holds"):
        check_rows(max_rows(4) + 1, columns=4)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: ClassConditional(1, seed=0).fit(DF).sample(HUGE), "n"),
        (lambda: PrivBayes(1, seed=0).fit(DF).sample(HUGE), "n"),
        (lambda: generate(DF, numTuples=HUGE, random_state=0), "numTuples"),
        (lambda: DP2Pub(1, seed=0).fit_transform(DF, rows=HUGE), "rows"),
    ],
)
def test_the_api_refuses_a_size_beyond_memory(make, name) -> None:
    with pytest.raises(SynthError, match=rf"{name} \({HUGE}\) is more rows than this machine"):
        make()
