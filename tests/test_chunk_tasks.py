"""The level-batched passes in chunks (``topdown.estimation.batched.families.level_chunks``,
``topdown.estimation.batched.chunk_tasks``): how a level is cut, that a family's answer does not depend on the
chunk it is solved in (bit for bit), and that the release does not depend on the executor."""

from __future__ import annotations

import numpy as np
import pytest

import topdown.estimation.batched.families as batched_module
from topdown.estimation.batched.chunk_tasks import ChunkTask, chunk_task, solve_chunk
from topdown.estimation.batched.families import ChunkShape, level_chunks
from topdown.estimation.batched.marginals import LevelMarginal
from topdown.execution.executors import make_executor


def _level(rng, n_parents=60, cells=40, max_k=7):
    """A level with parents of 1..max_k children (permuted), sparse parent counts (support
    sizes from 0 to all cells, so chunks pad), noisy answers near the parent's share, some
    integer (ties), node totals off the cells' sums, weights spanning two orders."""
    sizes = rng.integers(1, max_k + 1, n_parents)
    parent = rng.permutation(np.repeat(np.arange(n_parents), sizes))
    density = rng.uniform(0, 1, n_parents)[:, None]
    pc = rng.integers(0, 25, (n_parents, cells)) * (rng.random((n_parents, cells)) < density)
    pc[:3] = 0
    kids = parent.size
    y = rng.normal((pc / sizes[:, None])[parent], 3.0)
    rows = rng.random(kids) < 0.3
    y[rows] = np.round(y[rows])  # integer answers: ties in the projections and roundings
    t = y.sum(axis=1) + rng.normal(0, 10, kids)
    w = 10.0 ** rng.uniform(-2, 0, kids)
    v = 10.0 ** rng.uniform(-2, 0, kids) * (rng.random(kids) < 0.8)
    return y, t, pc, parent, w, v


def _marginals(rng, y, cells=40):
    """Three marginals of the level's cells (groups of 5 cells, cells mod 4, the total) with
    answers off the children's sums and weights over two orders, some 0."""
    out = []
    for groups in (np.arange(cells) // 5, np.arange(cells) % 4, np.zeros(cells, dtype=np.int64)):
        sums = np.stack([np.bincount(groups, row) for row in y])
        kids = y.shape[0]
        v = 10.0 ** rng.uniform(-2, 0, kids) * (rng.random(kids) < 0.9)
        out.append(LevelMarginal(groups, np.round(sums + rng.normal(0, 5, sums.shape)), v))
    return tuple(out)


def _inputs(mode, rng, y, t, v):
    """The L2 pass's extra inputs of a chunk task: none, node totals or marginals."""
    if mode == "totals":
        return (t, v), {}
    if mode == "marginals":
        return (None, None), {"marginals": _marginals(rng, y)}
    return (None, None), {}


def _alone(chunk: ChunkShape, q: int) -> ChunkShape:
    """Family ``q`` of a chunk as a chunk of its own (its own width, no padding)."""
    n = int(chunk.sizes[q])
    return ChunkShape(
        chunk.parents[q : q + 1],
        chunk.children[q : q + 1],
        chunk.cells[q : q + 1, :n],
        chunk.sizes[q : q + 1],
    )


def test_level_chunks_cover_each_family_once_by_public_structure():
    """Every family with two or more children and some count is in exactly one chunk, only
    children are copied, all-zero parents are in neither; chunks hold one k, are sorted by
    support size, stay within the value budget unless one family exceeds it, and list each
    family's support cells in order."""
    rng = np.random.default_rng(0)
    _, _, pc, parent, _, _ = _level(rng)
    plan = level_chunks(parent, pc, max_values=300)
    k = np.bincount(parent, minlength=pc.shape[0])
    n = (pc > 0).sum(axis=1)
    seen = np.concatenate([c.parents for c in plan.chunks])
    assert sorted(seen.tolist()) == np.flatnonzero((k > 1) & (n > 0)).tolist()
    assert sorted(plan.only_parents.tolist()) == np.flatnonzero(k == 1).tolist()
    np.testing.assert_array_equal(parent[plan.only_children], plan.only_parents)
    for c in plan.chunks:
        kc = c.children.shape[1]
        assert np.all(k[c.parents] == kc)
        assert np.all(np.diff(c.sizes) >= 0)
        assert c.parents.size == 1 or kc * c.sizes.sum() <= 300 + kc * c.sizes.max()
        for q, p in enumerate(c.parents):
            np.testing.assert_array_equal(c.children[q], np.flatnonzero(parent == p))
            np.testing.assert_array_equal(c.cells[q, : c.sizes[q]], np.flatnonzero(pc[p] > 0))
    again = level_chunks(parent, pc, max_values=300)
    for a, b in zip(plan.chunks, again.chunks, strict=True):
        np.testing.assert_array_equal(a.parents, b.parents)


@pytest.mark.parametrize(
    ("seed", "mode"),
    [(seed, mode) for mode in ("detailed", "totals") for seed in range(6)]
    + [(seed, "marginals") for seed in range(3)],  # each family alone costs an iteration
)
def test_a_family_alone_equals_the_family_inside_a_chunk(seed, mode):
    """The closed form, the dual Newton iteration (``batched_l2_total``'s), the marginal Newton
    iteration (``topdown.estimation.batched.marginals``: the chunk pads cells and each marginal's groups)
    and the rounding with its transport repair (per-family 2^-30 cost grid) give each family
    the same answer, bit for bit, solved alone (its own width) or inside a chunk of other
    families padded to the widest one. Near-ties (integer answers) are included."""
    rng = np.random.default_rng(seed)
    y, t, pc, parent, w, v = _level(rng)
    totals, more = _inputs(mode, rng, y, t, v)
    plan = level_chunks(parent, pc, max_values=10**9)  # one chunk per number of children
    assert any(c.parents.size > 3 and np.ptp(c.sizes) > 0 for c in plan.chunks)
    for chunk in plan.chunks:
        together_l2 = solve_chunk(chunk_task(1, chunk, pc, y, w, *totals, rounding=False, **more))
        together = solve_chunk(chunk_task(1, chunk, pc, y, w, *totals, **more))
        assert together.rounded.all() and together_l2.settled.all()
        for q in range(chunk.parents.size):
            one = _alone(chunk, q)
            n = int(chunk.sizes[q])
            alone_l2 = solve_chunk(chunk_task(1, one, pc, y, w, *totals, rounding=False, **more))
            alone = solve_chunk(chunk_task(1, one, pc, y, w, *totals, **more))
            assert alone_l2.l2 is not None and together_l2.l2 is not None
            np.testing.assert_array_equal(alone_l2.l2[0], together_l2.l2[q, :, :n])
            assert alone.counts is not None and together.counts is not None
            np.testing.assert_array_equal(alone.counts[0], together.counts[q, :, :n])
            np.testing.assert_array_equal(
                together.counts[q].sum(axis=0)[:n], pc[chunk.parents[q]][chunk.cells[q, :n]]
            )


def test_chunk_tasks_give_the_same_answers_on_every_executor():
    """The chunk tasks of a level (dual Newton and marginal Newton), run serially and on a pool
    of 2 and of 3 processes, come back the same (the executor only moves them)."""
    rng = np.random.default_rng(3)
    y, t, pc, parent, w, v = _level(rng, n_parents=200)
    chunks = level_chunks(parent, pc, max_values=200).chunks
    marginals = _marginals(rng, y)
    tasks = [chunk_task(2, c, pc, y, w, t, v) for c in chunks]
    tasks += [chunk_task(2, c, pc, y, w, marginals=marginals) for c in chunks[::3]]
    assert len(tasks) >= 2 * 3  # several tasks per worker (a lone task stays in this process)
    serial = make_executor("serial").map(solve_chunk, tasks)
    for workers in (2, 3):
        with make_executor("processes", workers=workers) as ex:
            for a, b in zip(serial, ex.map(solve_chunk, tasks), strict=True):
                np.testing.assert_array_equal(a.counts, b.counts)


def test_release_takes_chunks_on_the_executor_and_is_the_same_on_any_pool(monkeypatch):
    """With small chunks (several per level), a detailed-only release (``blue``: the dual
    Newton iteration; ``topdown``: the closed form) solves its levels below the root as chunk
    tasks, and is the same count for count serially and on 2 or 3 worker processes."""
    from benchmarks.pl94 import detailed_strategy, make_state, pl94_schema
    from topdown import release

    monkeypatch.setattr(batched_module, "CHUNK_VALUES", 200)
    ran: list[int] = []
    import topdown.estimation.batched.level as level_batch_module

    real = level_batch_module.level_chunks
    monkeypatch.setattr(
        level_batch_module,
        "level_chunks",
        lambda *a, **kw: (lambda plan: ran.append(len(plan.chunks)) or plan)(real(*a, **kw)),
    )
    state = make_state(20_000, seed=5)
    for estimator, solver in (("blue", "closed_form"), ("topdown", "closed_form")):
        ran.clear()  # this estimator's levels only
        runs = [
            release(
                state.records,
                pl94_schema(False),
                detailed_strategy(False),
                seed=9,
                estimator=estimator,
                geography=state.geography,
                **kwargs,
            )
            for kwargs in (
                {},
                {"executor": "processes", "workers": 2},
                {"workers": 3, "executor": "processes"},
            )
        ]
        assert max(ran) >= 8
        last = runs[0].stats[-1]
        assert last.solved_in("l2") == {solver: last.problems // 2}
        assert runs[0].check_correctness().ok
        for other in runs[1:]:
            for a, b in zip(runs[0].counts, other.counts, strict=True):
                np.testing.assert_array_equal(a, b)


def test_a_chunk_task_needs_totals_and_their_weights_together():
    with pytest.raises(ValueError, match=r"totals \(given\) and total_weights \(None\)"):
        ChunkTask(
            level=1,
            cells=np.zeros((1, 1), dtype=np.int64),
            parent_values=np.ones((1, 1), dtype=np.int64),
            noisy=np.zeros((1, 2, 1)),
            weights=np.ones((1, 2)),
            totals=np.zeros((1, 2)),
        )
