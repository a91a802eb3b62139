"""The ACS excerpt set up as the engine issue's real-data run (shared by the benchmark and the
integration test): nation > state (PUMA[:2]) > PUMA, queries SEX x age bins x RAC1P, domains
declared from the excerpt's data dictionary."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from topdown import Attribute, Schema, attributes_from_dictionary
from topdown.measurement.read import read_data

AGE_BINS = (0, 18, 25, 35, 45, 55, 65, 75, 100)


def shared_data() -> Path:
    """``../shared/data`` beside the repository, or $TOPDOWN_SHARED_DATA."""
    env = os.environ.get("TOPDOWN_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_acs(name: str = "national2019.csv") -> tuple[pd.DataFrame, Schema]:
    folder = shared_data() / "acs_excerpts"
    df = read_data(folder / name)
    df["STATE"] = df["PUMA"].astype(str).str[:2]
    declared = attributes_from_dictionary(folder / "data_dictionary.json", ["SEX", "AGEP", "RAC1P"])
    ages = declared["AGEP"]
    schema = Schema(
        (
            Attribute("SEX", values=declared["SEX"]),
            Attribute("AGE", bins=AGE_BINS[:-1] + (max(ages) + 1,), column="AGEP"),
            Attribute("RAC1P", values=declared["RAC1P"]),
        ),
        ("STATE", "PUMA"),
    )
    return df, schema
