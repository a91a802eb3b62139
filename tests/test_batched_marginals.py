"""The marginal Newton iteration (``topdown.estimation.batched.marginals``): the L2 pass of families fitted
to their detailed cells and marginal queries (a production-shaped strategy), against hand-worked
answers and the per-family QP."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers.builders import children_l2_problem
from topdown.estimation.batched.families import ChunkShape, level_chunks, seq_dot, seq_sum
from topdown.estimation.batched.marginals import LevelMarginal, marginal_newton_chunk

# a 2 x 3 x 4 domain (24 cells, C order) and the group of each cell under some marginals
SHAPE = (2, 3, 4)
_AXES = np.indices(SHAPE).reshape(3, -1)
GROUPINGS = {
    "total": np.zeros(24, dtype=np.int64),
    "A": _AXES[0],
    "C": _AXES[2],
    "A x B": _AXES[0] * 3 + _AXES[1],
    "B x C": _AXES[1] * 4 + _AXES[2],
}


def _matrix(groups: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix(
        (np.ones(groups.size), (groups, np.arange(groups.size))), shape=(groups.max() + 1, 24)
    )


def _one_family(y, p, w, marginals):
    """One family as a chunk: y (k, n), p (n,) > 0, w (k,), marginals [(groups, z, v)]."""
    k, n = y.shape
    chunk = ChunkShape(np.array([0]), np.arange(k)[None, :], np.arange(n)[None, :], np.array([n]))
    blocks = tuple(LevelMarginal(g, z, v).of_chunk(chunk) for g, z, v in marginals)
    x, ok = marginal_newton_chunk(y[None], np.asarray(p, float)[None], w[None], blocks)
    assert ok.all()
    return x[0]


def test_hand_worked_one_cell_and_a_total():
    """One cell of 10 persons, two children answering 4 and 4 with totals 7 and 3 (all weights
    1): child c minimises 2 (x_c - m_c)^2 with m = (5.5, 3.5), so both move by half the gap of
    1: (6, 4)."""
    x = _one_family(
        np.array([[4.0], [4.0]]),
        [10],
        np.ones(2),
        [(np.zeros(1, dtype=np.int64), np.array([[7.0], [3.0]]), np.ones(2))],
    )
    np.testing.assert_allclose(x, [[6.0], [4.0]], atol=1e-12)


def test_hand_worked_a_child_clipped_at_zero():
    """One cell of 2: answers (3, -2) and totals (3, -2), weights 1: unclipped (3.5, -1.5),
    so the second child is 0 and the first takes the cell: (2, 0)."""
    x = _one_family(
        np.array([[3.0], [-2.0]]),
        [2],
        np.ones(2),
        [(np.zeros(1, dtype=np.int64), np.array([[3.0], [-2.0]]), np.ones(2))],
    )
    np.testing.assert_allclose(x, [[2.0], [0.0]], atol=1e-12)


def test_a_consistent_input_is_its_own_answer_and_a_zero_weight_drops_a_marginal():
    """Answers that already sum to the parent and agree with their marginals are the answer;
    a marginal of weight 0 for a child does not move it (its answers are nonsense here)."""
    rng = np.random.default_rng(1)
    y = rng.integers(1, 9, (3, 24)).astype(float)
    p = y.sum(axis=0)
    A = GROUPINGS["A x B"]
    z = np.stack([np.bincount(A, y[c]) for c in range(3)])
    wild = z + 100.0
    x = _one_family(
        y, p, np.ones(3), [(A, z, np.full(3, 2.0)), (GROUPINGS["C"], wild, np.zeros(3))]
    )
    np.testing.assert_allclose(x, y, atol=1e-9)


def _random_level(rng, n_parents=12, max_k=6):
    """Families of 2..max_k children on the 24 cells with 1-3 marginals (totals among them),
    zero parent cells, answers near 0 (children clipped), weights over two orders, some
    marginal weights 0."""
    sizes = rng.integers(2, max_k + 1, n_parents)
    parent = rng.permutation(np.repeat(np.arange(n_parents), sizes))
    density = rng.uniform(0.2, 1, n_parents)[:, None]
    pc = rng.integers(0, 12, (n_parents, 24)) * (rng.random((n_parents, 24)) < density)
    share = (pc / sizes[:, None])[parent]
    y = rng.normal(share, 2.0)
    w = 10.0 ** rng.uniform(-1, 1, parent.size)
    names = rng.choice(list(GROUPINGS), size=int(rng.integers(1, 4)), replace=False)
    marginals = []
    for name in names:
        groups = GROUPINGS[str(name)]
        z = rng.normal(_matrix(groups).dot(share.T).T, 3.0)
        v = 10.0 ** rng.uniform(-2, 0, parent.size) * (rng.random(parent.size) < 0.85)
        marginals.append(LevelMarginal(groups, z, v))
    return y, pc, parent, w, marginals


def _polished_qp(y, p, w, marginals, kids, support):
    """The per-family QP (children_l2_problem, HiGHS), then polished on its zero set: the
    equality-constrained QP with those variables at 0 solved exactly (a KKT linear system).
    The polished point is checked to be optimal (non-negative, bound multipliers >= 0), so it
    is the QP's optimum to about 1e-9 whatever HiGHS's tolerance."""
    k, n = len(kids), len(support)
    meas = [(sp.identity(n, format="csr"), y[np.ix_(kids, support)], w[kids])]
    meas += [(_matrix(m.groups)[:, support], m.answers[kids], m.weights[kids]) for m in marginals]
    raw = children_l2_problem(p[support].astype(float), meas, k=k, n=n, lifted=True)
    x_qp = np.asarray(solvers.solve(raw, solver="highs").x)[: k * n]
    exact = children_l2_problem(p[support].astype(float), meas, k=k, n=n)
    free = x_qp > 1e-7
    assert exact.P is not None and exact.A is not None
    P = exact.P.toarray()[np.ix_(free, free)]
    A = exact.A.toarray()[:, free]
    rows = np.abs(A).sum(axis=1) > 0
    A, b = A[rows], np.asarray(exact.row_lb)[rows]
    kkt = np.block([[P, A.T], [A, np.zeros((A.shape[0], A.shape[0]))]])
    sol = np.linalg.lstsq(kkt, np.r_[-exact.c[free], b], rcond=None)[0]
    x = np.zeros(k * n)
    x[free] = sol[: free.sum()]
    nu = sol[free.sum() :]
    bound = (exact.P @ x + exact.c + exact.A[rows].T @ nu)[~free]
    assert x.min() >= -1e-9 and bound.min(initial=0.0) >= -1e-7, "HiGHS's zero set is not optimal"
    return x.reshape(k, n), x_qp.reshape(k, n)


@pytest.mark.parametrize("seed", range(8))
def test_batched_equals_the_per_family_qp(seed):
    """Every family of random levels (1-3 marginals, totals among them, zero parent cells,
    children clipped to 0, zero marginal weights): the batched answer is the QP's optimum
    within 1e-7 (max abs, against the polished QP) and within 1e-4 of HiGHS's raw answer."""
    rng = np.random.default_rng(seed)
    y, pc, parent, w, marginals = _random_level(rng)
    plan = level_chunks(parent, pc)
    clipped = 0
    for chunk in plan.chunks:
        blocks = tuple(m.of_chunk(chunk) for m in marginals)
        x, ok = marginal_newton_chunk(
            chunk.gather(y), chunk.gather_parents(pc), w[chunk.children], blocks
        )
        assert ok.all()
        for q, p in enumerate(chunk.parents):
            n = int(chunk.sizes[q])
            support = chunk.cells[q, :n]
            exact, raw = _polished_qp(y, pc[p], w, marginals, chunk.children[q], support)
            mine = x[q, :, :n]
            np.testing.assert_allclose(mine, exact, rtol=0, atol=1e-7)
            np.testing.assert_allclose(mine, raw, rtol=0, atol=1e-4)
            np.testing.assert_allclose(mine.sum(axis=0), pc[p][support], rtol=0, atol=1e-9)
            assert mine.min() >= 0.0
            clipped += int((mine == 0).sum())
    assert clipped > 0


def test_families_that_do_not_settle_are_reported():
    """With no Newton step allowed, families not at their optimum are reported unsettled."""
    rng = np.random.default_rng(3)
    y, pc, parent, w, marginals = _random_level(rng)
    chunk = level_chunks(parent, pc).chunks[0]
    blocks = tuple(m.of_chunk(chunk) for m in marginals)
    _, ok = marginal_newton_chunk(
        chunk.gather(y), chunk.gather_parents(pc), w[chunk.children], blocks, max_iter=0
    )
    assert not ok.any()


def test_of_chunk_keeps_each_familys_non_empty_groups_in_order():
    """A chunk's marginal lists, per family, the groups its support cells fall in (in group
    order), their answers, and points padding cells past the last group."""
    groups = GROUPINGS["A x B"]
    answers = np.arange(4 * 6, dtype=float).reshape(4, 6)
    chunk = ChunkShape(
        np.array([0, 1]),
        np.array([[0, 1], [2, 3]]),
        np.array([[0, 13, 23], [5, 0, 0]]),  # cells of groups 0, 3, 5; then group 1 only
        np.array([3, 1]),
    )
    m = LevelMarginal(groups, answers, np.ones(4)).of_chunk(chunk)
    np.testing.assert_array_equal(m.groups, [[0, 1, 2], [0, 3, 3]])
    np.testing.assert_array_equal(m.targets[0], answers[[0, 1]][:, [0, 3, 5]])
    np.testing.assert_array_equal(m.targets[1, :, :1], answers[[2, 3]][:, [1]])
    np.testing.assert_array_equal(m.targets[1, :, 1:], 0.0)


def test_bad_marginals_are_refused():
    answers = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"groups \(from 0 to 3\) must index the 3 answers"):
        LevelMarginal(np.array([0, 3]), answers, np.ones(2))
    with pytest.raises(ValueError, match=r"weights \(shape \(2,\)\) must be finite and >= 0"):
        LevelMarginal(np.array([0, 2]), answers, np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match=r"answers \(shape \(3,\)\) must be 2-D"):
        LevelMarginal(np.array([0, 2]), np.zeros(3), np.ones(3))


def test_seq_dot_is_the_sequential_sum_bit_for_bit():
    """The compiled row dot products equal ``seq_sum(a * b, axis=1)`` exactly (each product
    rounded, added in index order: no fused multiply-add, no reassociation), on values over
    twelve orders of magnitude with cancellation, where numpy's pairwise ``sum`` differs in
    the last bits; on a non-contiguous view as well; and trailing zeros leave the sums as
    they are (the padding of a chunk)."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 5001)) * 10.0 ** rng.uniform(-6, 6, size=(7, 5001))
    b = rng.normal(size=(7, 5001))
    want = seq_sum(a * b, axis=1)
    np.testing.assert_array_equal(seq_dot(a, b), want)
    assert not np.array_equal((a * b).sum(axis=1), want)  # the test can tell the orders apart
    np.testing.assert_array_equal(seq_dot(a[:, ::2], b[:, ::2]), seq_sum(a[:, ::2] * b[:, ::2], 1))
    padded = np.concatenate([a, np.zeros((7, 999))], axis=1)
    np.testing.assert_array_equal(seq_dot(padded, np.pad(b, ((0, 0), (0, 999)))), want)
    np.testing.assert_array_equal(seq_dot(np.zeros((3, 0)), np.zeros((3, 0))), np.zeros(3))
    with pytest.raises(ValueError, match=r"a \(shape \(2, 3\)\) and b \(shape \(3, 2\)\)"):
        seq_dot(np.zeros((2, 3)), np.zeros((3, 2)))
