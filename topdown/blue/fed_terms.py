"""A level's subtree covariances folded, block by block, into what the passes read of them.

Under ``estimator="blue"`` the passes' inputs (``topdown.blue.estimate.blue_inputs``) read a
level's subtree covariances for two things: the metric weights (``topdown.blue.metric``) and,
per fed query, its mean subtree variance (an answer of variance 0 is exact, an invariant's).
Both are sums over the blocks of the recoded split. A streamed release's stream level has one
node type per node (every subtree has its own shape), so with recodes its subtree covariances
are a ``k x k`` matrix per node and block: 86 MB a DHC tract. ``FedTerms`` takes each block's
share as the block is solved (``topdown.blue.block_solve.solve_blocks``'s ``fold``), and the
solve then drops that block's subtree covariances: the parent keeps the stream level's final
covariances only, which sweep 2 starts from, instead of both.

The sums are taken in block order, as ``block_metric_weights`` and ``Blue.variance`` take
them, so the passes' inputs are the same bit for bit (``tests/test_blue_fed_terms.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from constraints.domain import Domain
from topdown.blue.blocks import Block
from topdown.blue.metric import MetricNormals
from topdown.blue.shared_matrices import Covariance
from topdown.blue.variance_terms import mean_variance_term
from topdown.strategy import Query

__all__ = ["FedTerms", "fed_names"]


def fed_names(measured: Iterable[Query], marginals: bool) -> list[str]:
    """The queries a level's passes are fed under ``"blue"``, by name: the detailed cells, the
    node totals and (``marginals``) every other query the level measured (``measured``), in
    its order."""
    names = ["detailed", "total"]
    return names + [q.name for q in measured if marginals and q.name not in ("detailed", "total")]


class FedTerms:
    """One level's metric normal equations and fed queries' mean subtree variances, summed
    over the blocks as they are added (``add``).

    Attributes:
        names: the fed queries, by name (``fed_names``), in the order of the weights' columns.
        blocks: how many blocks have been added.
    """

    def __init__(self, domain: Domain, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._normals = MetricNormals(domain, [Query.parse(name) for name in self.names])
        self._variance: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(self.names)
        self.blocks = 0

    def add(self, block: Block, subtree: Covariance) -> None:
        """The next block's share, from its subtree covariance per node ((nodes,) for ``k =
        1``, else (nodes, k, k), an array or shared matrices); the covariances are not kept."""
        self._normals.add(block, subtree)
        for i, factors in enumerate(self._normals.factors):
            term, size = mean_variance_term(block, subtree, factors)
            held = self._variance[i]
            self._variance[i] = (term, size) if held is None else (held[0] + term, held[1] + size)
        self.blocks += 1

    def weights(self) -> np.ndarray:
        """Per node and fed query, the metric weights (nodes, queries)."""
        return self._normals.weights()

    def mean_variance(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``i``-th fed query's mean subtree variance per node, and its size
        (``topdown.blue.variance_terms.mean_variance``)."""
        held = self._variance[i]
        if held is None:
            raise ValueError("no block has been added")
        return held
