"""Presets: the Census Bureau's 2020 production strategies, as (schema, strategy) pairs.

``census2020_pl94`` is the redistricting (P.L. 94-171) persons strategy and ``census2020_dhcp``
the Demographic and Housing Characteristics persons strategy, each read from the Census
Bureau's public production code (the modules cite the files and classes) with its exact
Fraction shares. The root of a release stands for the US; the hierarchy's columns for the
source's geographic levels below it (``topdown.presets.production``).

A TOML config names one as ``[strategy] preset = "census2020_pl94"`` (``PRESETS``).
"""

from __future__ import annotations

from collections.abc import Callable

from topdown.presets.census2020_dhcp import census2020_dhcp
from topdown.presets.census2020_pl94 import census2020_pl94
from topdown.schema import Schema
from topdown.strategy import Strategy

__all__ = ["census2020_pl94", "census2020_dhcp", "PRESETS"]

#: Preset name -> the function that builds it (the name a TOML config gives).
PRESETS: dict[str, Callable[..., tuple[Schema, Strategy]]] = {
    "census2020_pl94": census2020_pl94,
    "census2020_dhcp": census2020_dhcp,
}
