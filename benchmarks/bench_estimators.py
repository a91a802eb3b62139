"""Accuracy of the estimators on the same noisy measurements: BLUE vs TopDown vs the noise.

For each dataset, mechanism, budget, strategy and seed, the data are measured once and the same
noisy measurements go to every estimator:

- ``noisy``: the raw detailed measurements (totals: the measured total if any, else the sum of
  the noisy cells); ``clipped``: the noisy cells clipped at zero (totals: their sums);
- ``census``: today's passes on the raw measurements, an only child copied from its parent
  (the Census Bureau's 2020 TopDown);
- ``topdown``: the same passes, an only child's measurements folded into its parent's;
- ``gls``: the whole-tree BLUE itself (consistent, unbiased, not integer, may be negative);
- ``blue``: the BLUE's estimates and variances fed to the same passes (non-negative integers);
- ``blue_held``: the same, the root's total held at the rounded BLUE total
  (``topdown.estimation.root_total``, what ``release(estimator="blue")`` does without invariants);
- ``blue_dt``, ``blue_held_dt`` (``--estimators``): ``blue``, ``blue_held`` fed only the BLUE
  detailed cells and totals, not the measured marginals' answers (``blue_inputs(...,
  marginals=False)``): levels so fed take the level-batched passes; pair them with ``blue``,
  ``blue_held``; ``blue_held_few``: the marginals fed only at the levels of at most
  ``--few-nodes`` nodes (where the per-family path is cheap);
- ``sized(power,kappa)`` (``--size-weights``, an experiment): ``blue_held``'s root, then the
  levels below with per-cell weights scaled by the cell's size (``size_weights.py``, CVXPY per
  family); ``sized(0,1)`` is the same pass as ``blue_held`` by another solver, the baseline
  to pair them with (ties of the rounding fall differently). Strategies of detailed cells and
  totals only.

It prints the command line and tables of cell, total and marginal MAE and bias by level
(``marginal``: over every answer of the level's measured marginals, what a release publishes
besides cells and totals) (mean over seeds,
with the standard error across seeds), the same by true cell count (0, 1-5, 6-20, over 20), the
paired difference blue - topdown that the default switch reads, the BLUE pass's share of the
estimation time, and writes a CSV of every figure and a PNG plot. The data: the ACS excerpt
(nation > state > PUMA, 144 cells), sparse synthetic tracts (``synthetic.py``) and a PL94-shaped
state (``pl94.py``: nation > state > county > tract > block group > block, 2,016 cells;
``--pl94-persons`` sets its size). Run from the repository root:

    python benchmarks/bench_estimators.py [--seeds 20] [--budgets 0.5 2] [--data acs pl94]

``--data pl94 --strategy census2020`` runs instead the Census Bureau's 2020 production PL94
strategy as written (``topdown.presets.census2020_pl94``: its schema, exact shares, rho 2.56,
discrete Gaussian, multipass; ``--budgets`` and ``--mechanisms`` do not apply) on the
PL94-shaped state (nation > state > county > tract > block group > block), without the state
invariant (``bench_census2020.py`` holds it; here every estimator sees the same noisy
measurements and nothing else). Besides the tables above it prints the Census's own accuracy
figures per estimator and level (``bench_census2020.census_figures``: mean absolute error of
total population, of the voting-age population, of the six races alone pooled, of every measured
query and of the cells) and each race alone at the tract (``pl94_headline``, the release
report's headline figures; ``pl94.py`` codes race as the DAS's CENRACE), with the paired
``blue - topdown`` difference.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.acs import load_acs  # noqa: E402
from benchmarks.bench_census2020 import census_figures  # noqa: E402
from benchmarks.pl94 import GEOGRAPHY, make_state, pl94_schema  # noqa: E402
from benchmarks.size_weights import sized_counts  # noqa: E402
from benchmarks.synthetic import synthetic  # noqa: E402
from mechanisms.ledger import Ledger  # noqa: E402
from mechanisms.rng import new_release_key  # noqa: E402
from topdown import Strategy  # noqa: E402
from topdown.blue.estimate import blue, blue_inputs  # noqa: E402
from topdown.estimation.estimate import estimate  # noqa: E402
from topdown.estimation.estimators import fold_only_children  # noqa: E402
from topdown.estimation.passes import EstimateOptions, SolverChoice  # noqa: E402
from topdown.estimation.root_total import decide, with_root_total  # noqa: E402
from topdown.measurement.estimator_inputs import as_inputs  # noqa: E402
from topdown.measurement.measure import measure  # noqa: E402
from topdown.measurement.tree import build_tree  # noqa: E402
from topdown.outputs.headline import headline_table  # noqa: E402
from topdown.presets import census2020_pl94  # noqa: E402
from topdown.presets.census2020_pl94 import pl94_headline  # noqa: E402
from topdown.strategy import Query  # noqa: E402

STRATEGIES: dict[str, list[tuple[str, str]]] = {
    "detailed": [("detailed", "1")],
    "detailed 3/4 + total 1/4": [("detailed", "3/4"), ("total", "1/4")],
    "detailed 2/3 + two marginals 1/6": [
        ("detailed", "2/3"),
        ("MARGINAL", "1/6"),
        ("RACE", "1/6"),
    ],
    # benchmarks/pl94.py's production queries (PL94 only: the other data lack its attributes)
    "production queries": [
        ("detailed", "1/2"),
        ("VOTING_AGE x HISPANIC x RACE", "3/10"),
        ("HHGQ", "1/10"),
        ("total", "1/10"),
    ],
}
#: the strategies only some data sets can run
ONLY = {"production queries": ("pl94",)}
#: per data set: the race attribute and the two-attribute marginal of the third strategy
NAMES = {
    "acs": {"RACE": "RAC1P", "MARGINAL": "SEX x AGE"},
    "synthetic": {"RACE": "RACE", "MARGINAL": "SEX x AGE"},
    "pl94": {"RACE": "RACE", "MARGINAL": "VOTING_AGE x HISPANIC"},
}
SIZE_BINS = [(0, 0, "0"), (1, 5, "1-5"), (6, 20, "6-20"), (21, np.inf, ">20")]
ESTIMATORS = (
    "noisy",
    "clipped",
    "census",
    "topdown",
    "gls",
    "blue",
    "blue_held",
    "blue_dt",
    "blue_held_dt",
    "blue_held_few",
)
#: the optional estimations (the others are always computed)
OPTIONAL = ("topdown", "blue", "blue_held", "blue_dt", "blue_held_dt", "blue_held_few")
#: ``--strategy census2020``: the production preset's label in the tables
CENSUS2020 = "census2020 (production PL94)"
#: the rows of the Census's figures carry this "bin" (so the cell/total/marginal tables skip them)
CENSUS_BIN = "census"


def load(name: str, pl94_persons: int = 20_000):
    """The tree and true histograms of a data set, and its schema."""
    if name == "acs":
        df, schema = load_acs()
        return (*build_tree(df, schema), schema)
    if name == "synthetic":
        df, schema = synthetic(300, seed=7)
        return (*build_tree(df, schema), schema)
    state = make_state(pl94_persons, seed=7)
    schema = pl94_schema()
    return (*build_tree(state.records, schema, geography=state.geography), schema)


def load_census2020(persons: int):
    """The PL94-shaped state under the production preset: tree, truth, schema, strategy."""
    state = make_state(persons, seed=7)
    schema, strategy = census2020_pl94(tuple(c for c in GEOGRAPHY if c != "TRACT_GROUP"))
    tree, truth = build_tree(state.records, schema, geography=state.geography)
    return tree, truth, schema, strategy


def census_scores(schema, strategy):
    """Per estimator, the Census Bureau's PL94 figures of its counts at every level
    (``census_figures``) and each race alone at the tract (the preset's headline figures;
    ``pl94.py`` codes race as the DAS's CENRACE)."""
    races = pl94_headline(schema)
    at_tract = [f for f in races if f.levels is not None]

    def figures(counts: list[np.ndarray], true: list[np.ndarray]) -> list[dict]:
        rows = []
        for level, (est, tru) in enumerate(zip(counts, true, strict=True)):
            queries = [q for q, _ in strategy.levels[level].queries]
            rows.extend(census_figures(level, est, tru, schema, queries))
        table = headline_table(schema.domain, counts, true, at_tract)
        rows.extend(
            {"level": r.level, "what": f"alone: {r.figure}", "mae": r.mae}
            for r in table.itertuples()
        )
        return rows

    return figures


def scores(
    level: int,
    est: np.ndarray,
    truth: np.ndarray,
    direct_total=None,
    marginals: tuple[Query, ...] = (),
    domain=None,
) -> list[dict]:
    """Cell and total error figures of one level (cell figures by true count too), and the
    error of the level's measured ``marginals``' answers (all answers pooled)."""
    err = est - truth
    tot_est = est.sum(axis=1) if direct_total is None else direct_total
    tot_err = tot_est - truth.sum(axis=1)
    rows = [
        {
            "level": level,
            "what": "cell",
            "bin": "all",
            "mae": np.abs(err).mean(),
            "bias": err.mean(),
        },
        {
            "level": level,
            "what": "total",
            "bin": "all",
            "mae": np.abs(tot_err).mean(),
            "bias": tot_err.mean(),
        },
    ]
    if marginals:
        m_err = np.concatenate(
            [(q.answer(est, domain) - q.answer(truth, domain)).ravel() for q in marginals]
        )
        rows.append(
            {
                "level": level,
                "what": "marginal",
                "bin": "all",
                "mae": np.abs(m_err).mean(),
                "bias": m_err.mean(),
            }
        )
    for lo, hi, label in SIZE_BINS:
        mask = (truth >= lo) & (truth <= hi)
        if mask.any():
            rows.append(
                {
                    "level": level,
                    "what": "cell",
                    "bin": label,
                    "mae": np.abs(err[mask]).mean(),
                    "bias": err[mask].mean(),
                }
            )
    return rows


def one_run(
    tree,
    truth,
    domain,
    strategy,
    seed: int,
    options: EstimateOptions,
    census: bool = True,
    estimators: tuple[str, ...] = ("topdown", "blue", "blue_held"),
    sized: tuple[tuple[float, float], ...] = (),
    few_nodes: int = 16,
    extra_scores=None,
) -> tuple[list[dict], dict[str, float]]:
    """Every estimation on one seed's measurements; ``extra_scores(counts, true_counts)``
    (per estimator with integer counts) adds rows of further figures (``census_scores``)."""
    ledger = Ledger()
    meas, _ = measure(
        tree, truth, domain, strategy, release_key=new_release_key(seed), ledger=ledger
    )
    first_pass = {i: ls.first_pass for i, ls in enumerate(strategy.levels)}  # multipass
    times: dict[str, float] = {}
    results: dict[str, list[np.ndarray]] = {}
    totals: dict[str, list[np.ndarray | None]] = {}
    noisy_cells, noisy_totals = [], []
    for level in range(tree.n_levels):
        d = meas.get(level, "detailed")
        assert d is not None
        noisy_cells.append(d.noisy.astype(float))
        t = meas.get(level, "total")
        noisy_totals.append(None if t is None else t.noisy[:, 0].astype(float))
    results["noisy"], totals["noisy"] = noisy_cells, noisy_totals
    results["clipped"] = [np.maximum(c, 0) for c in noisy_cells]
    start = time.perf_counter()
    b = blue(tree, domain, meas)
    fed = blue_inputs(meas, b)
    times["blue pass"] = time.perf_counter() - start
    results["gls"] = list(b.cells)
    held = with_root_total(None, decide("blue", tree, domain, b))
    lean = blue_inputs(meas, b, marginals=False)
    few = [level for level in range(tree.n_levels) if tree.levels[level].size <= few_nodes]
    runs = [
        ("topdown", fold_only_children(tree, as_inputs(meas)), None),
        ("blue", fed, None),
        ("blue_held", fed, held),
        ("blue_dt", lean, None),
        ("blue_held_dt", lean, held),
        ("blue_held_few", blue_inputs(meas, b, marginals=few), held),
    ]
    for name, inputs, bound in [("census", as_inputs(meas), None)] * census + runs:
        if name != "census" and name not in estimators:  # census: --no-census decides
            continue
        start = time.perf_counter()
        try:
            counts, _ = estimate(
                tree, domain, inputs, first_pass=first_pass, invariants=bound, options=options
            )
        except RuntimeError as err:  # a rounding backend's failure: rerun with HiGHS, counted
            logging.warning("seed %d, %s: %s; rounding again with highs", seed, name, err)
            times[f"{name} fallback"] = 1.0
            retry = EstimateOptions(solver=SolverChoice.of({"rounding": "highs"}))
            counts, _ = estimate(
                tree, domain, inputs, first_pass=first_pass, invariants=bound, options=retry
            )
        times[name] = time.perf_counter() - start
        results[name] = [c.astype(float) for c in counts]
        if name == "blue_held" and sized:
            names = {q.query.name for lv in fed.levels for q in lv}
            if names <= {"detailed", "total"}:
                for power, kappa in sized:
                    start = time.perf_counter()
                    label = f"sized({power:g},{kappa:g})"
                    counts = sized_counts(tree, fed, counts[0], kappa, power)
                    times[label] = time.perf_counter() - start
                    results[label] = [c.astype(float) for c in counts]
    marginals = [
        tuple(m.query for m in lv if m.query.name not in ("detailed", "total"))
        for lv in as_inputs(meas).levels
    ]
    rows = []
    for name in [e for e in ESTIMATORS if e in results] + [
        e for e in results if e.startswith("sized")
    ]:
        for level in range(tree.n_levels):
            direct = totals.get(name, [None] * tree.n_levels)[level]
            est, true = results[name][level], truth.counts[level]
            for r in scores(level, est, true, direct, marginals[level], domain):
                rows.append({"estimator": name, **r})
        if extra_scores is not None and name != "gls":  # the figures count integers
            counts = [c.astype(np.int64) for c in results[name]]
            for r in extra_scores(counts, truth.counts):
                rows.append({"estimator": name, "bin": CENSUS_BIN, "bias": np.nan, **r})
    return rows, times


def _power_kappa(text: str) -> tuple[float, float]:
    power, kappa = text.split(":")
    return float(power), float(kappa)


def run(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows: list[dict] = []
    timing: list[dict] = []
    options = EstimateOptions(solver=SolverChoice.of({"rounding": args.rounding}))
    if args.strategy == "census2020":
        return run_census2020(args, options)
    for data_name in args.data:
        tree, truth, schema = load(data_name, args.pl94_persons)
        for mechanism in args.mechanisms:
            for budget in args.budgets:
                for sname, queries in STRATEGIES.items():
                    if args.strategies and sname not in args.strategies:
                        continue
                    if data_name not in ONLY.get(sname, (data_name,)):
                        continue
                    strategy = Strategy.from_budgets(
                        [budget] * tree.n_levels,
                        mechanism=mechanism,
                        queries=[
                            (Query.parse(NAMES[data_name].get(q, q)), Fraction(s))
                            for q, s in queries
                        ],
                    )
                    strategy.check(schema.domain, tree.n_levels)
                    for seed in range(args.seeds):
                        res, times = one_run(
                            tree,
                            truth,
                            schema.domain,
                            strategy,
                            1000 + seed,
                            options,
                            args.census,
                            tuple(args.estimators),
                            tuple(_power_kappa(w) for w in args.size_weights),
                            args.few_nodes,
                        )
                        key = {
                            "data": data_name,
                            "mechanism": mechanism,
                            "budget": budget,
                            "strategy": sname,
                            "seed": seed,
                        }
                        rows.extend({**key, **r} for r in res)
                        timing.append({**key, **times})
                    logging.info("done %s %s %s %s", data_name, mechanism, budget, sname)
    return pd.DataFrame(rows), pd.DataFrame(timing)


def run_census2020(args, options: EstimateOptions) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``--strategy census2020``: the production preset on the PL94-shaped state, per seed."""
    rows: list[dict] = []
    timing: list[dict] = []
    tree, truth, schema, strategy = load_census2020(args.pl94_persons)
    extra = census_scores(schema, strategy)
    for seed in range(args.seeds):
        res, times = one_run(
            tree,
            truth,
            schema.domain,
            strategy,
            1000 + seed,
            options,
            args.census,
            tuple(args.estimators),
            few_nodes=args.few_nodes,
            extra_scores=extra,
        )
        key = {
            "data": "pl94",
            "mechanism": strategy.mechanism,
            "budget": f"{float(strategy.total()):.4g}",
            "strategy": CENSUS2020,
            "seed": seed,
        }
        rows.extend({**key, **r} for r in res)
        timing.append({**key, **times})
        logging.info("done census2020 seed %d", seed)
    return pd.DataFrame(rows), pd.DataFrame(timing)


def census_table(raw: pd.DataFrame) -> pd.DataFrame:
    """The Census's figures: per level and figure, each estimator's MAE (mean ± s.e. over
    seeds) and the paired blue - topdown difference when both ran."""
    sel = raw[raw["bin"] == CENSUS_BIN]
    g = sel.groupby(["level", "what", "estimator"], sort=False)["mae"]
    fig = pd.DataFrame({"mae": g.mean(), "se": g.std(ddof=1) / np.sqrt(g.size())}).reset_index()
    fig["fig"] = [f"{m:.3f}±{e:.3f}" for m, e in zip(fig["mae"], fig["se"], strict=True)]
    out = fig.pivot_table(
        index=["level", "what"], columns="estimator", values="fig", aggfunc="first", sort=False
    )
    if {"blue", "topdown"} <= set(sel["estimator"]):
        wide = sel.pivot_table(index=["level", "what", "seed"], columns="estimator", values="mae")
        diff = (wide["blue"] - wide["topdown"]).groupby(level=["level", "what"], sort=False)
        mean, se = diff.mean(), diff.std(ddof=1) / np.sqrt(diff.size())
        verdict = np.where(mean <= 0, "better", np.where(mean <= 2 * se, "same", "WORSE"))
        paired_fig = [f"{m:+.3f}±{e:.3f} {v}" for m, e, v in zip(mean, se, verdict, strict=True)]
        out["blue - topdown"] = pd.Series(paired_fig, index=mean.index)  # aligned by label
    return out


def summarise(raw: pd.DataFrame) -> pd.DataFrame:
    keys = ["data", "mechanism", "budget", "strategy", "level", "what", "bin", "estimator"]
    g = raw.groupby(keys, sort=False)
    out = g.agg(
        mae=("mae", "mean"),
        mae_se=("mae", lambda s: s.std(ddof=1) / np.sqrt(len(s))),
        bias=("bias", "mean"),
        bias_se=("bias", lambda s: s.std(ddof=1) / np.sqrt(len(s))),
        seeds=("mae", "size"),
    )
    return out.reset_index()


def paired(raw: pd.DataFrame, a: str = "blue", b: str = "topdown") -> pd.DataFrame:
    """Per configuration and level, MAE of ``a`` minus MAE of ``b`` on the same measurements
    (mean over seeds and its standard error): the default switch reads this table."""
    keys = ["data", "mechanism", "budget", "strategy", "level", "what", "seed"]
    sel = raw[raw["bin"] == "all"]
    wide = sel.pivot_table(index=keys, columns="estimator", values="mae").reset_index()
    wide = wide.dropna(subset=[a, b])  # configurations where one of them did not run
    wide["diff"] = wide[a] - wide[b]
    g = wide.groupby(keys[:-1])["diff"]
    out = pd.DataFrame({"mean": g.mean(), "se": g.std(ddof=1) / np.sqrt(g.size())})
    out["verdict"] = np.where(
        out["mean"] <= 0, "better", np.where(out["mean"] <= 2 * out["se"], "same", "WORSE")
    )
    out = out.reset_index()
    out["fig"] = [
        f"{m:+.4f}±{e:.4f} {v}"
        for m, e, v in zip(out["mean"], out["se"], out["verdict"], strict=True)
    ]
    return out.pivot_table(
        index=["data", "mechanism", "budget", "strategy", "level"],
        columns="what",
        values="fig",
        aggfunc="first",
    )


def level_table(
    summary: pd.DataFrame,
    estimators=(
        "noisy",
        "clipped",
        "census",
        "topdown",
        "blue",
        "blue_held",
        "blue_dt",
        "blue_held_dt",
        "blue_held_few",
    ),
):
    chosen = summary["estimator"].isin(estimators) | summary["estimator"].str.startswith("sized")
    s = summary[(summary["bin"] == "all") & chosen].copy()
    s["fig"] = [f"{m:.3f}±{e:.3f}" for m, e in zip(s["mae"], s["mae_se"], strict=True)]
    wide = s.pivot_table(
        index=["data", "mechanism", "budget", "strategy", "level"],
        columns=["what", "estimator"],
        values="fig",
        aggfunc="first",
    )
    return wide


def plot(summary: pd.DataFrame, path: Path) -> None:
    """Cell and total MAE below the root relative to "topdown"'s (1 = as good)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["data", "mechanism", "budget", "strategy", "level", "what"]
    s = summary[(summary["bin"] == "all") & (summary["level"] > 0)].copy()
    base = s[s["estimator"] == "topdown"].set_index(keys)["mae"]
    s["relative"] = s["mae"].to_numpy() / base.reindex(pd.MultiIndex.from_frame(s[keys])).to_numpy()
    s["relative_se"] = (
        s["mae_se"].to_numpy() / base.reindex(pd.MultiIndex.from_frame(s[keys])).to_numpy()
    )
    rows = s[keys[:-1]].drop_duplicates().reset_index(drop=True)
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(rows) + 1.8), sharey=True)
    for ax, what in zip(axes, ("cell", "total"), strict=True):
        part = s[s["what"] == what].set_index(keys[:-1])
        for i, est in enumerate(("clipped", "census", "gls", "blue")):
            sel = part[part["estimator"] == est].reindex(pd.MultiIndex.from_frame(rows))
            ax.errorbar(
                sel["relative"],
                np.arange(len(rows)) + 0.15 * (i - 1.5),
                xerr=sel["relative_se"],
                fmt="o",
                ms=3,
                color=f"C{i}",
                label=est,
            )
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(f"{what} MAE / topdown's (mean over seeds, ± s.e.)")
        ax.legend(fontsize=7)
    labels = [
        f"{r.data} {r.mechanism[9:]} {r.budget} {r.strategy[:24]} L{r.level}"
        for r in rows.itertuples()
    ]
    axes[0].set_yticks(np.arange(len(rows)), labels, fontsize=6)
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per configuration")
    parser.add_argument("--budgets", nargs="+", default=["0.5", "2"], help="budget per level")
    parser.add_argument(
        "--mechanisms", nargs="+", default=["discrete_gaussian", "discrete_laplace"]
    )
    parser.add_argument("--data", nargs="+", default=["acs"], choices=["acs", "synthetic", "pl94"])
    parser.add_argument(
        "--pl94-persons", type=int, default=20_000, help="size of the PL94-shaped state"
    )
    parser.add_argument(
        "--rounding", default="auto", help="solver of the rounding pass (a registry name)"
    )
    parser.add_argument(
        "--no-census",
        dest="census",
        action="store_false",
        help="skip the Census copy-the-only-child TopDown (a third estimation per run)",
    )
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=["topdown", "blue", "blue_held"],
        choices=list(OPTIONAL),
        help="the estimations to run besides noisy, clipped, gls (and census)",
    )
    parser.add_argument(
        "--few-nodes",
        type=int,
        default=16,
        help="blue_held_few feeds the marginals at the levels of at most this many nodes",
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        choices=list(STRATEGIES),
        help="run only these strategies (default: all)",
    )
    parser.add_argument(
        "--strategy",
        choices=["census2020"],
        help="census2020: the Census Bureau's 2020 production PL94 strategy (the preset) on the "
        "PL94-shaped state instead of --strategies (needs --data pl94; --budgets and "
        "--mechanisms do not apply)",
    )
    parser.add_argument(
        "--size-weights",
        action="append",
        default=[],
        metavar="POWER:KAPPA",
        help="also run the size-weighted L2 experiment (size_weights.py) with this factor "
        "(repeat it; write --size-weights=-1:1 for a negative power; needs blue_held; 0:1 is "
        "the baseline the others are paired with)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench_estimators"), help="CSV/PNG prefix")
    parser.add_argument(
        "--replot", type=Path, help="only redraw the plot from a CSV this script wrote"
    )
    args = parser.parse_args(argv)
    if args.strategy == "census2020" and args.data != ["pl94"]:
        parser.error(f"--strategy census2020 runs on --data pl94 only; got --data {args.data}")
    if args.replot:
        plot(pd.read_csv(args.replot), args.replot.with_suffix(".png"))
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("benchmarks").setLevel(logging.INFO)
    logging.getLogger().setLevel(logging.INFO)
    for name in ("topdown", "mechanisms", "solvers", "constraints"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print("command: python benchmarks/bench_estimators.py " + " ".join(argv or sys.argv[1:]))
    raw, timing = run(args)
    summary = summarise(raw)
    summary.to_csv(f"{args.out}.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    pd.set_option("display.max_rows", 1000)
    print("\nCell and total MAE by level (mean over seeds ± standard error across seeds)\n")
    print(level_table(summary).to_string())
    print(
        "\nblue minus topdown, paired on the same measurements (MAE difference, mean ± s.e.; "
        "'same' = worse by at most 2 s.e.)\n"
    )
    ran = set(raw["estimator"])
    if {"blue", "topdown"} <= ran:
        print(paired(raw).to_string())
    sized_names = sorted(e for e in ran if e.startswith("sized") and e != "sized(0,1)")
    for name in sized_names if "sized(0,1)" in ran else []:
        print(f"\n{name} minus sized(0,1), paired, every level (MAE difference, mean ± s.e.)\n")
        print(paired(raw, name, "sized(0,1)").to_string())
    if {"blue_held", "blue"} <= ran:
        print(
            "\nblue_held minus blue (the root's total held at the rounded BLUE total), paired, "
            "every level (MAE difference, mean ± s.e.)\n"
        )
        print(paired(raw, "blue_held", "blue").to_string())
    for lean, full in (
        ("blue_dt", "blue"),
        ("blue_held_dt", "blue_held"),
        ("blue_held_few", "blue_held"),
    ):
        if {lean, full} <= ran:
            print(
                f"\n{lean} minus {full} (marginals not fed to the passes), paired, every level "
                "(MAE difference, mean ± s.e.)\n"
            )
            print(paired(raw, lean, full).to_string())
    if (raw["bin"] == CENSUS_BIN).any():
        print(
            "\nThe Census Bureau's PL94 accuracy figures: MAE by level (mean ± s.e. over seeds; "
            "race alone: the six pooled; alone: each at the tract)\n"
        )
        print(census_table(raw).to_string())
    bins = summary[(summary["what"] == "cell") & (summary["level"] > 0)]
    bins = bins[
        bins["estimator"].isin(["census", *OPTIONAL, "gls"])
        | bins["estimator"].str.startswith("sized")
    ]
    print("\nCell MAE / bias by true count, below the root (mean over seeds ± s.e.)\n")
    bins = bins.assign(
        fig=[
            f"{m:.3f}±{me:.3f} / {b:+.3f}±{e:.3f}"
            for m, me, b, e in zip(
                bins["mae"], bins["mae_se"], bins["bias"], bins["bias_se"], strict=True
            )
        ]
    )
    print(
        bins.pivot_table(
            index=["data", "mechanism", "budget", "strategy", "level", "estimator"],
            columns="bin",
            values="fig",
            aggfunc="first",
        )[["all", "0", "1-5", "6-20", ">20"]].to_string()
    )
    tb = summary[(summary["what"] == "total") & (summary["bin"] == "all")]
    tb = tb[tb["estimator"].isin(["census", *OPTIONAL, "gls"])]
    print("\nTotal bias by level, the root's too (mean ± s.e. across seeds, z = bias / s.e.)\n")
    tb = tb.assign(z=tb["bias"] / tb["bias_se"].replace(0, np.nan))
    print(
        tb[
            [
                "data",
                "mechanism",
                "budget",
                "strategy",
                "level",
                "estimator",
                "bias",
                "bias_se",
                "z",
            ]
        ]
        .round(3)
        .to_string(index=False)
    )
    t = timing.groupby(["data", "mechanism", "budget", "strategy"])[
        [c for c in ("blue pass", "census", *OPTIONAL) if c in timing.columns]
    ].mean()
    if "blue" in t.columns:
        t["blue pass / blue release"] = t["blue pass"] / (t["blue pass"] + t["blue"])
    print("\nSeconds per run (mean over seeds; the releases' estimation passes only)\n")
    print(t.round(4).to_string())
    if "topdown" in ran:  # the plot is relative to "topdown"
        plot(summary, Path(f"{args.out}.png"))
        print(f"\nwrote {args.out}.csv and {args.out}.png")
    else:
        print(f"\nwrote {args.out}.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
