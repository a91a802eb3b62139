"""A multipass first pass too large for the general solvers is refused at once, with the way out.

The DHC persons preset's default (``multipass=True``) sent its root's first pass, a QP over
1,227,744 cells, to Clarabel: 7.9 GB and a time-limit error after 7.5 minutes of a
20,000-person run. The Newton passes (``topdown.estimation.multipass_newton``) now take such a
first pass when nothing but bounds on the total binds the root; the refusal stands where the
general solvers would still take it (here a structural zero, a capture). These tests lower
``GENERAL_FIRST_PASS_MAX_VARIABLES`` to a small domain's size, where the logic is the same,
and run the real preset through the command line.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.synthetic import synthetic
from constraints.aggregate_constraints import StructuralZero
from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from constraints.logical_expressions import Equal, TrueExpression
from topdown import release
from topdown.estimation import first_pass_limit
from topdown.estimation.first_pass_limit import (
    FirstPassTooLargeError,
    check_root_first_pass,
    first_pass_answers,
    newton_takes_root_first_pass,
)
from topdown.presets import census2020_dhcp
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


#: a constraint row at the root other than its total: the Newton passes decline it, the general
#: solvers take it
ROW_AT_ROOT = ConstraintSet().add(SumEqualRealTotal(Equal("SEX", 1)), level=0)


def test_a_root_first_pass_over_the_limit_is_refused_before_the_data_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 217)
    missing = tmp_path / "no-such-file.csv"  # reading it would raise another error
    with pytest.raises(FirstPassTooLargeError) as err:
        release(missing, SCHEMA, _strategy((0,)), seed=1, constraints=ROW_AT_ROOT)
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
    rel = release(
        DATA, SCHEMA, _strategy((0,)), seed=1, estimator="topdown", constraints=ROW_AT_ROOT
    )
    assert rel.check_correctness().ok
    assert set(rel.stats[0].solved_in("l2")) == {"cvxpy:CLARABEL"}  # the general path's
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 10)
    named = release(
        DATA,
        SCHEMA,
        _strategy((0,)),
        seed=1,
        estimator="topdown",
        solver="cvxpy:CLARABEL",
        constraints=ROW_AT_ROOT,
    )
    assert named.check_correctness().ok


@pytest.mark.parametrize("estimator", ["topdown", "blue"])
def test_a_root_first_pass_the_newton_passes_take_is_not_refused(
    monkeypatch: pytest.MonkeyPatch, estimator: str
) -> None:
    """Nothing but the queries binds the root (or an invariant total: bounds on it): the
    first pass goes to ``root_newton_multipass``, whatever its size; the limit far below it."""
    monkeypatch.setattr(first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", 10)
    total = ConstraintSet().add(SumEqualRealTotal(TrueExpression()), level=0)
    for constraints in (None, total):
        rel = release(
            DATA,
            SCHEMA,
            _strategy((0,)),
            seed=1,
            estimator=estimator,
            constraints=constraints,
        )
        assert rel.check_correctness().ok
        assert set(rel.stats[0].solved_in("l2")) == {"root_newton_multipass"}


def test_which_root_first_passes_the_newton_passes_take() -> None:
    """The rule ahead of the data: a first pass of marginals, ``detailed`` outside it, the
    ``auto`` L2 solver, no capture, and at most bounds on the root's total."""
    level = _strategy((0,)).levels[0]
    domain = SCHEMA.domain
    assert newton_takes_root_first_pass(level, domain, None)
    assert not newton_takes_root_first_pass(_strategy(()).levels[0], domain, None)  # no pass
    assert not newton_takes_root_first_pass(level, domain, None, l2_solver="cvxpy:CLARABEL")
    assert not newton_takes_root_first_pass(level, domain, None, capture="problems")
    assert not newton_takes_root_first_pass(level, domain, ROW_AT_ROOT)
    zero = ConstraintSet().add(StructuralZero(Equal("SEX", 1) & Equal("RACE", 9)), level=0)
    assert newton_takes_root_first_pass(level, domain, zero)  # left out of the support
    both = ConstraintSet().add(StructuralZero(Equal("RACE", 9)), level=0)
    both.add(SumEqualRealTotal(TrueExpression()), level=0)
    assert not newton_takes_root_first_pass(level, domain, both)  # rows then: the general path
    with_detailed = LevelStrategy(Fraction(1, 2), QUERIES, ("detailed", "SEX"))
    assert not newton_takes_root_first_pass(with_detailed, domain, None)
    total = ConstraintSet().add(SumEqualRealTotal(TrueExpression()), level=0)
    assert newton_takes_root_first_pass(level, domain, total)
    below = ConstraintSet().add(StructuralZero(Equal("RACE", 9)), level=1)  # not the root's
    assert newton_takes_root_first_pass(level, domain, below)


def test_the_dhc_preset_root_goes_to_the_newton_passes_unless_declined() -> None:
    """The preset's default root (1,903,289 variables for the general solvers) is not refused
    as it is; with a constraint row at the root it is, naming its size."""
    schema, strategy = census2020_dhcp(("STATE", "COUNTY", "TRACT"))
    level = strategy.levels[0]
    assert level.first_pass  # the preset's default: multipass
    args = (level.first_pass, schema.domain.size, first_pass_answers(level, schema.domain))
    newton = newton_takes_root_first_pass(level, schema.domain, None)
    assert newton
    check_root_first_pass(*args, newton=newton)  # not refused
    row = ConstraintSet().add(SumEqualRealTotal(Equal("SEX", 1)), level=0)
    with pytest.raises(FirstPassTooLargeError, match="1,903,289 variables"):
        check_root_first_pass(*args, newton=newton_takes_root_first_pass(level, schema.domain, row))


def test_a_family_first_pass_over_the_limit_is_refused_when_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below the root the support is the parent's positive cells, known only after the parent
    is estimated: the family's check names it, its children and cells. A constraint row on
    the family (not its total) sends it to the general solvers; without one the Newton passes
    take it whatever the limit."""
    row = ConstraintSet().add(SumEqualRealTotal(Equal("SEX", 1)), level=1)
    rel = release(DATA, SCHEMA, _strategy((1,)), seed=1, estimator="topdown", constraints=row)
    families = rel.tree.levels[1].size  # the root's children: one family
    cells = int((rel.counts[0][0] > 0).sum())
    assert rel.check_correctness().ok  # within the default limit it runs
    monkeypatch.setattr(
        first_pass_limit, "GENERAL_FIRST_PASS_MAX_VARIABLES", families * (cells + 74) - 1
    )
    with pytest.raises(FirstPassTooLargeError) as err:
        release(DATA, SCHEMA, _strategy((1,)), seed=1, estimator="topdown", constraints=row)
    message = str(err.value)
    assert "first pass of level 1, children of " in message
    assert "fits 2 of its 3 queries before the other queries" in message
    assert f"({families:,} node(s) x ({cells:,} cells + 74 query answers))" in message
    newton = release(DATA, SCHEMA, _strategy((1,)), seed=1, estimator="topdown")
    assert newton.check_correctness().ok
    assert set(newton.stats[1].solved_in("l2")) == {"marginal_newton_multipass"}


def test_the_dhc_preset_default_with_a_capture_stops_at_once_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``preset = "census2020_dhcp"`` with defaults (``multipass`` true) and
    ``--capture-problems`` (a capture records the general problems, so the general solvers
    would take the root's first pass): exit 2 and one line naming ``strategy.multipass``,
    before anything is measured; nothing is written."""
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
    capture = tmp_path / "problems"
    assert (
        main(["-q", "run", str(config), "--out", str(out), "--capture-problems", str(capture)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"topdown: error: {config}: strategy.multipass: the multipass first pass")
    assert "of level 0 (root)" in err
    # 1,227,744 cells and the nine marginals' 675,545 answers
    assert "1,903,289 variables" in err and "multipass = false" in err
    assert not out.exists() and not capture.exists()
