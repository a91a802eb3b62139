"""The level-batched multipass L2 pass (``topdown.estimation.batched.multipass``): pass 1 (the
node totals alone) in closed form, pass 2 the marginal Newton iteration holding them, against
hand-worked answers, the per-family two-pass solve, and in a release against the per-family
path."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from constraints.domain import Domain
from topdown.estimation.batched.chunk_tasks import ChunkTask, solve_chunk
from topdown.estimation.batched.families import ChunkShape
from topdown.estimation.batched.marginals import LevelMarginal, Marginal
from topdown.estimation.batched.multipass import first_pass_totals
from topdown.estimation.family import FamilyTask, _l2
from topdown.estimation.passes import EstimateOptions, SolverChoice

# a 2 x 3 x 4 domain (24 cells): the groups of the total and of two marginals
_AXES = np.indices((2, 3, 4)).reshape(3, -1)
TOTAL = np.zeros(24, dtype=np.int64)
A_X_B = _AXES[0] * 3 + _AXES[1]
C = _AXES[2]
_DOMAIN = Domain({"A": [0, 1], "B": [0, 1, 2], "C": [0, 1, 2, 3]})


def _total(t, v) -> Marginal:
    """The total query of one family of len(t) children on 3 cells."""
    k = len(t)
    return Marginal(
        np.zeros((1, 3), dtype=np.int64),
        np.asarray(t, float).reshape(1, k, 1),
        np.asarray(v, float).reshape(1, k),
    )


def test_hand_worked_first_pass():
    """Totals 9 and 4 (weights 1) under a parent of 15: lambda = (13 - 15) / 2 = -1, so each
    child takes one more: (10, 5). Weights 1 and 3 on totals 9 and 4 under 12: lambda =
    (13 - 12) / (1 + 1/3) = 3/4: (8.25, 3.75), the lighter-weighted child moving 3 times
    further."""
    T, ok = first_pass_totals(_total([9, 4], [1, 1]), np.array([[5.0, 6.0, 4.0]]))
    np.testing.assert_allclose(T, [[10.0, 5.0]], atol=1e-12)
    assert ok.all()
    T, ok = first_pass_totals(_total([9, 4], [1, 3]), np.array([[5.0, 3.0, 4.0]]))
    np.testing.assert_allclose(T, [[8.25, 3.75]], atol=1e-12)
    assert ok.all()


def test_a_bound_or_a_zero_weight_leaves_the_family_to_the_per_family_path():
    """Totals 20 and -3 under 10: unbounded (16.5, -6.5), the second child's bound is active;
    a zero weight leaves that child's total free. Neither is answered here."""
    _, ok = first_pass_totals(_total([20, -3], [1, 1]), np.array([[5.0, 3.0, 2.0]]))
    assert not ok.any()
    _, ok = first_pass_totals(_total([5, 5], [1, 0]), np.array([[5.0, 3.0, 2.0]]))
    assert not ok.any()


def _family(seed: int, k: int):
    """A random family on the 24 cells: noisy detailed answers, totals and two marginals."""
    rng = np.random.default_rng(seed)
    x_true = rng.integers(0, 12, (k, 24)) * (rng.random((k, 24)) < 0.8)
    p = x_true.sum(axis=0)
    p[p == 0] = 1  # every cell in the support
    y = x_true + rng.normal(0, 2.0, (k, 24))
    w = rng.uniform(0.5, 2.0, k)
    marginals = []
    for groups, scale in ((TOTAL, 3.0), (A_X_B, 2.0), (C, 1.5)):
        z = np.stack([np.bincount(groups, x_true[c]) for c in range(k)])
        z = z + rng.normal(0, scale, z.shape)
        marginals.append((groups, z, rng.uniform(0.2, 1.0, k)))
    return y, p.astype(float), w, marginals


def _one_family_task(y, p, w, marginals, first_total: int | None) -> ChunkTask:
    """One family as a one-chunk L2 task (no rounding); ``first_total`` as ``ChunkTask``'s."""
    k, n = y.shape
    chunk = ChunkShape(np.array([0]), np.arange(k)[None, :], np.arange(n)[None, :], np.array([n]))
    return ChunkTask(
        level=1,
        cells=chunk.cells,
        parent_values=p[None],
        noisy=y[None],
        weights=w[None],
        marginals=tuple(LevelMarginal(g, z, v).of_chunk(chunk) for g, z, v in marginals),
        first_total=first_total,
        rounding=False,
    )


def _batched(y, p, w, marginals) -> tuple[np.ndarray, bool]:
    res = solve_chunk(_one_family_task(y, p, w, marginals, first_total=0))
    assert res.l2 is not None
    return res.l2[0], bool(res.settled[0])


def _per_family(y, p, w, marginals) -> np.ndarray:
    """The per-family path's two passes (an interior-point solve of each, the totals kept
    within the default tolerance of 1e-6): Clarabel named, since under ``auto`` the
    per-family path now solves them by the Newton passes of
    ``topdown.estimation.multipass_newton``."""
    k, n = y.shape
    measurements = [(sp.identity(n, format="csr"), y, np.repeat(w[:, None], n, axis=1))]
    for groups, z, v in marginals:
        Q = sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(groups.max() + 1, n))
        measurements.append((Q, z, np.repeat(v[:, None], z.shape[1], axis=1)))
    task = FamilyTask(
        level=1,
        parent_label="p",
        child_labels=tuple(f"c{c}" for c in range(k)),
        parent_values=p,
        measurements=tuple(measurements),
        support=np.arange(n),
        first_pass=(1,),
        options=EstimateOptions(solver=SolverChoice("cvxpy:CLARABEL")),
    )
    x, stats = _l2(task, p)
    assert sum(stats.solved_in("l2").values()) == 2  # the two passes
    return x


@pytest.mark.parametrize("seed", range(6))
def test_batched_two_passes_equal_the_per_family_ones(seed):
    """Same children totals as pass 1 and the same pass-2 answer as the per-family path, to
    the interior-point solver's accuracy (its totals may sit 1e-6 off pass 1's)."""
    y, p, w, marginals = _family(seed, k=2 + seed % 4)
    x, settled = _batched(y, p, w, marginals)
    assert settled
    reference = _per_family(y, p, w, marginals)
    np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9)  # consistent with the parent
    assert x.min() >= 0
    np.testing.assert_allclose(x, reference, atol=2e-4 * p.max())
    np.testing.assert_allclose(x.sum(axis=1), reference.sum(axis=1), atol=1e-5 * p.sum())
    # and the totals are pass 1's: not those of the one-pass fit of every query
    T, _ = first_pass_totals(
        LevelMarginal(TOTAL, marginals[0][1], marginals[0][2]).of_chunk(
            ChunkShape(
                np.array([0]),
                np.arange(y.shape[0])[None, :],
                np.arange(24)[None, :],
                np.array([24]),
            )
        ),
        p[None],
    )
    np.testing.assert_allclose(x.sum(axis=1), T[0], atol=1e-8 * p.sum())


def test_held_totals_differ_from_the_one_pass_fit():
    """Holding pass 1's totals is a real constraint: the one-pass fit of the same queries
    (``first_total`` None) ends at other totals."""
    y, p, w, marginals = _family(3, k=3)
    x, _ = _batched(y, p, w, marginals)
    one = solve_chunk(_one_family_task(y, p, w, marginals, first_total=None))
    assert one.l2 is not None
    assert np.abs(one.l2[0].sum(axis=1) - x.sum(axis=1)).max() > 0.1


def test_bad_first_total_is_refused():
    y, p, w, marginals = _family(0, k=2)
    with pytest.raises(ValueError, match=r"first_total \(3\) must index the 0 marginals"):
        ChunkTask(1, np.zeros((1, 24), dtype=np.int64), p[None], y[None], w[None], first_total=3)


def test_release_batches_multipass_and_matches_the_per_family_path(tmp_path):
    """A release whose levels below the root fit the total first: the levels are solved by
    the batched passes (their statistics say so) and release the counts of the per-family path
    (a capture forces it) but for rounding ties. The L2 answers agree to the interior-point
    solver's accuracy (``test_batched_two_passes_equal_the_per_family_ones``), but the rounding
    LP's optimum need not be unique: here (seed 11) two counties' L2 cells 0.39, 2.46 and 0.42,
    3.49 both round at an L1 cost of 2.0 either way a unit moves between them (their
    fractional parts differ by the same 0.0681 in both children), and the two paths' last digits
    pick different optima; deeper levels then have different parents."""
    from benchmarks.synthetic import synthetic
    from topdown import release
    from topdown.query import Query
    from topdown.strategy import LevelStrategy, Strategy

    df, schema = synthetic(400, people=5, seed=4)
    queries = (
        (Query.parse("detailed"), Fraction(1, 2)),
        (Query.parse("total"), Fraction(1, 4)),
        (Query.parse(schema.domain.names[0]), Fraction(1, 4)),
    )
    levels = tuple(LevelStrategy(Fraction(1, 2), queries, ("total",)) for _ in range(4))
    strategy = Strategy(levels, "discrete_gaussian")
    batched = release(df, schema, strategy, seed=11, estimator="blue")
    per_family = release(
        df, schema, strategy, seed=11, estimator="blue", capture=tmp_path / "problems"
    )
    assert batched.check_correctness().ok and per_family.check_correctness().ok
    newton = [batched.stats[lv].solved_in("l2").get("marginal_newton", 0) for lv in range(4)]
    assert newton[0] == 0 and all(n > 0 for n in newton[2:]), newton
    assert not any(per_family.stats[lv].solved_in("l2").get("marginal_newton") for lv in range(4))
    for level in range(2):
        np.testing.assert_array_equal(batched.counts[level], per_family.counts[level])
    for level in range(2, batched.tree.n_levels):  # ties only: a few cells of a thousand
        assert np.mean(batched.counts[level] != per_family.counts[level]) < 0.005


def test_a_looser_multipass_tolerance_goes_to_the_per_family_path():
    """The batched pass holds pass 1's totals exactly, the optimum of the default tolerance
    (1e-6) only: a level with a looser one is not batched. A first pass of another marginal
    is batched by the Newton passes; one with the detailed query is not."""
    import dataclasses

    from topdown.estimation.batched.level import LevelInputs, _batched_fit
    from topdown.estimation.node_constraints import NodeConstraints
    from topdown.estimation.passes import EstimateOptions
    from topdown.measurement.estimator_inputs import QueryEstimate
    from topdown.query import Query

    domain = _DOMAIN
    qms = tuple(
        QueryEstimate(1, Query.parse(name), np.ones((2, Query.parse(name).n_answers(domain))), 1.0)
        for name in ("detailed", "total", "A")
    )
    inputs = LevelInputs(
        level=1,
        labels=np.array(["a", "b"]),
        measurements=qms,
        matrices=tuple(None if m.query.attributes is None else m.query.matrix(domain) for m in qms),
        first_pass=(1,),
        book=NodeConstraints(domain, None, None),
        options=EstimateOptions(),
    )
    fit = _batched_fit(inputs)
    assert fit is not None and fit.first_total == 0  # the total, first of the marginals
    loose = dataclasses.replace(inputs, options=EstimateOptions(multipass_tolerance=0.5))
    assert _batched_fit(loose) is None
    # a first pass of another marginal: the Newton passes of multipass_newton
    other = _batched_fit(dataclasses.replace(inputs, first_pass=(2,)))
    assert other is not None and other.first_total is None and other.first_marginals == (1,)
    assert other.solver == "marginal_newton_multipass"
    # the detailed query in the first pass: the per-family path
    assert _batched_fit(dataclasses.replace(inputs, first_pass=(0, 1))) is None
