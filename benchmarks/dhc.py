"""A DHC-persons-shaped synthetic state: the 2020 DHC persons histogram, 1,227,744 cells a node.

Built on the PL94-shaped state (``benchmarks/pl94.py``: the same geography, race and Hispanic
origin by tract, group quarters in few blocks), with the attributes of the Demographic and
Housing Characteristics persons histogram:

* ``RELGQ`` (42): relationship to the householder for persons in households (codes 0..33:
  householder, spouse or partner, children, other relatives, non-relatives; skewed the way
  households are) and the group-quarters types (codes 34..41: PL94's seven types, and one
  more that this generator leaves empty);
* ``SEX`` (2), ``AGE`` (116: single years 0..115; under 18 exactly when PL94's voting-age flag
  is 0; group quarters' ages by type: college dormitories young, nursing homes old);
* ``HISPANIC`` (2) and ``CENRACE`` (63), PL94's ``HISPANIC`` and ``RACE``.

42 x 2 x 116 x 2 x 63 = 1,227,744 cells. The categories are a synthetic stand-in with the
production histogram's shape, not the Census Bureau's code lists.

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
HOUSEHOLD_RELATIONSHIPS = 34
#: the shares of the household relationship codes: householder, spouse/partner, children, the
#: rest spread thinly over the other relatives and non-relatives
_REL_HEAD = np.array([0.38, 0.19, 0.25, 0.03, 0.03])
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
    shares = np.concatenate(
        [_REL_HEAD, np.full(HOUSEHOLD_RELATIONSHIPS - _REL_HEAD.size, 0.12 / 29)]
    )
    rel = rng.choice(HOUSEHOLD_RELATIONSHIPS, size=persons, p=shares / shares.sum())
    # a householder or spouse is an adult; a minor is most often a child of the householder
    rel = np.where(~adult & (rel < 2), 2, rel)
    rel = np.where(hhgq > 0, HOUSEHOLD_RELATIONSHIPS + hhgq - 1, rel)
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
