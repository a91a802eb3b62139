"""The subspace split of the whole-tree BLUE: which attribute subsets are solved together.

Every query is a marginal, the Kronecker product over attributes of an identity (kept) or a row
of ones (summed). In the "ANOVA" basis (per attribute: the mean direction and its orthogonal
complement) the cell space splits into orthogonal subspaces, one per attribute subset S (the
attributes whose complement part is taken). ``Q'Q`` of a marginal keeping K is ``prod_{a not in
K} n_a`` times the identity on every subspace with S a subset of K, and zero on the others;
consistency acts cell by cell. So the whole-tree problem splits into independent tree problems,
one per subspace, in which each node has one scalar precision ``pi_v(S) = sum_q [S subset K_q]
prod_{a not in K_q} n_a / Var_q(v)``. Subspaces with the same precisions everywhere are solved
together (a group, ``BluePlan``). A detailed-only strategy is one group; detailed plus total is
two (the second, the node totals' direction, is solved on one value per node).

A query through a recode (a grouping of an attribute's values) is not a scalar on these
subspaces when its groups have unequal sizes: a plan with one holds the blocks of
``topdown.blue.blocks`` instead of groups (``BluePlan.blocks``).

Kept apart from the recursions (``topdown.blue.recursions``) because the split depends only on
the domain and the queries (public), never on values: the whole tree and every piece of a
streamed BLUE (``topdown.blue.streamed``) share one plan.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from constraints.domain import Domain
from topdown.blue.blocks import Block, blocks_of
from topdown.errors import StrategyError
from topdown.strategy import Query

__all__ = ["BluePlan", "kept_axes", "lift", "coefficient"]


def kept_axes(query: Query, domain: Domain) -> frozenset[int]:
    """The axes a plain marginal keeps. A recoded query has no such set: a plan with one goes
    through the blocks of ``topdown.blue.blocks`` (``BluePlan.blocks``), never here."""
    recoded = query.recoded(domain)
    if recoded:
        raise StrategyError(
            f"query {query.name!r} measures {sorted(recoded)} through recodes: the plain "
            "subspace groups cannot hold it (a plan with recoded queries uses blocks)"
        )
    kept = set(query.kept(domain))
    return frozenset(i for i, a in enumerate(domain.names) if a in kept)


def _subsets(domain: Domain) -> list[frozenset[int]]:
    """Attribute subsets with a non-empty subspace (an attribute of one value has none)."""
    axes = [i for i, n in enumerate(domain.shape) if n > 1]
    return [frozenset(c) for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]


def lift(query: Query, domain: Domain) -> float:
    """``Q'Q`` of a marginal on the subspaces it sees: the product of the summed sizes."""
    kept = kept_axes(query, domain)
    return float(np.prod([n for i, n in enumerate(domain.shape) if i not in kept]))


def coefficient(subset: frozenset[int], kept: frozenset[int], shape: Sequence[int]) -> float:
    """diag(Q P_S Q') of a marginal keeping ``kept``: the share of subspace S in one answer."""
    if not subset <= kept:
        return 0.0
    c = 1.0
    for i, n in enumerate(shape):
        if i in subset:
            c *= 1.0 - 1.0 / n
        elif i in kept:
            c *= 1.0 / n
        else:
            c *= n
    return c


def _width(axes: frozenset[int], shape: Sequence[int]) -> int:
    return int(np.prod([n for i, n in enumerate(shape) if i in axes]))


@dataclass(frozen=True)
class BluePlan:
    """The subspace groups of a whole tree's BLUE: which attribute subsets are solved together,
    from the queries every level measures (public: the strategy, and the levels where an
    invariant publishes node totals). The pieces of a streamed BLUE share the whole tree's plan,
    so each piece runs the same recursions the whole tree would.

    Attributes:
        signatures: per group, the (level, query index) pairs whose queries see its subsets.
        members: per group, its attribute subsets (the group on the most cells first).
        shape: the domain's shape.
        blocks: when a query is recoded, the blocks of ``topdown.blue.blocks`` instead of
            the groups (``signatures`` and ``members`` are then empty).
    """

    signatures: tuple[tuple[tuple[int, int], ...], ...]
    members: tuple[tuple[frozenset[int], ...], ...]
    shape: tuple[int, ...]
    blocks: tuple[Block, ...] = ()

    @classmethod
    def of(
        cls,
        domain: Domain,
        queries: Sequence[Sequence[Query]],
        exact_totals: Mapping[int, Mapping[int, float]] | None = None,
    ) -> BluePlan:
        """The plan of a tree whose level ``l`` measures ``queries[l]`` (in this order), plus a
        total at the levels where ``exact_totals`` names a node (as ``blue`` adds them)."""
        per_level = [
            list(qs) + ([Query(())] if (exact_totals or {}).get(level) else [])
            for level, qs in enumerate(queries)
        ]
        if any(q.recoded(domain) for qs in per_level for q in qs):
            every = [q for qs in per_level for q in qs]
            return cls((), (), tuple(int(n) for n in domain.shape), blocks_of(domain, every))
        subsets = _subsets(domain)
        signature: dict[frozenset[int], list[tuple[int, int]]] = {s: [] for s in subsets}
        for level, qs in enumerate(per_level):
            for qi, q in enumerate(qs):
                kept = kept_axes(q, domain)
                for s in subsets:
                    if s <= kept:
                        signature[s].append((level, qi))
        by_sig: dict[tuple[tuple[int, int], ...], list[frozenset[int]]] = {}
        for s in subsets:
            by_sig.setdefault(tuple(signature[s]), []).append(s)
        # the group on the most cells first: solved on every cell, as the identity minus the
        # other groups' projectors; the others on their own axes' cells
        groups = sorted(
            by_sig.items(),
            key=lambda kv: (-_width(frozenset().union(*kv[1]), domain.shape), -len(kv[1])),
        )
        return cls(
            tuple(sig for sig, _ in groups),
            tuple(tuple(m) for _, m in groups),
            tuple(int(n) for n in domain.shape),
        )

    def __len__(self) -> int:
        return len(self.blocks) if self.blocks else len(self.members)

    def reduced(self, g: int) -> tuple[int, ...]:
        """The cell shape group ``g`` is solved on: every cell for the first group, its own
        axes' cells for the others."""
        if g == 0:
            return self.shape
        axes = frozenset().union(*self.members[g])
        return tuple(n if i in axes else 1 for i, n in enumerate(self.shape))
