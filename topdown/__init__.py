"""TopDown: differentially private releases of hierarchical data.

Confidential records with a geography go in; integer, non-negative, consistent counts at every
level and synthetic microdata come out, under a recorded privacy budget. See ``release`` for the
typed pipeline and ``TopDown`` for the seed-compatible API.
"""

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
