"""Options of one ``topdown synth`` method given to another are refused (issue 30 D3).

They were ignored silently (``crosstab --rows``, ``classcond --k``, ``privbayes --target``,
``dp2pub --columns``): exit 2, naming the option, its value, the method and the methods
that take it, before anything is read or written. ``dp2pub --rows`` is honoured (A1).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from cli_helpers import synth_files

from synth.cli import main


@pytest.fixture()
def files(tmp_path):
    return synth_files(tmp_path, 120)


@pytest.mark.parametrize(
    ("method", "extra", "message"),
    [
        (
            "crosstab",
            ["--rows", "50"],
            "--rows (50) does not apply to method 'crosstab' (its options: --columns); it is an "
            "option of classcond, privbayes, dp2pub, adaptive",
        ),
        (
            "classcond",
            ["--k", "2"],
            "--k (2) does not apply to method 'classcond' (its options: --rows, --target); it is "
            "an option of privbayes, dp2pub",
        ),
        (
            "privbayes",
            ["--target", "a"],
            "--target ('a') does not apply to method 'privbayes' (its options: --rows, --k); it "
            "is an option of classcond",
        ),
        (
            "dp2pub",
            ["--columns", "a", "b"],
            "--columns (['a', 'b']) does not apply to method 'dp2pub' (its options: --rows, "
            "--k); it is an option of crosstab",
        ),
    ],
)
def test_an_option_of_another_method_is_refused(files, tmp_path, capsys, method, extra, message):
    data, domains = files
    out = tmp_path / "out.csv"
    argv = [method, str(data), "--epsilon", "1", "--domains", str(domains), "--out", str(out)]
    assert main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_dp2pub_rows_is_honoured(files, tmp_path, capsys):
    data, domains = files
    out = tmp_path / "out.csv"
    argv = ["dp2pub", str(data), "--epsilon", "2", "--domains", str(domains), "--out", str(out)]
    assert main([*argv, "--rows", "37", "--k", "1", "--seed", "2"]) == 0
    assert len(pd.read_csv(out)) == 37
    assert re.fullmatch(r"\S+out\.csv\n", capsys.readouterr().out)
