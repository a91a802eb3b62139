"""Shared fixtures: the real data sets in ../shared/data (skipped with a reason if absent)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ helpers are not installed with the package

# Property tests draw the same examples on every run ("repeatable", the default), so a run of
# the test command on a clean clone passes or fails the same way each time: a property false on
# rare inputs must not land or be refused at random. ``HYPOTHESIS_PROFILE=explore`` draws new
# examples each run (with the example database), to look for such inputs on purpose.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def acs():
    """(DataFrame, Schema) of the ACS national2019 excerpt, nation > state > PUMA."""
    from benchmarks.acs import load_acs, shared_data

    if not (shared_data() / "acs_excerpts" / "national2019.csv").exists():
        pytest.skip(f"the shared ACS data is not at {shared_data()}")
    return load_acs()


@pytest.fixture(scope="module")
def cluster():
    """A 2-worker Dask LocalCluster, one per test module (the Dask test modules skip first
    when the 'dask' extra is not installed)."""
    from dask.distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as c:
        yield c


@pytest.fixture(scope="session", autouse=True)
def _compiled_samplers():
    """Compile (or load from numba's on-disk cache) the sampler kernels once per test run,
    so that no test's time includes the JIT."""
    from mechanisms._warmup import warm_up

    warm_up()
