"""Walk-through: a noisy race x sex crosstab of Adult with its error table.

Run from the repository root:  python examples/synth_crosstab.py [--epsilon E]

The domains are declared, so every cell is measured, including any that is empty in the data
(a real zero is protected like any count). The table is released with the geometric mechanism
and made non-negative and integer; with ``margins=True`` it is also consistent with noisy
one-way margins. The error table compares with the confidential counts (evaluation only).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from synth import NoisyCrosstab

DATA = Path(
    os.environ.get("TOPDOWN_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
DOMAINS = {
    "race": ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"],
    "sex": ["Female", "Male"],
}


def main(epsilon: float = 1.0, rows: int | None = None) -> dict[str, float]:
    df = pd.read_csv(DATA / "adult" / "adult.csv", skipinitialspace=True)
    if rows is not None:
        df = df.sample(rows, random_state=0)
    crosstab = NoisyCrosstab(epsilon, ["race", "sex"], domains=DOMAINS, margins=True).fit(df)
    print(crosstab.release())
    errors, summary = crosstab.errors(df)
    print(errors.round(4).to_string(index=False))
    print(summary)
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    main(args.epsilon)
