"""Strategy: which queries each level measures, and how the privacy budget is divided.

A query (``topdown.query``) is a marginal over some query attributes, each kept whole or
through one of its recodes (``detailed`` = all of them whole, ``total`` = none).

Budgets are Fractions: per level, root first, each level's budget split between its queries by
Fraction shares that sum to exactly 1. The mechanism decides the budget's kind: the discrete
Laplace spends pure-DP epsilon, the discrete Gaussian spends zCDP rho. A float budget is read as
the decimal it prints as (``0.3`` means 3/10), so the ledger shows what the user wrote; pass a
Fraction for any other value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from constraints.domain import Domain
from mechanisms.errors import BudgetError
from mechanisms.exact import as_fraction
from topdown.errors import StrategyError
from topdown.query import Query

__all__ = [
    "Query",
    "LevelStrategy",
    "Strategy",
    "MECHANISMS",
    "NEIGHBOURING",
    "parse_budget",
]

MECHANISMS = ("discrete_laplace", "discrete_gaussian")
NEIGHBOURING = ("add_remove", "replace_one")


@dataclass(frozen=True)
class LevelStrategy:
    """The queries of one level with their Fraction shares of the level's budget.

    Attributes:
        budget: the level's budget (epsilon or rho, by the strategy's mechanism).
        queries: (query, share) pairs; shares are > 0 and sum to exactly 1.
        first_pass: names of the queries the first estimation pass fits (multipass); empty
            means a single pass over all queries.
        held: names of the first-pass queries whose answers the second pass holds (within
            the strategy's ``multipass_tolerance``), in ``first_pass``'s order; None: all of
            ``first_pass`` (stored as None when it names them all, so a strategy with a
            first pass replaced keeps holding all of the new one; ``holds``: the names). The Census
            Bureau's DHC ordering fits nine marginals first but holds one of them
            (``topdown.presets.census2020_dhcp``); the others only shaped the first pass.
    """

    budget: Fraction
    queries: tuple[tuple[Query, Fraction], ...] = ((Query(None), Fraction(1)),)
    first_pass: tuple[str, ...] = ()
    held: tuple[str, ...] | None = None

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
        object.__setattr__(self, "held", _held(self.held, self.first_pass))

    @property
    def holds(self) -> tuple[str, ...]:
        """The names of the first-pass queries the second pass holds."""
        return self.first_pass if self.held is None else self.held


def _held(held: Sequence[str] | None, first_pass: tuple[str, ...]) -> tuple[str, ...] | None:
    """``LevelStrategy.held`` checked against ``first_pass``: None is all of it; otherwise a
    non-empty subset (a second pass holding nothing would make the first pass moot), None
    when it is all of it."""
    if held is None:
        return None
    if isinstance(held, (str, bytes)) or not isinstance(held, Sequence):
        raise StrategyError(f"held ({held!r}) must be a list of first_pass query names")
    held = tuple(held)
    outside = [h for h in held if h not in first_pass]
    if outside:
        raise StrategyError(
            f"held names {outside} that are not in first_pass {list(first_pass)}: the second "
            "pass holds only answers the first pass fitted"
        )
    if first_pass and not held:
        raise StrategyError(
            f"held ([]) must name at least one of first_pass {list(first_pass)} (omit it to "
            "hold them all): a second pass holding nothing leaves the first pass no effect"
        )
    if len(set(held)) != len(held):
        raise StrategyError(f"held ({list(held)}) repeats a name: list each once")
    ordered = tuple(q for q in first_pass if q in held)  # first_pass's order
    return None if ordered == first_pass else ordered


@dataclass(frozen=True)
class Strategy:
    """Per-level strategies (root first), the mechanism and the neighbouring relation.

    Attributes:
        multipass_tolerance: how far a multipass second pass may move each first-pass answer
            (absolute, in counts), for every level with a ``first_pass``; None: the
            estimation's default (``EstimateOptions.multipass_tolerance``, 1e-6: held). The
            Census Bureau's production allowed 0.1 (``opt_tol_slack``; the presets hold
            exactly, ``topdown.presets.census2020_dhcp``): post-processing, so any value is
            private; it decides how closely the released marginals follow the first pass's
            fit.
    """

    levels: tuple[LevelStrategy, ...]
    mechanism: str = "discrete_gaussian"
    neighbouring: str = "add_remove"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    multipass_tolerance: float | None = None

    def __post_init__(self) -> None:
        tol = self.multipass_tolerance
        if tol is not None:
            if isinstance(tol, bool) or not isinstance(tol, (int, float, Fraction)):
                raise StrategyError(
                    f"multipass_tolerance ({tol!r}) must be a number (counts) or None"
                )
            if not (np.isfinite(float(tol)) and float(tol) > 0):
                raise StrategyError(
                    f"multipass_tolerance ({tol!r}) must be finite and > 0: how far the second "
                    "pass may move each first-pass answer"
                )
            object.__setattr__(self, "multipass_tolerance", float(tol))
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
        extra = (
            {}
            if self.multipass_tolerance is None
            else {"multipass_tolerance": self.multipass_tolerance}
        )
        return extra | {
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
                | ({} if ls.held is None else {"held": list(ls.held)})
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
                    lv.get("held"),
                )
            )
        return cls(
            tuple(levels),
            spec.get("mechanism", "discrete_gaussian"),
            spec.get("neighbouring", "add_remove"),
            multipass_tolerance=spec.get("multipass_tolerance"),
        )


def parse_budget(value: Any, name: str) -> Fraction:
    """A budget or share as an exact Fraction; a float is read as the decimal it prints as."""
    if isinstance(value, float) and np.isfinite(value):
        value = repr(value)
    return as_fraction(value, name, error=BudgetError)
