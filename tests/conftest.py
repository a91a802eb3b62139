"""Shared fixtures: the real data sets in ../shared/data (skipped with a reason if absent)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ helpers are not installed with the package


@pytest.fixture(scope="session")
def acs():
    """(DataFrame, Schema) of the ACS national2019 excerpt, nation > state > PUMA."""
    from benchmarks.acs import load_acs, shared_data

    if not (shared_data() / "acs_excerpts" / "national2019.csv").exists():
        pytest.skip(f"the shared ACS data is not at {shared_data()}")
    return load_acs()
