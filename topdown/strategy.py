"""Strategy: which queries each level measures, and how the privacy budget is divided.

A query is a marginal over some query attributes (``detailed`` = all of them, ``total`` = none).
As a matrix it is the Kronecker product of an identity (kept attribute) or a row of ones
(summed attribute) per axis; it is answered by reshaping the histogram and summing axes, and the
matrix is only built sparse, for the estimator.

Budgets are Fractions: per level, root first, each level's budget split between its queries by
Fraction shares that sum to exactly 1. The mechanism decides the budget's kind: the discrete
Laplace spends pure-DP epsilon, the discrete Gaussian spends zCDP rho. A float budget is read as
the decimal it prints as (``0.3`` means 3/10), so the ledger shows what the user wrote; pass a
Fraction for any other value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from constraints.domain import Domain
from mechanisms.errors import BudgetError
from mechanisms.exact import as_fraction
from topdown.errors import StrategyError

__all__ = ["Query", "LevelStrategy", "Strategy", "MECHANISMS", "NEIGHBOURING", "parse_budget"]

MECHANISMS = ("discrete_laplace", "discrete_gaussian")
NEIGHBOURING = ("add_remove", "replace_one")


@dataclass(frozen=True)
class Query:
    """A marginal query over named attributes; ``None`` means the detailed histogram.

    Build with ``Query.parse``: ``"detailed"``, ``"total"``, ``"SEX"``, ``"SEX x AGE"`` or a
    sequence of attribute names.
    """

    attributes: tuple[str, ...] | None

    @classmethod
    def parse(cls, spec: Query | str | Sequence[str]) -> Query:
        if isinstance(spec, Query):
            return spec
        if isinstance(spec, str):
            text = spec.strip()
            if text == "detailed":
                return cls(None)
            if text == "total":
                return cls(())
            parts = [p.strip() for p in text.replace("*", " x ").split(" x ")]
            return cls(tuple(p for p in parts if p))
        if isinstance(spec, Iterable):
            return cls(tuple(str(a) for a in spec))
        raise StrategyError(
            f"query ({spec!r}) must be 'detailed', 'total', an attribute name, 'A x B' or a list "
            "of attribute names"
        )

    @property
    def name(self) -> str:
        if self.attributes is None:
            return "detailed"
        if not self.attributes:
            return "total"
        return " x ".join(self.attributes)

    def kept(self, domain: Domain) -> tuple[str, ...]:
        """The attributes this query keeps, in the domain's axis order (validated)."""
        if self.attributes is None:
            return domain.names
        unknown = [a for a in self.attributes if a not in domain]
        if unknown:
            raise StrategyError(
                f"query {self.name!r} names attribute(s) {unknown} that are not query "
                f"attributes; they are {list(domain.names)}"
            )
        return tuple(a for a in domain.names if a in self.attributes)

    def n_answers(self, domain: Domain) -> int:
        """How many answers the query has (the product of the kept attributes' sizes)."""
        keep = self.kept(domain)
        return int(np.prod([len(domain.values(a)) for a in keep], dtype=np.int64))

    def answer(self, histograms: np.ndarray, domain: Domain) -> np.ndarray:
        """Answers for a stack of histograms: shape (nodes, cells) -> (nodes, answers)."""
        keep = set(self.kept(domain))
        h = np.asarray(histograms)
        stacked = h.reshape((h.shape[0],) + domain.shape)
        axes = tuple(1 + i for i, a in enumerate(domain.names) if a not in keep)
        summed = stacked.sum(axis=axes) if axes else stacked
        return summed.reshape(h.shape[0], -1)

    def matrix(self, domain: Domain) -> sp.csr_matrix:
        """The query as a sparse (answers x cells) 0/1 matrix: a Kronecker product."""
        keep = set(self.kept(domain))
        mat = sp.identity(1, format="csr", dtype=np.float64)
        for a, n in zip(domain.names, domain.shape, strict=True):
            factor = sp.identity(n, format="csr") if a in keep else sp.csr_matrix(np.ones((1, n)))
            mat = sp.kron(mat, factor, format="csr")
        return mat


@dataclass(frozen=True)
class LevelStrategy:
    """The queries of one level with their Fraction shares of the level's budget.

    Attributes:
        budget: the level's budget (epsilon or rho, by the strategy's mechanism).
        queries: (query, share) pairs; shares are > 0 and sum to exactly 1.
        first_pass: names of the queries the first estimation pass fits (multipass); empty
            means a single pass over all queries.
    """

    budget: Fraction
    queries: tuple[tuple[Query, Fraction], ...] = ((Query(None), Fraction(1)),)
    first_pass: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        queries = tuple((Query.parse(q), parse_budget(s, "share")) for q, s in self.queries)
        if not queries:
            raise StrategyError("queries (empty) must list at least one query per level")
        names = [q.name for q, _ in queries]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise StrategyError(f"queries repeat ({dup}): list each query once per level")
        total = sum((s for _, s in queries), Fraction(0))
        if total != 1:
            raise StrategyError(
                "query shares "
                f"({', '.join(f'{n}: {s}' for n, (_, s) in zip(names, queries, strict=True))}) "
                f"sum to {total}, and must sum to exactly 1"
            )
        unknown = [f for f in self.first_pass if f not in names]
        if unknown:
            raise StrategyError(
                f"first_pass names {unknown} that this level does not measure; it measures {names}"
            )
        object.__setattr__(self, "queries", queries)
        object.__setattr__(self, "first_pass", tuple(self.first_pass))


@dataclass(frozen=True)
class Strategy:
    """Per-level strategies (root first), the mechanism and the neighbouring relation."""

    levels: tuple[LevelStrategy, ...]
    mechanism: str = "discrete_gaussian"
    neighbouring: str = "add_remove"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise StrategyError(
                f"mechanism ({self.mechanism!r}) is unknown; known mechanisms are "
                f"{list(MECHANISMS)}"
            )
        if self.neighbouring not in NEIGHBOURING:
            raise StrategyError(
                f"neighbouring ({self.neighbouring!r}) is unknown; it must be one of "
                f"{list(NEIGHBOURING)}"
            )
        if not self.levels:
            raise StrategyError("levels (empty) must give a budget for at least the root")
        object.__setattr__(self, "levels", tuple(self.levels))

    @property
    def budget_name(self) -> str:
        return "epsilon" if self.mechanism == "discrete_laplace" else "rho"

    @classmethod
    def from_budgets(
        cls,
        budgets: Sequence[Any],
        *,
        mechanism: str = "discrete_gaussian",
        neighbouring: str = "add_remove",
        queries: Sequence[tuple[Any, Any]] | None = None,
        first_pass: Sequence[str] = (),
    ) -> Strategy:
        """Seed style: one budget per level, root first, the same queries on every level
        (default: all of each level's budget on ``detailed``)."""
        if isinstance(budgets, (str, bytes)) or not isinstance(budgets, Sequence):
            raise BudgetError(f"budgets ({budgets!r}) must be a list, one budget per level")
        qs = tuple(queries) if queries else ((Query(None), Fraction(1)),)
        levels = tuple(
            LevelStrategy(parse_budget(b, f"budgets[{i}]"), qs, tuple(first_pass))
            for i, b in enumerate(budgets)
        )
        return cls(levels, mechanism, neighbouring)

    def check(self, domain: Domain, n_levels: int) -> None:
        """Validate against a schema: one level strategy per tree level, known attributes."""
        if len(self.levels) != n_levels:
            raise StrategyError(
                f"the strategy gives {len(self.levels)} level budget(s) but the tree has "
                f"{n_levels} levels (root + {n_levels - 1} hierarchy column(s)): give one "
                "budget per level, root first"
            )
        for ls in self.levels:
            for q, _ in ls.queries:
                q.kept(domain)

    def total(self) -> Fraction:
        return sum((ls.budget for ls in self.levels), Fraction(0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "neighbouring": self.neighbouring,
            "budget": self.budget_name,
            "levels": [
                {
                    "level": i,
                    "budget": str(ls.budget),
                    "queries": [{"query": q.name, "share": str(s)} for q, s in ls.queries],
                    "first_pass": list(ls.first_pass),
                }
                for i, ls in enumerate(self.levels)
            ],
        }

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Strategy:
        """Inverse of ``to_dict`` (also the TOML ``[strategy]`` table's shape once parsed)."""
        levels = []
        for i, lv in enumerate(spec.get("levels", [])):
            queries = tuple((q["query"], q.get("share", 1)) for q in lv.get("queries", []))
            levels.append(
                LevelStrategy(
                    parse_budget(lv["budget"], f"levels[{i}].budget"),
                    queries or ((Query(None), Fraction(1)),),
                    tuple(lv.get("first_pass", ())),
                )
            )
        return cls(
            tuple(levels),
            spec.get("mechanism", "discrete_gaussian"),
            spec.get("neighbouring", "add_remove"),
        )


def parse_budget(value: Any, name: str) -> Fraction:
    """A budget or share as an exact Fraction; a float is read as the decimal it prints as."""
    if isinstance(value, float) and np.isfinite(value):
        value = repr(value)
    return as_fraction(value, name, error=BudgetError)
