"""Each level's own measurements, gathered for every block of a recoded BLUE at once.

A block's recursion needs, per node, the precision its own measurements give it (``Q'Q`` on
the block, weighted by the inverse variances) and the information they carry (``Q'y`` on the
block, weighted alike). The information of every block comes from one rotation of each
query's answers (``topdown.blue.rotation``): each block reads its box of it, so the answers
are read once per level, not once per block. Rotation and gathering go a block of nodes at a
time (the rotated answers of a few hundred nodes, not a level-sized temporary), on
``threads`` threads when asked (the blocks of nodes are disjoint rows; numpy's array work
releases the interpreter lock).

Kept apart from ``topdown.blue.block_solve`` (the recursions over the blocks) because this is
where the measurements are read; the solve sees only these per-block terms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_recursions import NodeInfo
from topdown.blue.blocks import Block
from topdown.blue.rotation import box, box_shape, rotate_answers, to_block
from topdown.blue.shared_matrices import SharedMatrices, type_index
from topdown.errors import StrategyError
from topdown.measurement.estimator_inputs import QueryEstimate, precision
from topdown.query import Factor
from topdown.support.row_blocks import row_blocks

__all__ = ["ScalarTerms", "BlockTerms", "level_terms", "on_threads", "GATHER_BYTES"]

#: A precision above this is an exact answer (variance 0: see ``precision``).
_EXACT_PRECISION = 1e100

#: Bytes of the answers rotated at once (a block of nodes): large enough that the per-call
#: work of the 11 queries x 16 blocks of the PL94 preset is small beside the arithmetic,
#: small enough that the rotated copies are reused from the heap.
GATHER_BYTES = 1 << 23


@dataclass(frozen=True)
class ScalarTerms:
    """A ``k = 1`` block's own terms at a level: the precision ``pi`` (nodes,) and ``z = r /
    pi`` (nodes, block coordinates), each query weighted by its precision's share of ``pi``
    (so an exact answer does not swamp the sum)."""

    precision: np.ndarray
    z: np.ndarray


#: One block's own terms at a level: scalar (k = 1) or matrix (k > 1, ``NodeInfo``).
BlockTerms = ScalarTerms | NodeInfo


@dataclass(frozen=True)
class _Term:
    """One measured query: its estimate, factors and per-node precision."""

    m: QueryEstimate
    factors: tuple[Factor, ...]
    precision: np.ndarray


def _terms(lv: Sequence[QueryEstimate], domain: Domain, nodes: int) -> list[_Term]:
    return [
        _Term(m, tuple(m.query.factors(domain)), np.broadcast_to(precision(m.variance), (nodes,)))
        for m in lv
    ]


def _scalar_weights(
    block: Block, seen: list[_Term], nodes: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """A ``k = 1`` block's ``pi`` and each seen query's weight ``prec / pi`` (0 where pi is)."""
    pi = np.zeros(nodes)
    for t in seen:
        pi = pi + t.precision * float(block.gram(t.factors)[0, 0])
    with np.errstate(divide="ignore", invalid="ignore"):
        weights = [np.where(pi > 0, t.precision / pi, 0.0) for t in seen]
    return pi, weights


def _matrix_weights(
    block: Block, seen: list[_Term], nodes: int, where: str
) -> tuple[SharedMatrices, list[np.ndarray], np.ndarray, np.ndarray]:
    """A ``k > 1`` block's precisions (nodes, k, k, held once per distinct set of the seen
    queries' precisions: ``topdown.blue.shared_matrices``), each seen query's weight (its
    precision, 0 where exact), and the exact node totals (which nodes, their values)."""
    exact = np.zeros(nodes, dtype=bool)
    total = np.zeros(nodes)
    weights = []
    for t in seen:
        hard = t.precision > _EXACT_PRECISION
        if hard.any():
            if any(f.kept for f in t.factors):
                raise StrategyError(
                    f"query {t.m.query.name!r} at {where} has answers of variance 0 (exact); the "
                    "BLUE of recoded queries takes exact node totals only (invariants)"
                )
            exact |= hard
            total[hard] = np.asarray(t.m.noisy, dtype=float)[hard, 0]
        weights.append(np.where(hard, 0.0, t.precision))
    k = block.k
    if not weights:
        return SharedMatrices.constant(np.zeros((k, k)), nodes), weights, exact, total
    types, first = type_index(weights)
    pi = np.zeros((first.size, k, k))
    for t, weight in zip(seen, weights, strict=True):
        pi += weight[first][:, None, None] * block.gram(t.factors)[None]
    return SharedMatrices(pi, types), weights, exact, total


def on_threads(work: Callable[[slice], None], chunks: Sequence[slice], threads: int) -> None:
    """``work(rows)`` for every block of nodes, on ``threads`` threads (here when 1). The
    blocks are disjoint rows, so the result does not depend on the order."""
    if threads > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="blue-rows") as pool:
            list(pool.map(work, chunks))
    else:
        for rows in chunks:
            work(rows)


def level_terms(
    blocks: Sequence[Block],
    lv: Sequence[QueryEstimate],
    domain: Domain,
    nodes: int,
    where: str,
    threads: int = 1,
) -> list[BlockTerms]:
    """Every block's own terms at one level (``lv``: its measurements; ``where``: how an
    error names the level), from one rotation of each query's answers."""
    terms = _terms(lv, domain, nodes)
    splits = blocks[0].splits
    # per query, the blocks that see it with its weight there; per block, the sum gathered
    readers: list[list[tuple[int, np.ndarray]]] = [[] for _ in terms]
    heads: list[np.ndarray | tuple[SharedMatrices, np.ndarray, np.ndarray]] = []
    sums: list[np.ndarray] = []
    for b, block in enumerate(blocks):
        idx = [j for j, t in enumerate(terms) if block.sees(t.factors)]
        seen = [terms[j] for j in idx]
        if block.k == 1:
            pi, weights = _scalar_weights(block, seen, nodes)
            heads.append(pi)
        else:
            pi_m, weights, exact, total = _matrix_weights(block, seen, nodes, where)
            heads.append((pi_m, exact, total))
        for j, weight in zip(idx, weights, strict=True):
            readers[j].append((b, weight))
        sums.append(np.zeros((nodes,) + box_shape(block)))

    def gather(rows: slice) -> None:
        for j, t in enumerate(terms):
            if not readers[j]:
                continue
            values = np.asarray(t.m.noisy)[rows]
            values = values.reshape((values.shape[0],) + tuple(f.n_out for f in t.factors))
            informed = t.precision[rows] > 0
            if not informed.all():  # no information: its values are not read
                values = np.where(informed.reshape((-1,) + (1,) * (values.ndim - 1)), values, 0)
            rotated, scale = rotate_answers(values, t.factors, splits)
            for b, weight in readers[j]:
                block = blocks[b]
                part = to_block(rotated[box(block)], block)
                w = (weight[rows] * scale).reshape((-1,) + (1,) * (part.ndim - 1))
                sums[b][rows] += part * w

    row_bytes = 8 * max(1, int(np.prod(domain.shape)))
    on_threads(gather, row_blocks(nodes, row_bytes, GATHER_BYTES), threads)
    out: list[BlockTerms] = []
    for block, head, gathered in zip(blocks, heads, sums, strict=True):
        if isinstance(head, tuple):
            pi_m, exact, total = head
            info = gathered.reshape(nodes, -1, block.k)
            out.append(NodeInfo(pi_m, info, exact if exact.any() else None, total))
        else:
            out.append(ScalarTerms(head, gathered.reshape(nodes, -1)))
    return out
