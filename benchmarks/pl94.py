"""A PL94-shaped synthetic state: the benchmark input of Census-scale runs.

Deterministic from a seed. The shape follows the 2020 redistricting data (P.L. 94-171):

* geography: nation > state > county > tract group > tract > block group > block, in the
  proportions of a medium state (3 million persons: 70 counties, 800 tract groups, 1,600
  tracts, 4,500 block groups, 60,000 blocks), scaled linearly with the number of persons, at
  least one unit per parent; children are spread over their parents with lognormal weights;
* blocks: 35% empty, the others with lognormal sizes (so a few hold hundreds of persons and
  many a handful); group quarters in about 1.5% of blocks;
* attributes: VOTING_AGE (2) x HISPANIC (2) x RACE (63: the non-empty combinations of six
  race groups, coded 1..63 in the Census Bureau's CENRACE order, so the preset
  ``census2020_pl94`` reads them as the DAS does: 1..6 the races alone (White, Black, AIAN,
  Asian, NHPI, Some Other Race), then the pairs, triples, ... each in lexicographic order of
  the races, as ``programs/schema/attributes/cenrace.py`` of the DAS's 2020 redistricting
  production code lists them) x HHGQ (8: household, then seven group-quarters types) = 2,016
  cells. Race and Hispanic origin mix differently from tract to tract
  (Dirichlet around state-wide shares); group-quarters types occur only in GQ blocks.

Run ``python benchmarks/pl94.py --persons 10000`` to print a summary of one state.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

if "topdown" not in sys.modules:  # run as a script; bench_pl94 may have chosen another checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from constraints.attach import ConstraintSet  # noqa: E402
from constraints.contextual_constraints import SumEqualRealTotal  # noqa: E402
from constraints.logical_expressions.atomic import TrueExpression  # noqa: E402
from topdown import Attribute, Schema, Strategy  # noqa: E402
from topdown.strategy import LevelStrategy, Query  # noqa: E402

__all__ = [
    "PL94State",
    "make_state",
    "pl94_schema",
    "production_strategy",
    "detailed_strategy",
    "state_total_invariant",
    "GEOGRAPHY",
    "MEDIUM_PERSONS",
    "CALIFORNIA_PERSONS",
    "CALIFORNIA_UNITS",
    "StateFiles",
    "write_state",
]

MEDIUM_PERSONS = 3_000_000
# units per medium state, top down (the state itself is 1)
MEDIUM_UNITS = {
    "COUNTY": 70,
    "TRACT_GROUP": 800,
    "TRACT": 1_600,
    "BLOCK_GROUP": 4_500,
    "BLOCK": 60_000,
}
GEOGRAPHY = ("STATE", *MEDIUM_UNITS)
EMPTY_BLOCKS = 0.35
GQ_BLOCKS = 0.015
BLOCK_SIGMA = 1.1  # lognormal sigma of non-empty block sizes
UNIT_SIGMA = 0.6  # lognormal sigma of the weights spreading children over parents

# 2020 geolevel shares of rho for persons (nation, state, county, tract, block group, block)
PRODUCTION_RHO = Fraction(256, 100)
PRODUCTION_SHARES = (
    Fraction(104, 4099),
    Fraction(1440, 4099),
    Fraction(447, 4099),
    Fraction(687, 4099),
    Fraction(1256, 4099),
    Fraction(165, 4099),
)
# per-level queries of the production shape (a choice here, not the production figures)
PRODUCTION_QUERIES = (
    ("detailed", Fraction(1, 2)),
    ("VOTING_AGE x HISPANIC x RACE", Fraction(3, 10)),
    ("HHGQ", Fraction(1, 10)),
    ("total", Fraction(1, 10)),
)

_RACE_SINGLE = np.array([0.62, 0.12, 0.012, 0.06, 0.002, 0.086])  # W, B, AIAN, A, NHPI, SOR
_TWO_OR_MORE = 0.10


@dataclass(frozen=True)
class PL94State:
    """One synthetic state: person records, the declared geography (one row per block, empty
    blocks included) and the counts of units per level."""

    records: pd.DataFrame
    geography: pd.DataFrame
    units: dict[str, int]

    @property
    def persons(self) -> int:
        return len(self.records)


def pl94_schema(tract_groups: bool = False) -> Schema:
    """The 2,016-cell schema; hierarchy state > county > [tract group >] tract > BG > block."""
    hierarchy = [c for c in GEOGRAPHY if tract_groups or c != "TRACT_GROUP"]
    return Schema(
        (
            Attribute("VOTING_AGE", values=(0, 1)),
            Attribute("HISPANIC", values=(0, 1)),
            Attribute("RACE", values=tuple(range(1, 64))),
            Attribute("HHGQ", values=tuple(range(8))),
        ),
        tuple(hierarchy),
    )


def _race_shares() -> np.ndarray:
    """State-wide shares of the 63 race combinations (index = bit mask - 1)."""
    masks = np.arange(1, 64)
    bits = (masks[:, None] >> np.arange(6)) & 1
    n_races = bits.sum(axis=1)
    shares = np.zeros(63)
    single = n_races == 1
    shares[single] = _RACE_SINGLE[np.argmax(bits[single], axis=1)]
    # combinations of k >= 2 races: weight decays with k, and follows the races' own shares
    multi = ~single
    weight = np.prod(np.where(bits[multi] == 1, _RACE_SINGLE + 0.05, 1.0), axis=1)
    weight *= 0.15 ** (n_races[multi] - 2)
    shares[multi] = _TWO_OR_MORE * weight / weight.sum()
    return shares / shares.sum()


def _spread(children: int, parents: int, rng: np.random.Generator) -> np.ndarray:
    """Each child's parent: at least one child per parent, the rest by lognormal weights."""
    if children < parents:
        raise ValueError(f"children ({children}) must be at least parents ({parents})")
    weights = rng.lognormal(0.0, UNIT_SIGMA, parents)
    extra = rng.multinomial(children - parents, weights / weights.sum())
    return np.repeat(np.arange(parents), 1 + extra)


def _units(persons: int) -> dict[str, int]:
    """Units per level for ``persons``: the medium state's ratios, at least one per parent."""
    units: dict[str, int] = {}
    above = 1
    for column, medium in MEDIUM_UNITS.items():
        above = max(above, round(medium * persons / MEDIUM_PERSONS))
        units[column] = above
    return units


def _categorical_from_codes(codes: np.ndarray, labels: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=pd.Index(labels))


def _geography(
    units: dict[str, int], rng: np.random.Generator
) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """Labels of every unit (parent label + own number) and each unit's parent index, level by
    level; children of one parent are contiguous (parent indices are non-decreasing)."""
    parent_of: dict[str, np.ndarray] = {}
    labels: dict[str, list[str]] = {"STATE": ["01"]}
    previous = "STATE"
    for column, count in units.items():
        parents = _spread(count, len(labels[previous]), rng)
        parent_of[column] = parents
        within = np.arange(count) - np.searchsorted(parents, parents)
        width = {"COUNTY": 3, "TRACT_GROUP": 3, "TRACT": 3, "BLOCK_GROUP": 2, "BLOCK": 4}[column]
        prev = labels[previous]
        labels[column] = [f"{prev[p]}{w:0{width}d}" for p, w in zip(parents, within, strict=True)]
        previous = column
    return labels, parent_of


def _block_sizes(
    n_blocks: int, persons: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Block populations: 35% empty, lognormal sizes for the rest, summing to ``persons``
    exactly; returns (occupied blocks, sizes of all blocks)."""
    occupied = rng.permutation(n_blocks)[: max(1, round(n_blocks * (1 - EMPTY_BLOCKS)))]
    occupied = np.sort(occupied[: min(occupied.size, persons)])
    weights = rng.lognormal(0.0, BLOCK_SIGMA, occupied.size)
    sizes = np.zeros(n_blocks, dtype=np.int64)
    sizes[occupied] = 1 + rng.multinomial(persons - occupied.size, weights / weights.sum())
    return occupied, sizes


def _cenrace_of_mask() -> np.ndarray:
    """Bit mask of the races marked (bit 0 White .. bit 5 Some Other Race) -> CENRACE code
    1..63: the combinations of one race, then of two, ..., each size in lexicographic order
    (the DAS's ``cenrace.py``). Index 0 (no race) is unused."""
    table = np.zeros(64, dtype=np.int64)
    combos = (c for k in range(1, 7) for c in itertools.combinations(range(6), k))
    for code, combo in enumerate(combos, start=1):
        table[sum(1 << race for race in combo)] = code
    return table


CENRACE_OF_MASK = _cenrace_of_mask()


def _race(cum: np.ndarray, tract: np.ndarray, u: np.ndarray) -> np.ndarray:
    """CENRACE codes (1..63) drawn by inverting each person's tract's cumulative shares of the
    race bit masks (``cum``: tracts x 63, column ``mask - 1``, rows ending at 1) at the
    uniforms ``u``; ``tract`` indexes ``cum``."""
    n_tracts = cum.shape[0]
    race = np.searchsorted((cum + np.arange(n_tracts)[:, None]).ravel(), u + tract, side="right")
    return CENRACE_OF_MASK[race - tract * 63 + 1]


def make_state(persons: int, seed: int = 0) -> PL94State:
    """A PL94-shaped state of exactly ``persons`` persons (>= 1,000), reproducible from ``seed``.

    Geography columns are categoricals (so 3 million records stay small); attribute columns
    are small integers.
    """
    if persons < 1_000:
        raise ValueError(f"persons ({persons}) must be at least 1000")
    rng = np.random.default_rng(seed)
    units = _units(persons)
    labels, parent_of = _geography(units, rng)
    n_blocks = units["BLOCK"]
    occupied, sizes = _block_sizes(n_blocks, persons, rng)
    block = np.repeat(np.arange(n_blocks), sizes)
    # ancestors of every person's block
    code = {"BLOCK": block}
    for column, child in zip(reversed(list(units)[:-1]), reversed(list(units)[1:]), strict=True):
        code[column] = parent_of[child][code[child]]
    tract = code["TRACT"]
    n_tracts = units["TRACT"]
    # race and Hispanic origin mix by tract
    race_p = rng.dirichlet(_race_shares() * 60.0 + 0.01, n_tracts)
    cum = np.cumsum(race_p, axis=1)
    cum[:, -1] = 1.0
    race = _race(cum, tract, rng.random(persons))
    hisp_p = rng.beta(1.2, 5.0, n_tracts)
    hispanic = (rng.random(persons) < hisp_p[tract]).astype(np.int8)
    voting_age = (rng.random(persons) < rng.beta(40, 11, n_tracts)[tract]).astype(np.int8)
    # group quarters: ~1.5% of occupied blocks, each with one GQ type housing most residents
    gq_blocks = rng.random(n_blocks) < GQ_BLOCKS * n_blocks / max(1, occupied.size)
    gq_type = rng.integers(1, 8, n_blocks)
    in_gq = gq_blocks[block] & (rng.random(persons) < 0.8)
    hhgq = np.where(in_gq, gq_type[block], 0).astype(np.int8)
    voting_age = np.where(in_gq & (gq_type[block] != 4), 1, voting_age).astype(np.int8)
    records = pd.DataFrame(
        {
            "STATE": _categorical_from_codes(np.zeros(persons, dtype=np.int64), labels["STATE"]),
            **{c: _categorical_from_codes(code[c], labels[c]) for c in units},
            "VOTING_AGE": voting_age,
            "HISPANIC": hispanic,
            "RACE": race.astype(np.int8),
            "HHGQ": hhgq,
        }
    )
    geography = pd.DataFrame(
        {"STATE": labels["STATE"] * n_blocks}
        | {c: np.asarray(labels[c], dtype=object)[_ancestor(parent_of, units, c)] for c in units}
    )
    return PL94State(records, geography, {"STATE": 1, **units})


def _ancestor(parent_of: dict[str, np.ndarray], units: dict[str, int], column: str) -> np.ndarray:
    """For each block, the index of its unit in ``column``."""
    index = np.arange(units["BLOCK"])
    for child in reversed(list(units)):
        if child == column:
            return index
        index = parent_of[child][index]
    raise ValueError(f"column ({column!r}) must be one of {list(units)}")


# a California-sized state (2020 counts rounded): 58 counties, about 8,000 tracts, 23,000 block
# groups, 520,000 blocks; tract groups are pairs of tracts
CALIFORNIA_PERSONS = 39_000_000
CALIFORNIA_UNITS = {
    "COUNTY": 58,
    "TRACT_GROUP": 4_000,
    "TRACT": 8_057,
    "BLOCK_GROUP": 23_212,
    "BLOCK": 519_723,
}


@dataclass(frozen=True)
class StateFiles:
    """A state written by ``write_state``: one Parquet file of records per county (the stream
    partitions), the declared geography, and the counts of units and persons."""

    records: Path
    geography: Path
    units: dict[str, int]
    persons: int


def write_state(
    out: str | Path,
    persons: int,
    seed: int = 0,
    *,
    units: dict[str, int] | None = None,
) -> StateFiles:
    """Write a PL94-shaped state as Parquet, one county at a time, in bounded memory.

    ``out/records/<county>.parquet`` holds one county's records (every hierarchy column and the
    four attributes), ``out/geography.parquet`` the declared units (one row per block). The
    geography and the per-unit parameters (block sizes, tract mixes, group-quarters blocks) are
    drawn for the whole state from ``seed``; each county's persons from a stream of their own
    (``seed``, county index), so memory follows the largest county and the files do not depend
    on the order they are written in. The shape is ``make_state``'s, not its exact records.

    Args:
        out: a new or empty folder.
        persons: persons in the state (>= 1,000).
        seed: the state's seed.
        units: units per level below the state (``CALIFORNIA_UNITS``); default the medium
            state's ratios scaled to ``persons``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if persons < 1_000:
        raise ValueError(f"persons ({persons}) must be at least 1000")
    units = dict(units or _units(persons))
    if list(units) != list(MEDIUM_UNITS):
        raise ValueError(f"units ({units}) must give, in order, {list(MEDIUM_UNITS)}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"out ({str(out)!r}) must be a new or empty folder")
    (out / "records").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    labels, parent_of = _geography(units, rng)
    n_blocks = units["BLOCK"]
    occupied, sizes = _block_sizes(n_blocks, persons, rng)
    n_tracts = units["TRACT"]
    cum = np.cumsum(rng.dirichlet(_race_shares() * 60.0 + 0.01, n_tracts), axis=1)
    cum[:, -1] = 1.0
    hisp_p = rng.beta(1.2, 5.0, n_tracts)
    adult_p = rng.beta(40, 11, n_tracts)
    gq_blocks = rng.random(n_blocks) < GQ_BLOCKS * n_blocks / max(1, occupied.size)
    gq_type = rng.integers(1, 8, n_blocks)
    ancestors = {c: _ancestor(parent_of, units, c) for c in units}  # per block
    county_of_block = ancestors["COUNTY"]
    bounds = np.searchsorted(county_of_block, np.arange(units["COUNTY"] + 1))
    dictionaries = {c: pa.array(labels[c]) for c in ("STATE", *units)}
    for county in range(units["COUNTY"]):
        blocks = np.arange(bounds[county], bounds[county + 1])
        block = np.repeat(blocks, sizes[blocks])
        n = block.size
        draw = np.random.default_rng([seed, county])
        tract = ancestors["TRACT"][block]
        race = _race(cum, tract, draw.random(n))
        hispanic = (draw.random(n) < hisp_p[tract]).astype(np.int8)
        voting_age = (draw.random(n) < adult_p[tract]).astype(np.int8)
        in_gq = gq_blocks[block] & (draw.random(n) < 0.8)
        hhgq = np.where(in_gq, gq_type[block], 0).astype(np.int8)
        voting_age = np.where(in_gq & (gq_type[block] != 4), 1, voting_age).astype(np.int8)
        columns = {
            "STATE": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), dictionaries["STATE"])
        }
        for c in units:  # the county's units are contiguous: its own labels only
            first, last = ancestors[c][blocks[[0, -1]]] if blocks.size else (0, -1)
            codes = (ancestors[c][block] - first).astype(np.int32)
            columns[c] = pa.DictionaryArray.from_arrays(codes, dictionaries[c][first : last + 1])
        columns |= {
            "VOTING_AGE": pa.array(voting_age),
            "HISPANIC": pa.array(hispanic),
            "RACE": pa.array(race.astype(np.int8)),
            "HHGQ": pa.array(hhgq),
        }
        pq.write_table(pa.table(columns), out / "records" / f"{labels['COUNTY'][county]}.parquet")
    geography = pd.DataFrame(
        {"STATE": labels["STATE"] * n_blocks}
        | {c: np.asarray(labels[c], dtype=object)[ancestors[c]] for c in units}
    )
    geography.to_parquet(out / "geography.parquet", index=False)
    return StateFiles(out / "records", out / "geography.parquet", {"STATE": 1, **units}, persons)


def production_strategy(tract_groups: bool = False, rho: Fraction = PRODUCTION_RHO) -> Strategy:
    """rho split over levels by the 2020 production shares; detailed plus marginals per level.

    With tract groups, that level takes half of the tract's share (the production shares
    have no separate tract-group level).
    """
    shares = list(PRODUCTION_SHARES)
    if tract_groups:
        shares[3:4] = [shares[3] / 2, shares[3] / 2]
    queries = tuple((Query.parse(q), s) for q, s in PRODUCTION_QUERIES)
    return Strategy(tuple(LevelStrategy(rho * s, queries) for s in shares))


def detailed_strategy(tract_groups: bool = False, rho: Fraction = PRODUCTION_RHO) -> Strategy:
    """The same level budgets, all of each on the detailed query."""
    shares = list(PRODUCTION_SHARES)
    if tract_groups:
        shares[3:4] = [shares[3] / 2, shares[3] / 2]
    return Strategy(tuple(LevelStrategy(rho * s) for s in shares))


def state_total_invariant() -> ConstraintSet:
    """The state's total population published exactly (also fixes the nation's)."""
    constraints = ConstraintSet()
    constraints.add(SumEqualRealTotal(TrueExpression()), level=1)
    return constraints


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--units",
        choices=["scaled", "california"],
        default="scaled",
        help="units per level: the medium state's ratios scaled, or California's counts",
    )
    parser.add_argument("--write", metavar="DIR", help="write Parquet by county to DIR")
    args = parser.parse_args(argv)
    if args.write:
        units = CALIFORNIA_UNITS if args.units == "california" else None
        files = write_state(args.write, args.persons, args.seed, units=units)
        print(f"wrote {files.persons} persons by county to {files.records}, units {files.units}")
        return 0
    state = make_state(args.persons, args.seed)
    by_block = state.records.groupby("BLOCK", observed=False)
    sizes = by_block.size()
    print(f"persons {state.persons}, units {state.units}")
    print(
        f"empty blocks {np.mean(sizes == 0):.1%}, largest block {sizes.max()}, "
        f"median non-empty block {int(sizes[sizes > 0].median())}, "
        f"GQ persons {np.mean(state.records['HHGQ'] > 0):.2%}, "
        f"blocks with GQ {np.mean(by_block['HHGQ'].max() > 0):.2%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
