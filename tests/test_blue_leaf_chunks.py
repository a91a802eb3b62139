"""The BLUE's leaf level a chunk of families at a time (``topdown.blue.leaf_families``) gives
the whole-tree BLUE and, through the passes, the same counts.

On the DHC-persons-like domain of ``test_blue_dhc_like`` (recoded queries: the block solve) and
on a plain one (no recodes: the subspace groups), over a tree whose families have one to four
children (only children, unequal families, parents cut into chunks of one and of several
families), with the leaf marginals unmeasured at every other leaf: the chunked BLUE's cells,
totals and variances at every level equal the whole-tree solve's to 1e-9, and the released
counts are identical. A chunk that lost a family, a leaf placed in another's row, a parent
given another's final estimate or a covariance merged into the wrong type would break them.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_blue_dhc_like import DOMAIN, QUERIES

from constraints.domain import Domain
from topdown.blue.error_estimates import error_summary, node_error_table
from topdown.blue.estimate import blue
from topdown.blue.leaf_families import blue_by_families, family_chunks, family_tree
from topdown.estimation.estimate import estimate
from topdown.estimation.estimators import prepare_blue_by_families, prepare_inputs
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.tree import Level, Tree
from topdown.schema import Attribute, Schema
from topdown.strategy import Query, Strategy

PLAIN = Domain({"A": [0, 1, 2], "B": [0, 1], "C": [0, 1, 2, 3]})
PLAIN_QUERIES = ["detailed", "total", "A x B", "C"]

#: children per county (12 counties under 3 states): only children and unequal families
CHILDREN = [1, 3, 2, 4, 1, 2, 3, 3, 2, 1, 4, 2]


def _tree() -> Tree:
    root = Level(0, None, np.array(["r"], dtype=object), np.array([-1]))
    states = Level(1, "S", np.array(["s0", "s1", "s2"], dtype=object), np.zeros(3, dtype=np.int64))
    county_parent = np.repeat(np.arange(3), 4)
    counties = Level(
        2, "C", np.array([f"c{i:02d}" for i in range(12)], dtype=object), county_parent
    )
    leaf_parent = np.repeat(np.arange(12), CHILDREN)
    # leaves labelled so their sorted order is not their parents' (family_tree must not
    # assume contiguous families)
    order = np.random.default_rng(5).permutation(leaf_parent.size)
    labels = np.array([f"t{i:03d}" for i in range(leaf_parent.size)], dtype=object)
    leaves = Level(3, "T", labels, leaf_parent[order])
    return Tree((root, states, counties, leaves))


def _inputs(rng: np.random.Generator, tree: Tree, domain: Domain, queries: list[str]):
    """Integer noisy answers of a sparse truth (many clipped below 0), one variance per
    query and level."""
    levels = []
    truth = np.where(rng.random((tree.levels[-1].size, domain.size)) < 0.3, 1, 0)
    per_level = [truth]
    for lv in tree.levels[:0:-1]:
        parent = np.zeros((tree.levels[lv.number - 1].size, domain.size), dtype=np.int64)
        np.add.at(parent, lv.parent, per_level[0])
        per_level.insert(0, parent)
    for level, counts in enumerate(per_level):
        row = []
        for name in queries:
            q = Query.parse(name)
            variance = rng.uniform(0.5, 4.0)
            answers = q.answer(counts, domain)
            noisy = np.rint(answers + rng.normal(0.0, np.sqrt(variance), answers.shape))
            row.append(QueryEstimate(level, q, noisy.astype(np.int64), variance))
        levels.append(tuple(row))
    return EstimatorInputs(tuple(levels))


def _masked(inputs: EstimatorInputs) -> EstimatorInputs:
    """``leaf_marginals_every_other_node`` on this tree's leaf level (level 3)."""
    masked = []
    for m in inputs.at(3):
        var = np.broadcast_to(m.variance, (m.noisy.shape[0],)).astype(float)
        if m.query.name != "detailed":
            var[::2] = np.inf
        masked.append(QueryEstimate(m.level, m.query, m.noisy, var))
    return EstimatorInputs(inputs.levels[:3] + (tuple(masked),))


@pytest.mark.parametrize("recoded", [True, False], ids=["recoded", "plain"])
@pytest.mark.parametrize("families_per_chunk", [1, 3])
def test_chunked_leaf_blue_is_the_whole_tree_blue(recoded: bool, families_per_chunk: int) -> None:
    domain, queries = (DOMAIN, QUERIES) if recoded else (PLAIN, PLAIN_QUERIES)
    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(3), tree, domain, queries))
    whole = blue(tree, domain, inputs)
    max_bytes = families_per_chunk * 2 * domain.size * 8
    solved = blue_by_families(tree, domain, inputs, max_bytes=max_bytes)
    assert solved is not None
    chunked, leaves = solved
    assert len(leaves.chunks) > 1
    for level in range(tree.n_levels):
        a, b = whole.cells_at(level), chunked.cells_at(level)
        scale = max(1.0, float(np.abs(a).max()))
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(
            chunked.totals_at(level), whole.totals_at(level), atol=1e-9 * scale
        )
        for name in queries:
            for subtree in (False, True):
                np.testing.assert_allclose(
                    chunked.answer_variance(level, name, subtree=subtree),
                    whole.answer_variance(level, name, subtree=subtree),
                    rtol=1e-9,
                    atol=1e-12,
                )
    # a block of rows across chunks
    rows = slice(2, 17)
    np.testing.assert_allclose(
        chunked.cells_at(3, rows), whole.cells_at(3, rows), atol=1e-9 * scale
    )


def test_family_chunks_keep_families_whole_and_in_order() -> None:
    tree = _tree()
    chunks = family_chunks(tree, 10, 3 * 10 * 8)
    assert np.array_equal(np.concatenate(chunks), np.arange(12))
    per_parent = np.bincount(tree.levels[3].parent, minlength=12)
    for parents in chunks:
        # at most 3 children a chunk, unless one family alone has more
        assert per_parent[parents].sum() <= 3 or parents.size == 1
    sub, children = family_tree(tree, chunks[1])
    assert np.array_equal(
        np.sort(children), np.flatnonzero(np.isin(tree.levels[3].parent, chunks[1]))
    )
    assert np.array_equal(chunks[1][sub.levels[1].parent], tree.levels[3].parent[children])


@pytest.mark.parametrize("recoded", [True, False], ids=["recoded", "plain"])
def test_chunked_passes_release_the_same_counts(recoded: bool) -> None:
    domain, queries = (DOMAIN, QUERIES) if recoded else (PLAIN, PLAIN_QUERIES)
    tree = _tree()
    measured = _masked(_inputs(np.random.default_rng(7), tree, domain, queries))
    fed, _, _ = prepare_inputs("blue", tree, domain, measured)
    whole, _ = estimate(tree, domain, fed, first_pass={})
    prepared = prepare_blue_by_families(tree, domain, measured, max_bytes=2 * domain.size * 8)
    assert prepared is not None
    above, _, leaves, _ = prepared
    assert len(leaves.chunks) > 1
    chunked, stats = estimate(tree, domain, above, first_pass={}, leaves=leaves)
    for a, b in zip(whole, chunked, strict=True):
        assert np.array_equal(a, b)
    assert stats[-1].families > 0
    # the passes keep none of the leaves' covariances (a (k, k) matrix per parent type and
    # block, for the rest of a release); a reader of the variances gets them estimated again
    assert leaves.covariance_bytes == 0
    blue_whole = blue(tree, domain, measured)
    _, blue_chunked, _, _ = prepared
    for name in queries:
        np.testing.assert_allclose(
            blue_chunked.answer_variance(3, name),
            blue_whole.answer_variance(3, name),
            rtol=1e-9,
            atol=1e-12,
        )
    assert leaves.covariance_bytes > 0


def hhinst_release(*extra: Attribute) -> tuple[Schema, Strategy]:
    """County > tract, ``HHGQ`` (with PL94's ``hhinst`` recode) x ``VA`` (x ``extra``), and
    the detailed, ``hhinst`` and ``hhinst x VA`` queries, rho 1 a level: a recoded release
    small enough for the tests, whose tracts the chunked BLUE takes with a tiny chunk size."""
    schema = Schema(
        (
            Attribute(
                "HHGQ",
                values=tuple(range(8)),
                recodes={"hhinst": {"non": [0, 5, 6, 7], "inst": [1, 2, 3, 4]}},
            ),
            Attribute("VA", values=(0, 1)),
            *extra,
        ),
        ("COUNTY", "TRACT"),
    )
    strategy = Strategy.from_budgets(
        [1, 1, 1], queries=[("detailed", "1/2"), ("hhinst", "1/4"), ("HHGQ:hhinst x VA", "1/4")]
    )
    return schema, strategy


def test_release_takes_the_chunked_path_with_the_same_counts(monkeypatch) -> None:
    """``release()`` under ``"blue"``: with ``LEAF_CHUNK_BYTES`` below one family's leaves
    every county's tracts are a chunk of their own; the counts equal the whole-tree path's,
    and so do ``Release.blue``'s leaf cells, totals and standard errors (read on demand)."""
    import pandas as pd

    import topdown.estimation.estimators as estimators
    from topdown import release

    rng = np.random.default_rng(4)
    n = 3000
    county = rng.integers(0, 4, n)
    data = pd.DataFrame(
        {
            "COUNTY": county,
            "TRACT": county * 10 + rng.integers(0, 1 + county, n),  # 1 to 4 tracts a county
            "HHGQ": rng.choice(8, n, p=[0.86] + [0.02] * 7),
            "VA": rng.integers(0, 2, n),
            "SEX": rng.integers(1, 3, n),
        }
    )
    schema, strategy = hhinst_release(Attribute("SEX", values=(1, 2)))
    whole = release(data, schema, strategy, estimator="blue", seed=3)
    monkeypatch.setattr(estimators, "LEAF_CHUNK_BYTES", 8)
    chunked = release(data, schema, strategy, estimator="blue", seed=3)
    assert whole.blue is not None and chunked.blue is not None
    assert whole.blue.leaves is None and chunked.blue.leaves is not None
    for a, b in zip(whole.counts, chunked.counts, strict=True):
        assert np.array_equal(a, b)
    np.testing.assert_allclose(chunked.blue.cells_at(2), whole.blue.cells_at(2), atol=1e-9)
    np.testing.assert_allclose(chunked.blue.totals_at(2), whole.blue.totals_at(2), atol=1e-9)
    np.testing.assert_allclose(chunked.blue.stderr(2), whole.blue.stderr(2), rtol=1e-9)
    assert chunked.check_correctness().ok
    for frame in (node_error_table, error_summary):
        a = frame(whole.tree, whole.counts, whole.blue)
        b = frame(chunked.tree, chunked.counts, chunked.blue)
        pd.testing.assert_frame_equal(b, a, rtol=1e-9)


def test_kept_first_chunk_terms_give_the_same_estimates_to_the_bit(monkeypatch) -> None:
    """The first pass keeps chunk ``KEPT_CHUNK``'s own terms for the second: its estimate
    from them equals, bit for bit, the one computed afresh (once they are used they are gone:
    a later read of the chunk computes them again), and equals the estimate of a run that
    kept none."""
    import topdown.blue.leaf_families as lf

    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(11), tree, DOMAIN, QUERIES))
    max_bytes = 2 * DOMAIN.size * 8
    solved = blue_by_families(tree, DOMAIN, inputs, max_bytes=max_bytes)
    assert solved is not None
    _, leaves = solved
    assert list(leaves._kept) == [lf.KEPT_CHUNK]
    i = lf.KEPT_CHUNK
    _, kept = leaves.estimate(i)
    assert not leaves._kept
    kept_cells = kept.cells_at(1)
    leaves._last = None  # forget it: the next read computes the chunk again
    _, fresh = leaves.estimate(i)
    assert kept_cells.tobytes() == fresh.cells_at(1).tobytes()
    monkeypatch.setattr(lf, "KEPT_CHUNK", -1)  # keep none
    plain = blue_by_families(tree, DOMAIN, inputs, max_bytes=max_bytes)
    assert plain is not None and not plain[1]._kept
    _, none_kept = plain[1].estimate(i)
    assert kept_cells.tobytes() == none_kept.cells_at(1).tobytes()
    for a, b in zip(kept.block_scale[1], none_kept.block_scale[1], strict=True):
        np.testing.assert_array_equal(
            np.asarray(getattr(a, "values", a)), np.asarray(getattr(b, "values", b))
        )


def test_leaf_summaries_are_freed_block_by_block_with_the_same_blue(monkeypatch) -> None:
    """``blue_by_families`` hands the leaves' summaries to ``blue_above`` in lists: each
    block's are emptied when that block's solve takes them (the later blocks' still held),
    and the levels above come out bit for bit as from the same summaries in tuples (kept
    whole to the end, as a streamed release passes them)."""
    import topdown.blue.block_solve as bs
    import topdown.blue.leaf_families as lf
    from topdown.blue.estimate import NodeSummary

    tree = _tree()
    inputs = _masked(_inputs(np.random.default_rng(13), tree, DOMAIN, QUERIES))
    real_above, real_block = lf.blue_above, bs._solve_block
    seen: dict = {"held": []}

    def above(tree, domain, measurements, below, plan, **options):
        kept = NodeSummary(tuple(e.copy() for e in below.est), tuple(v.copy() for v in below.var))
        seen["whole"] = real_above(tree, domain, measurements, kept, plan, **options)
        seen["below"] = below
        return real_above(tree, domain, measurements, below, plan, **options)

    def block(*args):
        if "below" in seen:
            seen["held"].append([v.size > 0 for v in seen["below"].var])
        return real_block(*args)

    monkeypatch.setattr(lf, "blue_above", above)
    monkeypatch.setattr(bs, "_solve_block", block)
    solved = blue_by_families(tree, DOMAIN, inputs, max_bytes=2 * DOMAIN.size * 8)
    assert solved is not None
    chunked, leaves = solved
    n = len(seen["held"])
    assert n > 1
    assert seen["held"] == [[j > b for j in range(n)] for b in range(n)]
    assert all(v.size == 0 for v in seen["below"].var + seen["below"].est)
    whole, final = seen["whole"]
    for level in range(tree.n_levels - 1):
        assert chunked.cells_at(level).tobytes() == whole.cells_at(level).tobytes()
    for a, b in zip(leaves.parents_final.est, final.est, strict=True):
        assert a.tobytes() == b.tobytes()


def test_stacked_parts_of_several_rows_equal_their_concatenation() -> None:
    """``NodeSummary.stacked`` with parts of several rows (a chunk's parents), in any order:
    their concatenation, as lists a recoded solve can empty; a row given twice is refused."""
    from topdown.blue.estimate import NodeSummary

    rng = np.random.default_rng(3)
    parts = [
        NodeSummary(
            (rng.normal(size=(n, 2)), rng.normal(size=(n, 3))),
            (rng.normal(size=n), rng.normal(size=(n, 3, 3))),
        )
        for n in (1, 2, 4)
    ]
    got = NodeSummary.stacked(7, [(3, parts[2]), (0, parts[0]), (1, parts[1])])
    assert isinstance(got.est, list) and isinstance(got.var, list)
    for g in range(2):
        assert np.array_equal(got.est[g], np.concatenate([p.est[g] for p in parts]))
        assert np.array_equal(got.var[g], np.concatenate([p.var[g] for p in parts]))
    assert np.array_equal(NodeSummary.stack(parts).var[1], got.var[1])
    with pytest.raises(ValueError, match="rows 1-2 came twice"):
        NodeSummary.stacked(7, [(0, parts[0]), (1, parts[1]), (1, parts[1])])
