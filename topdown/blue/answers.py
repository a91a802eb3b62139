"""The answers of several queries read from the same cells, each from the smallest it can.

``blue_inputs`` (``topdown.blue.estimate``) feeds the passes the BLUE's answers to every query a
level measured: for the PL94 preset, 11 queries of which 10 are sums over the same 2,016 cells
per node. Read from the cells each time, that is 10 passes over a level's largest array;
read from the answers already computed (``cenrace`` from ``votingage x hispanic x cenrace``,
``hhinst`` from ``hhgq``), only the first marginal reads the cells.

Kept apart from ``topdown.blue.estimate`` because it knows nothing of the BLUE: it is
``Query.answer`` for a set of queries at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from constraints.domain import Domain
from topdown.query import Factor
from topdown.strategy import Query

__all__ = ["shared_answers"]


def shared_answers(cells: np.ndarray, queries: Sequence[Query], domain: Domain) -> list[np.ndarray]:
    """Each query's answers (nodes, answers) from the cells (nodes, cells), each read from
    the smallest answers already computed that hold it (``va x hisp x cenrace`` for
    ``cenrace``, ``hhgq`` for ``hhinst``), not from the cells again: the PL94 preset feeds 11
    queries a level, 10 of them sums over the same 2,016 cells. The detailed query's answers
    are the cells themselves (no copy), and the node totals are summed from the cells (one
    contiguous sum), so neither depends on which marginals are fed (``blue_inputs(...,
    marginals=False)`` feeds them unchanged). Sums in another order than ``Query.answer``'s:
    equal to round-off."""
    nodes = cells.shape[0]
    whole = Query(None).factors(domain)
    done: list[tuple[Sequence[Factor], np.ndarray]] = [
        (whole, cells.reshape((nodes,) + tuple(int(n) for n in domain.shape)))
    ]
    out: list[np.ndarray] = [np.empty(0)] * len(queries)
    for j in sorted(range(len(queries)), key=lambda j: -queries[j].n_answers(domain)):
        factors = queries[j].factors(domain)
        readable = [
            (held, values)
            for held, values in done
            if all(h.identity or h == f for h, f in zip(held, factors, strict=True))
        ]
        if not any(f.kept for f in factors):  # the total: from the cells, whatever else is fed
            readable = readable[:1]
        held, values = min(readable, key=lambda hv: hv[1].size)
        changed = [i for i, (h, f) in enumerate(zip(held, factors, strict=True)) if h != f]
        # the summed axes in one call: numpy sums several axes at once about 4 times faster
        # than one after another (a middle axis alone is the slow case)
        summed = tuple(1 + i for i in changed if not factors[i].kept)
        if summed:
            values = values.sum(axis=summed, keepdims=True)
        for i in changed:
            if factors[i].kept:  # a recode of an axis held whole
                values = factors[i].reduce(values, 1 + i)
        done.append((factors, values))
        out[j] = values.reshape(nodes, -1)
    return out
