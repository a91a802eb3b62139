"""The 2020 Census production strategy for the Demographic and Housing Characteristics persons file.

Every number here is read from the Census Bureau's public DHC production code,
https://github.com/uscensusbureau/DAS_2020_DHC_Production_Code (snapshot at commit 38ea5f2),
under ``das_decennial/``:

- Which strategy was final: ``configs/production/dhc/person_US.ini`` (the production folder,
  beside ``unit_US.ini`` and the PR files) names ``strategy =
  test_strategy_dhcp_20220922_exp_iteration_23_1`` and ``query_ordering =
  test_strategy_regular_ordering_dhcp_20220811_exp_21_1``, as does
  ``configs/DHCP2020/us_20220922_exp_iteration_23_1.ini``, the last of the dated experiment
  configs; ``programs/strategies/strategies.py`` maps the name to
  ``dhcp_strategies.DecompTestStrategyDHCP_20220922_exp_iteration_23_1``, and
  ``scripts/create_dhch_strategy_dhc_experiment_iteration_23_20220922.py`` shows how its
  numbers were made (iteration 22 with two query groups' allocations times 4).
- The budget: that class gives each query of each geolevel an allocation in units of
  1/10000 of rho, not a share. ``person_US.ini`` leaves ``[geodict] geolevel_names`` empty, and
  then ``programs/engine/budget.py`` (``Budget.__init__`` and ``QueryBudget.__init__``) takes
  the levels from the strategy, each level's budget as the sum of its queries' allocations, the
  total as the sum over levels (global_scale**2 = 1/total; the ini's ``global_scale`` and
  ``geolevel_budget_prop`` are then unused) and each query's share as its allocation over its
  level's sum. The total is 49622/10000 = 4.9622 (the script's closing comment: "DHCP:
  49622"). This preset does the same arithmetic on the allocations copied below.
- Ten queries at each of the eight geolevels US, State, County, Prim, Tract_Subset_Group,
  Tract_Subset, Block_Group, Block (the class's ``levels``); the query ordering fits the nine
  marginals in a first outer pass and ``detailed`` in the second (``multipass=``).
- How closely the second pass holds the first pass's answers: ``person_US.ini`` lines 141-161
  (``[gurobi]``) set ``l2_optimization_approach = DataIndUserSpecifiedQueriesNPassDecomp``,
  ``dataindnpass_tolerancetype = opt_tol``, ``opt_tol_slack = 0.1`` and ``outer_pass =
  True``. That optimizer (``programs/optimization/l2_dataIndep_npass_optimizer_decomp.py``,
  ``findOptimalTolAndAddConstrs``) holds each first-pass answer as ``|Q x - Q x1| <= tol``,
  ``x1`` the first pass's solution and ``tol`` the smallest tolerance those constraints allow
  (an LP; about 0, since ``x1`` is feasible) plus the solver's constraint residual plus the
  slack. So the second pass may move each held answer by about 0.1. That optimizer holds only
  the queries its constrain-to ordering names: the production ordering (``person_US.ini``
  line 12, ``query_ordering = test_strategy_regular_ordering_dhcp_20220811_exp_21_1``;
  ``dhcp_strategies.py`` lines 434-453,
  ``DecompTestStrategyRegularOrderingDHCP_20220811_exp_21_1``) fits the marginals in pass 0
  of ``L2_QUERY_ORDERING`` (lines 438-448) but its ``L2_CONSTRAIN_TO_QUERY_ORDERING`` pass 0
  (line 452) names one of them, ``relgq * age_40_groups * hispanic * cenrace * sex``
  (``PRODUCTION_HELD_NAME``). The preset holds that one, as production did, but exactly
  (``Strategy.multipass_tolerance`` at the engine's default, not 0.1): an answer held exactly
  lies inside production's box, so it is feasible for production's second pass, though not
  that pass's optimum. Why: every one of the nine first-pass marginals is a sum of the held
  one's answers, so holding it exactly holds all nine exactly, and both passes then reduce
  to the held marginal's groups (``topdown.estimation.nested_passes``): at 20,000 persons
  to the tract the release took 9.6 CPU s, against 93.1 held within 0.1 and 11.1 in one
  pass, in one run (docs/benchmarks.md, "The DHC preset held exactly"). Held within 0.1,
  production's one marginal let the coarse marginals' tract errors grow about 100 times
  (``SEX x AGE`` MAE 419 against 3.7 held exactly; one seed; a reading, not checked: each of
  its 423,360 answers a tract may move by 0.1, and a coarse answer sums thousands of them).
  Production's slack is one line away: ``dataclasses.replace(strategy,
  multipass_tolerance=0.1)`` (the second pass is then the box-holding rounds of
  ``topdown.estimation.multipass_newton``: 8.4 times one pass's CPU in that run).
- The first pass is the nine measured marginals, as in production. That ordering's pass 0
  (lines 439-448) lists ten names, one of them ``hispanic * sex * age_40_groups * HHGQ_8LEV
  * cenrace`` (line 444), which is not among the strategy's ten measured queries. The
  optimizer builds a pass's terms by walking the *measured* queries and keeping those the
  ordering names (``l2_dataIndep_npass_optimizer_decomp.py`` line 106, ``filterQueries`` in
  ``programs/optimization/optimizer.py`` lines 895-910), so an ordering name without a
  measurement adds nothing. ``programs/engine/optimizer_query_ordering.py`` (lines 133-135)
  checks only the converse: that every measured query is in the ordering.
- The schema ``DHCP_SCHEMA`` (``programs/schema/schemas/schemamaker.py``): relgq (42) x sex (2)
  x age (116) x hispanic (2) x cenrace (63) = 1,227,744 cells. The recodes the queries use
  are copied from ``programs/schema/attributes/age.py`` (``recodeAge18_64_116``,
  ``recodeAge38groups``, ``recodeAge40groups``, ``recodeAge10groups``) and
  ``programs/schema/attributes/relgq.py`` (``recodeRELGQ_4_Groups``,
  ``recode_GQ_CONSTR_GROUPS``, ``recode_POP_SEHSD_Targets_RELSHIP``,
  ``recode_relship_and_eight_level_GQ``).

Every one of these recodes is a partition of one attribute's values (each value in exactly
one group; checked by ``constraints.domain.Domain``), so each query is expressed as written,
none folded or dropped. ``gq_constr_groups`` has groups that are not contiguous runs of codes
(e.g. ``[33, 37, 38, 39, 40, 41]``); a partition need not be.

Geography: the DHC ran on the Census's optimized spine, whose Prim (primitive geography) and
Tract_Subset_Group levels a tabulation hierarchy does not have. By default the hierarchy's
columns stand for State, County, Tract_Subset, Block_Group, Block (a tract for a tract subset),
and Prim's and Tract_Subset_Group's budgets (12428/10000 of rho) are not spent; a hierarchy of
the seven spine levels with ``geolevels=DHCP_GEOLEVELS[1:]`` runs all eight.

Neighbours and noise: as for PL94 (``topdown.presets.census2020_pl94``), the DAS's rho is for
bounded neighbours and its discrete Gaussian has variance 1 / (query rho): ``replace_one``.
Not part of the returned strategy: the production invariants and edit constraints (the
``relgq*_lt15`` ... age-by-relationship rules, the PL94 counts as constraints) and the
rounder's own query ordering.

Group labels are the source's, shortened where long. Value codes follow the Census Edited
File and ``benchmarks/dhc.py`` where they differ from the DAS's internal 0-based codes: ``SEX``
is 1, 2 and ``CENRACE`` 1..63; ``RELGQ`` (0..41), ``AGE`` (0..115) and ``HISPANIC`` (0, 1) are
the DAS's codes, which the recodes group (``benchmarks/dhc.py``'s synthetic ``RELGQ`` uses
them: 0..17 household relationships, 18..41 group-quarters types).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction as Fr
from typing import Any

from topdown.presets.production import (
    ProductionStrategy,
    data_columns,
    schema_and_strategy,
)
from topdown.query import Query
from topdown.schema import Attribute, Schema
from topdown.strategy import Strategy

__all__ = [
    "census2020_dhcp",
    "DHCP",
    "DHCP_GEOLEVELS",
    "DHCP_COLUMNS",
    "AGE_RECODES",
    "RELGQ_RECODES",
    "PRODUCTION_HELD_NAME",
]

#: ``DecompTestStrategyDHCP_20220922_exp_iteration_23_1.levels``, top down.
DHCP_GEOLEVELS = (
    "US",
    "State",
    "County",
    "Prim",
    "Tract_Subset_Group",
    "Tract_Subset",
    "Block_Group",
    "Block",
)
#: The DAS's query names, the same ten at every geolevel.
_DAS_QUERIES = (
    "age_18_64_116 * relgq_4_groups",
    "age_18_64_116 * sex",
    "age_38_groups * sex",
    "hispanic * sex",
    "sex * relgq_4_groups",
    "gq_constr_groups * age_10_groups",
    "popSehsdTargetsRelship",
    "hispanic * sex * age_40_groups * relship_and_eight_level_GQ * cenrace",
    "relgq * age_40_groups * hispanic * cenrace * sex",
    "detailed",
)
#: The one first-pass query production's second pass holds (module docstring's sources).
_HELD = "relgq * age_40_groups * hispanic * cenrace * sex"
#: Each DAS term (an attribute or a recode) in this engine's syntax.
_TERM = {
    "relgq": "RELGQ",
    "sex": "SEX",
    "hispanic": "HISPANIC",
    "cenrace": "CENRACE",
    **{r: f"AGE:{r}" for r in ("age_18_64_116", "age_38_groups", "age_40_groups", "age_10_groups")},
    **{
        r: f"RELGQ:{r}"
        for r in (
            "relgq_4_groups",
            "gq_constr_groups",
            "popSehsdTargetsRelship",
            "relship_and_eight_level_GQ",
        )
    },
}
#: QUERIESPROP per geolevel, in units of 1/10000 of rho, in the order of ``_DAS_QUERIES``.
_ALLOCATIONS: dict[str, tuple[int, ...]] = {
    "US": (73, 73, 73, 73, 73, 292, 73, 73, 73, 73),
    "State": (999, 999, 999, 999, 999, 3996, 999, 999, 999, 999),
    "County": (310, 310, 310, 310, 310, 1240, 1240, 310, 310, 310),
    "Prim": (478, 478, 478, 478, 478, 1912, 478, 478, 478, 478),
    "Tract_Subset_Group": (478, 478, 478, 478, 478, 1912, 478, 478, 478, 478),
    "Tract_Subset": (868, 868, 868, 868, 868, 3472, 3472, 868, 868, 868),
    "Block_Group": (430, 430, 430, 430, 430, 430, 430, 430, 430, 430),
    "Block": (11, 11, 11, 11, 11, 11, 11, 11, 11, 11),
}
_UNIT = Fr(1, 10000)


def _age_bands(*edges: int) -> dict[str, tuple[int, ...]]:
    """Groups of ages [edges[i], edges[i+1]) labelled like the DAS's ("20 to 24 years")."""
    out = {}
    for lo, hi in zip(edges, edges[1:], strict=False):
        single = {0: "Under 1 year", 1: "1 year"}.get(lo, f"{lo} years")
        out[f"{lo} to {hi - 1} years" if hi - lo > 1 else single] = tuple(range(lo, hi))
    return out


#: ``age.py``: 5-year bands from 20 (with 60-61, 62-64, 65-66, 67-69) to 110-115.
_ADULT_EDGES: tuple[int, ...] = (18, 20, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75)
_ADULT_EDGES += (80, 85, 90, 95, 100, 105, 110, 116)
AGE_RECODES: dict[str, dict[str, tuple[int, ...]]] = {
    # recodeAge18_64_116
    "age_18_64_116": {
        "under 18 years": tuple(range(0, 18)),
        "18 to 64 years": tuple(range(18, 65)),
        "65 and over": tuple(range(65, 116)),
    },
    # recodeAge38groups: single years 0..14, 15 to 17, then the adult bands
    "age_38_groups": _age_bands(*range(15), 15, *_ADULT_EDGES),
    # recodeAge40groups: single years 0..17, then the adult bands
    "age_40_groups": _age_bands(*range(18), *_ADULT_EDGES),
    # recodeAge10groups
    "age_10_groups": {
        "Under 3 years": tuple(range(0, 3)),
        "3 to 14 years": tuple(range(3, 15)),
        "15 years": (15,),
        "16 years": (16,),
        "17 years": (17,),
        "18 to 19 years": (18, 19),
        "20 to 24 years": tuple(range(20, 25)),
        "25 to 29 years": tuple(range(25, 30)),
        "30 to 34 years": tuple(range(30, 35)),
        "35 to 115 years": tuple(range(35, 116)),
    },
}
#: ``relgq.py``: the 18 household relationships (codes 0..17), labelled as in ``getLevels``.
_RELATIONSHIPS = (
    "Householder living alone",
    "Householder not living alone",
    "Opposite-sex spouse",
    "Opposite-sex unmarried partner",
    "Same-sex spouse",
    "Same-sex unmarried partner",
    "Biological son or daughter",
    "Adopted son or daughter",
    "Stepson or stepdaughter",
    "Brother or sister",
    "Father or mother",
    "Grandchild",
    "Parent-in-law",
    "Son-in-law or daughter-in-law",
    "Other relative",
    "Roommate or housemate",
    "Foster child",
    "Other nonrelative",
)
_ONE_EACH = {label: (code,) for code, label in enumerate(_RELATIONSHIPS)}
RELGQ_RECODES: dict[str, dict[str, tuple[int, ...]]] = {
    # recodeRELGQ_4_Groups
    "relgq_4_groups": {
        "Householders living alone or not alone": (0, 1),
        "Non-Householder": tuple(range(2, 18)),
        "Institutionalized population": tuple(range(18, 33)),
        "Noninstitutionalized population": tuple(range(33, 42)),
    },
    # recode_GQ_CONSTR_GROUPS: the GQ types by the youngest age their edit constraint allows
    "gq_constr_groups": {
        "In a household": tuple(range(18)),
        "GQ in the constraint for AGE < 3": (32,),
        "GQ in the constraint for AGE < 15": tuple(range(18, 23)),
        "GQ in the constraint for AGE < 16": (33, *range(37, 42)),
        "GQ in the constraint for AGE < 17": (23, 31, 34, 35),
        "GQ not in the constraint for AGE < 18": (*range(24, 31), 36),
    },
    # recode_POP_SEHSD_Targets_RELSHIP
    "popSehsdTargetsRelship": {**_ONE_EACH, "In a GQ": tuple(range(18, 42))},
    # recode_relship_and_eight_level_GQ
    "relship_and_eight_level_GQ": {
        **_ONE_EACH,
        "Correctional facilities for adults": tuple(range(18, 24)),
        "Juvenile facilities": tuple(range(24, 27)),
        "Nursing facilities/Skilled-nursing facilities": (27,),
        "Other institutional facilities": tuple(range(28, 33)),
        "College/University student housing": (33,),
        "Military quarters": (34, 35),
        "Other noninstitutional facilities": tuple(range(36, 42)),
    },
}
#: Attribute key -> the data column it is read from by default (``benchmarks/dhc.py``).
DHCP_COLUMNS = {
    "relgq": "RELGQ",
    "sex": "SEX",
    "age": "AGE",
    "hispanic": "HISPANIC",
    "cenrace": "CENRACE",
}


def _query(das: str) -> str:
    if das == "detailed":
        return das
    return " x ".join(_TERM[t.strip()] for t in das.split("*"))


def _queries(geolevel: str) -> tuple[tuple[Query, Fr], ...]:
    allocations = _ALLOCATIONS[geolevel]
    level = sum(allocations)
    pairs = zip(_DAS_QUERIES, allocations, strict=True)
    return tuple((Query.parse(_query(q)), Fr(a, level)) for q, a in pairs)


#: The one first-pass query production's second pass held (``dhcp_strategies.py`` line 452), as
#: the preset names it (each level's ``held``; module docstring).
PRODUCTION_HELD_NAME = _query(_HELD)

#: The production strategy in the source's terms.
DHCP = ProductionStrategy(
    name="census2020_dhcp",
    citation=(
        "uscensusbureau/DAS_2020_DHC_Production_Code: "
        "das_decennial/configs/production/dhc/person_US.ini, "
        "das_decennial/programs/strategies/dhcp_strategies.py "
        "DecompTestStrategyDHCP_20220922_exp_iteration_23_1"
    ),
    geolevels=DHCP_GEOLEVELS,
    budgets=tuple(sum(_ALLOCATIONS[g]) * _UNIT for g in DHCP_GEOLEVELS),
    queries={g: _queries(g) for g in DHCP_GEOLEVELS},
    first_pass={g: tuple(_query(q) for q in _DAS_QUERIES[:-1]) for g in DHCP_GEOLEVELS},
    # production's ordering holds one of the nine (dhcp_strategies.py line 452)
    held={g: (PRODUCTION_HELD_NAME,) for g in DHCP_GEOLEVELS},
    default_geolevels=("State", "County", "Tract_Subset", "Block_Group", "Block"),
    # held exactly, not within person_US.ini line 160's opt_tol_slack = 0.1 (module docstring)
    hold_slack=None,
)


def census2020_dhcp(
    hierarchy: Sequence[str] = ("STATE", "COUNTY", "TRACT", "BLOCK_GROUP", "BLOCK"),
    columns: Mapping[str, str] | None = None,
    rho: Any = None,
    *,
    geolevels: Sequence[str] | None = None,
    multipass: bool = True,
) -> tuple[Schema, Strategy]:
    """The 2020 production DHC persons schema and strategy (see the module's sources).

    Args:
        hierarchy: the data's geography columns, top down; the root stands for the US. By
            default they stand for State, County, Tract_Subset, Block_Group, Block; fewer
            columns take the first of these (``("STATE", "COUNTY", "TRACT")``: a release to
            the tract).
        columns: attribute key (``relgq``, ``sex``, ``age``, ``hispanic``, ``cenrace``) ->
            the data column holding it; default ``benchmarks/dhc.py``'s names
            (``DHCP_COLUMNS``).
        rho: the total rho of the whole production strategy (default 49622/10000); the
            geolevel and query shares stay.
        geolevels: the source level each hierarchy column stands for, top down (a
            subsequence of ``DHCP_GEOLEVELS[1:]``).
        multipass: fit the nine marginals first and ``detailed`` after, as production did,
            the second pass holding the answers of one of them (``relgq * age_40_groups *
            hispanic * cenrace * sex``, production's constrain-to ordering) exactly, where
            production allowed 0.1 (``Strategy.multipass_tolerance``; the module's sources).
            Under the ``auto`` L2 solver both passes run on the held marginal's groups
            (``topdown.estimation.nested_passes``: every first-pass marginal is a sum of its
            answers) by the matrix-free Newton iterations; where those do not apply (a named L2
            solver, constraint rows, a capture) the first pass is a general QP, which
            ``release`` refuses over 1,000,000 variables before measuring
            (``topdown.estimation.first_pass_limit``). ``multipass=False`` (a config's
            ``[strategy] multipass = false``) fits the ten queries in one pass, from the same
            measurements; the release says so in its own config (``first_pass`` empty in
            ``config.json``).

    Returns:
        (schema, strategy): ``RELGQ`` (0..41) x ``SEX`` (1, 2) x ``AGE`` (0..115) x
        ``HISPANIC`` (0, 1) x ``CENRACE`` (1..63), with the recodes the queries use, and the
        strategy (discrete Gaussian, ``replace_one`` neighbours).

    Raises:
        StrategyError: a hierarchy it cannot map (the message says what it accepts).
        DomainError: an unknown ``columns`` key.

    Example:
        >>> schema, strategy = census2020_dhcp(("STATE", "COUNTY", "TRACT"))
        >>> schema.domain.size
        1227744
        >>> " > ".join(strategy.meta["geolevels"])
        'US > State > County > Tract_Subset'
        >>> strategy.multipass_tolerance is None  # held exactly (production: within 0.1)
        True
        >>> strategy.levels[0].held == (PRODUCTION_HELD_NAME,)  # production's constrain-to
        True
    """
    cols = data_columns(DHCP.name, DHCP_COLUMNS, columns)
    return schema_and_strategy(
        DHCP,
        (
            Attribute(
                "RELGQ", values=tuple(range(42)), column=cols["relgq"], recodes=RELGQ_RECODES
            ),
            Attribute("SEX", values=(1, 2), column=cols["sex"]),
            Attribute("AGE", values=tuple(range(116)), column=cols["age"], recodes=AGE_RECODES),
            Attribute("HISPANIC", values=(0, 1), column=cols["hispanic"]),
            Attribute("CENRACE", values=tuple(range(1, 64)), column=cols["cenrace"]),
        ),
        hierarchy,
        geolevels=geolevels,
        rho=rho,
        multipass=multipass,
    )
