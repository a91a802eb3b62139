"""The junction tree of a set of cliques, and the cap on the model's size.

Why a junction tree: belief propagation is exact on a tree of cliques with the running
intersection property, at a cost linear in the cells of its cliques. The measured cliques
define a graph over the attributes (an edge between two attributes measured together); it is
triangulated by greedy elimination (min-fill, ties broken by the fewest cells, the order
private-pgm and most exact-inference codes use), its maximal cliques are joined by a maximum
spanning tree on the size of their intersections (networkx), which is a junction tree for a
chordal graph. Attributes never measured together end up in different components, joined by
empty separators so the tree is one tree.

The model's memory is the cells of these cliques, so :func:`too_large` tells which candidate
cliques would push the largest one over a cap before anything is measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from synth._domains import SynthError
from synth.graphical.factor import cells

__all__ = [
    "JunctionTree",
    "ModelSizeError",
    "build_junction_tree",
    "largest_clique_cells",
    "too_large",
    "triangulated_cliques",
]


class ModelSizeError(SynthError):
    """The cliques' junction tree has a clique table larger than the cap."""


@dataclass(frozen=True)
class JunctionTree:
    """Cliques (sorted attribute tuples), the tree's parent of each (root 0: parent -1) and
    a root-first order; ``separators[i]`` is what clique i shares with its parent.

    Attributes:
        cliques: the maximal cliques of the triangulated graph.
        parent: the parent clique of each clique (-1 for the root, clique 0).
        order: the cliques root first, every parent before its children.
        separators: the attributes each clique shares with its parent (sorted).
    """

    cliques: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    order: tuple[int, ...]
    separators: tuple[tuple[int, ...], ...] = field(init=False)
    children: tuple[tuple[int, ...], ...] = field(init=False)

    def __post_init__(self) -> None:
        k = len(self.cliques)
        if not (len(self.parent) == len(self.order) == k) or sorted(self.order) != list(range(k)):
            raise SynthError(
                f"junction tree: parent ({len(self.parent)}) and order ({len(self.order)}) "
                f"must cover the {k} cliques once"
            )
        seps = []
        for i, p in enumerate(self.parent):
            shared = set(self.cliques[i]) & set(self.cliques[p]) if p >= 0 else set()
            seps.append(tuple(sorted(shared)))
        object.__setattr__(self, "separators", tuple(seps))
        kids: list[list[int]] = [[] for _ in range(k)]
        for i in self.order:
            if self.parent[i] >= 0:
                kids[self.parent[i]].append(i)
        object.__setattr__(self, "children", tuple(tuple(c) for c in kids))

    def containing(self, attrs: Iterable[int]) -> int | None:
        """The smallest clique holding every attribute of ``attrs``, or None."""
        wanted = set(attrs)
        best = [i for i, c in enumerate(self.cliques) if wanted <= set(c)]
        return min(best, key=lambda i: len(self.cliques[i])) if best else None


def _eliminate(adjacency: dict[int, set[int]], sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Maximal cliques of a triangulation of the graph by greedy min-fill elimination.

    ``adjacency`` maps each attribute to its neighbours; it is consumed.
    """
    found: list[frozenset[int]] = []
    while adjacency:
        best: tuple[int, int, int] | None = None
        for v, nbrs in adjacency.items():
            fill = 0
            listed = list(nbrs)
            for i, a in enumerate(listed):
                fill += len(set(listed[i + 1 :]) - adjacency[a])
            key = (fill, cells([v, *nbrs], sizes), v)
            if best is None or key < best:
                best = key
        assert best is not None
        v = best[2]
        nbrs = adjacency.pop(v)
        clique = frozenset([v, *nbrs])
        if not any(clique <= other for other in found):
            found.append(clique)
        for a in nbrs:
            adjacency[a].discard(v)
            adjacency[a] |= nbrs - {a}
    maximal = [c for c in found if not any(c < other for other in found)]
    return [tuple(sorted(c)) for c in maximal]


def _adjacency(cliques: Iterable[Sequence[int]], d: int) -> dict[int, set[int]]:
    """The graph over ``range(d)`` with an edge between attributes of one clique."""
    adjacency: dict[int, set[int]] = {a: set() for a in range(d)}
    for clique in cliques:
        members = sorted(set(int(a) for a in clique))
        if any(not 0 <= a < d for a in members):
            raise SynthError(f"clique ({tuple(clique)}) must hold attributes in [0, {d})")
        for a in members:
            adjacency[a].update(b for b in members if b != a)
    return adjacency


def triangulated_cliques(
    cliques: Iterable[Sequence[int]], sizes: Sequence[int]
) -> list[tuple[int, ...]]:
    """The maximal cliques of the junction tree these cliques give (no tree built)."""
    return _eliminate(_adjacency(cliques, len(sizes)), sizes)


def build_junction_tree(
    cliques: Iterable[Sequence[int]], sizes: Sequence[int], *, max_cells: int | None = None
) -> JunctionTree:
    """The junction tree over every attribute of ``sizes`` covering each given clique.

    Raises:
        ModelSizeError: a clique of the tree has more than ``max_cells`` cells.
        SynthError: a clique names an attribute outside ``range(len(sizes))``.
    """
    maximal = sorted(triangulated_cliques(cliques, sizes), key=lambda c: (-cells(c, sizes), c))
    if max_cells is not None:
        big = max(cells(c, sizes) for c in maximal)
        if big > max_cells:
            raise ModelSizeError(
                f"max_cells ({max_cells}) is smaller than the largest clique of the model "
                f"({big} cells); measure smaller marginals or raise the cap"
            )
    tree = nx.Graph()
    tree.add_nodes_from(range(len(maximal)))
    for i in range(len(maximal)):
        for j in range(i + 1, len(maximal)):
            shared = len(set(maximal[i]) & set(maximal[j]))
            tree.add_edge(i, j, weight=shared)
    spanning = nx.maximum_spanning_tree(tree) if len(maximal) > 1 else tree
    parent = [-1] * len(maximal)
    order = [0]
    for a, b in nx.bfs_edges(spanning, 0):
        parent[b] = a
        order.append(b)
    return JunctionTree(tuple(maximal), tuple(parent), tuple(order))


def largest_clique_cells(cliques: Iterable[Sequence[int]], sizes: Sequence[int]) -> int:
    """The cells of the largest clique of the junction tree these cliques would give."""
    return max(cells(c, sizes) for c in triangulated_cliques(cliques, sizes))


def too_large(
    cliques: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[int]],
    sizes: Sequence[int],
    max_cells: int,
) -> list[tuple[int, ...]]:
    """The candidates that, added to ``cliques``, give a clique over ``max_cells`` cells.

    A candidate inside a clique already present changes nothing and is never listed.
    """
    tree = build_junction_tree(cliques, sizes)
    out = []
    for candidate in candidates:
        key = tuple(sorted(candidate))
        if tree.containing(key) is not None:
            continue
        if largest_clique_cells([*cliques, key], sizes) > max_cells:
            out.append(key)
    return out
