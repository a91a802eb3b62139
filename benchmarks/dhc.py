"""A DHC-persons-shaped synthetic state: the 2020 DHC persons histogram, 1,227,744 cells a node.

Built on the PL94-shaped state (``benchmarks/pl94.py``: the same geography, race and Hispanic
origin by tract, group quarters in few blocks), with the attributes of the Demographic and
Housing Characteristics persons histogram:

* ``RELGQ`` (42), in the DAS's codes (``relgq.py`` of the DHC production code, as
  ``topdown.presets.census2020_dhcp``'s recodes read them): the 18 relationships to the
  householder for persons in households (codes 0..17: householder living alone or not,
  spouses and partners, children, other relatives, non-relatives; skewed the way households
  are) and the 24 group-quarters types (codes 18..41), a person of PL94's group-quarters type
  getting one of the codes the DAS's eight-level GQ recode puts in that type (correctional
  18..23, juvenile 24..26, nursing 27, other institutional 28..32, college 33, military 34..35,
  other noninstitutional 36..41);
* ``SEX`` (2), ``AGE`` (116: single years 0..115; under 18 exactly when PL94's voting-age flag
  is 0; group quarters' ages by type: college dormitories young, nursing homes old);
* ``HISPANIC`` (2) and ``CENRACE`` (63), PL94's ``HISPANIC`` and ``RACE``.

42 x 2 x 116 x 2 x 63 = 1,227,744 cells. The frequencies are a synthetic stand-in with the
production histogram's shape, not the Census Bureau's; the RELGQ codes are the DAS's.

Run ``python benchmarks/dhc.py --persons 10000`` to print a summary of one state.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

if "topdown" not in sys.modules:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.pl94 import PL94State, make_state  # noqa: E402
from topdown import Attribute, Schema  # noqa: E402

__all__ = ["DHC_SHAPE", "dhc_schema", "make_dhc_state"]

#: RELGQ, SEX, AGE, HISPANIC, CENRACE
DHC_SHAPE = (42, 2, 116, 2, 63)
HOUSEHOLD_RELATIONSHIPS = 18
#: the shares of the 18 household relationship codes (``relgq.py``'s order): householder alone,
#: not alone, opposite-sex spouse, partner, same-sex spouse, partner, biological, adopted and
#: step children, sibling, parent, grandchild, parent-in-law, child-in-law, other relative,
#: roommate, foster child, other nonrelative
_REL_SHARES = np.array(
    [0.11, 0.27, 0.15, 0.04, 0.005, 0.005, 0.22, 0.01, 0.02]
    + [0.015, 0.015, 0.03, 0.005, 0.005, 0.02, 0.02, 0.003, 0.017]
)
#: codes 0..5 (householders, spouses, partners) are adults; a minor drawn there is a child
_ADULT_ONLY = 6
_BIOLOGICAL_CHILD = 6
#: PL94's group-quarters type (HHGQ 1..7) -> the DAS RELGQ codes of that type
_GQ_CODES = {
    1: tuple(range(18, 24)),
    2: tuple(range(24, 27)),
    3: (27,),
    4: tuple(range(28, 33)),
    5: (33,),
    6: (34, 35),
    7: tuple(range(36, 42)),
}
#: the group-quarters types' (PL94 HHGQ 1..7) typical age bands (low, high)
_GQ_AGES = {
    1: (18, 80),
    2: (12, 20),
    3: (65, 105),
    4: (18, 95),
    5: (18, 24),
    6: (18, 40),
    7: (18, 90),
}


def dhc_schema(hierarchy: tuple[str, ...] = ("COUNTY", "TRACT")) -> Schema:
    """The 1,227,744-cell schema over ``hierarchy`` (columns of the PL94-shaped state)."""
    return Schema(
        (
            Attribute("RELGQ", values=tuple(range(42))),
            Attribute("SEX", values=(1, 2)),
            Attribute("AGE", values=tuple(range(116))),
            Attribute("HISPANIC", values=(0, 1)),
            Attribute("CENRACE", values=tuple(range(1, 64))),
        ),
        hierarchy,
    )


def make_dhc_state(persons: int, seed: int = 0) -> PL94State:
    """A DHC-shaped state of exactly ``persons`` persons (>= 1,000), reproducible from ``seed``."""
    base = make_state(persons, seed)
    rng = np.random.default_rng(seed + 1)
    rec = base.records
    hhgq = rec["HHGQ"].to_numpy()
    adult = rec["VOTING_AGE"].to_numpy() == 1
    shares = _REL_SHARES / _REL_SHARES.sum()
    rel = rng.choice(HOUSEHOLD_RELATIONSHIPS, size=persons, p=shares)
    # a householder, spouse or partner is an adult; a minor is most often a child
    rel = np.where(~adult & (rel < _ADULT_ONLY), _BIOLOGICAL_CHILD, rel)
    for gq, codes in _GQ_CODES.items():
        here = np.flatnonzero(hhgq == gq)
        rel[here] = np.asarray(codes)[rng.integers(0, len(codes), here.size)]
    age = np.where(
        adult,
        np.minimum(18 + rng.gamma(2.2, 14.0, persons).astype(np.int64), 115),
        rng.integers(0, 18, persons),
    )
    for gq, (low, high) in _GQ_AGES.items():
        here = hhgq == gq
        age[here] = rng.integers(low, high + 1, int(here.sum()))
    age = np.where(adult, np.maximum(age, 18), np.minimum(age, 17))
    records = pd.DataFrame(
        {
            **{c: rec[c] for c in base.geography.columns},
            "RELGQ": rel.astype(np.int16),
            "SEX": rng.integers(1, 3, persons).astype(np.int8),
            "AGE": age.astype(np.int16),
            "HISPANIC": rec["HISPANIC"].to_numpy(),
            "CENRACE": rec["RACE"].to_numpy(),
        }
    )
    return PL94State(records, base.geography, base.units)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    state = make_dhc_state(args.persons, args.seed)
    print(f"{state.persons:,} persons; units: {state.units}")
    print(state.records.describe().T[["min", "max", "mean"]].to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
