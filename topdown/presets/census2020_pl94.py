"""The 2020 Census production strategy for the P.L. 94-171 redistricting persons file.

Every number here is read from the Census Bureau's public production code,
https://github.com/uscensusbureau/DAS_2020_Redistricting_Production_Code (snapshot at commit
289ee46):

- ``source/configs/production/pl94/person_US.ini``: ``[budget] strategy =
  ProductionCandidate20210527US_mult8_add02_dsepJune3``, ``query_ordering =
  Strategy1b_ST_CTY_TR_BG_isoTot_Ordering_dsepJune3`` and ``geolevel_budget_prop = 104/4099,
  1440/4099, 447/4099, 687/4099, 1256/4099, 165/4099`` (US, State, County, Tract, Block_Group,
  Block: its comment says "budget in topdown order").
- ``source/configs/production/pl94/person_default.ini`` (included by the above):
  ``global_scale = 339/542`` with the discrete Gaussian under zCDP. The DAS takes
  rho = 1 / global_scale**2 (``source/programs/engine/budget.py``, ``das2020_driver.py``), so the
  total is (542/339)**2 = 293764/114921, about 2.556 (published as 2.56).
- ``source/programs/strategies/strategies.py``, class
  ``ProductionCandidate20210527US_mult8_add02_dsepJune3``: the queries of each geolevel and
  their shares (``QUERIESPROP``), copied below verbatim with the DAS's query names; the US
  level has no ``total`` query. ``Strategy1b_ST_CTY_TR_BG_isoTot_Ordering_dsepJune3``: at
  State, County, Tract and Block_Group the L2 pass fits ``total`` first, alone, then the rest;
  at US and Block a single pass (``multipass=``). ``person_default.ini`` lines 57-60 hold
  the first pass's answer as the DHC does (``DataIndNPass_toleranceType = opt_tol``,
  ``opt_tol_slack = 0.1``: the total may move by about 0.1 in the second pass). This preset
  does not say so: it leaves ``Strategy.multipass_tolerance`` at the default and holds the
  total exactly, which lets ``topdown.estimation.batched.multipass`` fit each level's
  families in closed form; a looser hold of the total is another problem, which only the
  per-family path solves (much slower at the block groups). Holding within 0 rather than
  0.1 is one of the answers production's constraint allows, not its optimum.
- ``source/programs/schema/attributes/hhgq_person_simple.py`` (the ``hhgq`` attribute of the
  ``PL94_2020`` schema in ``programs/schema/schemas/schemamaker.py``: hhgq x votingage x
  hispanic x cenrace): ``recodeHHnstLevels`` names ``hhinstlevels`` = Household [0],
  Institutional Facility [1, 2, 3, 4], Non-Institutional Facility [5, 6, 7]; here the recode
  ``hhinst`` of ``HHGQ``.

Neighbours: the DAS's zCDP accounting is for bounded neighbours (one record changed:
``zCDPEpsDeltaCurve(..., bounded=True)``) and its discrete Gaussian draws with variance
1 / (query rho) (``primitives.RationalDiscreteGaussianMechanism``: ``sigma_sq =
1/inverse_scale``), which is this engine's discrete Gaussian under ``replace_one`` neighbours
(L2 sensitivity squared 2, sigma^2 = 2 / (2 rho)). The preset uses ``replace_one``, so each
query gets the production noise exactly.

Not part of the returned strategy (declare them separately if wanted): the production
invariants (the state's total population; at the block, the group-quarters facility counts)
and its edit constraints (``hhgq_total_lb``/``ub``, ``nurse_nva_0``), and the rounder's own
query ordering (this engine's rounding pass is one pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction as Fr
from typing import Any

from constraints import Equal, TrueExpression
from topdown.outputs.headline import HeadlineFigure
from topdown.presets.production import (
    ProductionStrategy,
    data_columns,
    schema_and_strategy,
)
from topdown.query import Query
from topdown.schema import Attribute, Schema
from topdown.strategy import Strategy

__all__ = [
    "census2020_pl94",
    "PL94",
    "PL94_GEOLEVELS",
    "PL94_RHO",
    "PL94_COLUMNS",
    "HHINST",
    "pl94_headline",
    "RACE_ALONE",
]

#: The source's geolevels, top down (``person_US.ini``: ``geolevel_names`` reversed).
PL94_GEOLEVELS = ("US", "State", "County", "Tract", "Block_Group", "Block")
#: rho = 1 / global_scale**2, global_scale = 339/542 (``person_default.ini``).
PL94_RHO = 1 / Fr(339, 542) ** 2
#: ``geolevel_budget_prop`` of ``person_US.ini``, top down.
GEOLEVEL_SHARES = (
    Fr(104, 4099),
    Fr(1440, 4099),
    Fr(447, 4099),
    Fr(687, 4099),
    Fr(1256, 4099),
    Fr(165, 4099),
)
#: The DAS's query names (the same 11 at every level but US) ...
_DAS_QUERIES = (
    "total",
    "cenrace",
    "hispanic",
    "votingage",
    "hhinstlevels",
    "hhgq",
    "hispanic * cenrace",
    "votingage * cenrace",
    "votingage * hispanic",
    "votingage * hispanic * cenrace",
    "detailed",
)
#: ... in this engine's query syntax.
_QUERY = {
    "total": "total",
    "cenrace": "CENRACE",
    "hispanic": "HISPANIC",
    "votingage": "VOTINGAGE",
    "hhinstlevels": "HHGQ:hhinst",
    "hhgq": "HHGQ",
    "hispanic * cenrace": "HISPANIC x CENRACE",
    "votingage * cenrace": "VOTINGAGE x CENRACE",
    "votingage * hispanic": "VOTINGAGE x HISPANIC",
    "votingage * hispanic * cenrace": "VOTINGAGE x HISPANIC x CENRACE",
    "detailed": "detailed",
}
#: ``ProductionCandidate20210527US_mult8_add02_dsepJune3.make``: QUERIESPROP per geolevel, in
#: the order of ``_DAS_QUERIES`` (US: without ``total``).
_SHARES: dict[str, tuple[Fr, ...]] = {
    "US": (
        Fr(52, 4097), Fr(26, 4097), Fr(26, 4097), Fr(26, 4097), Fr(26, 4097), Fr(130, 4097),
        Fr(130, 4097), Fr(26, 4097), Fr(26, 241), Fr(189, 241),
    ),
    "State": (
        Fr(3773, 4097), Fr(6, 4097), Fr(6, 4097), Fr(6, 4097), Fr(6, 4097), Fr(6, 4097),
        Fr(12, 4097), Fr(12, 4097), Fr(6, 4097), Fr(2, 241), Fr(230, 4097),
    ),
    "County": (
        Fr(3126, 4097), Fr(10, 4097), Fr(10, 4097), Fr(10, 4097), Fr(10, 4097), Fr(10, 4097),
        Fr(28, 4097), Fr(28, 4097), Fr(10, 4097), Fr(101, 4097), Fr(754, 4097),
    ),
    "Tract": (
        Fr(1567, 4102), Fr(4, 2051), Fr(5, 4102), Fr(5, 4102), Fr(5, 4102), Fr(5, 4102),
        Fr(1933, 4102), Fr(10, 2051), Fr(5, 4102), Fr(67, 4102), Fr(241, 2051),
    ),
    "Block_Group": (
        Fr(1705, 4099), Fr(3, 4099), Fr(3, 4099), Fr(3, 4099), Fr(3, 4099), Fr(3, 4099),
        Fr(1055, 4099), Fr(9, 4099), Fr(3, 4099), Fr(24, 4099), Fr(1288, 4099),
    ),
    "Block": (
        Fr(5, 4097), Fr(9, 4097), Fr(5, 4097), Fr(5, 4097), Fr(5, 4097), Fr(5, 4097),
        Fr(21, 4097), Fr(21, 4097), Fr(5, 4097), Fr(71, 4097), Fr(3945, 4097),
    ),
}  # fmt: skip

#: ``hhinstlevels`` (``hhgq_person_simple.py``, ``recodeHHnstLevels``).
HHINST = {
    "Household": (0,),
    "Institutional Facility": (1, 2, 3, 4),
    "Non-Institutional Facility": (5, 6, 7),
}
#: Attribute key -> the data column it is read from by default (``benchmarks/pl94.py``).
PL94_COLUMNS = {
    "hhgq": "HHGQ",
    "votingage": "VOTING_AGE",
    "hispanic": "HISPANIC",
    "cenrace": "RACE",
}


def _queries(geolevel: str) -> tuple[tuple[Query, Fr], ...]:
    names = _DAS_QUERIES[1:] if geolevel == "US" else _DAS_QUERIES
    return tuple((Query.parse(_QUERY[n]), s) for n, s in zip(names, _SHARES[geolevel], strict=True))


#: The production strategy in the source's terms.
PL94 = ProductionStrategy(
    name="census2020_pl94",
    citation=(
        "uscensusbureau/DAS_2020_Redistricting_Production_Code: "
        "source/configs/production/pl94/person_US.ini, "
        "source/programs/strategies/strategies.py "
        "ProductionCandidate20210527US_mult8_add02_dsepJune3"
    ),
    geolevels=PL94_GEOLEVELS,
    budgets=tuple(PL94_RHO * s for s in GEOLEVEL_SHARES),
    queries={g: _queries(g) for g in PL94_GEOLEVELS},
    first_pass={g: ("total",) for g in ("State", "County", "Tract", "Block_Group")},
    default_geolevels=PL94_GEOLEVELS[1:],
)


def census2020_pl94(
    hierarchy: Sequence[str] = ("STATE", "COUNTY", "TRACT", "BLOCK_GROUP", "BLOCK"),
    columns: Mapping[str, str] | None = None,
    rho: Any = None,
    *,
    geolevels: Sequence[str] | None = None,
    multipass: bool = True,
) -> tuple[Schema, Strategy]:
    """The 2020 production PL94 persons schema and strategy (see the module's sources).

    Args:
        hierarchy: the data's geography columns, top down; the root stands for the US. By
            default they stand for State, County, Tract, Block_Group, Block; fewer columns
            take the first levels (``("STATE", "COUNTY", "TRACT")`` is a release to the
            tract: the block group's and block's budgets are not spent).
        columns: attribute key (``hhgq``, ``votingage``, ``hispanic``, ``cenrace``) -> the
            data column holding it; default ``benchmarks/pl94.py``'s names
            (``PL94_COLUMNS``).
        rho: the total rho of the whole production strategy (default 293764/114921, about
            2.556); the geolevel and query shares stay.
        geolevels: the source level each hierarchy column stands for, top down (a
            subsequence of State, County, Tract, Block_Group, Block).
        multipass: fit ``total`` alone first at State..Block_Group, as production did.

    Returns:
        (schema, strategy): attributes ``HHGQ`` (0..7, recode ``hhinst``), ``VOTINGAGE``
        (0, 1), ``HISPANIC`` (0, 1), ``CENRACE`` (1..63) in the DAS's histogram order, and
        the strategy (discrete Gaussian, ``replace_one`` neighbours; ``strategy.meta`` names
        the source and any level left out).

    Raises:
        StrategyError: a hierarchy it cannot map (the message says what it accepts).
        DomainError: an unknown ``columns`` key.

    Example:
        >>> schema, strategy = census2020_pl94(("STATE", "COUNTY", "TRACT"))
        >>> ", ".join(q.name for q, _ in strategy.levels[0].queries[:3])
        'CENRACE, HISPANIC, VOTINGAGE'
        >>> ", ".join(strategy.meta["omitted_geolevels"])
        'Block_Group, Block'
    """
    cols = data_columns(PL94.name, PL94_COLUMNS, columns)
    return schema_and_strategy(
        PL94,
        (
            Attribute(
                "HHGQ", values=tuple(range(8)), column=cols["hhgq"], recodes={"hhinst": HHINST}
            ),
            Attribute("VOTINGAGE", values=(0, 1), column=cols["votingage"]),
            Attribute("HISPANIC", values=(0, 1), column=cols["hispanic"]),
            Attribute("CENRACE", values=tuple(range(1, 64)), column=cols["cenrace"]),
        ),
        hierarchy,
        geolevels=geolevels,
        rho=rho,
        multipass=multipass,
    )


#: The six races alone: published name -> CENRACE code (``cenrace.py``: indices 0..5).
RACE_ALONE = {
    "White alone": 1,
    "Black or African American alone": 2,
    "American Indian and Alaska Native alone": 3,
    "Asian alone": 4,
    "Native Hawaiian and Other Pacific Islander alone": 5,
    "Some Other Race alone": 6,
}


def pl94_headline(
    schema: Schema,
    *,
    race_alone: Mapping[str, Any] | None = None,
    tract_level: int | None = None,
) -> tuple[HeadlineFigure, ...]:
    """The Census Bureau's headline accuracy figures for PL94 releases, for ``schema``: mean
    absolute error of total population and of the voting-age population at every level, and
    of each race alone at the tract level.

    They apply to any schema with the preset's ``VOTINGAGE`` (1 = 18 and over) and ``CENRACE``
    attributes; another schema gets none (an empty tuple), so the hook can be asked of every
    release.

    Args:
        schema: the release's schema.
        race_alone: race name -> CENRACE value (default ``RACE_ALONE``, the DAS's codes 1..6,
            which ``benchmarks/pl94.py``'s states use too); data coding race otherwise (as
            bit masks, say) passes its own codes.
        tract_level: the tract's level number (0 = root); default the level of the hierarchy
            column named ``TRACT`` (any case); without one the race figures are left out.

    Example:
        >>> schema, _ = census2020_pl94(("STATE", "COUNTY", "TRACT"))
        >>> figures = pl94_headline(schema)
        >>> tuple((f.name, f.levels) for f in figures[0:3])
        (('Total population', None), ('Voting-age population', None), ('White alone', (3,)))
    """
    names = schema.domain.names
    if "VOTINGAGE" not in names or "CENRACE" not in names:
        return ()
    figures = [
        HeadlineFigure("Total population", TrueExpression()),
        HeadlineFigure("Voting-age population", Equal("VOTINGAGE", 1)),
    ]
    if tract_level is None:
        columns = [c.upper() for c in schema.hierarchy]
        tract_level = columns.index("TRACT") + 1 if "TRACT" in columns else None
    if tract_level is not None:
        for name, code in (race_alone or RACE_ALONE).items():
            figures.append(HeadlineFigure(name, Equal("CENRACE", code), (tract_level,)))
    return tuple(figures)
