"""Shared pieces of the command-line tests: a slice of the embedded data, one schema block."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

EMBEDDED = Path(__file__).resolve().parents[1] / "topdown" / "data" / "acs_national2019.csv"

#: The query attributes every CLI test config declares: SEX and AGE in three bins over AGEP.
SEX_AGE = """[[schema.attributes]]
name = "SEX"
values = [1, 2]
[[schema.attributes]]
name = "AGE"
column = "AGEP"
bins = [0, 18, 65, 100]
"""


def embedded_subset(states: tuple[str, ...], rows_per_state: int | None = None) -> pd.DataFrame:
    """Records of some states of the embedded ACS data (STATE and PUMA kept as text)."""
    df = pd.read_csv(EMBEDDED, dtype={"STATE": str, "PUMA": str})
    parts = [df[df["STATE"] == s] for s in states]
    if rows_per_state is not None:
        parts = [p.head(rows_per_state) for p in parts]
    return pd.concat(parts).reset_index(drop=True)
