"""The whole-tree BLUE over the blocks of a recoded split (``topdown.blue.blocks``).

Each level's own measurements are gathered for every block at once
(``topdown.blue.block_terms``: ``Q'y`` and ``Q'Q`` on the block, weighted by the inverse
variances, each block's ``Q'y`` a box of the level's rotated answers), then each block's tree
problem is solved: by the scalar recursions (``topdown.blue.recursions``) when ``k = 1``, by
their matrix form (``topdown.blue.block_recursions``) otherwise; the blocks' estimates fill
their boxes of a rotated array per level, rotated back to the cells once
(``topdown.blue.rotation``). The same per-block steps serve the pieces of a streamed BLUE
(``block_summary``; ``solve_blocks`` with a summary below or a final estimate above), which
share one plan.

Kept apart from ``topdown.blue.estimate`` (the plain groups' solve, the ``Blue`` type) because
only strategies with recodes take it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from topdown.blue.block_recursions import MatrixUp, NodeInfo, matrix_downward, matrix_upward
from topdown.blue.block_terms import (
    GATHER_BYTES,
    BlockTerms,
    ScalarTerms,
    level_terms,
    on_threads,
)
from topdown.blue.blocks import AxisSplit, Block
from topdown.blue.fed_terms import FedTerms
from topdown.blue.mapped_stacks import MappedStacks, hand_back, is_mapped
from topdown.blue.recursions import _Upward, downward, sum_matrices, upward
from topdown.blue.rotation import box, from_block, unrotate
from topdown.blue.shared_matrices import Covariance, SharedMatrices, dense
from topdown.measurement.estimator_inputs import EstimatorInputs
from topdown.measurement.tree import Tree
from topdown.support.row_blocks import row_blocks

__all__ = ["BlockSolution", "OwnTerms", "own_terms", "solve_blocks", "block_summary"]


@dataclass(frozen=True)
class BlockSolution:
    """Per block and level: the final estimates (nodes, block cells), their covariances
    ((nodes,) for k = 1, else (nodes, k, k) held once per distinct matrix:
    ``topdown.blue.shared_matrices``), the subtree covariances, and, with a summary below,
    the last level's final estimates, covariances and subtree covariances (per node; the
    covariances as the level holds them, shared matrices for k > 1)."""

    cells: list[np.ndarray]
    scale: list[list[Covariance]]
    subtree_scale: list[list[Covariance]]
    ends: list[tuple[np.ndarray, Covariance, Covariance]]


def _where(tree: Tree, level: int, inputs: EstimatorInputs | None = None) -> str:
    """A level as an error names it: its number and column, and what it measures."""
    lv = tree.levels[level]
    out = f"level {lv.number} ({lv.column or 'root'})"
    if inputs is not None:
        out += f", which measures {[m.query.name for m in inputs.at(level)]},"
    return out


#: Per level, every block's own terms (``level_terms``); a block's are dropped once it is solved.
OwnTerms = list[list[BlockTerms | None]]


def own_terms(
    tree: Tree, domain: Domain, inputs: EstimatorInputs, blocks: Sequence[Block], threads: int = 1
) -> OwnTerms:
    """Every level's own terms for every block, from one rotation of each level's answers.
    Computed once, they can serve a subtree's summary (``block_summary``, which only reads
    them) and then its solve (``solve_blocks``, which takes them)."""
    return [
        list(
            level_terms(
                blocks, inputs.at(level), domain, lv.size, _where(tree, level), threads=threads
            )
        )
        for level, lv in enumerate(tree.levels)
    ]


def _take(own: OwnTerms, b: int) -> list[BlockTerms]:
    """Block ``b``'s terms at every level, dropped from ``own`` (its memory goes with the
    block's recursion, which overwrites its arrays)."""
    out = []
    for per_level in own:
        terms = per_level[b]
        assert terms is not None, f"block {b}'s terms were taken twice"
        per_level[b] = None
        out.append(terms)
    return out


def _upward(
    tree: Tree,
    inputs: EstimatorInputs,
    block: Block,
    terms: list[BlockTerms],
    sums: list[sp.csr_matrix],
    below: tuple[np.ndarray, Covariance] | None,
    maps: MappedStacks | None = None,
) -> _Upward | MatrixUp:
    """A block's upward recursion: the plain scalar one (``k = 1``) or its matrix form (its
    large covariance stacks in files of ``maps`` as they are made, if given)."""
    if block.k == 1:
        scalar = [t for t in terms if isinstance(t, ScalarTerms)]
        child = None if below is None else (below[0], dense(below[1]))
        return upward(lambda level: scalar[level].z, [t.precision for t in scalar], sums, child)
    info = [t for t in terms if isinstance(t, NodeInfo)]
    return matrix_upward(
        lambda level: info[level],
        tree.n_levels,
        sums,
        block.total_direction(),
        lambda level: _where(tree, level, inputs),
        below,
        maps,
    )


def block_summary(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    blocks: Sequence[Block],
    own: OwnTerms | None = None,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Per block, a subtree's top's estimate from its descendants and its covariance.
    ``own``: the subtree's own terms (``own_terms``), read and left whole for a later
    ``solve_blocks`` (the upward recursion writes in none of their arrays); computed when
    None."""
    # a list per level of its own: the loop below takes each block's terms from it
    own = own_terms(tree, domain, inputs, blocks) if own is None else [list(lv) for lv in own]
    sums = sum_matrices(tree)
    est, var = [], []
    with MappedStacks.opened() as maps:
        for b, block in enumerate(blocks):
            up = _upward(tree, inputs, block, _take(own, b), sums, None, maps)
            est.append(np.asarray(up.est[0], dtype=float))
            top = dense(up.var[0])
            # the top's covariances (k x k a node) out of memory too, while the summaries of
            # every chunk wait for the levels above
            var.append(top if maps is None or top.ndim != 3 else maps.held(top))
    return tuple(est), tuple(var)


def solve_blocks(
    tree: Tree,
    domain: Domain,
    inputs: EstimatorInputs,
    blocks: Sequence[Block],
    *,
    below: tuple[Sequence[np.ndarray], Sequence[Covariance]] | None = None,
    top: tuple[Sequence[np.ndarray], Sequence[Covariance], Sequence[Covariance]] | None = None,
    threads: int = 1,
    own: OwnTerms | None = None,
    fold: FedTerms | None = None,
) -> BlockSolution:
    """Every block's recursions over ``tree``, the estimates put together on the cells.
    ``below``: per block, the last level's children's summed estimates and covariances
    (lists are handed over: a block's entries are emptied once its recursion has them, so
    each block's summary is freed when its solve ends, ``_child_summary``);
    ``top``: per block, the first level's final estimates, covariances and subtree
    covariances (both in the block's own layout, ``topdown.blue.rotation.box_shape``; the
    subtree ones may be left out, empty, when the first level's are not read: its
    ``subtree_scale`` is then its children's alone);
    ``own``: the levels' own terms (``own_terms``) when already computed, taken (the
    recursions write in their arrays);
    ``fold``: the last level's subtree covariances go into it block by block
    (``topdown.blue.fed_terms``) and are not kept: its ``subtree_scale`` and the ends' are
    then empty.

    Each level's answers are rotated once and every block reads its box of them
    (``topdown.blue.block_terms``); each block's final estimates fill its box of the level's
    rotated array, which is rotated back to the cells once. With ``threads > 1`` the rotation
    runs on that many threads (blocks of nodes), and that many blocks are solved at once
    (numpy's array work releases the interpreter lock; the PL94 preset has 16 blocks), at most
    ``threads`` finished ahead of the one being placed. The boxes are disjoint, so the answer
    is the same with any number of threads, bit for bit."""
    splits = blocks[0].splits
    last = tree.n_levels - 1
    estimates: list[list[np.ndarray]] = []  # per block, per level
    scale: list[list[Covariance]] = [[] for _ in tree.levels]
    subtree: list[list[Covariance]] = [[] for _ in tree.levels]
    ends = []
    parents = [lv.parent for lv in tree.levels]
    sums = sum_matrices(tree)
    if own is None:
        own = own_terms(tree, domain, inputs, blocks, threads)

    def one(b: int, maps: MappedStacks | None) -> _Solved:
        terms = _take(own, b)
        child = None if below is None else _child_summary(below, b, maps)
        return _solve_block(tree, inputs, blocks[b], b, terms, (parents, sums), child, top, maps)

    # the large covariance stacks go to files as they are made (``topdown.blue.mapped_stacks``)
    with MappedStacks.opened() as maps:
        for b, (u, f, var) in enumerate(_in_order(lambda i: one(i, maps), len(blocks), threads)):
            if fold is not None:
                # a stream level's: a k x k matrix per node, folded and dropped now
                fold.add(blocks[b], var[last])
                var[last] = np.empty(0)
            if below is not None:
                # the covariances as held (per type): the level's own, not a dense copy per node
                ends.append((np.array(u[last], dtype=float), f[last], var[last]))
            estimates.append(u)
            for level in range(last + 1):
                scale[level].append(f[level])
                if fold is None or level < last:
                    subtree[level].append(var[level])
    cells = []
    for level in range(last + 1):
        cells.append(_cells([u[level] for u in estimates], blocks, splits, threads))
        for u in estimates:
            u[level] = np.empty(0)
    return BlockSolution(cells, scale, subtree, ends)


def _cells(
    estimates: Sequence[np.ndarray],
    blocks: Sequence[Block],
    splits: Sequence[AxisSplit],
    threads: int = 1,
) -> np.ndarray:
    """A level's cells (nodes, cells) from every block's estimates: a block of nodes at a
    time (on ``threads`` threads), each block's rows placed in its box of a rotated array and
    the array rotated back (the boxes cover it once; no level-sized temporaries)."""
    nodes = estimates[0].shape[0]
    shape = tuple(s.n for s in splits)
    out = np.empty((nodes, int(np.prod(shape, dtype=np.int64))))

    def place(rows: slice) -> None:
        rotated = np.empty((rows.stop - rows.start,) + shape)
        for block, values in zip(blocks, estimates, strict=True):
            rotated[box(block)] = from_block(values[rows], block)
        out[rows] = unrotate(rotated, splits).reshape(rows.stop - rows.start, -1)

    on_threads(place, row_blocks(nodes, out[:1].nbytes, GATHER_BYTES), threads)
    return out


#: One block's final estimates, covariances and subtree covariances, per level.
_Solved = tuple[list[np.ndarray], list[Covariance], list[Covariance]]


def _solve_block(
    tree: Tree,
    inputs: EstimatorInputs,
    block: Block,
    b: int,
    terms: list[BlockTerms],
    structure: tuple[list[np.ndarray], list[sp.csr_matrix]],
    child: tuple[np.ndarray, Covariance] | None,
    top: tuple[Sequence[np.ndarray], Sequence[Covariance], Sequence[Covariance]] | None,
    maps: MappedStacks | None = None,
) -> _Solved:
    """Block ``b``'s upward and downward recursions (see ``solve_blocks``) from its own
    ``terms`` per level; ``structure``: the levels' parent indices and ``sum_matrices``;
    ``child``: its last level's children's summary (``_child_summary``), if any; ``maps``:
    where its large covariance stacks go as they are made."""
    parents, sums = structure
    given = None if top is None else (top[0][b], top[1][b])
    up = _upward(tree, inputs, block, terms, sums, child, maps)
    if isinstance(up, MatrixUp):
        if top is not None and top[2]:  # the top's whole-tree subtree variance
            up.var[0] = SharedMatrices.of(top[2][b])
        u, f = matrix_downward(up, parents, sums, block.total_direction(), given, maps)
        return list(u), list(f), list(up.var)
    if top is not None and top[2]:
        up.var[0] = dense(top[2][b])
    scalar = None if given is None else (given[0], dense(given[1]))
    est, final, _ = downward(up, parents, sums, False, scalar)
    return list(est), list(final), list(up.var)


def _child_summary(
    below: tuple[Sequence[np.ndarray], Sequence[Covariance]],
    b: int,
    maps: MappedStacks | None = None,
) -> tuple[np.ndarray, Covariance]:
    """Block ``b``'s summary of the last level's children, its covariances as shared matrices
    when ``k > 1`` (what ``matrix_upward`` would make of them: held once per distinct
    matrix; in a file of ``maps`` when large enough). From lists the entries are taken (left
    empty): a summary is read by one block only, so the caller's dense covariances (18 DHC
    counties x 8 blocks of ``k = 1,160``: 1.5 GB) go as the blocks are solved, not at the
    end of the solve. Covariances already mapped from a file and all distinct (a stream
    level's: every subtree its own type) are read in place, not copied to memory and then
    to a file again (for 400 DHC tracts, 400 x 10.8 MB = 4.3 GB a block)."""
    est, var = below[0][b], below[1][b]
    if isinstance(var, np.ndarray) and var.ndim == 3:
        shared = SharedMatrices.of(var, copy=not is_mapped(var))
        hand_back(var)
        if maps is not None and not is_mapped(shared.values):
            shared = SharedMatrices(maps.held(shared.values), shared.index)
        var = shared
    for part in below:
        if isinstance(part, list):
            part[b] = np.empty(0)
    return est, var


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
