"""A multipass first pass handed to the general solvers at a size they cannot take: refused at once.

A level's multipass first pass (``LevelStrategy.first_pass``) has a fast route when it is the
node total alone below the root (``topdown.estimation.batched.multipass``) or marginals of the
cells fitted by the Newton passes of ``topdown.estimation.multipass_newton`` (the 2020 DHC
persons strategy's nine, ``topdown.presets.census2020_dhcp``): under the ``auto`` L2 solver,
with one ``detailed`` query outside the first pass, no capture, and nothing attached to the
node but structural zeros or bounds on its total. Any other first pass (constraint rows, the
detailed query in the first pass, a capture) is a general QP for CVXPY or HiGHS
(``topdown.estimation.family``): one variable per child and support cell, plus one per answer
of each marginal (the lifted form). At the DHC root that is a QP over all 1,227,744 cells.
``topdown run`` of the preset on a 20,000-person state, before the Newton passes, spent five
minutes in the BLUE, then built that QP for Clarabel, which grew the process to 7.9 GB
resident and stopped at its 60-second time limit: the run failed after 7.5 minutes with
``cvxpy:CLARABEL on problem 'level 0 (root) / L2 pass 1': time_limit``, which says nothing of
multipass (``docs/benchmarks.md``, DHC section).

So before anything is measured (``check_root_first_pass``: ``release`` checks it before it
reads a data path; the command line has read its data file by then), a root first pass that
``newton_takes_root_first_pass`` does not give to the Newton passes, and before a family's
first pass is handed to the general solvers (``check_family_first_pass``: the Newton passes
declined it or did not settle it), a first pass with more than
``GENERAL_FIRST_PASS_MAX_VARIABLES`` variables stops the release with an error that names
``strategy.multipass`` and the route that works: one pass, every query fitted together by the
matrix-free Newton iterations, from the same measurements. The check applies under the
``auto`` L2 solver only: a named solver (``--solver``, ``[solver] name``) is the user's own
choice of what can take the problem.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from constraints.attach import ConstraintSet
from constraints.compile import compile_rows, zero_mask
from constraints.constraint import Constraint
from constraints.domain import Domain
from topdown.errors import StrategyError
from topdown.strategy import LevelStrategy

__all__ = [
    "GENERAL_FIRST_PASS_MAX_VARIABLES",
    "FirstPassTooLargeError",
    "check_family_first_pass",
    "check_root_first_pass",
    "first_pass_answers",
    "newton_takes_root_first_pass",
]

#: The most variables a multipass first pass may hand to the general solvers under ``auto``:
#: children x (support cells + the answers of its marginal queries, one lifted variable each;
#: ``solvers.builders.children_l2_problem``). Measured on the DHC root's first pass cut to a
#: random 60,000 and 250,000 of its cells (735,545 and 925,545 variables: the two large
#: marginals alone have 675,360 answers), Clarabel stopped at its 60-second time limit both
#: times, on a machine at load 11 (9.3 and 12.9 CPU s); the whole root (1,903,289 variables)
#: grew the run to 7.9 GB first. The limit refuses what is larger than anything seen tried;
#: below it a solve that runs out of time fails within about a minute, with the solver's error.
GENERAL_FIRST_PASS_MAX_VARIABLES = 1_000_000


class FirstPassTooLargeError(StrategyError):
    """A multipass first pass that only the general solvers take, at a size they cannot."""


def check_root_first_pass(
    first_pass: Sequence[str],
    cells: int,
    answers: int,
    *,
    l2_solver: str = "auto",
    newton: bool = False,
) -> None:
    """Refuse the root's multipass first pass over more than the limit's variables when the
    general solvers would take it.

    The root is one node over every cell of the domain (``cells``); a first pass the Newton
    passes do not take (``newton``: ``newton_takes_root_first_pass``) goes to the general
    solvers with one more variable per answer of its marginal queries (``answers``), so this
    is known before the data is read. If the Newton passes are given the root and do not
    settle it, the family's own check (``check_family_first_pass``) stops the release before
    the general solvers are called.

    Raises:
        FirstPassTooLargeError: ``first_pass`` is not empty, ``newton`` is false, ``l2_solver``
            is ``auto`` and ``cells + answers`` exceeds ``GENERAL_FIRST_PASS_MAX_VARIABLES``.
    """
    if first_pass and not newton:
        _check("level 0 (root)", _names(first_pass), 1, cells, answers, l2_solver)


def newton_takes_root_first_pass(
    level: LevelStrategy,
    domain: Domain,
    constraints: ConstraintSet | None,
    *,
    l2_solver: str = "auto",
    capture: object = None,
) -> bool:
    """Whether the root's multipass first pass goes to the Newton passes
    (``topdown.estimation.multipass_newton``: ``root_newton_multipass``), as far as it is known
    before the data is read: a first pass, the ``auto`` L2 solver, no capture (a capture
    records the general problems), one ``detailed`` query and outside the first pass, every
    first-pass query a marginal of the cells (a partition: ``Query.groups``), and nothing
    attached to the root but structural zeros, or bounds on its total without them (an
    invariant counts by its rows, whatever value it is bound to). The routes decline anything
    else (constraint rows: ``family._newton``)
    (``topdown.estimation.batched.level._root``, ``topdown.estimation.family_newton``)."""
    if not level.first_pass or l2_solver != "auto" or capture is not None:
        return False
    detailed = [q.name for q, _ in level.queries if q.attributes is None]
    if len(detailed) != 1 or detailed[0] in level.first_pass:
        return False
    return constraints is None or _total_bounds_only(constraints, domain)


def _total_bounds_only(constraints: ConstraintSet, domain: Domain) -> bool:
    """The constraints binding a root node are structural zeros alone (the per-family route
    leaves those cells out of the support) or compile to rows of ones over every cell (bounds
    on the total, which the batched root holds) with no structural zero."""
    attached = [*constraints.for_level(0)]
    for per_node in constraints.node_specific(0).values():
        attached.extend(per_node)
    bound: list[Constraint] = [
        c.bind(0) if c.is_invariant else c  # type: ignore[attr-defined]
        for c in attached
    ]
    rows = compile_rows(bound, domain)
    if rows.n_rows == 0:
        return True
    if zero_mask(bound, domain).any():
        return False
    counts = np.asarray(rows.A.getnnz(axis=1))
    return bool(np.all(counts == domain.size) and np.all(rows.A.data == 1.0))


def check_family_first_pass(
    where: str,
    first: int,
    queries: int,
    k: int,
    n: int,
    answers: int,
    *,
    l2_solver: str = "auto",
) -> None:
    """Refuse a family's first pass (``first`` of its ``queries`` queries, ``k`` children over
    ``n`` support cells, ``answers`` lifted answers a child) on the general path when its
    variables exceed the limit (see ``check_root_first_pass``)."""
    if first:
        _check(where, f"{first} of its {queries} queries", k, n, answers, l2_solver)


def first_pass_answers(level: LevelStrategy, domain: Domain) -> int:
    """The lifted variables a node's first pass adds: the answers of its first-pass queries
    other than ``detailed`` (which acts on the cells directly), 0 when none couples cells."""
    return sum(
        q.n_answers(domain)
        for q, _ in level.queries
        if q.name in level.first_pass and q.attributes is not None
    )


def _check(where: str, what: str, k: int, n: int, answers: int, l2_solver: str) -> None:
    """The one rule both checks apply: under ``auto``, ``k * (n + answers)`` variables at most."""
    if l2_solver == "auto" and k * (n + answers) > GENERAL_FIRST_PASS_MAX_VARIABLES:
        raise FirstPassTooLargeError(_message(where, what, k, n, answers))


def _names(first_pass: Sequence[str]) -> str:
    names = [repr(q) for q in first_pass]
    return ", ".join(names if len(names) <= 3 else [*names[:3], f"... ({len(names)} queries)"])


def _message(where: str, what: str, k: int, n: int, answers: int) -> str:
    return (
        f"strategy.multipass: the multipass first pass of {where} fits {what} before the "
        f"other queries; only the general solvers (CVXPY, HiGHS) take that pass, here a QP over "
        f"{k * (n + answers):,} variables ({k:,} node(s) x ({n:,} cells + {answers:,} query "
        f"answers)), more than the {GENERAL_FIRST_PASS_MAX_VARIABLES:,} they can be given (the "
        "DHC persons root: 7.9 GB, then Clarabel's time limit). Set multipass = false in the "
        "config's [strategy] table (Python: the preset's multipass=False, or LevelStrategy "
        "first_pass=()): one pass fits every query together by the matrix-free route, from the "
        "same measurements; or name an L2 solver that takes this size (--solver)"
    )
