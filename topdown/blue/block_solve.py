"""The whole-tree BLUE over the blocks of a recoded split (``topdown.blue.blocks``).

Per block, each level's own measurements are gathered (``Q'y`` projected on the block, and
``Q'Q`` there, weighted by the inverse variances), then the block's tree problem is solved:
by the scalar recursions (``topdown.blue.recursions``) when ``k = 1``, by their matrix form
(``topdown.blue.block_recursions``) otherwise, and the blocks' estimates are added on the
cells. The same per-block steps serve the pieces of a streamed BLUE (``block_summary``;
``solve_blocks`` with a summary below or a final estimate above), which share one plan.

Kept apart from ``topdown.blue.estimate`` (the plain groups' solve, the ``Blue`` type) because
only strategies with recodes take it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_recursions import MatrixUp, NodeInfo, matrix_downward, matrix_upward
from topdown.blue.blocks import Block
from topdown.blue.recursions import _Upward, downward, sum_matrices, upward
from topdown.errors import StrategyError
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate, precision
from topdown.measurement.tree import Tree
from topdown.query import Factor

__all__ = ["BlockSolution", "solve_blocks", "block_summary"]

#: A precision above this is an exact answer (variance 0: see ``precision``).
_EXACT_PRECISION = 1e100


@dataclass(frozen=True)
class BlockSolution:
    """Per block and level: the final estimates (nodes, block cells), their covariances
    ((nodes,) for k = 1, else (nodes, k, k)), the subtree covariances, and, with a summary
    below, the last level's final estimates, covariances and subtree covariances."""

    cells: list[np.ndarray]
    scale: list[list[np.ndarray]]
    subtree_scale: list[list[np.ndarray]]
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def _level_terms(
    block: Block, lv: tuple[QueryEstimate, ...], domain: Domain, nodes: int
) -> list[tuple[QueryEstimate, tuple[Factor, ...], np.ndarray]]:
    """The level's measurements that see the block, with their factors and precisions."""
    out = []
    for m in lv:
        factors = m.query.factors(domain)
        if block.sees(factors):
            prec = np.broadcast_to(precision(m.variance), (nodes,))
            out.append((m, factors, prec))
    return out


def _answers(m: QueryEstimate, factors: Sequence[Factor], prec: np.ndarray) -> np.ndarray:
    values = np.asarray(m.noisy, dtype=float)
    values = values.reshape((values.shape[0],) + tuple(f.n_out for f in factors))
    if not np.all(prec > 0):  # no information: its values are not read
        values = np.where((prec > 0).reshape((-1,) + (1,) * (values.ndim - 1)), values, 0.0)
    return values


def _scalar_level(
    block: Block, lv: tuple[QueryEstimate, ...], domain: Domain, nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """A ``k = 1`` block's precision pi (nodes,) and z = r / pi (nodes, block cells), each
    term weighted by its precision's share of pi (an exact answer does not swamp)."""
    terms = _level_terms(block, lv, domain, nodes)
    pi = np.zeros(nodes)
    for _, factors, prec in terms:
        pi = pi + prec * float(block.gram(factors)[0, 0])
    z: np.ndarray | None = None
    with np.errstate(divide="ignore", invalid="ignore"):
        for m, factors, prec in terms:
            weight = np.where(pi > 0, prec / pi, 0.0).reshape((nodes,) + (1,) * len(block.shape))
            part = _weighted(block.rep(factors, _answers(m, factors, prec)), weight, m.noisy)
            if z is None and part.shape[1:] == block.shape:
                z = part
            elif z is None:
                z = np.zeros((nodes,) + block.shape) + part
            else:
                z += part
    if z is None:
        return pi, np.zeros((nodes, int(np.prod(block.shape))))
    return pi, z.reshape(nodes, -1)


def _weighted(rep: np.ndarray, weight: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``weight * rep``, in place when ``rep`` is a fresh array (not the answers themselves)."""
    if np.shares_memory(rep, source) or rep.dtype != np.float64:
        return weight * rep
    rep *= weight
    return rep


def _matrix_level(
    block: Block, lv: tuple[QueryEstimate, ...], domain: Domain, nodes: int, where: str
) -> NodeInfo:
    """A ``k > 1`` block's precisions, information vectors and exact totals at a level."""
    k = block.k
    pi = np.zeros((nodes, k, k))
    r = np.zeros((nodes,) + block.shape)
    exact = np.zeros(nodes, dtype=bool)
    total = np.zeros(nodes)
    for m, factors, prec in _level_terms(block, lv, domain, nodes):
        hard = prec > _EXACT_PRECISION
        if hard.any():
            if any(f.kept for f in factors):
                raise StrategyError(
                    f"query {m.query.name!r} at {where} has answers of variance 0 (exact); the "
                    "BLUE of recoded queries takes exact node totals only (invariants)"
                )
            exact |= hard
            total[hard] = np.asarray(m.noisy, dtype=float)[hard, 0]
        soft = np.where(hard, 0.0, prec)
        pi += soft[:, None, None] * block.gram(factors)[None]
        weight = soft.reshape((nodes,) + (1,) * len(block.shape))
        r += _weighted(block.rep(factors, _answers(m, factors, soft)), weight, m.noisy)
    return NodeInfo(pi, block.to_matrix(r), exact if exact.any() else None, total)


def _where(tree: Tree, level: int, inputs: EstimatorInputs | None = None) -> str:
    """A level as an error names it: its number and column, and what it measures."""
    lv = tree.levels[level]
    out = f"level {lv.number} ({lv.column or 'root'})"
    if inputs is not None:
        out += f", which measures {[m.query.name for m in inputs.at(level)]},"
    return out


def _scalar_upward(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    block: Block,
    below: tuple[np.ndarray, np.ndarray] | None,
) -> _Upward:
    """A ``k = 1`` block's upward recursion: the plain scalar one, on the block's cells."""
    levels = [
        _scalar_level(block, inputs.at(i), domain, lv.size) for i, lv in enumerate(tree.levels)
    ]
    pis = [p for p, _ in levels]
    return upward(lambda level: levels[level][1], pis, sum_matrices(tree), below)


def _matrix_upward(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    block: Block,
    below: tuple[np.ndarray, np.ndarray] | None,
) -> MatrixUp:
    """A ``k > 1`` block's upward recursion in matrix form."""
    return matrix_upward(
        lambda level: _matrix_level(
            block, inputs.at(level), domain, tree.levels[level].size, _where(tree, level)
        ),
        tree.n_levels,
        sum_matrices(tree),
        block.total_direction(),
        lambda level: _where(tree, level, inputs),
        below,
    )


def block_summary(
    tree: Tree, domain: Domain, inputs: EstimatorInputs, blocks: Sequence[Block]
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Per block, a subtree's top's estimate from its descendants and its covariance."""
    est, var = [], []
    for block in blocks:
        upward_of = _scalar_upward if block.k == 1 else _matrix_upward
        up = upward_of(tree, domain, inputs, block, None)
        est.append(np.asarray(up.est[0], dtype=float))
        var.append(up.var[0])
    return tuple(est), tuple(var)


def solve_blocks(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    blocks: Sequence[Block],
    *,
    below: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | None = None,
    top: tuple[tuple[np.ndarray, ...], ...] | None = None,
    threads: int = 1,
) -> BlockSolution:
    """Every block's recursions over ``tree``, the estimates added on the cells. ``below``:
    per block, the last level's children's summed estimates and covariances; ``top``: per
    block, the first level's final estimates, covariances and subtree covariances.

    The blocks are independent problems: with ``threads > 1`` that many are solved at once on
    threads (numpy's array work releases the interpreter lock; the PL94 preset has 16 blocks),
    at most ``threads`` finished ahead of the one being added, and each block's estimates are
    added on the cells in block order, so the answer is the same with any number of threads,
    bit for bit."""
    shape = tuple(int(n) for n in domain.shape)
    last = tree.n_levels - 1
    cells = [np.zeros((lv.size,) + shape) for lv in tree.levels]
    scale: list[list[np.ndarray]] = [[] for _ in tree.levels]
    subtree: list[list[np.ndarray]] = [[] for _ in tree.levels]
    ends = []
    parents = [lv.parent for lv in tree.levels]
    sums = sum_matrices(tree)

    def one(b: int) -> _Solved:
        return _solve_block(tree, domain, inputs, blocks[b], b, (parents, sums), below, top)

    for block, (u, f, var) in zip(blocks, _in_order(one, len(blocks), threads), strict=True):
        if below is not None:
            ends.append((np.array(u[last], dtype=float), f[last], np.array(var[last])))
        for level in range(last + 1):
            values = u[level]
            if block.k > 1:
                values = block.from_matrix(values)
            cells[level] += block.expand(values.reshape((-1,) + block.shape))
            scale[level].append(f[level])
            subtree[level].append(var[level])
    return BlockSolution([c.reshape(c.shape[0], -1) for c in cells], scale, subtree, ends)


#: One block's final estimates, covariances and subtree covariances, per level.
_Solved = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


def _solve_block(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    block: Block,
    b: int,
    structure: tuple[list[np.ndarray], Any],
    below: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | None,
    top: tuple[tuple[np.ndarray, ...], ...] | None,
) -> _Solved:
    """Block ``b``'s upward and downward recursions (see ``solve_blocks``); ``structure``:
    the levels' parent indices and ``sum_matrices``."""
    parents, sums = structure
    child = None if below is None else (below[0][b], below[1][b])
    given = None if top is None else (top[0][b], top[1][b])
    if block.k == 1:
        up = _scalar_upward(tree, domain, inputs, block, child)
        if top is not None:  # the top's whole-tree subtree variance
            up.var[0] = top[2][b]
        u, f, _ = downward(up, parents, sums, False, given)
        return list(u), list(f), list(up.var)
    mup = _matrix_upward(tree, domain, inputs, block, child)
    if top is not None:
        mup.var[0] = top[2][b]
    u, f = matrix_downward(mup, parents, sums, block.total_direction(), given)
    return list(u), list(f), list(mup.var)


def _in_order(work: Callable[[int], _Solved], n: int, threads: int) -> Iterator[_Solved]:
    """``work(0)``, ..., ``work(n - 1)`` in order, ``threads`` of them running at once (in this
    thread when 1), at most ``threads`` submitted ahead of the one yielded (each result holds
    a block's estimates on every level: bounded memory)."""
    if threads <= 1 or n <= 1:
        yield from (work(i) for i in range(n))
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="blue-block") as pool:
        pending: deque[Future[_Solved]] = deque()
        submitted = 0
        for _ in range(n):
            while submitted < n and len(pending) < threads:
                pending.append(pool.submit(work, submitted))
                submitted += 1
            yield pending.popleft().result()
