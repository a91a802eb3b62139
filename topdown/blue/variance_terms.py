"""The variance of any query's answers from the BLUE's per-block (or per-group) covariances.

The BLUE's covariance at a node is a sum over the blocks of the split (``topdown.blue.blocks``)
of Kronecker products: per axis a projector (a contrast part, or the span part with the
block's ``k x k`` covariance over the span axes jointly). The variance of a query's answers is
the diagonal of ``Q C Q'``, and the diagonal of a Kronecker product is the Kronecker product of
the diagonals, so each block gives ``diag(F P F')`` per contrast axis times ``diag(B Phi B')``
over the span axes (``B`` the Kronecker product of their ``F U``, contracted with ``Phi`` one
axis at a time, never formed: it has ``k`` columns), once per distinct ``Phi``
(``topdown.blue.shared_matrices``): O(answers) per node, no matrix over the cells. The plain
groups (``topdown.blue.plan``) are the case of one group per axis with scalar covariances;
their formula is used for a recoded query asked of a BLUE whose strategy had none (its
answers' variances differ with the groups' sizes).

Each term comes with its absolute size, so an answer whose variance is rounding left over
from an exact direction (an invariant's total) can be reported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from topdown.blue.blocks import Block, axis_diag
from topdown.blue.mapped_stacks import hand_back
from topdown.blue.shared_matrices import Covariance, SharedMatrices
from topdown.query import Factor

__all__ = [
    "summed_variance_terms",
    "plain_variance_terms",
    "mean_variance",
    "mean_variance_term",
]


def _times(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b`` with ``0 * inf = 0``: an answer that does not read a direction the
    measurements leave unidentified (infinite variance) gets nothing from it."""
    with np.errstate(invalid="ignore"):
        product = a * b
    if np.isfinite(b).all():
        return product
    return np.where(np.isnan(product), 0.0, product)


def _kron_diag(maps: Sequence[np.ndarray], phi: np.ndarray) -> np.ndarray:
    """``diag(B Phi B')`` for each matrix of ``phi`` (t, k, k), ``B`` the Kronecker product of
    ``maps`` (each (n_a, g_a), ``k`` the product of the ``g_a``): (t, product of the n_a).

    Contracted one axis at a time on both sides of ``Phi`` (as a tensor with a left and a
    right index per axis), never forming ``B``."""
    t, m = phi.shape[0], len(maps)
    x = phi.reshape([t] + [mp.shape[1] for mp in maps] * 2)
    labels = list(range(1 + 2 * m))  # the matrix, then per axis its left and right index
    for a, mp in enumerate(maps):
        answer = 1 + 2 * m + a
        out = [answer if label == 1 + a else label for label in labels if label != 1 + m + a]
        x = np.einsum(x, labels, mp, [answer, 1 + a], mp, [answer, 1 + m + a], out, optimize=True)
        labels = out
    return x.reshape(t, -1)


#: Bytes of ``k x k`` matrices contracted at once (``_by_chunks``).
CHUNK_BYTES = 1 << 26


def _by_chunks(
    f: Callable[[np.ndarray], np.ndarray], phi: np.ndarray, absolute: bool
) -> np.ndarray:
    """``f`` of the matrices ``phi`` (t, k, k), or of their absolute values, at most
    ``CHUNK_BYTES`` of them at a time, the results stacked. A level's distinct matrices are
    not gathered, nor their absolute values copied, all at once: at 100,000 DHC persons to
    the block the 51 tract types' stack is 550 MB a block (read from its file, ``phi`` is a
    map; its pages are handed back chunk by chunk), and the stacked contraction made
    temporaries of its size and the absolute values a copy. Each matrix's result is its
    own contraction: chunks change the numbers by rounding only (BLAS may sum in another
    order for another number of matrices), and a stack within one chunk is contracted
    whole, as before (``tests/test_blue_variance_chunks.py``)."""
    rows = max(1, CHUNK_BYTES // max(1, phi[:1].nbytes))
    out = []
    for start in range(0, max(len(phi), 1), rows):  # an empty stack: one empty chunk
        chunk = phi[start : start + rows]
        out.append(f(np.abs(chunk) if absolute else np.asarray(chunk)))
        hand_back(phi)
    return out[0] if len(out) == 1 else np.concatenate(out)


def _span_variance(
    maps: Sequence[np.ndarray], phi: Covariance, absolute: bool = False
) -> np.ndarray:
    """``diag(B Phi B')`` per node (nodes, span answers), ``B`` the Kronecker product of
    ``maps``; a scalar ``Phi`` may be infinite. Shared matrices: once per distinct matrix,
    then per node. ``absolute``: of ``|Phi|``, entry by entry."""
    if isinstance(phi, SharedMatrices):
        return _span_variance(maps, phi.values, absolute)[phi.index]
    if phi.ndim == 1:
        squares = np.ones(1)
        for mp in maps:
            squares = np.kron(squares, mp[:, 0] ** 2)
        return _times(squares[None, :], (np.abs(phi) if absolute else phi)[:, None])
    return _by_chunks(lambda x: _kron_diag(maps, x), phi, absolute)


def _abs(phi: Covariance) -> Covariance:
    if isinstance(phi, SharedMatrices):
        return SharedMatrices(np.abs(phi.values), phi.index)
    return np.abs(phi)


def _trace(
    parts: Sequence[np.ndarray], phi: np.ndarray | SharedMatrices, absolute: bool = False
) -> np.ndarray:
    """``trace(G Phi)`` per node of matrices ``Phi`` (once per distinct one if shared; of
    ``|Phi|`` with ``absolute``), ``G`` the Kronecker product of ``parts``: ``_contracted``
    a chunk of matrices at a time (``_by_chunks``)."""
    if isinstance(phi, SharedMatrices):
        return _trace(parts, phi.values, absolute)[phi.index]
    return _by_chunks(lambda x: _contracted(parts, x), phi, absolute)


def _contracted(parts: Sequence[np.ndarray], phi: np.ndarray) -> np.ndarray:
    """``trace(G Phi)`` per matrix of ``phi`` (t, k, k), ``G`` the Kronecker product of
    ``parts`` (each (g, g)), never built: with ``Phi`` as a tensor (t, g_1..g_n,
    g_1..g_n), ``sum_ij G1_ij Phi[j.., i..]`` contracts one axis pair at a time, O(k^2)
    each."""
    dims = [p.shape[0] for p in parts]
    x = np.asarray(phi).reshape([phi.shape[0]] + dims + dims)
    for part in parts:
        n = (x.ndim - 1) // 2
        # part[i, j] * x[:, j, ..., i, ...]: the row index i meets Phi's column index
        x = np.tensordot(x, part, axes=([1 + n, 1], [0, 1]))
    return x.reshape(-1)


def _trace_formed(gram: np.ndarray, phi: np.ndarray | SharedMatrices) -> np.ndarray:
    """``trace(gram Phi)`` per node, ``gram`` formed (k, k) (once per distinct ``Phi``)."""
    if isinstance(phi, SharedMatrices):
        return np.einsum("kl,nlk->n", gram, phi.values)[phi.index]
    return np.einsum("kl,nlk->n", gram, phi)


def _handed_back(phi: Covariance) -> None:
    """A block's covariances read: the pages read of a stack mapped from disk handed back
    (``topdown.blue.mapped_stacks``), so a level's blocks are not all resident at once."""
    if isinstance(phi, SharedMatrices):
        hand_back(phi.values)


def mean_variance(
    terms: Sequence[tuple[Block, Covariance]], factors: Sequence[Factor]
) -> tuple[np.ndarray, np.ndarray]:
    """The mean over a query's answers of ``summed_variance_terms`` (and of its sizes),
    without the answers: the blocks' ``mean_variance_term`` summed in order."""
    out = size = None
    for block, phi in terms:
        term, mag = mean_variance_term(block, phi, factors)
        out = term if out is None else out + term
        size = mag if size is None else size + mag
    assert out is not None and size is not None
    return out, size


def mean_variance_term(
    block: Block, phi: Covariance, factors: Sequence[Factor]
) -> tuple[np.ndarray, np.ndarray]:
    """One block's share of ``mean_variance``, and of its size (each (nodes,)): an answer is a
    pair (contrast answer, span answer), so a block's mean is ``mean(d)`` times
    ``mean(diag(B Phi B')) = trace(B'B Phi) / rows(B)``, each factor from the axes' parts
    (``Block.mean_terms``), never ``B`` or ``d`` themselves."""
    parts = block.mean_terms(factors)
    gram, gram_abs = parts.gram_parts, parts.gram_abs_parts
    if isinstance(phi, np.ndarray) and phi.ndim == 1:  # k = 1: every part is 1 x 1
        scalar = float(np.prod([g[0, 0] for g in gram]))
        scalar_abs = float(np.prod([g[0, 0] for g in gram_abs]))
        span = _times(np.asarray(scalar), phi)
        span_abs = _times(np.asarray(scalar_abs), np.abs(phi))
    elif parts.formed is not None:  # small k: one contraction with the product
        formed, formed_abs = parts.formed
        span, span_abs = _trace_formed(formed, phi), _trace_formed(formed_abs, _abs(phi))
    else:
        span, span_abs = _trace(gram, phi), _trace(gram_abs, phi, absolute=True)
    _handed_back(phi)
    return _times(np.asarray(parts.d_mean), span), _times(np.asarray(parts.d_abs_mean), span_abs)


def _placed(
    contrast: Sequence[int],
    span: Sequence[int],
    d: np.ndarray,
    span_var: np.ndarray,
    factors: Sequence[Factor],
) -> np.ndarray:
    """``d`` over the contrast axes times ``span_var`` (nodes, span answers), as (nodes,
    *answers per axis) in axis order."""
    nodes = span_var.shape[0]
    out_contrast = [factors[i].n_out for i in contrast]
    out_span = [factors[i].n_out for i in span]
    full = _times(
        d.reshape([1] + out_contrast + [1] * len(out_span)),
        span_var.reshape([nodes] + [1] * len(out_contrast) + out_span),
    )
    order = [0] + [1 + i for i in contrast] + [1 + i for i in span]
    return np.moveaxis(full, list(range(len(order))), order)


def summed_variance_terms(
    terms: Sequence[tuple[Block, Covariance]], factors: Sequence[Factor]
) -> tuple[np.ndarray, np.ndarray]:
    """Each answer's variance summed over the blocks, and the sum of the terms' absolute
    sizes: both (nodes, *answers per axis). ``terms``: each block with its covariance per
    node, (nodes,) for k = 1 or (nodes, k, k) (an array or shared matrices)."""
    out = size = None
    for block, phi in terms:
        maps, d = block.answer_maps(factors)
        contrast = sorted(block.contrast)
        term = _placed(contrast, block.span, d, _span_variance(maps, phi), factors)
        magnitudes = [np.abs(mp) for mp in maps]
        mag = _placed(
            contrast, block.span, np.abs(d), _span_variance(magnitudes, phi, True), factors
        )
        _handed_back(phi)
        out = term if out is None else out + term
        size = mag if size is None else size + mag
    assert out is not None and size is not None
    return out, size


def plain_variance_terms(
    groups: Sequence[Sequence[frozenset[int]]], scale: np.ndarray, factors: Sequence[Factor]
) -> tuple[np.ndarray, np.ndarray]:
    """The same for the plain groups: ``scale`` (groups, nodes), each group a scalar times
    the sum of its subsets' ANOVA projectors (per axis the complement of the mean when the
    axis is in the subset, the mean otherwise)."""
    nodes = scale.shape[1]
    shape = [nodes] + [f.n_out for f in factors]
    out = np.zeros(shape)
    for g, subsets in enumerate(groups):
        for subset in subsets:
            d = np.ones([1] * len(shape))
            for i, f in enumerate(factors):
                mean = np.full((f.size, f.size), 1.0 / f.size)
                diag = axis_diag(f, np.eye(f.size) - mean if i in subset else mean)
                d = d * diag.reshape([1] * (1 + i) + [-1] + [1] * (len(factors) - i - 1))
            out = out + _times(d, scale[g].reshape([nodes] + [1] * len(factors)))
    return out, np.abs(out)
