"""A multipass first pass too large for the general solvers is refused at once, with the way out.

The DHC persons preset's default (``multipass=True``) sent its root's first pass, a QP over
1,227,744 cells, to Clarabel: 7.9 GB and a time-limit error after 7.5 minutes of a
20,000-person run. These tests lower ``GENERAL_FIRST_PASS_MAX_VARIABLES`` to a small domain's
size, where the logic is the same, and run the real preset through the command line.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.synthetic import synthetic
from topdown import release
from topdown.estimation import first_pass_limit
from topdown.estimation.first_pass_limit import FirstPassTooLargeError
from topdown.product.cli import main
from topdown.query import Query
from topdown.strategy import LevelStrategy, Strategy

DATA, SCHEMA = synthetic(400, people=5, seed=4)  # 144 cells, root > 3 levels
QUERIES = (
    (Query.parse("detailed"), Fraction(1, 2)),
    (Query.parse("SEX"), Fraction(1, 4)),
    (Query.parse("AGE x RACE"), Fraction(1, 4)),
)


def _strategy(first_pass_levels: tuple[int, ...]) -> Strategy:
    """Three queries a level; the levels named fit ``SEX`` and ``AGE x RACE`` first."""
    levels = tuple(
        LevelStrategy(
            Fraction(1, 2), QUERIES, ("SEX", "AGE x RACE") if i in first_pass_levels else ()
        )
        for i in range(4)
    )
    return Strategy(levels, "discrete_gaussian")


def test_a_root_first_pass_over_the_limit_is_refused_before_the_data_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 217)
    missing = tmp_path / "no-such-file.csv"  # reading it would raise another error
    with pytest.raises(FirstPassTooLargeError) as err:
        release(missing, SCHEMA, _strategy((0,)), seed=1)
    message = str(err.value)
    assert message.startswith("strategy.multipass: the multipass first pass of level 0 (root)")
    assert "'SEX', 'AGE x RACE'" in message
    # 144 cells and 2 + 72 answers of SEX and AGE x RACE (lifted: one variable each)
    assert (
        "218 variables (1 node(s) x (144 cells + 74 query answers)), more than the 217" in message
    )
    assert "multipass = false" in message and "multipass=False" in message
    assert isinstance(err.value, ValueError)  # the command line's usage error (exit 2)


def test_at_the_limit_or_with_a_named_solver_the_root_first_pass_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 218)
    rel = release(DATA, SCHEMA, _strategy((0,)), seed=1, estimator="topdown")
    assert rel.check_correctness().ok
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 10)
    named = release(
        DATA, SCHEMA, _strategy((0,)), seed=1, estimator="topdown", solver="cvxpy:CLARABEL"
    )
    assert named.check_correctness().ok


def test_a_family_first_pass_over_the_limit_is_refused_when_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below the root the support is the parent's positive cells, known only after the parent
    is estimated: the family's check names it, its children and cells."""
    rel = release(DATA, SCHEMA, _strategy((1,)), seed=1, estimator="topdown")
    families = rel.tree.levels[1].size  # the root's children: one family
    cells = int((rel.counts[0][0] > 0).sum())
    assert rel.check_correctness().ok  # within the default limit it runs
    monkeypatch.setattr(
        first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", families * (cells + 74) - 1
    )
    with pytest.raises(FirstPassTooLargeError) as err:
        release(DATA, SCHEMA, _strategy((1,)), seed=1, estimator="topdown")
    message = str(err.value)
    assert "first pass of level 1, children of " in message
    assert "fits 2 of its 3 queries before the other queries" in message
    assert f"({families:,} node(s) x ({cells:,} cells + 74 query answers))" in message


def test_the_dhc_preset_default_stops_at_once_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``preset = "census2020_dhcp"`` with defaults (``multipass`` true): exit 2 and one line
    naming ``strategy.multipass``, before anything is measured; nothing is written."""
    records = pd.DataFrame(
        {
            "STATE": ["01"] * 4,
            "COUNTY": ["001"] * 4,
            "TRACT": ["a", "a", "b", "b"],
            "RELGQ": [0, 6, 1, 27],
            "SEX": [1, 2, 2, 1],
            "AGE": [40, 8, 35, 88],
            "HISPANIC": [0, 1, 0, 0],
            "CENRACE": [1, 1, 7, 2],
        }
    )
    records.to_csv(tmp_path / "dhc.csv", index=False)
    config = tmp_path / "dhc.toml"
    config.write_text(
        'seed = 1\n[data]\npath = "dhc.csv"\n[schema]\nhierarchy = ["STATE", "COUNTY", "TRACT"]\n'
        '[strategy]\npreset = "census2020_dhcp"\n',
        encoding="utf-8",
    )
    out = tmp_path / "release"
    assert main(["-q", "run", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"topdown: error: {config}: strategy.multipass: the multipass first pass")
    assert "of level 0 (root)" in err
    # 1,227,744 cells and the nine marginals' 675,545 answers
    assert "1,903,289 variables" in err and "multipass = false" in err
    assert not out.exists()
