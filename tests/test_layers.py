"""The floors of the house hold: the import contracts of ``pyproject.toml`` pass.

``[tool.importlinter]`` declares the layers (the five packages; inside ``topdown``, the product
layer over the entry points over the release over estimation, the BLUE, measurement, execution,
the core modules and support). A module that imports a floor above its own breaks a contract
and fails this test, naming the import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    code = importlinter_cli.lint_imports(
        config_filename=os.fspath(ROOT / "pyproject.toml"), no_cache=True, no_logo=True
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out
