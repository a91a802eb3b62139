"""Make the shipped set of captured problems: the embedded default release and a PL94 state.

Run from the repository root:

    python benchmarks/solvers/make_problem_set.py --out DIR [--seed N] [--pl94-persons P]
    python benchmarks/solvers/replay.py --problems DIR/default --time-limit 20

``DIR/default`` holds every problem of the embedded default release (``topdown run`` with no
config: the ACS 2019 excerpt over nation > state > PUMA); ``DIR/default-detailed`` the same
release with each level's whole budget on the detailed histogram, whose L2 problems are the
separable ones (the closed form's); ``DIR/pl94`` those of a PL94-shaped
state of ``--pl94-persons`` persons (default a quarter of a medium state) from
``benchmarks/pl94.py``, the scale work's generator, with its production-shaped strategy and the
state-total invariant (skipped, with a note, where that generator is absent). Noise is seeded,
so the same command makes the same problems. The files are not kept in the repository: this
command regenerates them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from topdown.engine import release
from topdown.estimation.capture import INDEX
from topdown.strategy import LevelStrategy
from topdown.support.progress import Progress

logger = logging.getLogger("benchmarks.solvers.make_problem_set")

QUARTER_STATE = 750_000


def capture_default(out: Path, seed: int, *, detailed: bool = False) -> Path:
    """The embedded default release (``detailed``: its budgets on the detailed query alone),
    captured into ``out``."""
    from topdown.product.cli import load_data
    from topdown.product.config import DEFAULT_CONFIG, load_config

    cfg = load_config(DEFAULT_CONFIG)
    strategy = cfg.strategy
    if detailed:
        levels = tuple(LevelStrategy(level.budget) for level in strategy.levels)
        strategy = replace(strategy, levels=levels)
    release(
        load_data(cfg),
        cfg.schema,
        strategy,
        constraints=cfg.constraints,
        seed=seed,
        failsafe=cfg.failsafe,
        capture=out,
        progress=Progress(enabled=False),
    )
    return out


def capture_pl94(out: Path, seed: int, persons: int) -> Path | None:
    """A PL94-shaped state captured into ``out``; None when ``benchmarks/pl94.py`` is absent."""
    try:
        pl94 = importlib.import_module("benchmarks.pl94")
    except ModuleNotFoundError:
        return None
    state = pl94.make_state(persons, seed=seed)
    release(
        state.records,
        pl94.pl94_schema(),
        pl94.production_strategy(),
        constraints=pl94.state_total_invariant(),
        seed=seed + 1,
        geography=state.geography,
        capture=out,
        progress=Progress(enabled=False),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="new folder for the sets")
    parser.add_argument("--seed", type=int, default=2026, help="noise seed (reproducible set)")
    parser.add_argument(
        "--pl94-persons",
        type=int,
        default=QUARTER_STATE,
        help=f"persons of the PL94 state (default {QUARTER_STATE:,}; 0 skips it)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    made = []
    start = time.perf_counter()
    made.append(capture_default(args.out / "default", args.seed))
    made.append(capture_default(args.out / "default-detailed", args.seed, detailed=True))
    logger.info("default releases captured in %.1f s", time.perf_counter() - start)
    if args.pl94_persons:
        start = time.perf_counter()
        pl94 = capture_pl94(args.out / "pl94", args.seed, args.pl94_persons)
        if pl94 is None:
            sys.stdout.write("# note: benchmarks/pl94.py is not in this checkout; no PL94 set\n")
        else:
            made.append(pl94)
            logger.info("PL94 state captured in %.1f s", time.perf_counter() - start)
    for folder in made:
        with open(folder / INDEX) as fh:
            count = sum(1 for _ in fh) - 1
        sys.stdout.write(
            f"{folder}: {count} problems; replay with\n"
            f"  python benchmarks/solvers/replay.py --problems {folder} --time-limit 20\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
