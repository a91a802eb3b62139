"""The streamed BLUE (``release_streamed(estimator="blue")``, two sweeps over the subtrees) is
the whole-tree BLUE of the same measurements, holds the root total as the unstreamed release
does, and reads the confidential records only in its measurement sweep."""

from __future__ import annotations

import copy
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from test_stream import QUIET, SCHEMA, _geography, _records, _state_total, _strategy

from topdown.blue.estimate import NodeSummary, blue
from topdown.blue.streamed import blue_above, blue_below, subtree_summary
from topdown.estimation.estimators import exact_totals
from topdown.estimation.root_total import decide
from topdown.measurement.measure import Measurements, QueryMeasurement
from topdown.measurement.tree import Tree
from topdown.strategy import LevelStrategy, Query, Strategy
from topdown.streaming import tasks as stream_tasks
from topdown.streaming.measurements import read_part
from topdown.streaming.partitions import Partition
from topdown.streaming.result import StreamedRelease, streamed_plan
from topdown.streaming.run import release_streamed

#: a streamed release writes its parts as Parquet
pytestmark = pytest.mark.extra("parquet")


def _detailed_only() -> Strategy:
    """One subspace group: the leaves kept as raw measurements plus a shift (``LeafShift``)."""
    queries = ((Query.parse("detailed"), Fraction(1)),)
    return Strategy(tuple(LevelStrategy(Fraction(1, 2), queries) for _ in range(5)))


def _run(tmp_path, name, strategy, constraints=None, **kwargs) -> StreamedRelease:
    geo = _geography()
    return release_streamed(
        _records(geo),
        SCHEMA,
        strategy,
        stream_by="COUNTY",
        out=tmp_path / name,
        geography=geo,
        constraints=constraints,
        seed=7,
        progress=QUIET,
        **kwargs,
    )


def _assembled(rel: StreamedRelease) -> Measurements:
    """The run's published measurement parts as one whole-tree ``Measurements``."""
    domain, s = rel.schema.domain, rel.stream_level
    top_tree = Tree(rel.tree.levels[: s + 1])
    top = read_part(rel.folder, top_tree, range(s + 1), "top", rel.strategy, domain)
    lower = range(s + 1, rel.tree.n_levels)
    dense: dict[int, list[np.ndarray]] = {}
    for label in rel.tree.levels[s].labels.astype(str).tolist():
        part = read_part(rel.folder, rel.subtree_tree(label), lower, label, rel.strategy, domain)
        for level in lower:
            nodes = rel.nodes_of(level, label)
            arrays = dense.setdefault(
                level,
                [
                    np.zeros((rel.tree.levels[level].size, m.noisy.shape[1]), dtype=np.int64)
                    for m in part.at(level)
                ],
            )
            for array, m in zip(arrays, part.at(level), strict=True):
                array[nodes] = m.noisy
    levels = list(top.levels)
    for level in lower:
        first = read_part(
            rel.folder,
            rel.subtree_tree(str(rel.tree.levels[s].labels[0])),
            [level],
            str(rel.tree.levels[s].labels[0]),
            rel.strategy,
            domain,
        ).at(level)
        levels.append(
            tuple(
                QueryMeasurement(
                    m.level, m.query, m.share, m.mechanism, m.budget, m.variance, array
                )
                for m, array in zip(first, dense[level], strict=True)
            )
        )
    return Measurements(tuple(levels))


def assert_subtrees_match_the_whole(
    rel, whole, pieces, queries, *, variance: str, rtol: float, atol: float = 0.0
) -> None:
    """Each subtree's BLUE below the stream level (``blue_below`` from its summary) equals the
    whole-tree BLUE on its nodes: cells, and every query's ``variance`` method (own and
    subtree). ``pieces``: (plan, labels, lower levels, parts by label, per-subtree summaries).
    The top is given as sweep 2 gives it: its final estimates and covariances, not its
    subtree covariances, which no level below reads."""
    plan, labels, lower, parts, stream = pieces
    domain, s = rel.schema.domain, rel.stream_level
    for node, label in enumerate(labels):
        row = stream.row(node)
        sub = blue_below(
            Tree(rel.subtree_tree(label).levels[s:]),
            domain,
            Measurements(parts[label].levels[s:]),
            NodeSummary(row.est, row.var),
            plan,
        )
        for level in lower:
            nodes = rel.nodes_of(level, label)
            np.testing.assert_allclose(
                sub.cells_at(level - s), whole.cells_at(level)[nodes], atol=1e-8
            )
            for q in queries:
                for subtree in (False, True):
                    np.testing.assert_allclose(
                        getattr(sub, variance)(level - s, q, subtree=subtree),
                        getattr(whole, variance)(level, q, subtree=subtree)[nodes],
                        rtol=rtol,
                        atol=atol,
                    )


def streamed_pieces(rel, measurements: Measurements, exact, fold=None):
    """The streamed BLUE's pieces from a streamed folder's published parts, as the two sweeps
    compute them: (plan, subtree labels, levels below the stream level, parts by label, the
    BLUE above the stream level, its per-subtree summaries). ``fold``: given to
    ``blue_above``, called with the plan (``FedTerms`` or None)."""
    domain, s = rel.schema.domain, rel.stream_level
    top_tree = Tree(rel.tree.levels[: s + 1])
    top = Measurements(measurements.levels[: s + 1])
    plan = streamed_plan(domain, rel.strategy, top, rel.tree.n_levels, rel.invariants)
    labels = rel.tree.levels[s].labels.astype(str).tolist()
    lower = range(s + 1, rel.tree.n_levels)
    parts = {
        label: read_part(rel.folder, rel.subtree_tree(label), lower, label, rel.strategy, domain)
        for label in labels
    }
    below = NodeSummary.stack(
        [
            subtree_summary(
                Tree(rel.subtree_tree(label).levels[s:]),
                domain,
                Measurements(parts[label].levels[s:]),
                plan,
            )
            for label in labels
        ]
    )
    fed = None if fold is None else fold(plan)
    above, stream = blue_above(top_tree, domain, top, below, plan, exact_totals=exact, fold=fed)
    return plan, labels, lower, parts, above, stream


@pytest.mark.parametrize(
    ("strategy", "constraints"),
    [(_strategy, None), (_strategy, _state_total), (_detailed_only, None)],
    ids=["detailed+AGE", "detailed+AGE, state totals invariant", "detailed only"],
)
def test_streamed_blue_equals_the_whole_tree_blue_of_its_measurements(
    tmp_path, strategy, constraints, monkeypatch
):
    # what sweep 2 actually started each subtree from (the serial executor runs it here)
    received: dict[str, NodeSummary] = {}
    real_below = stream_tasks.blue_below

    def recording(tree, domain, below, top, plan):
        received[str(tree.levels[0].labels[0])] = copy.deepcopy(top)  # blue_below works in it
        return real_below(tree, domain, below, top, plan)

    monkeypatch.setattr(stream_tasks, "blue_below", recording)
    rel = _run(tmp_path, "rel", strategy(), None if constraints is None else constraints())
    domain, s = rel.schema.domain, rel.stream_level
    whole_measurements = _assembled(rel)
    exact = exact_totals(rel.invariants, domain)
    whole = blue(rel.tree, domain, whole_measurements, exact_totals=exact)
    # the pieces, as the two sweeps compute them, from the same published parts
    plan, labels, lower, parts, above, stream = streamed_pieces(rel, whole_measurements, exact)
    queries = ["detailed", "total", "AGE"]
    for level in range(s + 1):
        np.testing.assert_allclose(above.cells_at(level), whole.cells_at(level), atol=1e-8)
        for q in queries:
            for subtree in (False, True):
                np.testing.assert_allclose(
                    above.variance(level, q, subtree=subtree),
                    whole.variance(level, q, subtree=subtree),
                    rtol=1e-9,
                )
    assert sorted(received) == sorted(labels)
    for node, label in enumerate(labels):
        for got, want in zip(received[label].est, stream.row(node).est, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-8)
        for got, want in zip(received[label].var, stream.row(node).var, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-9)
        # the parent neither keeps nor sends the stream nodes' subtree covariances
        assert received[label].subtree == ()
    assert_subtrees_match_the_whole(
        rel, whole, (plan, labels, lower, parts, stream), queries, variance="variance", rtol=1e-9
    )
    # the run itself held the root total at the whole-tree BLUE's, as the unstreamed rule says
    expected = decide("blue", rel.tree, domain, whole, rel.constraints, rel.invariants)
    assert rel.root_total is not None
    assert rel.root_total.held == expected.held == (constraints is None)
    if expected.held:
        assert rel.root_total.value == expected.value
        assert rel.top_counts[0].sum() == expected.value  # the passes held it
        assert rel.root_total.blue_total == pytest.approx(expected.blue_total, abs=1e-6)
    assert rel.check_correctness().ok


def test_api_folder_ledger_records_the_estimation_note(tmp_path):
    rel = _run(tmp_path, "rel", _strategy())
    ledger = json.loads((rel.folder / "ledger.json").read_text())
    estimation = ledger["summary"]["estimation"]
    assert estimation["estimator"] == "blue"
    assert estimation["root_total"] == rel.root_total.to_dict()
    assert estimation["root_total"]["held"] is True
    assert ledger["summary"]["strategy_total"] == "5/2"
    # recomputed from the published parts alone, as topdown check does
    assert rel.blue_root_total() == rel.root_total


def test_records_are_read_only_in_the_measurement_sweep(tmp_path, monkeypatch):
    reads: Counter[str] = Counter()
    original = Partition.read

    def counting(self):
        reads[self.label] += 1
        return original(self)

    monkeypatch.setattr(Partition, "read", counting)
    _run(tmp_path, "topdown", _strategy(), estimator="topdown")
    one_sweep = dict(reads)
    reads.clear()
    _run(tmp_path, "blue", _strategy(), estimator="blue")
    # the top's histograms and sweep 1, as the one-sweep release: sweep 2 reads no records
    # (C00 has no records: only its empty stand-in is read, by sweep 1)
    assert dict(reads) == one_sweep
    assert one_sweep == {f"C{c:02d}": 1 if c == 0 else 2 for c in range(9)}


def test_default_estimator_is_blue_and_topdown_still_streams(tmp_path):
    default = _run(tmp_path, "default", _strategy())
    assert default.estimator == "blue" and default.root_total is not None
    plain = _run(tmp_path, "topdown", _strategy(), estimator="topdown")
    assert plain.estimator == "topdown" and plain.root_total is None
    assert plain.check_correctness().ok
    ledger = json.loads((plain.folder / "ledger.json").read_text())
    assert ledger["summary"]["estimation"] == {
        "estimator": "topdown",
        "note": "post-processing of the noisy measurements and their public variances only: "
        "no privacy cost",
    }
    # the measurements are the same streams under either estimator: only the estimates differ
    for level in range(plain.tree.n_levels):
        pd.testing.assert_frame_equal(
            plain.measurement_table(level), default.measurement_table(level)
        )
