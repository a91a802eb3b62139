"""Presets: the Census Bureau's 2020 production strategies, as (schema, strategy) pairs.

``census2020_pl94`` is the redistricting (P.L. 94-171) persons strategy and ``census2020_dhcp``
the Demographic and Housing Characteristics persons strategy, each read from the Census
Bureau's public production code (the modules cite the files and classes) with its exact
Fraction shares. The root of a release stands for the US; the hierarchy's columns for the
source's geographic levels below it (``topdown.presets.production``).

A TOML config names one as ``[strategy] preset = "census2020_pl94"`` (``PRESETS``). A preset
may also supply its agency's headline accuracy figures (``HEADLINES``; the release folder's
``headline.csv`` and the report's table when the truth is given): ``headline_figures(schema)``
collects those that apply to a schema.
"""

from __future__ import annotations

from collections.abc import Callable

from topdown.outputs.headline import HeadlineFigure
from topdown.presets.census2020_dhcp import census2020_dhcp
from topdown.presets.census2020_pl94 import census2020_pl94, pl94_headline
from topdown.schema import Schema
from topdown.strategy import Strategy

__all__ = ["census2020_pl94", "census2020_dhcp", "PRESETS", "HEADLINES", "headline_figures"]

#: Preset name -> the function that builds it (the name a TOML config gives).
PRESETS: dict[str, Callable[..., tuple[Schema, Strategy]]] = {
    "census2020_pl94": census2020_pl94,
    "census2020_dhcp": census2020_dhcp,
}

#: Preset name -> its headline figures for a schema (empty when the schema lacks what they
#: count): the Census Bureau's accuracy figures for its releases.
HEADLINES: dict[str, Callable[[Schema], tuple[HeadlineFigure, ...]]] = {
    "census2020_pl94": pl94_headline,
}


def headline_figures(schema: Schema) -> tuple[HeadlineFigure, ...]:
    """Every preset's headline figures that apply to ``schema`` (figures of the same name
    kept once, the first preset's), for ``Release.metrics(data, headline=...)``.

    Example:
        >>> schema, _ = census2020_pl94(("STATE", "COUNTY", "TRACT"))
        >>> names = [f.name for f in headline_figures(schema)]
        >>> names[0], names[1], len(names)
        ('Total population', 'Voting-age population', 8)
    """
    figures: dict[str, HeadlineFigure] = {}
    for hook in HEADLINES.values():
        for fig in hook(schema):
            figures.setdefault(fig.name, fig)
    return tuple(figures.values())
