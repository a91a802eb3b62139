"""The floors of the house hold: the import contracts of ``pyproject.toml`` pass.

``[tool.importlinter]`` declares the layers (the five packages; inside ``topdown``, the product
layer over the entry points over the release over estimation, the BLUE, measurement, execution,
the core modules and support). A module that imports a floor above its own breaks a contract
and fails this test, naming the import. The checker runs in its own process: it configures
logging with ``dictConfig``, which disables every logger that exists (the engine's among them)
in the process that calls it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def test_import_contracts_are_kept() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout
