"""How many bytes the recoded BLUE's covariance matrices take, known before anything is measured.

With recoded queries the BLUE keeps, per level and block of the split (``topdown.blue.blocks``),
a ``(k, k)`` matrix per node type (``topdown.blue.shared_matrices``): the DHC persons preset's
eight largest blocks have ``k = 1,160``, 10.8 MB a matrix and 86 MB a type over them. A node's
type is what its matrices depend on: its own measurements and its children's types, so it is
the shape of its subtree. Leaves of one level measured alike are one type; their parents are
as many types as there are distinct numbers of children; above, types are nearly as many as
nodes. So the level above the leaves is cheap and every level above it costs about its nodes
times 86 MB per kind of matrix kept (subtree, final and the children's sum): about 10 GB for a
20,000-person state to the block (44 types above the block groups' 30), hundreds for a state
of 750,000 persons to the block.

``covariance_bytes`` counts the types from the tree alone (structure, not values: measured
nodes of one level share their precision; nodes a strategy leaves unmeasured, and invariants'
exact totals, can split a type in two, which this count does not see) so that a release can
refuse a BLUE it cannot hold before it reads any record (``check_blue_fits``), naming the
estimator that can (``"topdown"``, which keeps nothing per type). A streamed release holds
less (``streamed_covariance_bytes``): the levels above its stream level, then a few subtrees'
types at a time, so the block groups of a state are never all held; what grows with the state
is the stream level, one node one type.

Kept apart from the recursions: it reads only the tree and the plan, never a value.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence

import numpy as np

from constraints.domain import Domain
from topdown.blue.blocks import Block, blocks_of
from topdown.errors import DataError
from topdown.measurement.tree import Tree, physical_memory
from topdown.strategy import Query, Strategy

__all__ = [
    "node_types",
    "covariance_bytes",
    "streamed_covariance_bytes",
    "check_blue_fits",
    "check_release_blue",
]

log = logging.getLogger(__name__)

#: The ``(k, k)`` matrices kept per node type and block: the subtree and the final
#: covariance, and at a parent its children's summed one.
KINDS = 3

#: Whether the BLUE writes its large ``(k, k)`` stacks to disk as it makes them
#: (``topdown.blue.mapped_stacks``: not on Windows), so a temporary directory's free space
#: holds them too. On a ``tmpfs`` that space is memory, counted twice here.
MAPPED = os.name != "nt"


def _shapes(tree: Tree) -> list[np.ndarray]:
    """Per level, each node's subtree shape as a number (a leaf's shape is one; a parent's is
    the multiset of its children's shapes); equal numbers, equal shapes, within a level."""
    shapes = [np.zeros(0, dtype=np.int64)] * tree.n_levels
    shapes[-1] = np.zeros(tree.levels[-1].size, dtype=np.int64)  # the leaves: one shape
    for level in range(tree.n_levels - 2, -1, -1):
        n = tree.levels[level].size
        parent = tree.levels[level + 1].parent
        # a parent's shape: the sorted pairs (child shape, how many)
        pairs = np.unique(np.stack([parent, shapes[level + 1]]), axis=1, return_counts=True)
        (owner, child_shape), many = pairs
        keys: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for p, s, m in zip(owner.tolist(), child_shape.tolist(), many.tolist(), strict=True):
            keys[p].append((s, m))
        ids: dict[tuple[tuple[int, int], ...], int] = {}
        shapes[level] = np.array([ids.setdefault(tuple(k), len(ids)) for k in keys], np.int64)
    return shapes


def node_types(tree: Tree) -> list[int]:
    """Per level, how many distinct subtree shapes its nodes have (a leaf's shape is one; a
    parent's is the multiset of its children's shapes)."""
    return _counts(_shapes(tree))


def _counts(shapes: list[np.ndarray]) -> list[int]:
    return [int(np.unique(s).size) for s in shapes]


def _per_type(blocks: Sequence[Block]) -> int:
    """The bytes of one node type's ``(k, k)`` matrices over the blocks (``k = 1``: none)."""
    return sum(b.k * b.k for b in blocks if b.k > 1) * 8


def covariance_bytes(tree: Tree, blocks: Sequence[Block]) -> int:
    """The bytes of the BLUE's ``(k, k)`` matrices over the tree (``KINDS`` per node type,
    block and level; blocks with ``k = 1`` are vectors and left out): 0 without recodes."""
    return KINDS * _per_type(blocks) * sum(node_types(tree))


def streamed_covariance_bytes(
    tree: Tree, blocks: Sequence[Block], stream_level: int, at_once: int = 1
) -> int:
    """The bytes of the ``(k, k)`` matrices a release streamed by ``stream_level`` holds at
    most (``topdown.streaming.run``), with ``at_once`` subtrees estimated at a time (its
    workers): the larger of its two phases.

    - The BLUE above the stream level: ``KINDS`` per node type of the levels above; at the
      stream level, one per stream node: the subtrees' summaries (as they arrive), each
      block's freed as the solve takes it while its final covariances are made (one per
      stream node type, kept for sweep 2); and, for the block being solved, its summaries
      as the solve takes them (``_child_summary``: copied only when some repeat, counted
      always) and its subtree and final covariances (its subtree ones folded and dropped
      once it is solved, ``topdown.blue.fed_terms``).
    - Sweep 2: the stream nodes' final covariances (per type: all the parent keeps) and, per
      subtree being estimated, ``KINDS`` for its top and per node type within it, for the
      subtree with the most (its types, not the whole tree's: a subtree's block groups are a
      few of a state's).

    A whole-tree release holds ``covariance_bytes``, the types of every level at once."""
    shapes = _shapes(tree)
    types = _counts(shapes)
    n_stream = tree.levels[stream_level].size
    above = KINDS * sum(types[:stream_level]) + n_stream
    # per stream node, the distinct shapes under it, level by level
    unit = np.arange(n_stream)
    within = np.zeros(n_stream, dtype=np.int64)
    for level in range(stream_level + 1, tree.n_levels):
        unit = unit[tree.levels[level].parent]
        pairs = np.unique(np.stack([unit, shapes[level]]), axis=1)
        within += np.bincount(pairs[0], minlength=n_stream)
    largest = int(within.max(initial=0))
    below = types[stream_level] + at_once * KINDS * (1 + largest)
    largest_block = max((b.k * b.k * 8 for b in blocks if b.k > 1), default=0)
    solving = largest_block * (n_stream + 2 * types[stream_level])
    return max(_per_type(blocks) * above + solving, _per_type(blocks) * below)


def check_blue_fits(
    tree: Tree,
    domain: Domain,
    queries: Iterable[Query],
    *,
    mapped: bool,
    stream: tuple[int, int] | None = None,
) -> None:
    """Refuse a BLUE of recoded ``queries`` (the strategy's, every level's) whose covariances
    fit neither this machine's memory nor, when the BLUE maps them from disk (``mapped``), its
    temporary directory's free space as well: before anything is measured, not hours in.
    ``stream``: a streamed release's stream level and how many subtrees it estimates at once
    (``streamed_covariance_bytes``: the levels above, then the subtrees a few at a time);
    None counts the whole tree's (``covariance_bytes``).

    Raises:
        DataError: naming the bytes, the node types per level, what there is, and the
            estimator "topdown".
    """
    queries = list(queries)
    if not any(q.recoded(domain) for q in queries):
        return
    blocks = blocks_of(domain, queries)
    need = (
        covariance_bytes(tree, blocks)
        if stream is None
        else streamed_covariance_bytes(tree, blocks, *stream)
    )
    memory = physical_memory()
    if need == 0 or memory is None:
        return
    room, where = memory, f"this machine's memory ({_gb(memory)})"
    if mapped:
        free = shutil.disk_usage(tempfile.gettempdir()).free
        room = memory + free  # the maps fall back to memory when the disk fills
        where += f" and the free space of {tempfile.gettempdir()!r} ({_gb(free)})"
    if need <= room:
        log.info("BLUE: about %s of covariance matrices (%s)", _gb(need), where)
        return
    types = ", ".join(
        f"{lv.column or 'root'} {t:,}" for lv, t in zip(tree.levels, node_types(tree), strict=True)
    )
    largest = max(b.k for b in blocks)
    how = ""
    if stream is not None:
        level, at_once = stream
        column = tree.levels[level].column
        how = (
            f", streamed by {column}: its {tree.levels[level].size:,} nodes' summaries, then "
            f"{at_once} subtree(s) at a time"
        )
    raise DataError(
        f"estimator 'blue' with these recoded queries keeps a {largest:,} x {largest:,} "
        f"matrix per block for each node type ({types} types{how}), about {_gb(need)} in all, "
        f"more than {where}; use estimator 'topdown' (the Census Bureau's method, which keeps "
        "none), or stop the tree at a coarser level"
    )


def check_release_blue(
    estimator: str,
    tree: Tree,
    domain: Domain,
    strategy: Strategy,
    stream: tuple[int, int] | None = None,
) -> None:
    """``release``'s and ``release_streamed``'s check, once the tree is known: under
    ``estimator="blue"``, ``check_blue_fits`` on every level's queries (``stream``: the
    streamed release's stream level and subtrees at once)."""
    if estimator == "blue":
        queries = [q for lv in strategy.levels for q, _ in lv.queries]
        check_blue_fits(tree, domain, queries, mapped=MAPPED, stream=stream)


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB"
