"""The Census 2020 production presets: exact shares as the source has them, queries that parse,
recodes that partition, hierarchies mapped or refused, a release that runs, the TOML form.

The expected numbers below are copied by hand from the Census Bureau's public code, not from
the preset modules, so a slip in either shows:

- PL94: uscensusbureau/DAS_2020_Redistricting_Production_Code,
  ``source/configs/production/pl94/person_US.ini`` (geolevel_budget_prop),
  ``source/configs/production/pl94/person_default.ini`` (global_scale = 339/542),
  ``source/programs/strategies/strategies.py``,
  ``ProductionCandidate20210527US_mult8_add02_dsepJune3`` (QUERIESPROP).
- DHC persons: uscensusbureau/DAS_2020_DHC_Production_Code,
  ``das_decennial/programs/strategies/dhcp_strategies.py``,
  ``DecompTestStrategyDHCP_20220922_exp_iteration_23_1`` (QUERIESPROP, in 1/10000 of rho),
  ``das_decennial/programs/schema/attributes/age.py`` and ``relgq.py`` (the recodes).
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction as Fr
from pathlib import Path

import pytest

from benchmarks.pl94 import make_state, state_total_invariant
from topdown import release
from topdown.errors import DomainError, StrategyError
from topdown.measurement.measure import make_level_mechanisms
from topdown.presets import census2020_dhcp, census2020_pl94
from topdown.presets.census2020_dhcp import DHCP_GEOLEVELS
from topdown.product.config import ConfigError, load_config, parse_config
from topdown.query import Query

ROOT = Path(__file__).resolve().parents[1]
PL94_TOTAL = Fr(542, 339) ** 2  # 1 / global_scale**2


def _share(strategy, level: int, query: str) -> Fr:
    return dict((q.name, s) for q, s in strategy.levels[level].queries)[query]


# -- PL94 -------------------------------------------------------------------------------------
def test_pl94_shares_are_the_sources_and_sum_to_one() -> None:
    _, strategy = census2020_pl94()
    assert strategy.total() == PL94_TOTAL == Fr(293764, 114921)
    geolevel_props = [104, 1440, 447, 687, 1256, 165]  # person_US.ini, over 4099
    assert [ls.budget / PL94_TOTAL for ls in strategy.levels] == [
        Fr(p, 4099) for p in geolevel_props
    ]
    for ls in strategy.levels:
        assert sum(s for _, s in ls.queries) == 1
    # strategies.py, class ProductionCandidate20210527US_mult8_add02_dsepJune3
    assert _share(strategy, 0, "detailed") == Fr(189, 241)  # US
    assert _share(strategy, 0, "VOTINGAGE x HISPANIC x CENRACE") == Fr(26, 241)
    assert _share(strategy, 1, "total") == Fr(3773, 4097)  # State
    assert _share(strategy, 2, "detailed") == Fr(754, 4097)  # County
    assert _share(strategy, 3, "HISPANIC x CENRACE") == Fr(1933, 4102)  # Tract
    assert _share(strategy, 3, "CENRACE") == Fr(4, 2051)
    assert _share(strategy, 4, "total") == Fr(1705, 4099)  # Block_Group
    assert _share(strategy, 5, "detailed") == Fr(3945, 4097)  # Block
    assert _share(strategy, 5, "HHGQ:hhinst") == Fr(5, 4097)
    # 11 queries per geolevel, 10 at the US (no total)
    assert [len(ls.queries) for ls in strategy.levels] == [10, 11, 11, 11, 11, 11]
    assert "total" not in {q.name for q, _ in strategy.levels[0].queries}
    # the query ordering: total alone first at State, County, Tract, Block_Group
    assert [ls.first_pass for ls in strategy.levels] == [()] + [("total",)] * 4 + [()]


def test_pl94_noise_is_the_productions() -> None:
    """The DAS draws each query's discrete Gaussian with variance 1 / (query rho)
    (primitives.RationalDiscreteGaussianMechanism: sigma_sq = 1/inverse_scale, inverse_scale =
    query prop x geolevel prop / global_scale**2); replace_one neighbours give the same."""
    _, strategy = census2020_pl94()
    assert (strategy.mechanism, strategy.neighbouring) == ("discrete_gaussian", "replace_one")
    for level, ls in enumerate(strategy.levels):
        for query, share, mech in make_level_mechanisms(strategy, level):
            assert mech.sigma2 == 1 / (ls.budget * share), (level, query.name)
    block_detailed = PL94_TOTAL * Fr(165, 4099) * Fr(3945, 4097)
    assert make_level_mechanisms(strategy, 5)[-1][2].sigma2 == 1 / block_detailed


def test_pl94_schema_and_hhinst_recode() -> None:
    schema, _ = census2020_pl94()
    assert [a.name for a in schema.attributes] == ["HHGQ", "VOTINGAGE", "HISPANIC", "CENRACE"]
    assert schema.domain.shape == (8, 2, 2, 63)
    assert schema.attribute("CENRACE").domain_values == tuple(range(1, 64))
    # hhgq_person_simple.py, recodeHHnstLevels
    assert schema.domain.grouping("HHGQ", "hhinst") == (0, 1, 1, 1, 1, 2, 2, 2)
    # default columns: benchmarks/pl94.py's
    assert [a.source for a in schema.attributes] == ["HHGQ", "VOTING_AGE", "HISPANIC", "RACE"]
    schema, _ = census2020_pl94(columns={"cenrace": "CENRACE_CODE"})
    assert schema.attribute("CENRACE").source == "CENRACE_CODE"
    with pytest.raises(DomainError, match=r"columns names 'race'.*'cenrace'"):
        census2020_pl94(columns={"race": "RACE"})


def test_pl94_prefix_hierarchy_and_rho_override() -> None:
    _, full = census2020_pl94()
    _, tract = census2020_pl94(("STATE", "COUNTY", "TRACT"))
    # the levels it has get the production budgets; the rest are not spent
    assert [ls.budget for ls in tract.levels] == [ls.budget for ls in full.levels[:4]]
    assert tract.meta["omitted_geolevels"] == ["Block_Group", "Block"]
    assert Fr(tract.meta["unspent"]) == PL94_TOTAL * Fr(1256 + 165, 4099)
    # geolevels= maps columns to chosen levels (a gap leaves the level between unspent)
    _, counties = census2020_pl94(("COUNTY", "TRACT"), geolevels=("County", "Tract"))
    assert [ls.budget for ls in counties.levels] == [full.levels[i].budget for i in (0, 2, 3)]
    # rho= scales the whole production total; the shares stay
    _, scaled = census2020_pl94(rho="1")
    assert scaled.total() == 1
    assert [ls.budget for ls in scaled.levels] == [
        Fr(p, 4099) for p in (104, 1440, 447, 687, 1256, 165)
    ]
    assert [ls.queries for ls in scaled.levels] == [ls.queries for ls in full.levels]
    _, single = census2020_pl94(multipass=False)
    assert all(ls.first_pass == () for ls in single.levels)


@pytest.mark.parametrize(
    ("hierarchy", "geolevels", "message"),
    [
        (("S", "C", "T", "BG", "B", "X"), None, r"6 columns, more than the 5 levels"),
        ((), None, r"hierarchy \(empty\)"),
        (("S", "C"), ("County", "State"), r"must follow the source's order"),
        (("S", "C"), ("State", "State"), r"must follow the source's order"),
        (("S", "C"), ("State", "Tract_Group"), r"\['Tract_Group'\] are not levels"),
        (("S", "C"), ("State",), r"name 1 levels for the 2 hierarchy columns"),
        (("S",), ("US",), r"\['US'\] are not levels"),
    ],
)
def test_a_hierarchy_it_cannot_map_is_refused(hierarchy, geolevels, message) -> None:
    with pytest.raises(StrategyError, match=message) as info:
        census2020_pl94(hierarchy, geolevels=geolevels)
    # every refusal says what is accepted
    assert "maps the root to 'US'" in str(info.value)
    assert "'State', 'County', 'Tract', 'Block_Group', 'Block'" in str(info.value)


# -- DHC persons ------------------------------------------------------------------------------
def test_dhcp_budgets_and_shares_are_the_sources() -> None:
    _, strategy = census2020_dhcp(
        ("S", "C", "P", "TSG", "TS", "BG", "B"), geolevels=DHCP_GEOLEVELS[1:]
    )
    # level budget = the sum of its queries' allocations (1/10000 of rho): budget.py QueryBudget
    sums = {"US": 949, "State": 12987, "County": 4960, "Prim": 6214, "Tract_Subset_Group": 6214,
            "Tract_Subset": 13888, "Block_Group": 4300, "Block": 110}  # fmt: skip
    assert [ls.budget for ls in strategy.levels] == [Fr(sums[g], 10000) for g in DHCP_GEOLEVELS]
    assert strategy.total() == Fr(49622, 10000)
    for ls in strategy.levels:
        assert len(ls.queries) == 10
        assert sum(s for _, s in ls.queries) == 1
    gq_age = "RELGQ:gq_constr_groups x AGE:age_10_groups"
    assert _share(strategy, 0, gq_age) == Fr(292, 949)  # US: 73 x 4
    assert _share(strategy, 2, "RELGQ:popSehsdTargetsRelship") == Fr(1240, 4960)  # County
    assert _share(strategy, 5, gq_age) == Fr(3472, 13888)  # Tract_Subset
    assert _share(strategy, 5, "detailed") == Fr(868, 13888)
    assert _share(strategy, 7, "detailed") == Fr(11, 110)  # Block
    # the query ordering: the nine marginals first, detailed after
    assert all(
        len(ls.first_pass) == 9 and "detailed" not in ls.first_pass for ls in strategy.levels
    )


def test_dhcp_default_hierarchy_skips_the_spine_levels() -> None:
    schema, strategy = census2020_dhcp()
    assert schema.domain.size == 42 * 2 * 116 * 2 * 63 == 1_227_744
    assert strategy.meta["geolevels"] == [
        "US",
        "State",
        "County",
        "Tract_Subset",
        "Block_Group",
        "Block",
    ]
    assert strategy.meta["omitted_geolevels"] == ["Prim", "Tract_Subset_Group"]
    assert Fr(strategy.meta["unspent"]) == Fr(2 * 6214, 10000)
    with pytest.raises(StrategyError, match="more than the 5 levels"):
        census2020_dhcp(("S", "C", "P", "TSG", "TS", "BG", "B"))


def test_dhcp_recodes_are_the_sources_partitions() -> None:
    schema, _ = census2020_dhcp()
    expected_groups = {
        ("AGE", "age_18_64_116"): 3,
        ("AGE", "age_38_groups"): 38,
        ("AGE", "age_40_groups"): 40,
        ("AGE", "age_10_groups"): 10,
        ("RELGQ", "relgq_4_groups"): 4,
        ("RELGQ", "gq_constr_groups"): 6,
        ("RELGQ", "popSehsdTargetsRelship"): 19,
        ("RELGQ", "relship_and_eight_level_GQ"): 25,
    }
    for (attribute, recode), n in expected_groups.items():
        groups = schema.attribute(attribute).recode_map[recode]
        members = [v for vals in groups.values() for v in vals]
        values = schema.attribute(attribute).domain_values
        assert len(groups) == n, recode
        assert sorted(members) == sorted(values) and len(set(members)) == len(members), recode
    age, relgq = schema.attribute("AGE").recode_map, schema.attribute("RELGQ").recode_map
    # spot checks against age.py and relgq.py
    assert age["age_38_groups"]["15 to 17 years"] == (15, 16, 17)
    assert age["age_38_groups"]["60 to 61 years"] == (60, 61)
    assert age["age_40_groups"]["17 years"] == (17,)
    assert age["age_40_groups"]["110 to 115 years"] == tuple(range(110, 116))
    assert age["age_10_groups"]["35 to 115 years"] == tuple(range(35, 116))
    assert relgq["gq_constr_groups"]["GQ in the constraint for AGE < 16"] == (
        33,
        37,
        38,
        39,
        40,
        41,
    )
    assert relgq["gq_constr_groups"]["GQ in the constraint for AGE < 17"] == (23, 31, 34, 35)
    assert relgq["relgq_4_groups"]["Institutionalized population"] == tuple(range(18, 33))
    assert relgq["relship_and_eight_level_GQ"]["Military quarters"] == (34, 35)
    assert relgq["popSehsdTargetsRelship"]["In a GQ"] == tuple(range(18, 42))


def test_every_query_parses_against_its_schema() -> None:
    pl94_schema, pl94 = census2020_pl94()
    dhcp_schema, dhcp = census2020_dhcp(
        ("S", "C", "P", "TSG", "TS", "BG", "B"), geolevels=DHCP_GEOLEVELS[1:]
    )
    for schema, strategy in ((pl94_schema, pl94), (dhcp_schema, dhcp)):
        for ls in strategy.levels:
            for q, _ in ls.queries:
                assert Query.parse(q.name).factors(schema.domain) == q.factors(schema.domain)
    d = dhcp_schema.domain
    answers = {q.name: q.n_answers(d) for q, _ in dhcp.levels[0].queries}
    assert answers["AGE:age_18_64_116 x RELGQ:relgq_4_groups"] == 3 * 4
    assert answers["RELGQ:gq_constr_groups x AGE:age_10_groups"] == 6 * 10
    assert answers[
        "HISPANIC x SEX x AGE:age_40_groups x RELGQ:relship_and_eight_level_GQ x CENRACE"
    ] == (2 * 2 * 40 * 25 * 63)
    assert answers["RELGQ x AGE:age_40_groups x HISPANIC x CENRACE x SEX"] == 42 * 40 * 2 * 63 * 2
    assert answers["detailed"] == 1_227_744
    assert {q.name: q.n_answers(pl94_schema.domain) for q, _ in pl94.levels[1].queries}[
        "HHGQ:hhinst"
    ] == 3


# -- a release ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_state():
    return make_state(1_000, seed=2)


@pytest.mark.parametrize("estimator", ["topdown", "blue"])
def test_a_small_pl94_release_with_the_preset_runs(tiny_state, estimator: str) -> None:
    schema, strategy = census2020_pl94(("STATE", "COUNTY", "TRACT"))
    geography = tiny_state.geography[list(schema.hierarchy)].drop_duplicates()
    out = release(
        tiny_state.records,
        schema,
        strategy,
        constraints=state_total_invariant(),
        seed=11,
        estimator=estimator,
        geography=geography,
    )
    report = out.check_correctness()
    assert report.ok, str(report)
    # the state's total is the invariant; every level sums to it
    assert [int(c.sum()) for c in out.counts] == [tiny_state.persons] * 4
    assert (
        out.ledger.total().rho == strategy.total() == PL94_TOTAL * Fr(104 + 1440 + 447 + 687, 4099)
    )
    measured = {e.query for e in out.ledger.entries if e.level == 3}
    assert {"HHGQ:hhinst", "HISPANIC x CENRACE", "total", "detailed"} <= measured


# -- TOML ---------------------------------------------------------------------------------------
def _config(tmp_path: Path, schema: dict, strategy: dict) -> dict:
    return {"data": {"path": str(tmp_path / "persons.csv")}, "schema": schema, "strategy": strategy}


def test_the_toml_preset_loads_and_resolves_in_full(tmp_path: Path) -> None:
    raw = _config(
        tmp_path,
        {"hierarchy": ["STATE", "COUNTY", "TRACT"], "columns": {"cenrace": "CENRACE"}},
        {"preset": "census2020_pl94", "rho": "2.56"},
    )
    config = parse_config(raw, "run.toml", base=tmp_path)
    schema, strategy = census2020_pl94(
        ("STATE", "COUNTY", "TRACT"), {"cenrace": "CENRACE"}, rho="2.56"
    )
    assert config.schema == schema
    assert config.strategy == strategy
    # config.json of a release holds the preset written out, and loads back without it
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.resolved()))
    again = load_config(path)
    assert again.schema == schema and again.strategy == strategy
    assert again.schema.attribute("HHGQ").recode_map == schema.attribute("HHGQ").recode_map


def test_the_dhc_preset_hold_survives_config_json(tmp_path: Path) -> None:
    """The DHC preset holds exactly (no tolerance in config.json, where production allowed
    0.1); a written-out strategy may state one (production's 0.1), which loads back, checked
    and named."""
    raw = _config(tmp_path, {"hierarchy": ["STATE"]}, {"preset": "census2020_dhcp"})
    config = parse_config(raw, "run.toml", base=tmp_path)
    assert config.strategy.multipass_tolerance is None
    resolved = config.resolved()
    assert "multipass_tolerance" not in resolved["strategy"]
    resolved["strategy"]["multipass_tolerance"] = 0.1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(resolved))
    loaded = load_config(path).strategy
    assert loaded.multipass_tolerance == 0.1
    assert loaded == dataclasses.replace(config.strategy, multipass_tolerance=0.1)
    resolved["strategy"]["multipass_tolerance"] = -1
    path.write_text(json.dumps(resolved))
    with pytest.raises(ConfigError, match="strategy.multipass_tolerance"):
        load_config(path)


@pytest.mark.parametrize(
    ("schema", "strategy", "key", "message"),
    [
        ({"hierarchy": ["S"]}, {"preset": "census2030"}, "strategy.preset", "presets are"),
        ({"hierarchy": ["S"], "attributes": [{"name": "A", "values": [0]}]},
         {"preset": "census2020_pl94"}, "schema.attributes", "declares the attributes"),
        ({"hierarchy": ["S"]}, {"preset": "census2020_pl94", "budgets": [1, 1]},
         "strategy.budgets", "unknown key"),
        ({"hierarchy": ["S", "C"]}, {"preset": "census2020_pl94", "geolevels": ["County", "State"]},
         "strategy.geolevels", "source's order"),
        ({"hierarchy": list("ABCDEF")}, {"preset": "census2020_pl94"}, "schema.hierarchy",
         "more than the 5 levels"),
        ({"hierarchy": ["S"], "columns": {"race": "R"}}, {"preset": "census2020_pl94"}, "schema",
         "columns names 'race'"),
        ({"hierarchy": ["S"]}, {"preset": "census2020_pl94", "rho": -1}, "strategy.rho", "rho"),
        ({"hierarchy": ["S"]}, {"preset": "census2020_dhcp", "multipass": "yes"},
         "strategy.multipass", "true or false"),
    ],
)  # fmt: skip
def test_a_bad_toml_preset_names_its_key(tmp_path: Path, schema, strategy, key, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(_config(tmp_path, schema, strategy), "run.toml", base=tmp_path)
    assert info.value.key == key


def test_the_example_config_loads() -> None:
    config = load_config(ROOT / "examples" / "census2020_pl94.toml")
    schema, strategy = census2020_pl94()
    assert config.schema == schema and config.strategy == strategy
    assert config.estimator == "topdown"
