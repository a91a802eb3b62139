"""Per-node ``k x k`` matrices held once per distinct value: the recoded BLUE's covariances.

In a block of the recoded split (``topdown.blue.blocks``) every node has a ``k x k``
precision and covariance; ``k`` is the product of the recoded axes' finest group counts,
1,160 for the DHC persons preset (29 relationship groups x 40 age groups): 10.8 MB a matrix.
Held densely per node, a level of 107 tracts and the preset's eight such blocks needed about
9 GB per array (the recursions hold several). But the matrices depend on the public
structure only, not on the data: a node's precision on how precisely each query was measured
there (one budget per level: the same at every node but for invariants and uninformed
nodes), its subtree covariance on that and on its children's, its final covariance on that
and on its parent's. So a level holds few distinct matrices (its nodes' *types*: leaves one,
parents one per number of children, ...): each is stored and computed once, and each node
keeps the index of its type. Memory and the ``k^3`` work then grow with the types, not the
nodes.

Kept apart from ``topdown.blue.block_recursions`` because the covariances travel beyond it:
the ``Blue`` estimate holds them, and the variances and the passes' metric read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Covariance", "SharedMatrices", "type_index", "type_rows", "dense"]


@dataclass(frozen=True, eq=False)
class SharedMatrices:
    """Node ``v``'s matrix is ``values[index[v]]``.

    Attributes:
        values: float (types, k, k), the distinct matrices.
        index: int (nodes,), each node's type.
    """

    values: np.ndarray
    index: np.ndarray

    def __post_init__(self) -> None:
        if self.values.ndim != 3 or self.values.shape[1] != self.values.shape[2]:
            raise ValueError(
                f"values (shape {self.values.shape}) must be (types, k, k) square matrices"
            )
        if self.index.ndim != 1 or (
            self.index.size
            and not 0 <= int(self.index.min()) <= int(self.index.max()) < len(self.values)
        ):
            raise ValueError(
                f"index (shape {self.index.shape}) must be one type in [0, {len(self.values)}) "
                "per node"
            )

    @property
    def shape(self) -> tuple[int, int, int]:
        """As the dense array would be: (nodes, k, k)."""
        k = self.values.shape[1]
        return (self.index.shape[0], k, k)

    @property
    def ndim(self) -> int:
        return 3

    @property
    def k(self) -> int:
        return int(self.values.shape[1])

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def dense(self) -> np.ndarray:
        """The per-node array (nodes, k, k): for few nodes (a streamed subtree's top)."""
        return self.values[self.index]

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray`` of shared matrices is the per-node array (``dense``)."""
        out = self.dense()
        return out if dtype is None else out.astype(dtype, copy=False)

    def rows(self, nodes: slice | np.ndarray) -> SharedMatrices:
        """The nodes ``nodes`` (a slice or an index array), sharing ``values``."""
        return SharedMatrices(self.values, self.index[nodes])

    def __getitem__(self, nodes: slice | np.ndarray) -> SharedMatrices:
        """``rows``: selecting nodes as an array's rows would (``NodeSummary.row``)."""
        return self.rows(nodes)

    def copy(self) -> SharedMatrices:
        """The same nodes' matrices with their own arrays (the distinct ones only: the used
        matrices are picked before copying, not all of a level's copied and most dropped)."""
        used, index = np.unique(self.index, return_inverse=True)
        return SharedMatrices(self.values[used], index.reshape(-1).astype(np.int64))

    def compact(self) -> SharedMatrices:
        """The same matrices with the types no node uses dropped."""
        used, index = np.unique(self.index, return_inverse=True)
        if used.size == len(self.values):
            return self
        return SharedMatrices(self.values[used], index.reshape(-1).astype(np.int64))

    @classmethod
    def of(cls, a: np.ndarray | SharedMatrices, *, copy: bool = True) -> SharedMatrices:
        """``a`` as shared matrices: per-node matrices (nodes, k, k) held once per distinct
        value (equal bit for bit), or ``a`` itself. ``copy=False``: when every matrix is
        distinct, ``a`` is the values, not a copy of them (the caller no longer writes in
        it)."""
        if isinstance(a, SharedMatrices):
            return a
        a = np.asarray(a, dtype=float)
        seen: dict[bytes, int] = {}
        index = np.fromiter(
            (seen.setdefault(np.ascontiguousarray(m).tobytes(), len(seen)) for m in a),
            dtype=np.int64,
            count=a.shape[0],
        )
        if not copy and len(seen) == a.shape[0]:
            return cls(a, index)
        first = np.zeros(len(seen), dtype=np.int64)
        first[index[::-1]] = np.arange(a.shape[0] - 1, -1, -1)
        return cls(a[first], index)

    @classmethod
    def constant(cls, matrix: np.ndarray, nodes: int) -> SharedMatrices:
        """The same ``matrix`` (k, k) at every one of ``nodes`` nodes."""
        return cls(np.asarray(matrix, dtype=float)[None], np.zeros(nodes, dtype=np.int64))


def dense(a: np.ndarray | SharedMatrices) -> np.ndarray:
    """Per-node matrices as an array, whichever way they are held."""
    return a.dense() if isinstance(a, SharedMatrices) else np.asarray(a)


#: A block's covariances over a level's nodes: (nodes,) for k = 1, else (nodes, k, k) as an
#: array or held once per distinct matrix.
Covariance = np.ndarray | SharedMatrices


def type_index(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct combinations of per-node ``keys`` (each (nodes,) or (nodes, c), numbers
    that are equal exactly when the nodes share what they describe): each node's type (int
    (nodes,), numbered in order of the types' first nodes) and each type's first node.

    Compared as bytes (one sort of the nodes, as ``topdown.blue.metric``'s distinct rows): a
    zero of either sign counts twice, which only repeats a type's work."""
    columns = [np.asarray(key).reshape(np.asarray(key).shape[0], -1) for key in keys]
    table = np.ascontiguousarray(np.concatenate([c.astype(float) for c in columns], axis=1))
    if table.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = table.view(np.dtype((np.void, table.dtype.itemsize * table.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    # renumbered by first node: the types' order does not depend on the keys' byte order
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[np.asarray(inverse).reshape(-1)].astype(np.int64), first[order].astype(np.int64)


def type_rows(types: np.ndarray, t: int) -> slice | np.ndarray:
    """The nodes of type ``t``: a slice when they are contiguous (a view, no copy of a
    level's rows: the common case of one type per level), else their indices."""
    nodes = np.flatnonzero(types == t)
    if nodes.size and nodes[-1] - nodes[0] + 1 == nodes.size:
        return slice(int(nodes[0]), int(nodes[-1]) + 1)
    return nodes
