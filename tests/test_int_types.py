"""The narrowest integer types of the level arrays, and widening before a write."""

from __future__ import annotations

import numpy as np
import pytest

from topdown.support.int_types import (
    child_count_type,
    holding,
    int_type_for,
    narrowed,
    smallest_int_type,
)


def test_smallest_int_type_by_hand():
    cases = {
        (-128, 127): np.int8,
        (0, 128): np.int16,
        (-129, 0): np.int16,
        (-32769, 5): np.int32,
        (0, 2**31): np.int64,
        (): np.int8,
    }
    for values, expected in cases.items():
        assert smallest_int_type(np.array(values, dtype=np.int64)) is expected


def test_a_range_beyond_int64_is_refused():
    assert int_type_for(-(2**63), 2**63 - 1) is np.int64
    with pytest.raises(OverflowError, match="do not fit int64"):
        int_type_for(0, 2**63)


def test_narrowed_keeps_every_value_and_copies_only_when_it_must():
    values = np.array([[-3, 200], [0, 7]], dtype=np.int64)
    out = narrowed(values)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, values)
    small = np.array([1, 2], dtype=np.int8)
    assert narrowed(small) is small


def test_holding_widens_only_for_values_the_type_cannot_hold():
    counts = np.zeros(3, dtype=np.int8)
    assert holding(counts, np.array([127, -128])) is counts
    wider = holding(counts, np.array([128]))
    assert wider.dtype == np.int16 and wider is not counts
    wider[0] = 128
    assert int(wider[0]) == 128  # written into int8 it would have wrapped round to -128
    assert holding(np.zeros(2, dtype=np.int32), np.array([5], dtype=np.int8)).dtype == np.int32


def test_a_level_gets_the_type_of_its_parents_largest_count_by_hand():
    # a child's cell is at most its parent's: 153 in a parent's cell needs int16 for the
    # children even when none of them will hold more than 127
    assert child_count_type(np.array([[153, 0], [2, 9]], dtype=np.int16)) is np.int16
    assert child_count_type(np.array([[127, 0]], dtype=np.int64)) is np.int8
    assert child_count_type(np.array([[40_000]], dtype=np.int32)) is np.int32
    assert child_count_type(np.zeros((0, 3), dtype=np.int64)) is np.int8


def test_holding_does_not_scan_values_of_a_type_the_array_holds():
    class Unscannable(np.ndarray):
        def min(self, *args, **kwargs):
            raise AssertionError("scanned")

        max = min

    counts = np.zeros(3, dtype=np.int16)
    narrow = np.array([5, -7], dtype=np.int8).view(Unscannable)
    assert holding(counts, narrow) is counts
    wide = np.array([5, -7], dtype=np.int64).view(Unscannable)
    with pytest.raises(AssertionError, match="scanned"):
        holding(counts, wide)  # a wider type is scanned for the values' own range
