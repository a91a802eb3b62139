"""The whole-tree BLUE with its leaf level computed a chunk of families at a time.

The leaf level is the bulk of a tree: at 400 DHC tracts (1,227,744 cells each) one float
array over it is 3.9 GB, and the whole-tree solve (``topdown.blue.estimate.blue``) holds
several (the blocks' own terms and estimates, the level's cells), then ``blue_inputs`` the
answers of every fed query. But the recursions pass only per-node summaries across a level
(``topdown.blue.streamed``), so the leaves need never be whole:

1. per chunk of families (consecutive parents of the leaves, their children), the upward
   recursion of the leaves gives each parent's estimate from its children alone
   (``subtree_summary``), and the chunk's arrays are dropped;
2. the levels above finish the upward recursion from those summaries and run the downward
   one to the leaves' parents (``blue_above``): their final BLUE;
3. each chunk's leaves are then estimated again from their own measurements and their
   parents' final BLUE (``blue_below``) when the passes (or a reader of ``Blue.cells_at``)
   need them: ``LeafFamilies.estimate``.

Each piece runs the same recursions on the whole tree's plan, so the result is the whole
tree's BLUE (to round-off: the same sums in another order). The price is the leaves'
recursions run twice (steps 1 and 3), and again for each chunk ``cells_at`` reads later,
or ``scale`` the first time the leaves' covariances are read (the passes do not keep them);
the bulk of step 3, the leaves' answers rotated and weighted (``own_terms``), is kept from
step 1 for the first chunk the passes read (``KEPT_CHUNK``).

Kept apart from ``topdown.blue.estimate`` (one solve over the whole tree) and
``topdown.blue.streamed`` (the pieces themselves, which a streamed release runs in separate
tasks): this module runs those pieces in one process, for the unstreamed release.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from constraints.domain import Domain
from topdown.blue.block_solve import OwnTerms, own_terms
from topdown.blue.estimate import Blue, NodeSummary, blue_inputs, checked_inputs
from topdown.blue.plan import BluePlan
from topdown.blue.shared_matrices import Covariance, SharedMatrices
from topdown.blue.streamed import blue_above, blue_below, subtree_summary
from topdown.measurement.estimator_inputs import EstimatorInputs, QueryEstimate
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Level, Tree

__all__ = [
    "LEAF_CHUNK_BYTES",
    "LeafFamilies",
    "blue_by_families",
    "family_chunks",
    "leaf_level_bytes",
]

log = logging.getLogger(__name__)

#: The float64 cells of the leaves one chunk of families holds (its children x cells x 8
#: bytes); at least one family a chunk. 256 MiB: 27 DHC tracts (1,227,744 cells), 16,644
#: PL94 blocks (2,016 cells). A leaf level within it takes the whole-tree solve.
LEAF_CHUNK_BYTES = 256 * 2**20


#: The chunk whose leaves' own terms (``topdown.blue.block_solve.own_terms``: their answers
#: rotated and weighted, about a float per cell) the first pass keeps for the second, which
#: then does not compute them again: the first chunk the passes read
#: (``topdown.estimation.estimate``'s leaves go in chunk order). One chunk, not more: the
#: second pass takes each chunk's terms as it solves it, so the kept chunk adds nothing to
#: what that pass holds, while every further chunk kept would be held during the others'
#: (the leaf level's peak). With a recoded plan and more than one chunk.
KEPT_CHUNK = 0


def leaf_level_bytes(tree: Tree, cells: int) -> int:
    """The bytes of one float64 array over the leaf level's cells."""
    return tree.levels[-1].size * cells * 8


def family_chunks(tree: Tree, cells: int, max_bytes: int) -> list[np.ndarray]:
    """The parents of the leaf level (indices into the level above) cut into chunks of
    consecutive parents whose children hold at most ``max_bytes`` of float64 cells, at least
    one parent a chunk (a family is never split: its children sum to their parent)."""
    parents = tree.levels[-2].size
    per_parent = np.bincount(tree.levels[-1].parent, minlength=parents) * cells * 8
    chunks: list[np.ndarray] = []
    start, held = 0, 0
    for p in range(parents):
        if p > start and held + int(per_parent[p]) > max_bytes:
            chunks.append(np.arange(start, p))
            start, held = p, 0
        held += int(per_parent[p])
    chunks.append(np.arange(start, parents))
    return chunks


def family_tree(tree: Tree, parents: np.ndarray) -> tuple[Tree, np.ndarray]:
    """The two-level tree of ``parents`` (of the leaves' parent level) and their children,
    numbered as in ``tree``, and the children's indices in the leaf level (ascending)."""
    top, leaves = tree.levels[-2], tree.levels[-1]
    at = np.full(top.size, -1, dtype=np.int64)
    at[parents] = np.arange(parents.size)
    children = np.flatnonzero(at[leaves.parent] >= 0)
    parent_of = at[leaves.parent[children]]
    sub = Tree(
        (
            Level(top.number, top.column, top.labels[parents], np.full(parents.size, -1)),
            Level(leaves.number, leaves.column, leaves.labels[children], parent_of),
        )
    )
    return sub, children


def _rows_of(children: np.ndarray) -> slice | np.ndarray:
    """Ascending leaf indices as a slice when they are consecutive (a family's leaves are,
    when the labels nest, as census codes do): the chunk's answers are then read in place,
    not copied (a chunk's detailed answers are a copy of its cells, each time the chunk is
    read)."""
    if children.size and int(children[-1]) - int(children[0]) + 1 == children.size:
        return slice(int(children[0]), int(children[-1]) + 1)
    return children


def _rows(summary: NodeSummary, rows: np.ndarray) -> NodeSummary:
    """The summary of the nodes ``rows`` (copies: ``blue_below`` works in its arrays)."""
    return NodeSummary(
        tuple(np.array(e[rows]) for e in summary.est),
        tuple(v[rows].copy() for v in summary.var),
        tuple(s[rows].copy() for s in summary.subtree),
    )


class _Merged:
    """One block's (or the plain groups') covariances over the leaf level, filled a chunk
    at a time: a vector per node (k = 1), rows per group (plain groups), or shared matrices,
    an equal matrix of another chunk held once."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.array: np.ndarray | None = None
        self.seen: dict[bytes, int] = {}
        self.values: list[np.ndarray] = []
        self.index = np.zeros(nodes, dtype=np.int64)

    def add(self, children: np.ndarray, part: Covariance) -> None:
        if not isinstance(part, SharedMatrices):
            part = np.asarray(part)
            if self.array is None:
                self.array = np.empty(part.shape[:-1] + (self.nodes,))
            self.array[..., children] = part
            return
        mapping = np.empty(len(part.values), dtype=np.int64)
        for t, matrix in enumerate(part.values):
            # keyed by a digest: the matrices' bytes as keys (10.8 MB each at k = 1,160) would
            # be a second copy of every kept matrix for the leaf level's life
            key = hashlib.blake2b(np.ascontiguousarray(matrix).tobytes(), digest_size=32).digest()
            at = self.seen.get(key)
            if at is None or not np.array_equal(self.values[at], matrix):
                at = len(self.values)
                self.seen.setdefault(key, at)
                # a copy: a view would keep the chunk's whole stack (its repeats too) alive
                self.values.append(np.array(matrix))
            mapping[t] = at
        self.index[children] = mapping[part.index]

    @property
    def nbytes(self) -> int:
        """The bytes of the covariances held."""
        held = sum(v.nbytes for v in self.values) + self.index.nbytes
        return held + (0 if self.array is None else self.array.nbytes)

    def value(self) -> Covariance:
        if self.array is not None:
            return self.array
        return SharedMatrices(np.stack(self.values), self.index)


@dataclass
class LeafFamilies:
    """The leaf level's BLUE, a chunk of families at a time (see the module docstring).

    Attributes:
        tree: the whole tree.
        domain: the query domain.
        leaf_inputs: the leaf level's measurements (every leaf's rows).
        plan: the whole tree's BLUE plan.
        parents_final: the leaves' parents' final BLUE per group (``blue_above``'s).
        chunks: the parents of each chunk (``family_chunks``).
    """

    tree: Tree
    domain: Domain
    leaf_inputs: tuple[QueryEstimate, ...]
    plan: BluePlan
    parents_final: NodeSummary
    chunks: list[np.ndarray]
    _last: tuple[int, np.ndarray, Blue] | None = field(default=None, repr=False)
    _scale: dict[bool, list[_Merged]] = field(default_factory=dict, repr=False)
    _done: set[int] = field(default_factory=set, repr=False)
    _kept: dict[int, OwnTerms] = field(default_factory=dict, repr=False)
    #: called once a chunk has copied its parents' rows out of ``parents_final`` (set while
    #: they are mapped from disk: ``topdown.blue.on_disk``)
    parents_read: Callable[[], None] | None = field(default=None, repr=False)

    def sub_inputs(self, children: np.ndarray) -> EstimatorInputs:
        """The two-level inputs of a chunk: nothing at the parents (measured with the levels
        above), the children's rows of every leaf query."""
        rows = _rows_of(children)
        return EstimatorInputs(
            (
                (),
                tuple(
                    QueryEstimate(m.level, m.query, m.noisy[rows], m.variance[rows])
                    for m in self.leaf_inputs
                ),
            )
        )

    def estimate(self, i: int, *, gather: bool = True) -> tuple[np.ndarray, Blue]:
        """Chunk ``i``'s leaves (indices in the leaf level) and the BLUE of its two levels
        (the parents' given, the leaves' final); the last one asked is kept. With ``gather``
        the leaves' covariances are added to the level's the first time a chunk is read (the
        passes read a chunk with ``gather=False``: ``fed``)."""
        if self._last is None or self._last[0] != i:
            self._last = None  # its arrays go before the next chunk's are made
            parents = self.chunks[i]
            sub, children = family_tree(self.tree, parents)
            top = _rows(self.parents_final, parents)
            if self.parents_read is not None:
                self.parents_read()
            own = self._kept.pop(i, None)  # the first pass's, used once (the solve writes in them)
            estimate = blue_below(sub, self.domain, self.sub_inputs(children), top, self.plan, own)
            self._last = (i, children, estimate)
        _, children, estimate = self._last
        if gather and i not in self._done:
            self._gather(children, estimate)
            self._done.add(i)
        return children, estimate

    def _gather(self, children: np.ndarray, estimate: Blue) -> None:
        nodes = self.tree.levels[-1].size
        for subtree in (False, True):
            if estimate.blocks:
                parts = list((estimate.block_subtree_scale if subtree else estimate.block_scale)[1])
            else:
                parts = [(estimate.subtree_scale if subtree else estimate.scale)[1]]
            merged = self._scale.setdefault(subtree, [_Merged(nodes) for _ in parts])
            for m, part in zip(merged, parts, strict=True):
                m.add(children, part)

    def scale(self, subtree: bool) -> list[Covariance]:
        """The leaves' final (or, with ``subtree``, subtree) covariances: per block, or the
        plain groups' (groups, leaves) as one entry. Estimates the chunks not seen yet."""
        for i in range(len(self.chunks)):
            if i not in self._done:
                self.estimate(i)
        return [m.value() for m in self._scale[subtree]]

    @property
    def covariance_bytes(self) -> int:
        """The bytes of the leaves' covariances gathered so far (0 until a reader asks for
        them: the passes do not)."""
        return sum(m.nbytes for merged in self._scale.values() for m in merged)

    def fed(self, i: int) -> tuple[np.ndarray, tuple[QueryEstimate, ...]]:
        """Chunk ``i``'s leaves and the passes' inputs for them (``blue_inputs`` of the
        chunk's BLUE: its cells, totals and measured marginals, with their weights)."""
        # not gathered: the leaves' final covariances, a (k, k) matrix per parent type and
        # block, would stay held for the rest of the release (82 MiB a DHC county type,
        # 14 types at 750,000 persons) and
        # the passes do not read them; ``scale`` estimates the chunks again when asked
        children, estimate = self.estimate(i, gather=False)
        self._last = None  # the passes hold the cells (the fed detailed answers) while needed
        fed = blue_inputs(self.sub_inputs(children), estimate, fixed=1).levels[1]
        del estimate
        level = self.tree.n_levels - 1
        return children, tuple(replace(m, level=level) for m in fed)

    def cells(self, rows: slice) -> np.ndarray:
        """The leaves' final BLUE of the leaf rows ``rows`` (nodes, cells), from the chunks
        that hold them."""
        nodes = np.arange(self.tree.levels[-1].size)[rows]
        out = np.empty((nodes.size, self.domain.size))
        where = np.full(self.tree.levels[-1].size, -1, dtype=np.int64)
        where[nodes] = np.arange(nodes.size)
        for i in np.unique(self._owner()[nodes]):
            children, estimate = self.estimate(int(i))
            keep = np.flatnonzero(where[children] >= 0)
            out[where[children[keep]]] = estimate.cells_at(1)[keep]
        return out

    def totals(self) -> np.ndarray:
        """The leaves' final BLUE totals (leaves,), a chunk at a time."""
        out = np.empty(self.tree.levels[-1].size)
        for i in range(len(self.chunks)):
            children, estimate = self.estimate(i)
            out[children] = estimate.totals_at(1)
        return out

    def _owner(self) -> np.ndarray:
        """The chunk of every leaf."""
        of_parent = np.empty(self.tree.levels[-2].size, dtype=np.int64)
        for i, parents in enumerate(self.chunks):
            of_parent[parents] = i
        return of_parent[self.tree.levels[-1].parent]


def blue_by_families(
    tree: Tree,
    domain: Domain,
    measurements: Measurements | EstimatorInputs,
    *,
    exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    max_bytes: int = LEAF_CHUNK_BYTES,
    top: tuple[NodeSummary, BluePlan] | None = None,
) -> tuple[Blue, LeafFamilies] | None:
    """The whole-tree BLUE with its leaf level by chunks of families (module docstring):
    the ``Blue`` of every level, whose leaf level is computed on demand (``Blue.cells_at``,
    its covariances once every chunk has been estimated), and the ``LeafFamilies`` the
    passes read the leaves' inputs from. None when the whole-tree solve is the one to run: a
    tree of one level, or exact totals at the leaves (their chunks would need them as
    measurements of their own).

    ``top``: for a streamed release's subtree (``tree`` from its top down, the top measured
    with the levels above), its top's final BLUE and the whole tree's plan, as
    ``topdown.blue.streamed.blue_below`` takes them: the subtree's BLUE, its leaves a chunk
    of families at a time.
    """
    exact = dict(exact_totals or {})
    last = tree.n_levels - 1
    if last < 1 or exact.get(last):
        return None
    inputs = checked_inputs(tree, measurements, exact)
    plan = (
        BluePlan.of(domain, [[m.query for m in lv] for lv in inputs.levels])
        if top is None
        else top[1]
    )
    raw = checked_inputs(tree, measurements, None)
    chunks = family_chunks(tree, domain.size, max_bytes)
    leaves = LeafFamilies(tree, domain, raw.levels[last], plan, NodeSummary((), ()), chunks)

    def summaries() -> Iterator[tuple[int, NodeSummary]]:
        """Each chunk's parents' summary (consecutive parents: ``family_chunks``), stacked
        as it is made and then dropped."""
        for i, parents in enumerate(chunks):
            sub, children = family_tree(tree, parents)
            chunk = checked_inputs(sub, leaves.sub_inputs(children), None)
            own = None
            if i == KEPT_CHUNK and plan.blocks and len(chunks) > 1:
                own = leaves._kept[i] = own_terms(sub, domain, chunk, plan.blocks)
            yield int(parents[0]), subtree_summary(sub, domain, chunk, plan, own)
            del own

    # blue_above frees each block's part of the stack as it reads it
    below = NodeSummary.stacked(tree.levels[last - 1].size, summaries())
    above, leaves.parents_final = blue_above(
        Tree(tree.levels[:last]),
        domain,
        EstimatorInputs(raw.levels[:last]),
        below,
        plan,
        exact_totals={lv: v for lv, v in exact.items() if lv < last},
        top=None if top is None else top[0],
    )
    log.debug("BLUE: the leaf level in %d chunk(s) of families", len(chunks))
    nodes = tree.levels[last].size
    return replace(above, fitted=above.fitted + (np.zeros((nodes, 0)),), leaves=leaves), leaves
