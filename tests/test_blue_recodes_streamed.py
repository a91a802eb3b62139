"""The streamed BLUE of recoded queries (``release_streamed(estimator="blue")``): its pieces
share the whole tree's block plan, so they give the whole-tree BLUE of the same measurements,
estimates and every answer's variance, with the state totals held exactly."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from test_stream import QUIET, _geography, _records, _state_total
from test_stream_blue import _assembled, assert_subtrees_match_the_whole, streamed_pieces

from topdown.blue.estimate import blue
from topdown.estimation.estimators import exact_totals
from topdown.schema import Attribute, Schema
from topdown.strategy import LevelStrategy, Query, Strategy
from topdown.streaming.result import StreamedRelease
from topdown.streaming.run import release_streamed

pytestmark = pytest.mark.extra("parquet")

#: AGE banded into a child value and three adult ones: groups of unequal sizes
SCHEMA = Schema(
    (
        Attribute("AGE", values=(0, 1, 2, 3), recodes={"band": {"child": [0], "adult": [1, 2, 3]}}),
        Attribute("SEX", values=(0, 1)),
    ),
    ("STATE", "COUNTY", "TRACT", "BLOCK"),
)
QUERIES = ["detailed", "total", "band", "AGE:band x SEX", "AGE"]


def _strategy() -> Strategy:
    queries = (
        (Query.parse("detailed"), Fraction(2, 3)),
        (Query.parse("AGE:band x SEX"), Fraction(1, 3)),
    )
    return Strategy(tuple(LevelStrategy(Fraction(1, 2), queries) for _ in range(5)))


def released(out) -> StreamedRelease:
    """The recoded strategy streamed by county, state totals invariant, seed 7."""
    geo = _geography()
    return release_streamed(
        _records(geo),
        SCHEMA,
        _strategy(),
        stream_by="COUNTY",
        out=out,
        geography=geo,
        constraints=_state_total(),
        seed=7,
        progress=QUIET,
    )


def test_streamed_blue_of_recoded_queries_is_the_whole_tree_blue(tmp_path) -> None:
    rel = released(tmp_path / "rel")
    assert rel.check_correctness().ok
    domain, s = rel.schema.domain, rel.stream_level
    measurements = _assembled(rel)
    exact = exact_totals(rel.invariants, domain)
    whole = blue(rel.tree, domain, measurements, exact_totals=exact)
    assert whole.blocks
    for state, total in exact[1].items():  # the invariant, kept with variance 0
        assert whole.cells_at(1)[state].sum() == pytest.approx(total, abs=1e-8)
        assert whole.answer_variance(1, "total")[state, 0] == 0.0
    plan, labels, lower, parts, above, stream = streamed_pieces(rel, measurements, exact)
    assert plan.blocks
    for level in range(s + 1):
        np.testing.assert_allclose(above.cells_at(level), whole.cells_at(level), atol=1e-8)
        for q in QUERIES:
            np.testing.assert_allclose(
                above.answer_variance(level, q), whole.answer_variance(level, q), rtol=1e-8
            )
    assert_subtrees_match_the_whole(
        rel,
        whole,
        (plan, labels, lower, parts, stream),
        QUERIES,
        variance="answer_variance",
        rtol=1e-8,
        atol=1e-12,
    )
