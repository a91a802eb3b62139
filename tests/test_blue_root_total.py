"""The root total's BLUE from its one block (``topdown.blue.root_total``) is the whole BLUE's.

``topdown check`` verifies the ledger's root-total note with ``root_total_blue`` instead of the
whole-tree BLUE; the note must come out the same, and it does only if the root's total and its
variance are the whole BLUE's (to round-off). Checked here against ``blue`` (itself checked
against a dense GLS in ``test_blue`` and ``test_blue_dhc_like``) on plain and recoded
strategies, per-node variances, uninformed nodes and an exact total.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_blue as tb
import test_blue_dhc_like as dl

from topdown.blue.estimate import blue
from topdown.blue.root_total import root_total_blue, total_block
from topdown.estimation.root_total import decide
from topdown.strategy import Query


def _same_total(tree, domain, inputs, exact_totals=None) -> None:
    whole = blue(tree, domain, inputs, exact_totals=exact_totals)
    alone = root_total_blue(tree, domain, inputs, exact_totals=exact_totals)
    got, want = alone.answer(0, "total"), whole.answer(0, "total")
    np.testing.assert_allclose(got.noisy, want.noisy, rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(got.variance, want.variance, rtol=1e-10, atol=1e-12)
    # the ledger's note, as topdown check compares it
    note = decide("blue", tree, domain, alone).to_dict()
    assert note == decide("blue", tree, domain, whole).to_dict()
    assert note["held"]


@pytest.mark.parametrize("name", sorted(tb.STRATEGIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_plain_strategies(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 3), only_child=seed == 0)
    inputs = tb.random_inputs(rng, tree, tb.STRATEGIES[name], per_node=seed == 1)
    _same_total(tree, tb.DOMAIN, inputs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recoded_dhc_like_strategy(seed: int) -> None:
    """The DHC persons preset's ten queries on a small recoded domain: the total's block is a
    matrix block (k > 1), whose total direction is not a coordinate."""
    assert total_block(dl.DOMAIN, [[Query.parse(q) for q in dl.QUERIES]]).k == 25
    rng = np.random.default_rng(seed)
    tree = tb.random_tree(rng, (2, 2), only_child=seed != 1)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tb, "DOMAIN", dl.DOMAIN)  # random_inputs reads its module's domain
        inputs = tb.random_inputs(rng, tree, [dl.QUERIES] * 3, per_node=seed == 2)
    _same_total(tree, dl.DOMAIN, inputs)


def test_uninformed_nodes_and_an_exact_total() -> None:
    """The marginals unmeasured at every other leaf, and an exact root total (variance 0)."""
    rng = np.random.default_rng(5)
    tree = tb.random_tree(rng, (3, 2), only_child=True)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tb, "DOMAIN", dl.DOMAIN)
        inputs = tb.random_inputs(rng, tree, [dl.QUERIES] * 3, per_node=False)
    inputs = dl.leaf_marginals_every_other_node(inputs)
    _same_total(tree, dl.DOMAIN, inputs)
    _same_total(tree, dl.DOMAIN, inputs, exact_totals={0: {0: 500.0}})
    exact = root_total_blue(tree, dl.DOMAIN, inputs, exact_totals={0: {0: 500.0}})
    assert exact.answer(0, "total").noisy[0, 0] == pytest.approx(500.0, abs=1e-8)
