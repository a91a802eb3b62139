"""Measurement: the one step that reads confidential data.

Every query of every node is answered on the node's true histogram and noised with an exact
discrete mechanism. Each node's noise comes from its own random stream, derived from the
release key and the node's (level, label), so the noisy answers do not depend on the order of
work or on how the levels are split between workers. Declared invariants (contextual
constraints) are also evaluated here, published exactly, and recorded in the ledger as outside
the DP guarantee.

The output, ``Measurements``, is what the Census calls the noisy measurement file: the query,
its noisy answers and the noise variance, per level. Everything after this step is
post-processing and costs no privacy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from constraints.contextual_constraints import SumEqualRealTotal
from constraints.domain import Domain
from mechanisms.accounting import ZCDP, PureDP
from mechanisms.discrete import DiscreteGaussianMechanism, DiscreteLaplaceMechanism, sensitivity
from mechanisms.ledger import Ledger
from mechanisms.rng import child_rng
from topdown.strategy import Query, Strategy
from topdown.tree import ConfidentialHistograms, Tree

__all__ = ["QueryMeasurement", "Measurements", "measure"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryMeasurement:
    """Noisy answers of one query for every node of one level.

    Attributes:
        level: level number (0 = root).
        query: the query measured.
        share: its share of the level's budget.
        mechanism: mechanism name.
        budget: the privacy cost of this query on this level (nodes compose in parallel).
        variance: variance of the noise added to each answer.
        noisy: int64 array (nodes of the level, answers of the query).
    """

    level: int
    query: Query
    share: Fraction
    mechanism: str
    budget: PureDP | ZCDP
    variance: float
    noisy: np.ndarray


@dataclass(frozen=True)
class Measurements:
    """All noisy measurements of a release, level by level (root first)."""

    levels: tuple[tuple[QueryMeasurement, ...], ...]

    def at(self, level: int) -> tuple[QueryMeasurement, ...]:
        return self.levels[level]

    def get(self, level: int, query: str) -> QueryMeasurement | None:
        for m in self.levels[level]:
            if m.query.name == query:
                return m
        return None

    def to_frame(self, tree: Tree) -> pd.DataFrame:
        """Long format: level, node, query, answer index, noisy answer, variance."""
        frames = []
        for lv in self.levels:
            for m in lv:
                nodes, answers = m.noisy.shape
                labels = tree.levels[m.level].labels.astype(str)
                frames.append(
                    pd.DataFrame(
                        {
                            "level": m.level,
                            "node": np.repeat(labels, answers),
                            "query": m.query.name,
                            "answer": np.tile(np.arange(answers), nodes),
                            "noisy": m.noisy.ravel(),
                            "variance": m.variance,
                        }
                    )
                )
        return pd.concat(frames, ignore_index=True)


def make_level_mechanisms(strategy: Strategy, level: int) -> list[tuple[Query, Fraction, Any]]:
    """The mechanism of each query of a level, calibrated to its share of the budget."""
    l1, l2_squared = sensitivity(strategy.neighbouring)
    out = []
    ls = strategy.levels[level]
    for query, share in ls.queries:
        amount = ls.budget * share
        if strategy.mechanism == "discrete_laplace":
            mech = DiscreteLaplaceMechanism(amount, l1_sensitivity=l1)
        else:
            mech = DiscreteGaussianMechanism(amount, l2_sensitivity_squared=l2_squared)
        out.append((query, share, mech))
    return out


def measure(
    tree: Tree,
    truth: ConfidentialHistograms,
    domain: Domain,
    strategy: Strategy,
    *,
    release_key: bytes,
    ledger: Ledger,
    constraints: ConstraintSet | None = None,
    progress: Callable[[Iterable, int, str], Iterable] | None = None,
) -> tuple[Measurements, dict[int, dict[int, tuple]]]:
    """Answer and noise every query of every node; evaluate declared invariants.

    Args:
        tree: the public structure.
        truth: the confidential histograms (read here and nowhere else in a release).
        domain: the query domain.
        strategy: queries, shares and budgets per level.
        release_key: key of the release's random streams (``mechanisms.rng``).
        ledger: receives one entry per (level, query) and one per invariant.
        constraints: attached constraints; contextual ones are evaluated on the truth.
        progress: wraps an iterable to show progress (nodes done / total).

    Returns:
        The measurements, and the bound invariants: level -> node index -> constraints with
        their published values.
    """
    wrap = progress or (lambda it, total, desc: it)
    levels = []
    for level in range(tree.n_levels):
        mechanisms = make_level_mechanisms(strategy, level)
        counts = truth.counts[level]
        labels = tree.levels[level].labels
        answers = [q.answer(counts, domain) for q, _, _ in mechanisms]
        noisy = [np.empty_like(a, dtype=np.int64) for a in answers]
        for i in wrap(range(len(labels)), len(labels), f"measure level {level}"):
            rng = child_rng(release_key, "measure", level, str(labels[i]))
            for j, (_, _, mech) in enumerate(mechanisms):
                noisy[j][i] = mech.release(answers[j][i], rng=rng)
        row = []
        l1, l2_squared = sensitivity(strategy.neighbouring)
        for (query, share, mech), values in zip(mechanisms, noisy, strict=True):
            ledger.record(
                query.name,
                level,
                mech.name,
                mech.budget,
                sensitivity=l1 if strategy.mechanism == "discrete_laplace" else l2_squared,
                nodes=len(labels),
                note=f"{strategy.neighbouring} neighbours; share {share} of the level's budget; "
                + (
                    "L1 sensitivity"
                    if strategy.mechanism == "discrete_laplace"
                    else "L2 sensitivity squared"
                ),
            )
            row.append(
                QueryMeasurement(
                    level, query, share, mech.name, mech.budget, float(mech.variance), values
                )
            )
        levels.append(tuple(row))
        log.info(
            "measured level %d: %d node(s), queries %s",
            level,
            len(labels),
            [q.name for q, _, _ in mechanisms],
        )
    invariants = _evaluate_invariants(tree, truth, domain, constraints, ledger)
    return Measurements(tuple(levels)), invariants


def _evaluate_invariants(
    tree: Tree,
    truth: ConfidentialHistograms,
    domain: Domain,
    constraints: ConstraintSet | None,
    ledger: Ledger,
) -> dict[int, dict[int, tuple]]:
    """Bind every contextual constraint to its node's true value: published exactly.

    A ``SumEqualRealTotal`` attached to every node of level k also fixes the same sum on every
    level above (a parent's value is the sum of its children's), so it is bound there too and
    recorded as implied: without that, a noisy parent could contradict its children's exact
    values and no consistent release would exist.
    """
    bound: dict[int, dict[int, tuple]] = {}
    if constraints is None:
        return bound
    implied: dict[int, list] = {}
    for level in range(tree.n_levels - 1, -1, -1):
        general = [c for c in constraints.for_level(level) if c.is_invariant]
        for c in general:
            if isinstance(c, SumEqualRealTotal):
                for above in range(level):
                    implied.setdefault(above, []).append((c, level))
    for level in range(tree.n_levels):
        labels = tree.levels[level].labels
        records_of = _records_by_node(truth, level)
        general = [c for c in constraints.for_level(level) if c.is_invariant]
        extra = [c for c, _ in implied.get(level, []) if c not in general]
        extra = list(dict.fromkeys(extra))
        specific = {
            str(label): [c for c in cs if c.is_invariant]
            for label, cs in constraints.node_specific(level).items()
        }
        if not general and not extra and not any(specific.values()):
            continue
        per_node: dict[int, tuple] = {}
        for i, label in enumerate(labels):
            applicable = general + extra + specific.get(str(label), [])
            if not applicable:
                continue
            records = records_of(i)
            per_node[i] = tuple(
                c.bind(c.evaluate(domain, truth.counts[level][i], records)) for c in applicable
            )
        bound[level] = per_node
        names = sorted({c.name for c in general} | {c.name for cs in specific.values() for c in cs})
        for name in names:
            ledger.record_invariant(name, level, description="published exactly, outside DP")
        for c in extra:
            source = min(lv for cc, lv in implied[level] if cc == c)
            ledger.record_invariant(
                c.name,
                level,
                description=f"implied by the same invariant on level {source} (sum of its values)",
            )
    return bound


def _records_by_node(
    truth: ConfidentialHistograms, level: int
) -> Callable[[int], pd.DataFrame | None]:
    """A lookup node -> its records, grouped once per level (not a scan per node)."""
    if truth.records is None or not truth.node_of_record:
        return lambda node: None
    codes = truth.node_of_record[level]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(codes.max() + 2))
    return lambda node: truth.records.iloc[order[bounds[node] : bounds[node + 1]]]
