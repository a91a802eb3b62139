"""Microdata from leaf counts: one record per unit of count, in the counts' own type."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from topdown import Attribute, Schema
from topdown.errors import ReleaseError
from topdown.measurement.tree import build_tree
from topdown.outputs.microdata import expand_microdata

SCHEMA = Schema((Attribute("SEX", values=(1, 2)),), ("STATE",))


def _tree():
    data = pd.DataFrame({"STATE": ["a", "b"], "SEX": [1, 2]})
    tree, _ = build_tree(data, SCHEMA)
    return tree


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8])
def test_records_by_hand_in_any_integer_type(dtype):
    counts = np.array([[127, 0], [1, 2]], dtype=dtype)  # state a: 127 x SEX 1; b: 1 + 2
    micro = expand_microdata(_tree(), SCHEMA, counts)
    assert len(micro) == 130
    assert (micro.groupby(["STATE", "SEX"]).size().to_dict()) == {
        ("a", 1): 127,
        ("b", 1): 1,
        ("b", 2): 2,
    }


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (np.array([[1.0, 0.0], [0.0, 1.0]]), "got dtype float64"),
        (np.array([[1, -1], [0, 1]], dtype=np.int8), "minimum -1"),
    ],
)
def test_counts_that_are_not_non_negative_integers_are_refused(counts, message):
    with pytest.raises(ReleaseError, match=message):
        expand_microdata(_tree(), SCHEMA, counts)
