"""TopDown: differentially private releases of hierarchical data.

Confidential records with a geography go in; integer, non-negative, consistent counts at every
level and synthetic microdata come out, under a recorded privacy budget. See ``release`` for the
typed pipeline and ``TopDown`` for the seed-compatible API.

The public names are loaded on first use (PEP 562): ``import topdown`` itself imports nothing
heavy, so the command line's entry (``topdown.product.entry``) can catch a Ctrl-C that lands
while numpy, pandas and the engine are being imported.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from constraints.domain import Domain
    from topdown.engine import TopDown, make_schema, release
    from topdown.release import CorrectnessReport, Release
    from topdown.schema import Attribute, Schema, attributes_from_dictionary
    from topdown.strategy import LevelStrategy, Query, Strategy

__all__ = [
    "TopDown",
    "release",
    "make_schema",
    "Release",
    "CorrectnessReport",
    "Attribute",
    "Schema",
    "Domain",
    "attributes_from_dictionary",
    "Query",
    "LevelStrategy",
    "Strategy",
]

_HOME = {
    "TopDown": "topdown.engine",
    "release": "topdown.engine",
    "make_schema": "topdown.engine",
    "Release": "topdown.release",
    "CorrectnessReport": "topdown.release",
    "Attribute": "topdown.schema",
    "Schema": "topdown.schema",
    "Domain": "constraints.domain",
    "attributes_from_dictionary": "topdown.schema",
    "Query": "topdown.strategy",
    "LevelStrategy": "topdown.strategy",
    "Strategy": "topdown.strategy",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'topdown' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``topdown.release`` is the function ``release`` (as it always was), not the submodule
    of the same name: importing the submodule (``topdown.release``, the ``Release`` type)
    binds it on the package, which must not hide the function (``from topdown import
    release``); the submodule stays reachable as ``sys.modules["topdown.release"]`` and by
    ``from topdown.release import Release``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
