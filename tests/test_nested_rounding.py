"""The root's rounding along nested marginals (``topdown.estimation.nested_rounding``): worked
cases, its guarantees as properties, and its use by the batched root."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topdown.estimation.batched.level as level_module
from constraints.domain import Domain
from topdown.estimation.estimate import estimate
from topdown.estimation.nested_rounding import nested_round, refinement_chain, refines
from topdown.estimation.passes import EstimateOptions, SolverChoice
from topdown.estimation.root import root_round
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Level, Tree
from topdown.strategy import Query


def test_refines_worked_cases() -> None:
    fine = np.array([0, 1, 2, 2, 3])
    coarse = np.array([0, 0, 1, 1, 1])
    assert refines(fine, coarse)
    assert not refines(coarse, fine)
    assert refines(fine, np.zeros(5, dtype=np.int64))  # everything refines the total
    assert not refines(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 1]))  # group 0 split
    with pytest.raises(ValueError, match=r"different shapes"):
        refines(fine, coarse[:4])


def test_refinement_chain_is_the_longest_coarse_first() -> None:
    cells = np.arange(8)
    halves = cells // 4  # 2 groups
    quarters = cells // 2  # 4 groups, inside the halves
    crossing = cells % 2  # 2 groups, crossing both
    total = np.zeros(8, dtype=np.int64)
    assert refinement_chain([crossing, quarters, total, halves]) == [3, 1]
    assert refinement_chain([total]) == []  # the total alone: no chain
    assert refinement_chain([]) == []


def test_worked_case_where_cell_rounding_moves_a_marginal() -> None:
    """Twenty cells of 0.3, ten in each of two answers: the L2 total is 6 and each answer's 3.
    Rounding each cell on its own rounds them all down, and the total's window then takes the
    six cheapest cells, all from the first answer (6 and 0); along the chain each answer gets
    its 3 (largest fractions within it: ties to the first cells)."""
    x = np.full(20, 0.3)
    answer = np.repeat([0, 1], 10)
    cells = root_round(x)
    assert cells is not None
    assert np.bincount(answer, cells).tolist() == [6, 0]
    nested = root_round(x, chain=[answer])
    assert nested is not None
    assert np.bincount(answer, nested).tolist() == [3, 3]
    assert nested.tolist() == ([1] * 3 + [0] * 7) * 2
    assert nested.dtype == np.int64


def test_bounds_away_from_the_l2_total_fall_back_to_cell_rounding() -> None:
    """An invariant total 2 below the L2 total: no integer within a unit of every answer sums
    to it, so the cells are rounded on their own (the total then in the bounds)."""
    x = np.full(20, 0.3)
    out = root_round(x, lo=4, hi=4, controlled=False, chain=[np.repeat([0, 1], 10)])
    assert out is not None and out.sum() == 4


def test_errors_name_the_rule() -> None:
    x = np.full(4, 0.5)
    with pytest.raises(ValueError, match=r"total \(5\) must be between the floor and the ceiling"):
        nested_round(x, [], 5)
    with pytest.raises(ValueError, match=r"chain\[1\] does not refine"):
        nested_round(x, [np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2])], 2)


@st.composite
def _problems(draw: st.DrawFn) -> tuple[np.ndarray, list[np.ndarray], int]:
    n = draw(st.integers(1, 40))
    values = draw(st.lists(st.floats(0, 3, allow_nan=False), min_size=n, max_size=n).map(np.array))
    sparse = draw(st.lists(st.booleans(), min_size=n, max_size=n).map(np.array))
    x = np.where(sparse, 0.0, values)
    coarse = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    split = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    chain = [coarse, coarse * 3 + split]
    total = float(x.sum())
    up = draw(st.booleans())
    return x, chain, int(np.ceil(total - 1e-9) if up else np.floor(total + 1e-9))


@settings(max_examples=200, deadline=None)
@given(_problems())
def test_every_chain_answer_and_cell_within_a_unit(
    problem: tuple[np.ndarray, list[np.ndarray], int],
) -> None:
    x, chain, total = problem
    counts = nested_round(x, chain, total)
    assert counts.sum() == total
    assert counts.min(initial=0) >= 0
    assert np.all(np.abs(counts - x) < 1.0)
    assert np.all(counts[x == 0] == 0)
    for part in chain:
        width = int(part.max()) + 1
        released = np.bincount(part, counts, minlength=width)
        assert np.all(np.abs(released - np.bincount(part, x, minlength=width)) < 1.0 + 1e-9)


def _sparse_root(
    width: int, ones: int, seed: int, variances: tuple[float, float, float]
) -> tuple[Domain, Tree, EstimatorInputs]:
    """A root alone over A (2) x B x C (``width`` each) with ``ones`` cells of 1 and the rest
    0, measured with Gaussian noise as ``detailed``, ``A`` and ``A x B`` (nested marginals) at
    ``variances``."""
    domain = Domain({"A": [0, 1], "B": list(range(width)), "C": list(range(width))})
    tree = Tree((Level(0, None, np.array(["r"], dtype=object), np.array([-1])),))
    rng = np.random.default_rng(seed)
    truth = np.zeros(domain.size)
    truth[rng.choice(domain.size, ones, replace=False)] = 1.0
    noisy = truth + rng.normal(0.0, 0.6, domain.size)
    rows = []
    for name, variance in zip(("detailed", "A", "A x B"), variances, strict=True):
        q = Query.parse(name)
        rows.append(QueryEstimate(0, q, q.answer(noisy[None, :], domain), np.array([variance])))
    return domain, tree, EstimatorInputs((tuple(rows),))


def test_the_batched_root_rounds_along_its_nested_marginals() -> None:
    """A root measuring the detailed cells of a sparse domain and two nested marginals (``A``,
    and ``A x B`` inside it): the released root holds each marginal answer within a unit of
    the L2 answer, which rounding each cell on its own (the option off) does not here."""
    domain, tree, inputs = _sparse_root(10, 12, 3, (1.0, 1e-4, 1e-3))
    seen: dict[str, np.ndarray] = {}
    original = level_module.root_l2, level_module.root_marginal_l2

    def keep(x: np.ndarray | None) -> np.ndarray | None:
        if x is not None:
            seen["l2"] = x
        return x

    level_module.root_marginal_l2 = lambda *a, **k: keep(original[1](*a, **k))  # type: ignore
    try:
        released = {}
        for nested in (True, False):
            options = EstimateOptions(nested_root_rounding=nested)
            counts, _ = estimate(tree, domain, inputs, first_pass={}, options=options)
            released[nested] = counts[0][0].astype(float)
    finally:
        level_module.root_marginal_l2 = original[1]
    l2 = seen["l2"]
    assert np.all(np.abs(released[True] - l2) < 1.0)
    for name in ("A", "A x B"):
        q = Query.parse(name)
        fitted = q.answer(l2[None, :], domain)
        assert np.all(np.abs(q.answer(released[True][None, :], domain) - fitted) < 1.0 + 1e-9)
    worst = max(
        float(np.abs(q.answer(released[False][None, :], domain) - q.answer(l2[None], domain)).max())
        for q in (Query.parse("A"), Query.parse("A x B"))
    )
    assert worst >= 1.0  # the case does exercise the difference


def test_the_per_family_root_rounds_along_the_same_chain() -> None:
    """The root's per-family path (here: a general L2 solver named, which the batched root
    declines) rounds along the same chain as the batched root: the same counts from L2 answers
    that agree to the QP's tolerance, and each chain answer within a unit of the batched L2."""
    domain, tree, inputs = _sparse_root(6, 10, 8, (1.0, 1e-3, 1e-2))
    released = {}
    for l2 in ("auto", "cvxpy:CLARABEL"):
        options = EstimateOptions(solver=SolverChoice(l2=l2), nested_root_rounding=True)
        counts, stats = estimate(tree, domain, inputs, first_pass={}, options=options)
        released[l2] = counts[0][0]
        assert ("l2", "root_newton" if l2 == "auto" else l2, 1) in stats[0].solved
    np.testing.assert_array_equal(released["auto"], released["cvxpy:CLARABEL"])
    off = EstimateOptions(solver=SolverChoice(l2="cvxpy:CLARABEL"))
    cells, _ = estimate(tree, domain, inputs, first_pass={}, options=off)
    assert not np.array_equal(cells[0][0], released["auto"])  # the chain changed the rounding
