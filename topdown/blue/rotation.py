"""The rotated cell basis in which every block of a recoded BLUE is a box of coordinates.

Per axis, an orthonormal basis of its values adapted to the axis's finest partition
(``topdown.blue.blocks.AxisSplit``): first the ``g`` group vectors ``f_k = e_k / sqrt(s_k)``
(the span part, ``AxisSplit.basis``), then within each group of ``s`` values its ``s - 1``
Helmert contrasts (for ``t = 1 .. s - 1``: 1 on the group's first ``t`` values, ``-t`` on the
next, divided by ``sqrt(t (t + 1))``; Lancaster, H. O. (1965), "The Helmert matrices", American
Mathematical Monthly 72(1), 4-12), an orthonormal basis of the within-group contrasts. The
Kronecker product of the axes' bases rotates the cell space so that each block of the split
is a box: per axis the span coordinates ``[0, g)`` (the block's span axes) or the contrast
ones ``[g, n)`` (its contrast axes).

Why: each block used to project every query's answers on itself (``Q'y`` through the block's
projectors), one pass over the answers per block and query: 16 passes over the detailed
answers for the PL94 preset's 16 blocks, most of the BLUE's time. Rotated once per level,
every block reads its box; the blocks' estimates, placed in their boxes, are rotated back
once. The recursions act on each copy of a block (each contrast coordinate) with the same
matrices, so they are indifferent to which basis of the contrast part the copies are in.

Both directions cost O(n) per vector along an axis (running sums, compiled: one pass over the
array per axis), not an n x n product.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeVar, cast

import numba
import numpy as np

from topdown.blue.blocks import AxisSplit, Block
from topdown.query import Factor

_F = TypeVar("_F", bound=Callable[..., Any])
_njit: Any = numba.njit  # its stubs do not type the decorator


def _compiled(function: _F) -> _F:
    """numba-compile ``function``, machine code cached on disk (compiled once per installation,
    loaded in milliseconds after), releasing the interpreter lock (``solve_blocks`` rotates
    blocks of nodes on threads)."""
    return cast(_F, _njit(cache=True, nogil=True)(function))


__all__ = [
    "rotate_axis",
    "unrotate_axis",
    "rotate_answers",
    "unrotate",
    "box",
    "box_shape",
    "to_block",
    "from_block",
]


@lru_cache(maxsize=256)
def _groups(split: AxisSplit) -> tuple[np.ndarray, np.ndarray]:
    """Each finest group's values in increasing order, concatenated group by group, and where
    each group starts in that list (g + 1 offsets): the kernels' view of the split."""
    labels = np.asarray(split.groups)
    members = np.concatenate([np.flatnonzero(labels == k) for k in range(split.g)])
    members = members.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(split.sizes)]).astype(np.int64)
    members.flags.writeable = starts.flags.writeable = False
    return members, starts


@_compiled
def _rotate_kernel(x: np.ndarray, out: np.ndarray, members: np.ndarray, starts: np.ndarray) -> None:
    """``out[p, :, q]`` = the rotated coordinates of ``x[p, :, q]`` (see ``rotate_axis``)."""
    pre, _, post = x.shape
    g = len(starts) - 1
    running = np.empty(post)
    for p in range(pre):
        offset = g
        for k in range(g):
            first, s = starts[k], starts[k + 1] - starts[k]
            for q in range(post):
                running[q] = x[p, members[first], q]
            for t in range(1, s):  # contrast t: (x_0 + ... + x_{t-1} - t x_t) / sqrt(t (t + 1))
                v = members[first + t]
                c = 1.0 / np.sqrt(t * (t + 1.0))
                for q in range(post):
                    value = x[p, v, q]
                    out[p, offset + t - 1, q] = (running[q] - t * value) * c
                    running[q] += value
            c = 1.0 / np.sqrt(s)
            for q in range(post):
                out[p, k, q] = running[q] * c
            offset += s - 1


@_compiled
def _unrotate_kernel(
    c: np.ndarray, out: np.ndarray, members: np.ndarray, starts: np.ndarray
) -> None:
    """``out[p, :, q]`` = the values whose rotated coordinates are ``c[p, :, q]``."""
    pre, _, post = c.shape
    g = len(starts) - 1
    base = np.empty(post)
    for p in range(pre):
        offset = g
        for k in range(g):
            first, s = starts[k], starts[k + 1] - starts[k]
            scale = 1.0 / np.sqrt(s)
            for q in range(post):
                base[q] = c[p, k, q] * scale
            for t in range(s - 1, 0, -1):
                v = members[first + t]
                h = 1.0 / np.sqrt(t * (t + 1.0))
                for q in range(post):
                    a = c[p, offset + t - 1, q] * h
                    out[p, v, q] = base[q] - t * a
                    base[q] += a  # what the values before t get: the later contrasts' a_j
            v = members[first]
            for q in range(post):
                out[p, v, q] = base[q]
            offset += s - 1


#: Rows the last-axis kernels interleave (``_rotate_last``): enough independent running sums
#: to keep the arithmetic units busy, few enough to stay in registers and the first cache.
_TILE = 64


@_compiled
def _rotate_last(x: np.ndarray, out: np.ndarray, members: np.ndarray, starts: np.ndarray) -> None:
    """``_rotate_kernel`` for the last axis (``x`` (pre, n, 1)): the same arithmetic on each
    row, ``_TILE`` rows at a time. Row by row, each value waits on the previous one's running
    sum (one dependent addition per value: the last axis took three times as long per value as
    the others, whose running sums are vectors along the axes after it); a tile's rows are
    independent sums, interleaved. The same operations in the same order per row, so the same
    values to the bit."""
    pre = x.shape[0]
    g = len(starts) - 1
    running = np.empty(_TILE)
    for p0 in range(0, pre, _TILE):
        p1 = min(pre, p0 + _TILE)
        offset = g
        for k in range(g):
            first, s = starts[k], starts[k + 1] - starts[k]
            head = members[first]
            for p in range(p0, p1):
                running[p - p0] = x[p, head, 0]
            for t in range(1, s):
                v = members[first + t]
                c = 1.0 / np.sqrt(t * (t + 1.0))
                for p in range(p0, p1):
                    value = x[p, v, 0]
                    out[p, offset + t - 1, 0] = (running[p - p0] - t * value) * c
                    running[p - p0] += value
            c = 1.0 / np.sqrt(s)
            for p in range(p0, p1):
                out[p, k, 0] = running[p - p0] * c
            offset += s - 1


@_compiled
def _unrotate_last(c: np.ndarray, out: np.ndarray, members: np.ndarray, starts: np.ndarray) -> None:
    """``_unrotate_kernel`` for the last axis, ``_TILE`` rows at a time (see
    ``_rotate_last``): the same values to the bit."""
    pre = c.shape[0]
    g = len(starts) - 1
    base = np.empty(_TILE)
    for p0 in range(0, pre, _TILE):
        p1 = min(pre, p0 + _TILE)
        offset = g
        for k in range(g):
            first, s = starts[k], starts[k + 1] - starts[k]
            scale = 1.0 / np.sqrt(s)
            for p in range(p0, p1):
                base[p - p0] = c[p, k, 0] * scale
            for t in range(s - 1, 0, -1):
                v = members[first + t]
                h = 1.0 / np.sqrt(t * (t + 1.0))
                for p in range(p0, p1):
                    a = c[p, offset + t - 1, 0] * h
                    out[p, v, 0] = base[p - p0] - t * a
                    base[p - p0] += a
            v = members[first]
            for p in range(p0, p1):
                out[p, v, 0] = base[p - p0]
            offset += s - 1


def _as_3d(x: np.ndarray, axis: int) -> np.ndarray:
    """A C-ordered ``x`` as (before the axis, the axis, after it), a view."""
    before = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(before, x.shape[axis], -1)


def rotate_axis(x: np.ndarray, split: AxisSplit, axis: int) -> np.ndarray:
    """``x`` with ``axis`` (the axis's ``n`` values) in the rotated coordinates: a new float
    array of the same shape, per group its sum over ``sqrt(s)`` at the group's index, its
    Helmert contrasts after the ``g`` span coordinates (group by group): ``x_0 + ... +
    x_{t-1} - t x_t`` over ``sqrt(t (t + 1))`` for the group's values ``x_0, x_1, ...``.

    One compiled pass (a running sum per group), reading any numeric dtype."""
    flat = _as_3d(np.ascontiguousarray(x), axis)
    out = np.empty(x.shape, dtype=float)
    members, starts = _groups(split)
    kernel = _rotate_last if flat.shape[2] == 1 else _rotate_kernel
    kernel(flat, out.reshape(flat.shape), members, starts)
    return out


def unrotate_axis(c: np.ndarray, split: AxisSplit, axis: int) -> np.ndarray:
    """The inverse of ``rotate_axis`` (its transpose: the basis is orthonormal), a new array.

    Value ``t`` of a group is its span coordinate over ``sqrt(s)``, plus ``a_j`` for every
    later contrast ``j > t``, minus ``t a_t``, with ``a_j = h_j / sqrt(j (j + 1))``: the later
    ones as a running sum from the group's last value down."""
    flat = _as_3d(np.ascontiguousarray(c, dtype=float), axis)
    out = np.empty(c.shape, dtype=float)
    members, starts = _groups(split)
    kernel = _unrotate_last if flat.shape[2] == 1 else _unrotate_kernel
    kernel(flat, out.reshape(flat.shape), members, starts)
    return out


@lru_cache(maxsize=4096)
def _span_map(split: AxisSplit, factor: Factor) -> np.ndarray:
    """``U'F'`` (g, n_out): a grouped or summed axis's answers to its span coordinates (its
    contrast coordinates are 0: every recode of the strategy is constant on a finest group)."""
    out = split.basis().T @ factor.matrix().toarray().T
    out.flags.writeable = False
    return out


def rotate_answers(
    answers: np.ndarray, factors: Sequence[Factor], splits: Sequence[AxisSplit]
) -> tuple[np.ndarray, float]:
    """A query's answers ``y`` (nodes, *answers per axis) as ``Q'y`` in the rotated basis,
    without its zero coordinates: per axis all ``n`` coordinates where the query keeps the
    axis whole, the ``g`` span ones elsewhere. Returned as an array and a scalar factor it is
    to be multiplied by (the summed axes of one group: ``sqrt(n)`` each, left to the caller's
    weights rather than a pass over the array). The shrinking axes go first."""
    x = answers
    scale = 1.0
    order = sorted(range(len(factors)), key=lambda i: factors[i].identity)
    for i in order:
        f, split = factors[i], splits[i]
        if f.identity:
            x = rotate_axis(x, split, 1 + i)
        elif split.g == 1 and not f.kept:
            scale *= float(np.sqrt(split.n))
        else:  # a small product along the axis, made C-ordered for the next axis's pass
            moved = np.moveaxis(np.asarray(x, dtype=float), 1 + i, -1) @ _span_map(split, f).T
            x = np.ascontiguousarray(np.moveaxis(moved, -1, 1 + i))
    return np.asarray(x, dtype=float), scale


def unrotate(c: np.ndarray, splits: Sequence[AxisSplit]) -> np.ndarray:
    """Rotated coordinates (nodes, *n per axis) back to the cells, a new array."""
    x = c
    for i, split in enumerate(splits):
        if split.n > 1:
            x = unrotate_axis(x, split, 1 + i)
    return x


def box(block: Block) -> tuple[slice, ...]:
    """The block's coordinates in a rotated array (nodes, ...): per axis ``[g, n)`` for a
    contrast axis, ``[0, g)`` for a span axis."""
    return (slice(None),) + tuple(
        slice(s.g, s.n) if i in block.contrast else slice(0, s.g)
        for i, s in enumerate(block.splits)
    )


def box_shape(block: Block) -> tuple[int, ...]:
    """The block's coordinates per node in its own layout: the contrast axes' ``n - g`` in
    axis order, then the span axes' ``g`` (so it reshapes to (copies, k))."""
    contrast = [block.splits[i].n - block.splits[i].g for i in sorted(block.contrast)]
    return tuple(contrast) + tuple(block.splits[i].g for i in block.span)


def _order(block: Block) -> list[int]:
    """The array axes of a box, in the block's own layout (nodes, contrast, span)."""
    return [0] + [1 + i for i in sorted(block.contrast)] + [1 + i for i in block.span]


def to_block(view: np.ndarray, block: Block) -> np.ndarray:
    """A box of a rotated array (``x[box(block)]``) in the block's own layout, a view."""
    return view.transpose(_order(block))


def from_block(values: np.ndarray, block: Block) -> np.ndarray:
    """Block values (nodes, ...) of ``box_shape`` as the box's axis order, a view (the inverse
    of ``to_block``)."""
    x = values.reshape((values.shape[0],) + box_shape(block))
    return x.transpose(np.argsort(_order(block)))
