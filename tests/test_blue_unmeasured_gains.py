"""The upward step's gains at a node measured elsewhere (its precision zero: a streamed
subtree's top, a chunk's parents) are ``I`` and ``M`` without an inverse, the numbers the plain
formula gives bit for bit; measured types in the same stack get the plain formula's."""

from __future__ import annotations

import numpy as np
import pytest

from topdown.blue.block_recursions import _gains


@pytest.mark.parametrize("k", [3, 40, 300])
def test_unmeasured_types_take_no_inverse_and_the_same_numbers(k, monkeypatch):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((3, k, k))
    cov = a @ np.swapaxes(a, 1, 2) + np.eye(k)
    b = rng.standard_normal((3, k, k))
    p = b @ np.swapaxes(b, 1, 2)
    p[[0, 2]] = 0.0  # types 0 and 2 measured elsewhere
    plain_inv = np.linalg.inv(np.eye(k) + cov @ p)
    plain_r = plain_inv @ cov
    inverted: list[int] = []
    inv = np.linalg.inv

    def counted(x):
        inverted.append(len(x))
        return inv(x)

    monkeypatch.setattr(np.linalg, "inv", counted)
    of_m, of_r = _gains(cov, p)
    assert inverted == [1]  # the measured type only
    assert np.array_equal(of_m, plain_inv)
    assert np.array_equal(of_r, plain_r)
    assert np.array_equal(of_m[0], np.eye(k)) and np.array_equal(of_r[2], cov[2])
    inverted.clear()
    of_m, of_r = _gains(cov[:1], p[:1])
    assert inverted == [] and np.array_equal(of_r, cov[:1])
    inverted.clear()
    p[[0, 2]] = p[1]  # every type measured: one stacked inverse, the plain formula's numbers
    of_m, of_r = _gains(cov, p)
    assert inverted == [3]
    assert np.array_equal(of_m, np.linalg.inv(np.eye(k) + cov @ p))
    assert np.array_equal(of_r, of_m @ cov)
