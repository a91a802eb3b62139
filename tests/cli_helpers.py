"""Shared pieces of the command-line tests: a slice of the embedded data, one schema block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def data_config(seed: int, hierarchy: tuple[str, ...], tail: str = "") -> str:
    """A config over ``data.csv``: SEX x AGE, rho 1/2 per level (3/4 detailed, 1/4 total)."""
    levels = ", ".join(['"1/2"'] * (len(hierarchy) + 1))
    return (
        f'seed = {seed}\n[data]\npath = "data.csv"\n[schema]\n'
        f"hierarchy = {list(hierarchy)!r}\n".replace("'", '"')
        + SEX_AGE
        + f'[strategy]\nbudgets = [{levels}]\nqueries = {{detailed = "3/4", total = "1/4"}}\n'
        + tail
    )


def embedded_subset(states: tuple[str, ...], rows_per_state: int | None = None) -> pd.DataFrame:
    """Records of some states of the embedded ACS data (STATE and PUMA kept as text)."""
    df = pd.read_csv(EMBEDDED, dtype={"STATE": str, "PUMA": str})
    parts = [df[df["STATE"] == s] for s in states]
    if rows_per_state is not None:
        parts = [p.head(rows_per_state) for p in parts]
    return pd.concat(parts).reset_index(drop=True)


def synth_files(folder: Path, n: int = 100) -> tuple[Path, Path]:
    """``data.csv`` (columns a in 0..1, b in 0..2, ``n`` rows) and ``domains.json`` declaring
    them, in ``folder``: the input of the ``topdown synth`` tests."""
    rng = np.random.default_rng(0)
    data = folder / "data.csv"
    pd.DataFrame({"a": rng.integers(0, 2, n), "b": rng.integers(0, 3, n)}).to_csv(data, index=False)
    domains = folder / "domains.json"
    domains.write_text(json.dumps({"a": [0, 1], "b": [0, 1, 2]}))
    return data, domains


#: the repository: a child ``python -m topdown`` imports this checkout's code
REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def start_topdown(args: list[str], cwd: Path, *, stdout: int = subprocess.PIPE) -> subprocess.Popen:
    """``python -m topdown -q ARGS`` started in ``cwd`` (stderr piped, text mode)."""
    return subprocess.Popen(
        [sys.executable, "-m", "topdown", "-q", *args],
        cwd=cwd,
        env=child_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def hidden_files(folder: Path) -> list[str]:
    """The dot-names in ``folder``: temporaries, partial folders and locks a run may leave."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
