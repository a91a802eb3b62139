"""The variance terms of a level's ``k x k`` covariances taken a chunk of matrices at a time
(``CHUNK_BYTES``) give the whole stack's numbers to rounding (BLAS may sum a contraction in
another order for another number of matrices), and the definitions' formed products:
``trace(G Phi)`` and ``diag(B Phi B')``, of ``Phi`` and of ``|Phi|``, held as shared
matrices or per node. A stack within one chunk is contracted whole, as before."""

from __future__ import annotations

import numpy as np
import pytest

from topdown.blue import variance_terms
from topdown.blue.shared_matrices import SharedMatrices

DIMS = (3, 4)  # a block's span axes: k = 12


def _stack(types: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((types, 12, 12))
    return a @ np.swapaxes(a, 1, 2) - 0.5  # some negative entries, so |Phi| differs


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_chunks_give_the_whole_stacks_numbers(monkeypatch, absolute, shared):
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal((g, g)) for g in DIMS]
    maps = [rng.standard_normal((n, g)) for n, g in zip((2, 5), DIMS, strict=True)]
    values = _stack(7, seed=1)
    phi = SharedMatrices(values, np.array([3, 0, 6, 6, 1, 2, 5, 4, 3])) if shared else values
    whole = (
        variance_terms._trace(parts, phi, absolute),
        variance_terms._span_variance(maps, phi, absolute),
    )
    one = values[:1].nbytes
    for rows in (1, 2, 3, 7):
        monkeypatch.setattr(variance_terms, "CHUNK_BYTES", rows * one)
        got = (
            variance_terms._trace(parts, phi, absolute),
            variance_terms._span_variance(maps, phi, absolute),
        )
        for g, w in zip(got, whole, strict=True):
            if rows == 7:
                assert np.array_equal(g, w)  # one chunk: the whole stack's contraction
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-12)
    # against the definitions, formed
    g_full = np.kron(parts[0], parts[1])
    b_full = np.kron(maps[0], maps[1])
    dense = np.abs(values) if absolute else values
    per_node = dense[phi.index] if shared else dense
    want_trace = np.einsum("kl,nlk->n", g_full, per_node)
    want_span = np.einsum("ak,nkl,al->na", b_full, per_node, b_full)
    np.testing.assert_allclose(whole[0], want_trace, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(whole[1], want_span, rtol=1e-12, atol=1e-9)
