"""A small synthetic state > county > tract population: sparse tracts over 144 cells.

About 60 people per tract over SEX x 8 age bins x 9 races, so most cells are empty: the regime
where non-negativity matters most. Used by ``bench_estimators.py`` beside the ACS excerpt; the
census-scale generator is ``pl94.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from topdown.schema import Attribute, Schema

__all__ = ["synthetic"]


def synthetic(n_tracts: int, people: int = 60, seed: int = 0) -> tuple[pd.DataFrame, Schema]:
    """About ``n_tracts`` tracts in a state > county > tract hierarchy."""
    rng = np.random.default_rng(seed)
    counties = max(1, n_tracts // 10)
    states = max(1, counties // 20)
    tract = np.repeat(np.arange(n_tracts), rng.poisson(people, n_tracts))
    county = tract % counties
    state = county % states
    n = len(tract)
    race_p = np.array([0.6, 0.13, 0.01, 0.005, 0.005, 0.06, 0.002, 0.08, 0.108])
    df = pd.DataFrame(
        {
            "STATE": np.char.add("S", state.astype(str)),
            "COUNTY": np.char.add(
                np.char.add("S", state.astype(str)), np.char.add("C", county.astype(str))
            ),
            "TRACT": np.char.add("T", tract.astype(str)),
            "SEX": rng.integers(1, 3, n),
            "AGE": rng.integers(0, 100, n),
            "RACE": rng.choice(np.arange(1, 10), n, p=race_p / race_p.sum()),
        }
    )
    df["COUNTY"] = df["STATE"] + df["COUNTY"].str.split("C").str[-1].radd("C")
    df["TRACT"] = df["COUNTY"] + df["TRACT"]
    schema = Schema(
        (
            Attribute("SEX", values=(1, 2)),
            Attribute("AGE", bins=(0, 18, 25, 35, 45, 55, 65, 75, 100)),
            Attribute("RACE", values=tuple(range(1, 10))),
        ),
        ("STATE", "COUNTY", "TRACT"),
    )
    return df, schema
