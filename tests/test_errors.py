"""One root error: every package's errors derive from ``TopDownError``, caught by one except."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import solvers
from constraints import SumEqual
from constraints.domain import Domain
from constraints.logical_expressions.atomic import TrueExpression
from mechanisms import discrete_laplace_pmf
from mechanisms.accounting import PureDP
from topdown.errors import (
    BudgetError,
    ConstraintError,
    DomainError,
    MechanismError,
    SolverError,
    TopDownError,
)


def _domain_error() -> None:
    Domain({"SEX": [1, 2]}).index_of("SEX", 3)


def _budget_error() -> None:
    PureDP(Fraction(-1))


def _constraint_error() -> None:
    SumEqual(TrueExpression(), 3).rows(Domain({"SEX": [1, 2]}), cells=np.array([5]))


def _mechanism_error() -> None:
    discrete_laplace_pmf(0, -1)


def _solver_error() -> None:
    problem = solvers.Problem(c=np.ones(1), lb=np.zeros(1), ub=np.ones(1), name="p")
    solvers.solve(problem, solver="no-such-solver")


@pytest.mark.parametrize(
    ("raise_it", "cls"),
    [
        (_domain_error, DomainError),
        (_budget_error, BudgetError),
        (_constraint_error, ConstraintError),
        (_mechanism_error, MechanismError),
        (_solver_error, SolverError),
    ],
)
def test_one_except_catches_every_package(raise_it, cls) -> None:
    with pytest.raises(cls) as info:
        raise_it()
    assert isinstance(info.value, TopDownError)
    try:
        raise_it()
    except TopDownError as err:  # the one clause a caller needs
        assert type(err) is info.type
    else:  # pragma: no cover - raise_it raised above
        pytest.fail("no error")


def test_bad_input_is_also_a_value_error_and_failures_a_runtime_error() -> None:
    for cls in (DomainError, BudgetError, ConstraintError, MechanismError):
        assert issubclass(cls, ValueError)
    assert issubclass(solvers.InfeasibleError, RuntimeError)
    assert not issubclass(solvers.InfeasibleError, ValueError)
