"""Bayesian networks shared by PrivBayes and DP2-Pub: scores, greedy structure, Markov
blankets and sampling in topological order.

A network is a list of ``(node, parents)`` pairs in the order the greedy search added them
(each node's parents come before it), and as a :class:`networkx.DiGraph` (edges parent ->
child) for graph questions. Nodes are attribute positions.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

import networkx as nx
import numpy as np

__all__ = [
    "Network",
    "mutual_information",
    "r_score",
    "greedy_network",
    "to_graph",
    "markov_blanket",
    "sample_network",
]

logger = logging.getLogger(__name__)

Network = list[tuple[int, tuple[int, ...]]]
"""(node, parents) in the order of the greedy search."""


def mutual_information(joint: np.ndarray) -> float:
    """I(X; Pi) in nats from a table with X on axis 0 and the parents on the other axes.

    The table may hold counts or probabilities (it is normalised); empty cells add nothing.
    """
    table = np.asarray(joint, dtype=float).reshape(joint.shape[0], -1)
    total = table.sum()
    if total <= 0:
        return 0.0
    p = table / total
    px = p.sum(axis=1, keepdims=True)
    pp = p.sum(axis=0, keepdims=True)
    rows, cols = np.nonzero(p > 0)  # then px and pp are > 0 there too
    cell = p[rows, cols]
    # logs taken apart: px * pp of two tiny marginals can underflow to 0 where p does not
    return float(np.sum(cell * (np.log(cell) - np.log(px[rows, 0]) - np.log(pp[0, cols]))))


def r_score(joint: np.ndarray) -> float:
    """R(X, Pi) = 1/2 ||P(X, Pi) - P(X) P(Pi)||_1 (Zhang et al., TODS 2017, Section 4.3)."""
    table = np.asarray(joint, dtype=float).reshape(joint.shape[0], -1)
    total = table.sum()
    if total <= 0:
        return 0.0
    p = table / total
    return 0.5 * float(
        np.abs(p - p.sum(axis=1, keepdims=True) @ p.sum(axis=0, keepdims=True)).sum()
    )


def greedy_network(
    sizes: Sequence[int],
    k: int,
    score: Callable[[int, tuple[int, ...]], float],
    choose: Callable[[list[float]], int],
    *,
    first: int = 0,
    max_cells: int = 100_000,
) -> Network:
    """Add nodes one at a time, each with the best-scoring parent set among those added.

    At each step the candidates are every (X, Pi) with X not yet added and Pi a set of
    ``min(k, added)`` added nodes (smaller sets when every such table would exceed
    ``max_cells`` cells, a bound on public domain sizes only; no parents at all is always a
    candidate). ``choose`` picks one index from
    the candidates' scores: the exponential mechanism in PrivBayes, the argmax in DP2-Pub.
    """
    d = len(sizes)
    network: Network = [(first, ())]
    added = [first]
    while len(added) < d:
        remaining = [x for x in range(d) if x not in added]
        candidates: list[tuple[int, tuple[int, ...]]] = []
        for size in range(min(k, len(added)), -1, -1):
            for x in remaining:
                for parents in itertools.combinations(added, size):
                    cells = sizes[x] * int(np.prod([sizes[p] for p in parents]))
                    if cells <= max_cells or not parents:  # X alone is always allowed
                        candidates.append((x, parents))
            if candidates:
                break
        scores = [score(x, parents) for x, parents in candidates]
        x, parents = candidates[choose(scores)]
        network.append((x, parents))
        added.append(x)
    return network


def to_graph(network: Network) -> nx.DiGraph:
    """The network as a directed graph, edges from each parent to its child."""
    graph = nx.DiGraph()
    for node, parents in network:
        graph.add_node(node)
        graph.add_edges_from((p, node) for p in parents)
    return graph


def markov_blanket(graph: nx.DiGraph, node: int) -> set[int]:
    """Parents, children, and the children's other parents of ``node``."""
    parents = set(graph.predecessors(node))
    children = set(graph.successors(node))
    spouses = {p for c in children for p in graph.predecessors(c)}
    return (parents | children | spouses) - {node}


def sample_network(
    network: Network,
    conditionals: dict[int, np.ndarray],
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Codes of ``n`` records drawn node by node in topological order.

    ``conditionals[x]`` has X on axis 0 and the parents (in the network's order) on the
    others, each column a distribution over X (a column of zeros falls back to uniform).
    """
    graph = to_graph(network)
    parents_of = dict(network)
    d = len(network)
    codes = np.zeros((n, d), dtype=np.int64)
    for node in nx.topological_sort(graph):
        cond = np.asarray(conditionals[node], dtype=float)
        size = cond.shape[0]
        flat = cond.reshape(size, -1).T  # one row per parent configuration
        sums = flat.sum(axis=1, keepdims=True)
        flat = np.where(sums > 0, flat / np.where(sums > 0, sums, 1.0), 1.0 / size)
        parents = parents_of[node]
        if parents:
            config = np.ravel_multi_index(tuple(codes[:, p] for p in parents), cond.shape[1:])
        else:
            config = np.zeros(n, dtype=np.int64)
        cdf = np.cumsum(flat, axis=1)
        u = rng.random(n) * cdf[config, -1]
        # the number of cdf entries <= u in the record's own row, by one binary search in the
        # rows laid end to end (row c shifted by 2c: each row lies in [0, ~1], so the rows stay
        # apart and in order): O(n log cells) time and no (n x size) temporary, which for 60,000
        # records of a 20,000-value column was 8.8 GiB
        shifted = (cdf + 2.0 * np.arange(cdf.shape[0])[:, None]).ravel()
        found = np.searchsorted(shifted, u + 2.0 * config, side="right") - config * size
        codes[:, node] = np.minimum(found, size - 1)
    return codes
