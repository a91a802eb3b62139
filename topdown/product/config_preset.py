"""A config's production preset: ``[strategy] preset = "census2020_pl94"`` (``topdown.presets``).

The preset declares the attributes, their recodes and the whole strategy; the config gives the
data's side of it::

    [schema]
    hierarchy = ["STATE", "COUNTY", "TRACT", "BLOCK_GROUP", "BLOCK"]   # the root is the US
    columns = { cenrace = "RACE" }     # attribute key -> data column (default: the preset's)

    [strategy]
    preset = "census2020_pl94"
    rho = "293764/114921"              # optional: the production total, the shares stay
    geolevels = ["State", "County", "Tract", "Block_Group", "Block"]   # optional
    multipass = true                   # optional: the source's query ordering

``RunConfig.resolved()`` writes the result out in full (attributes, recodes, every level's
queries), so a release folder's ``config.json`` does not depend on the preset's code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from topdown.errors import DomainError
from topdown.presets import PRESETS
from topdown.schema import Schema
from topdown.strategy import Strategy, parse_budget

__all__ = ["PRESET_KEYS", "SCHEMA_KEYS", "parse_preset"]

#: The keys of ``[strategy]`` with a preset, and of ``[schema]``.
PRESET_KEYS = {"preset", "rho", "geolevels", "multipass"}
SCHEMA_KEYS = {"hierarchy", "columns", "geography"}


def parse_preset(
    strategy: Mapping[str, Any],
    schema: Mapping[str, Any],
    hierarchy: tuple[str, ...],
    bad: Callable[[str, str], NoReturn],
) -> tuple[Schema, Strategy]:
    """The preset's (schema, strategy) for a config's ``[strategy]`` and ``[schema]`` tables
    (their keys already checked against ``PRESET_KEYS`` and ``SCHEMA_KEYS``).

    ``bad(key, rule)`` raises the config's error naming the key.
    """
    name = strategy["preset"]
    if name not in PRESETS:
        bad("strategy.preset", f"{name!r} is unknown; presets are {sorted(PRESETS)}")
    kwargs: dict[str, Any] = {}
    if "rho" in strategy:
        try:
            kwargs["rho"] = parse_budget(strategy["rho"], "rho")
        except ValueError as err:
            bad("strategy.rho", str(err))
    geolevels = strategy.get("geolevels")
    if geolevels is not None:
        if not isinstance(geolevels, list) or not all(isinstance(g, str) for g in geolevels):
            bad("strategy.geolevels", f"must be a list of level names; got {geolevels!r}")
        kwargs["geolevels"] = tuple(geolevels)
    multipass = strategy.get("multipass", True)
    if not isinstance(multipass, bool):
        bad("strategy.multipass", f"must be true or false; got {multipass!r}")
    columns = schema.get("columns", {})
    if not isinstance(columns, Mapping):
        bad("schema.columns", f"must be a table attribute key -> data column; got {columns!r}")
    try:
        return PRESETS[name](hierarchy, dict(columns), multipass=multipass, **kwargs)
    except DomainError as err:  # a columns key, or a hierarchy column named like an attribute
        bad("schema", str(err))
    except ValueError as err:
        bad("strategy.geolevels" if geolevels is not None else "schema.hierarchy", str(err))
