"""Multipass with a first pass of overlapping marginals by the Newton passes
(``topdown.estimation.multipass_newton``) against the per-family general path (Clarabel named,
both passes), on a 3 x 4 x 5 product domain: families and the root (with its total held),
several seeds; and versions broken on purpose (the proximal centre never moved, the hold
dropped) fail the same comparison."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from constraints.constraint import LinearRows
from topdown.estimation import multipass_newton
from topdown.estimation.batched.chunk_tasks import ChunkTask, solve_chunk
from topdown.estimation.batched.families import ChunkShape
from topdown.estimation.batched.marginals import LevelMarginal
from topdown.estimation.family import FamilyTask, _l2
from topdown.estimation.multipass_newton import ChunkFitter, root_two_passes
from topdown.estimation.passes import EstimateOptions, SolverChoice
from topdown.estimation.root_marginals import RootMarginal

_AXES = np.indices((3, 4, 5)).reshape(3, -1)
N = _AXES.shape[1]
#: A x B, B x C, A and the total: A x B and B x C share B, A and the total repeat parts of
#: A x B, so held exactly their rows are dependent
FIRST = (
    _AXES[0] * 4 + _AXES[1],
    _AXES[1] * 5 + _AXES[2],
    _AXES[0],
    np.zeros(N, dtype=np.int64),
)
#: a marginal fitted in the second pass only (with the detailed query)
SECOND = _AXES[2]
#: the comparison's tolerance: Clarabel's answers sit about 4e-5 from the exact ones here
ATOL = 2e-4


def record_two_passes(monkeypatch: pytest.MonkeyPatch, key: str) -> list:
    """The ``key`` argument of every call to ``multipass_newton.two_passes`` from here on in
    the test (a spy that calls through): what a release hands the Newton passes."""
    seen: list = []
    real = multipass_newton.two_passes

    def spy(*args, **kwargs):
        seen.append(kwargs.get(key))
        return real(*args, **kwargs)

    monkeypatch.setattr(multipass_newton, "two_passes", spy)
    return seen


def _inputs(seed: int, k: int, second: bool = False):
    """Detailed answers, parent counts, weights and marginals of a random family."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 6, (k, N)) * (rng.random((k, N)) < 0.5)
    p = truth.sum(axis=0).astype(float)
    y = truth + rng.normal(0, 2.0, (k, N))
    w = rng.uniform(0.5, 2.0, k)
    marginals = []
    for groups in FIRST + ((SECOND,) if second else ()):
        z = np.stack([np.bincount(groups, t, minlength=groups.max() + 1) for t in truth])
        marginals.append((groups, z + rng.normal(0, 1.5, z.shape), rng.uniform(0.5, 2.0, k)))
    return y, p, w, marginals


def _task(y, p, w, marginals, solver: str, rows: LinearRows | None = None) -> FamilyTask:
    """The family (the root when ``p`` is None) as the per-family path's task."""
    k = y.shape[0]
    support = np.arange(N) if p is None else np.flatnonzero(p > 0)
    n = support.size
    measurements = [(sp.identity(n, format="csr"), y[:, support], np.repeat(w[:, None], n, 1))]
    for groups, z, v in marginals:
        Q = sp.csr_matrix((np.ones(N), (groups, np.arange(N))), shape=(groups.max() + 1, N))
        measurements.append((Q[:, support].tocsr(), z, np.repeat(v[:, None], z.shape[1], 1)))
    return FamilyTask(
        level=0 if p is None else 1,
        parent_label=None if p is None else "p",
        child_labels=tuple(f"c{c}" for c in range(k)),
        parent_values=None if p is None else p[support],
        measurements=tuple(measurements),
        support=support,
        first_pass=tuple(range(1, len(FIRST) + 1)),
        rows=rows,
        options=EstimateOptions(solver=SolverChoice(solver)),
    )


def _solve(task: FamilyTask) -> tuple[np.ndarray, dict[str, int]]:
    """The task's L2 answer on every cell and the backends of its L2 pass."""
    parent = task.parent_values
    x, stats = _l2(task, parent)
    out = np.zeros((task.k, N))
    out[:, task.support] = x
    return out, stats.solved_in("l2")


def solve_held(y, p, w, marginals, solver: str, held=None, tolerance: float = 1e-6):
    """The per-family path's L2 answer (every cell) holding ``held`` (measurement numbers;
    None: the whole first pass) within ``tolerance``, and its backends."""
    task = _task(y, p, w, marginals, solver)
    options = EstimateOptions(solver=SolverChoice(solver), multipass_tolerance=tolerance)
    return _solve(dataclasses.replace(task, options=options, held=held))


def _answers(x: np.ndarray) -> list[np.ndarray]:
    return [np.stack([np.bincount(g, xc, minlength=g.max() + 1) for xc in x]) for g in FIRST]


def _assert_same(x: np.ndarray, reference: np.ndarray, p: np.ndarray | None) -> None:
    """The first-pass answers and the cells agree; non-negative and, under a parent,
    summing to it."""
    for a, b in zip(_answers(x), _answers(reference), strict=True):
        np.testing.assert_allclose(a, b, atol=ATOL)
    np.testing.assert_allclose(x, reference, atol=ATOL)
    assert x.min() >= 0
    if p is not None:
        np.testing.assert_allclose(x.sum(axis=0), p, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_family_two_passes_equal_the_general_path(seed):
    y, p, w, marginals = _inputs(seed, k=2 + seed % 3, second=seed % 2 == 1)
    x, solved = _solve(_task(y, p, w, marginals, "auto"))
    assert solved == {"marginal_newton_multipass": 1}  # one route, both passes
    reference, general = _solve(_task(y, p, w, marginals, "cvxpy:CLARABEL"))
    assert general == {"cvxpy:CLARABEL": 2}
    _assert_same(x, reference, p)


@pytest.mark.parametrize("seed", range(3))
def test_root_two_passes_equal_the_general_path(seed):
    y, _, w, marginals = _inputs(10 + seed, k=1, second=seed == 1)
    x, solved = _solve(_task(y, None, w, marginals, "auto"))
    assert solved == {"root_newton_multipass": 1}
    reference, _ = _solve(_task(y, None, w, marginals, "cvxpy:CLARABEL"))
    _assert_same(x, reference, None)


@pytest.mark.parametrize("seed", range(3))
def test_root_with_a_held_total_equals_the_general_path(seed):
    """The root's total held at an invariant: pass 1 and pass 2 both within it."""
    y, _, w, marginals = _inputs(20 + seed, k=1)
    total = float(round(_answers(np.maximum(y, 0))[3][0, 0] * 0.8))  # binds: below the fit
    rows = LinearRows(np.ones((1, N)), np.array([total]), np.array([total]), ("total",))
    reference, _ = _solve(_task(y, None, w, marginals, "cvxpy:CLARABEL", rows))
    root = [RootMarginal(g, z[0], float(v[0])) for g, z, v in marginals]
    x = root_two_passes(y[0], float(w[0]), root, range(len(FIRST)), total, total)
    assert x is not None
    assert abs(x.sum() - total) < 1e-6
    _assert_same(x[None], reference, None)


def test_a_chunk_of_families_equals_each_family_alone():
    """The level-batched route: three families of one chunk (padded to the widest), each
    equal to the general path."""
    families = [_inputs(30 + i, k=3) for i in range(3)]
    supports = [np.flatnonzero(p > 0) for _, p, _, _ in families]
    width = max(s.size for s in supports)
    cells = np.zeros((3, width), dtype=np.int64)
    for q, s in enumerate(supports):
        cells[q, : s.size] = s
    chunk = ChunkShape(
        np.arange(3), np.arange(9).reshape(3, 3), cells, np.array(list(map(len, supports)))
    )
    noisy = np.concatenate([y for y, _, _, _ in families])
    weights = np.concatenate([w for _, _, w, _ in families])
    parents = np.stack([p for _, p, _, _ in families])
    level_marginals = tuple(
        LevelMarginal(
            g,
            np.concatenate([m[i][1] for *_, m in families]),
            np.concatenate([m[i][2] for *_, m in families]),
        )
        for i, g in enumerate(FIRST)
    )
    task = ChunkTask(
        level=1,
        cells=chunk.cells,
        parent_values=chunk.gather_parents(parents),
        noisy=chunk.gather(noisy),
        weights=weights[chunk.children],
        marginals=tuple(m.of_chunk(chunk) for m in level_marginals),
        first_marginals=(0, 1, 2, 3),
        rounding=False,
    )
    res = solve_chunk(task)
    assert res.settled.all() and res.l2 is not None
    for q, (y, p, w, marginals) in enumerate(families):
        x = np.zeros((3, N))
        x[:, supports[q]] = res.l2[q, :, : supports[q].size]
        reference, _ = _solve(_task(y, p, w, marginals, "cvxpy:CLARABEL"))
        _assert_same(x, reference, p)


def _never_recentred(fit):
    """A broken pass 1: every proximal step centred at the detailed answers (the first
    centre), never at the last answer."""
    first_centre = {}

    def broken(self, centre, weight, marginals, start=None):
        first_centre.setdefault(id(self), centre)
        return fit(self, first_centre[id(self)], weight, marginals, start)

    return broken


def _hold_dropped(fit):
    """A broken pass 2: the held answers left out of the fit."""

    def broken(fitter, centre, weight, marginals, second_pass, start):
        if second_pass:
            marginals = [(t, np.zeros_like(np.asarray(v))) for t, v in marginals]
        return fit(fitter, centre, weight, marginals, second_pass, start)

    return broken


def test_a_pass_1_never_recentred_fails_the_comparison(monkeypatch):
    """Every proximal step centred at the detailed answers, never at the last answer: the
    steps stop moving at the one-pass fit with a small detailed weight, which the route takes
    for pass 1's answer; the comparison above catches it."""
    y, p, w, marginals = _inputs(0, k=3)
    reference, _ = _solve(_task(y, p, w, marginals, "cvxpy:CLARABEL"))
    monkeypatch.setattr(ChunkFitter, "fit", _never_recentred(ChunkFitter.fit))
    x, solved = _solve(_task(y, p, w, marginals, "auto"))
    assert solved == {"marginal_newton_multipass": 1}
    with pytest.raises(AssertionError):
        _assert_same(x, reference, p)


def test_a_pass_2_without_its_hold_is_refused(monkeypatch):
    """Pass 2 without the held answers: the route's own check on the held answers refuses
    the answer and the family goes to the general path (so the spy in the comparison above
    fails); its answer is not pass 2's."""
    y, p, w, marginals = _inputs(0, k=3)
    reference, _ = _solve(_task(y, p, w, marginals, "cvxpy:CLARABEL"))
    monkeypatch.setattr(multipass_newton, "_fit", _hold_dropped(multipass_newton._fit))
    chunk = [multipass_newton.Marginal(g[None], z[None], v[None]) for g, z, v in marginals]
    x, settled = multipass_newton.chunk_two_passes(y[None], p[None], w[None], chunk, (0, 1, 2, 3))
    assert not settled[0]
    with pytest.raises(AssertionError):
        _assert_same(x[0], reference, p)
    _, solved = _solve(_task(y, p, w, marginals, "auto"))
    assert "marginal_newton_multipass" not in solved


def test_release_takes_the_newton_passes_and_matches_the_per_family_path(tmp_path):
    """A release (about 500 people, 144 cells, four levels) fitting ``SEX x AGE``, ``AGE x RACE``
    and ``SEX`` first and ``detailed`` after: every level by the Newton passes (the statistics
    name the routes; the state level copies its root), the same counts as the per-family general path (a capture forces it)
    at the root and but for rounding ties below (the L2 answers agree to about 1e-4, and the
    rounding LP's optimum need not be unique: ``tests/test_multipass_batched.py``)."""
    from fractions import Fraction

    from benchmarks.synthetic import synthetic
    from topdown import release
    from topdown.query import Query
    from topdown.strategy import LevelStrategy, Strategy

    df, schema = synthetic(100, people=5, seed=4)
    first = ("SEX x AGE", "AGE x RACE", "SEX")
    queries = ((Query.parse("detailed"), Fraction(1, 4)),) + tuple(
        (Query.parse(q), Fraction(1, 4)) for q in first
    )
    names = tuple(q.name for q, _ in queries[1:])
    levels = tuple(LevelStrategy(Fraction(1, 4), queries, names) for _ in range(4))
    strategy = Strategy(levels, "discrete_gaussian")
    newton = release(df, schema, strategy, seed=3, estimator="topdown")
    general = release(
        df, schema, strategy, seed=3, estimator="topdown", capture=tmp_path / "problems"
    )
    assert newton.check_correctness().ok and general.check_correctness().ok
    routes = [set(s.solved_in("l2")) for s in newton.stats]
    assert routes[0] == {"root_newton_multipass"}
    assert routes[1] == set()  # the one state is the root's only child: a copy
    assert all(r == {"marginal_newton_multipass"} for r in routes[2:]), routes
    assert all("multipass" not in " ".join(s.solved_in("l2")) for s in general.stats)
    np.testing.assert_array_equal(newton.counts[0], general.counts[0])
    for level in range(1, newton.tree.n_levels):
        assert np.mean(newton.counts[level] != general.counts[level]) < 0.005
