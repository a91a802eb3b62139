"""The floors of the house hold: the import contracts of ``pyproject.toml`` pass.

``[tool.importlinter]`` declares the layers (the five packages; inside ``topdown``, the product
layer over the entry points over the release over estimation, the BLUE, measurement, execution,
the core modules and support). A module that imports a floor above its own breaks a contract
and fails this test, naming the import.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def logging_kept():
    """import-linter configures logging with ``dictConfig``, which disables every logger that
    exists: later tests' ``caplog`` then saw no record (test_rng, test_samplers, ...). Put
    the loggers and the root level back as they were."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)] + [
        logging.root
    ]
    state = [(lg, lg.disabled, lg.level) for lg in loggers]
    yield
    for lg, disabled, level in state:
        lg.disabled, lg.level = disabled, level


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch, capsys, logging_kept) -> None:
    monkeypatch.chdir(ROOT)
    code = importlinter_cli.lint_imports(
        config_filename=os.fspath(ROOT / "pyproject.toml"), no_cache=True, no_logo=True
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out
