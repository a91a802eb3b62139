"""A production strategy as the Census Bureau wrote it, and its mapping onto a user's hierarchy.

The Census Bureau's Disclosure Avoidance System (DAS) names its geographic levels (``US``,
``State``, ``County``, ...) and gives each a budget and a list of queries with Fraction shares.
A release of this engine has an implicit root and one hierarchy column per level below it. A
preset keeps the source's numbers verbatim (``ProductionStrategy``) and maps them here: the root
stands for the source's top level (``US``), and each hierarchy column for one of the source's
levels below it, top down (``build_strategy``).

A hierarchy may name fewer levels than the source has (a release to the tract, or without the
Census's spine levels): the levels it leaves out are not measured and their budget is not
spent, so every level that is measured gets exactly the production noise. That is the
accuracy the Census published, level by level, at a smaller total; it is recorded in
``Strategy.meta`` and logged. Mapping a hierarchy column onto a different level than it
stands for is the user's choice (``geolevels=``); the preset cannot check what a column means.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from topdown.errors import DomainError, StrategyError
from topdown.query import Query
from topdown.schema import Attribute, Schema
from topdown.strategy import LevelStrategy, Strategy, parse_budget

__all__ = ["ProductionStrategy", "build_strategy", "data_columns", "schema_and_strategy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProductionStrategy:
    """One production strategy, in the source's own terms.

    Attributes:
        name: the preset's name (``census2020_pl94``).
        citation: where the numbers come from (repository, file, class).
        geolevels: the source's geographic levels, top down; the first is the root.
        budgets: each geolevel's budget (rho) at the production total, in the same order.
        queries: per geolevel, (query in this engine's syntax, share of the level's budget).
        first_pass: per geolevel, the queries the source's first estimation pass fits alone
            (its query ordering); absent means a single pass.
        default_geolevels: the levels a hierarchy's columns stand for when the caller does not
            say (a shorter hierarchy takes a prefix of these).
        hold_slack: how far the source's later estimation pass may move each earlier pass's
            answer (its ``opt_tol_slack``: the DAS holds ``|Q x - cached| <= tol``, ``tol``
            the smallest the constraints allow plus this slack); with multipass it becomes
            ``Strategy.multipass_tolerance``. None: the engine's default hold.
        held: per geolevel, the first-pass queries the source's later pass holds (its
            constrain-to ordering; ``LevelStrategy.held``); a geolevel not named holds all of
            its first pass.
    """

    name: str
    citation: str
    geolevels: tuple[str, ...]
    budgets: tuple[Fraction, ...]
    queries: Mapping[str, tuple[tuple[Query, Fraction], ...]]
    first_pass: Mapping[str, tuple[str, ...]]
    default_geolevels: tuple[str, ...]
    hold_slack: float | None = None
    held: Mapping[str, tuple[str, ...]] | None = None

    @property
    def total(self) -> Fraction:
        """The production total rho (every geolevel's budget)."""
        return sum(self.budgets, Fraction(0))

    def budget(self, geolevel: str) -> Fraction:
        return self.budgets[self.geolevels.index(geolevel)]


def build_strategy(
    source: ProductionStrategy,
    hierarchy: Sequence[str],
    *,
    geolevels: Sequence[str] | None = None,
    rho: Any = None,
    multipass: bool = True,
) -> Strategy:
    """The engine's strategy for ``hierarchy``: the root is the source's top level, each
    hierarchy column the source level ``geolevels`` names (default: a prefix of the source's
    ``default_geolevels``).

    Args:
        source: the production strategy.
        hierarchy: the release's hierarchy columns, top down (the root is implicit).
        geolevels: the source level each column stands for, top down, each at most once.
        rho: the total of the whole production strategy (default: the source's); every
            geolevel's budget is scaled by ``rho / source.total``, the shares stay.
        multipass: fit the source's first-pass queries alone first, as its query ordering
            does (``LevelStrategy.first_pass``); False for a single pass.

    Raises:
        StrategyError: a hierarchy or mapping the preset cannot take, saying what it accepts.
    """
    hierarchy = tuple(hierarchy)
    below = source.geolevels[1:]
    mapped = _mapped(source, hierarchy, geolevels)
    scale = Fraction(1)
    if rho is not None:
        scale = parse_budget(rho, "rho") / source.total
    levels = []
    for geolevel in (source.geolevels[0], *mapped):
        first = source.first_pass.get(geolevel, ()) if multipass else ()
        held = source.held.get(geolevel) if first and source.held is not None else None
        levels.append(
            LevelStrategy(source.budget(geolevel) * scale, source.queries[geolevel], first, held)
        )
    omitted = [g for g in below if g not in mapped]
    unspent = sum((source.budget(g) * scale for g in omitted), Fraction(0))
    if omitted:
        log.info(
            "%s: hierarchy %s stands for %s; %s not measured, their rho %s (of %s) not spent",
            source.name,
            list(hierarchy),
            list(mapped),
            omitted,
            unspent,
            source.total * scale,
        )
    meta = {
        "preset": source.name,
        "source": source.citation,
        "geolevels": [source.geolevels[0], *mapped],
        "omitted_geolevels": omitted,
        "production_total": str(source.total * scale),
        "unspent": str(unspent),
    }
    two_passes = any(ls.first_pass for ls in levels)
    return Strategy(
        tuple(levels),
        "discrete_gaussian",
        "replace_one",
        meta,
        multipass_tolerance=source.hold_slack if two_passes else None,
    )


def schema_and_strategy(
    source: ProductionStrategy,
    attributes: Sequence[Attribute],
    hierarchy: Sequence[str],
    *,
    geolevels: Sequence[str] | None,
    rho: Any,
    multipass: bool,
) -> tuple[Schema, Strategy]:
    """A preset's result: the schema of ``attributes`` over ``hierarchy`` and the source's
    strategy for it (``build_strategy``), checked against that schema's domain and levels."""
    schema = Schema(tuple(attributes), tuple(hierarchy))
    strategy = build_strategy(
        source, schema.hierarchy, geolevels=geolevels, rho=rho, multipass=multipass
    )
    strategy.check(schema.domain, schema.n_levels)
    return schema, strategy


def _mapped(
    source: ProductionStrategy, hierarchy: tuple[str, ...], geolevels: Sequence[str] | None
) -> tuple[str, ...]:
    """The source level of each hierarchy column, checked."""
    below = source.geolevels[1:]
    accepted = (
        f"{source.name} maps the root to {source.geolevels[0]!r} and each hierarchy column, "
        f"top down, to one of {list(below)} in that order (default: the first columns of "
        f"{list(source.default_geolevels)}); geolevels= says which"
    )
    if not hierarchy:
        raise StrategyError(f"hierarchy (empty) must name at least one column; {accepted}")
    if geolevels is None:
        if len(hierarchy) > len(source.default_geolevels):
            raise StrategyError(
                f"hierarchy {list(hierarchy)} has {len(hierarchy)} columns, more than the "
                f"{len(source.default_geolevels)} levels {list(source.default_geolevels)} it "
                f"maps to by default; {accepted}"
            )
        return source.default_geolevels[: len(hierarchy)]
    mapped = tuple(geolevels)
    if len(mapped) != len(hierarchy):
        raise StrategyError(
            f"geolevels {list(mapped)} name {len(mapped)} levels for the {len(hierarchy)} "
            f"hierarchy columns {list(hierarchy)}: give one per column; {accepted}"
        )
    unknown = [g for g in mapped if g not in below]
    if unknown:
        raise StrategyError(f"geolevels {list(mapped)}: {unknown} are not levels; {accepted}")
    positions = [below.index(g) for g in mapped]
    if any(b <= a for a, b in zip(positions, positions[1:], strict=False)):
        raise StrategyError(
            f"geolevels {list(mapped)} must follow the source's order top down, each once; "
            f"{accepted}"
        )
    return mapped


def data_columns(
    preset: str, defaults: Mapping[str, str], columns: Mapping[str, str] | None
) -> dict[str, str]:
    """Each attribute key -> its data column: ``defaults`` overridden by ``columns``.

    Raises:
        DomainError: a key that is not one of the preset's attributes, or a column that is
            not a non-empty string.
    """
    out = dict(defaults)
    for key, column in dict(columns or {}).items():
        if key not in defaults:
            raise DomainError(
                f"columns names {key!r}, which is not an attribute of {preset}; its keys are "
                f"{list(defaults)} (each maps to the data column that holds it)"
            )
        if not isinstance(column, str) or not column:
            raise DomainError(
                f"columns[{key!r}] ({column!r}) must be a data column name (a non-empty string)"
            )
        out[key] = column
    return out
