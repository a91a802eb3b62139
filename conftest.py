"""Collection settings shared by the tests and the docstring examples of the packages.

``pyproject.toml`` runs pytest with ``--doctest-modules`` over the five packages; the tests'
own fixtures are in ``tests/conftest.py``. An example that cannot run yet is skipped here by
node id with its reason, so ``pytest -rs`` lists it instead of it passing unseen.

A test that needs an optional extra says so with ``@pytest.mark.extra("parquet")`` (or
``pytestmark`` for a module): with the extra absent it is skipped, the reason naming the extra
and its install command, so ``pip install ".[test]"`` alone gives a green run.
"""

from __future__ import annotations

import os

# ``-n auto`` (pyproject.toml) runs one pytest-xdist worker per core; a worker whose BLAS also
# starts a thread per core oversubscribes them, and OpenBLAS's threads then spin waiting for a
# core (a 4,110 x 1,440 least squares took 5 to 29 s of CPU with two threads on a busy
# two-core machine, 1.8 s with one). So each worker, and every process it starts, uses one BLAS
# thread. BLAS reads these when it loads: they are set here, before anything imports numpy.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")

import pytest  # noqa: E402

from topdown.support.optional import DISTRIBUTION, EXTRAS, is_installed  # noqa: E402

_PENDING_EXAMPLES = {
    "topdown/engine.py::topdown.engine.TopDown": (
        "the TopDown example uses placeholders (df, domain={...}); it becomes a runnable "
        "example with the engine rewrite (issue 13)"
    ),
}


def _missing_extra(item: pytest.Item) -> str | None:
    """Why ``item`` cannot run here: the first extra it is marked with that is not installed."""
    for mark in item.iter_markers("extra"):
        (extra,) = mark.args
        if extra not in EXTRAS:
            raise pytest.UsageError(
                f"{item.nodeid}: extra ({extra!r}) is not one of {sorted(EXTRAS)}"
            )
        absent = [m for m in EXTRAS[extra] if not is_installed(m)]
        if absent:
            return (
                f"needs the {extra!r} extra ({', '.join(absent)} not installed): "
                f'pip install "{DISTRIBUTION}[{extra}]"'
            )
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        reason = _PENDING_EXAMPLES.get(item.nodeid) or _missing_extra(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
