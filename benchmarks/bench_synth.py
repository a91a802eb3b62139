"""Benchmark of the synth generators on Adult, NLTCS and the ACS excerpt.

For each data set and epsilon: each generator's mean 1-, 2- and 3-way marginal TVD, the train-
on-synthetic / test-on-real AUC where the data set has a class, the wall time and the CPU time
(``cpu_s``, what a fit costs on a shared machine: this process's for the project's generators,
the peer process's own, all threads, for a peer). The Adaptive generator runs at
(epsilon, 1e-9), as the peers, its rows as many as its noisy total, i.i.d. (``Adaptive``) and,
from the same fit, by rounded counts (``Adaptive-rounded``: ``sample(method="rounded")``; both
rows' times are the shared fit's plus their own synthesis). Beside them: the
bootstrap floor (a resample of the real data, what sampling noise alone costs), the
independent-columns baseline (each column shuffled on its own: perfect 1-way marginals, no
dependence) and, for the local-DP DP2-Pub, the GRR + per-attribute PRAM floor.

Published peers run under ``--peer-python`` (a separate virtual environment: the project's
dependencies do not change for them), at ``--peer-eps``, once per seed, records drawn i.i.d.
from their models: smartnoise-synth's MST (and its AIM with ``--aim``) when that package is
importable, and private-pgm's own AIM (benchmarks/peer_pgm.py) with ``--pgm-mechanisms DIR``,
a checkout of private-pgm's ``mechanisms`` folder. AIM at its published settings takes hours
a fit on this machine, so its fits can be run before, one at a time in the background, by
peer_pgm.py and scored here with ``--aim-saved DIR [DIR ...]`` (the first folder holding a
fit is read); where peer_pgm.py also wrote the same model's records by private-pgm's own
rounded synthesis (``aim_DATA_sSEED.round.csv``), they are scored as a second peer row,
``AIM round (private-pgm, saved)``. A peer reports its own peak resident
memory (``peak_mib``). Every generator runs once per seed; the table shows the mean ± its
standard error.

Run from the repository root:

    /work/venv/bin/python -m benchmarks.bench_synth [--data adult nltcs acs acs-ma2019 acs-tx2019]
        [--eps 0.1 1 5] [--seeds 0 1 2] [--peer-python /work/venv-peer/bin/python] [--aim]
        [--pgm-mechanisms DIR | --aim-saved DIR [DIR ...]] [--methods adaptive adaptive-rounded]

The process's peak resident memory is printed at the end (run one method and one data set
with ``--methods`` and ``--data`` to read it as that method's peak on that data).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.acs import AGE_BINS, shared_data
from synth import Adaptive, ClassConditional, DP2Pub, PrivBayes
from synth.dp2pub import grr_pram_baseline
from synth.metrics import marginal_tvd, tstr_accuracy

PEER_DELTA = 1e-9  # the delta every (epsilon, delta) method runs at, ours and the peers

ACS_COLUMNS = [
    "PUMA",
    "AGEP",
    "SEX",
    "MSP",
    "HISP",
    "RAC1P",
    "HOUSING_TYPE",
    "OWN_RENT",
    "EDU",
    "DPHY",
]


def load_adult() -> tuple[pd.DataFrame, dict, str | None]:
    """Adult with fnlwgt and education-num dropped, ages and hours in 10-year/10-hour bins,
    capital gain and loss as zero / non-zero; class ``income``."""
    df = pd.read_csv(shared_data() / "adult" / "adult.csv", skipinitialspace=True)
    df = df.drop(columns=["fnlwgt", "education-num"])
    df["age"] = (df["age"].clip(upper=89) // 10 * 10).astype(int)
    df["hours-per-week"] = (df["hours-per-week"].clip(upper=99) // 10 * 10).astype(int)
    df["capital-gain"] = (df["capital-gain"] > 0).astype(int)
    df["capital-loss"] = (df["capital-loss"] > 0).astype(int)
    domains = {
        "age": list(range(10, 100, 10)),
        "hours-per-week": list(range(0, 100, 10)),
        "capital-gain": [0, 1],
        "capital-loss": [0, 1],
        "income": ["<=50K", ">50K"],
        "sex": ["Female", "Male"],
    }
    return df, domains, "income"


def load_nltcs() -> tuple[pd.DataFrame, dict, str | None]:
    """NLTCS: 16 binary attributes, no class."""
    df = pd.read_csv(shared_data() / "nltcs" / "nltcs.csv")
    return df, {c: [0, 1] for c in df.columns}, None


def load_acs_excerpt(excerpt: str = "national2019") -> tuple[pd.DataFrame, dict, str | None]:
    """Ten ACS columns (age in the engine's bins), domains from the excerpt's data dictionary.

    ``excerpt`` names a file pair in ``acs_excerpts`` (``<excerpt>.csv`` and ``.json``): the
    state excerpts (ma2019, tx2019) are held-out checks for tuning done on national2019.
    """
    folder = shared_data() / "acs_excerpts"
    df = pd.read_csv(folder / f"{excerpt}.csv", dtype=str, keep_default_na=False)[ACS_COLUMNS]
    ages = df["AGEP"].astype(int)
    edges = list(AGE_BINS)
    df["AGEP"] = pd.cut(ages, edges + [200], right=False, labels=[str(e) for e in edges]).astype(
        str
    )
    schema = json.loads((folder / f"{excerpt}.json").read_text())["schema"]
    domains = {"AGEP": [str(e) for e in edges]}
    for column in ACS_COLUMNS:
        values = schema.get(column, {}).get("values")
        if column != "AGEP" and values is not None:
            domains[column] = [str(v) for v in values]
    for column, values in domains.items():  # keep only declared domains that cover the data
        if not set(df[column]) <= set(values):
            domains[column] = sorted(set(values) | set(df[column]))
    return df, domains, None


DATASETS: dict[str, Callable[[], tuple[pd.DataFrame, dict, str | None]]] = {
    "adult": load_adult,
    "nltcs": load_nltcs,
    "acs": load_acs_excerpt,
    "acs-ma2019": lambda: load_acs_excerpt("ma2019"),
    "acs-tx2019": lambda: load_acs_excerpt("tx2019"),
}


Peer = Callable[[pd.DataFrame, dict, float, int], tuple[pd.DataFrame, dict]]
"""A peer run: (real data, domains, epsilon, seed) -> (synthetic data, the peer process's
``seconds``, ``cpu_s`` and ``peak_mib`` where it reports them)."""


def _domain_file(df: pd.DataFrame, domains: dict, folder: Path) -> Path:
    """Every column's values as strings, in the declared order (the ones not declared sorted
    from the data, as the project's generators infer them), for the private-pgm peer."""
    values = {
        c: [str(v) for v in domains[c]] if c in domains else sorted(set(df[c].astype(str)))
        for c in df.columns
    }
    path = folder / "domains.json"
    path.write_text(json.dumps(values))
    return path


def _peer_run(
    command: list[str], df: pd.DataFrame, folder: Path, timeout: float | None
) -> tuple[pd.DataFrame, dict]:
    """Run one peer command (its last two arguments name the output CSV) and read its output
    and the JSON statistics on the last line of its stdout (if it prints them)."""
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
    out = pd.read_csv(folder / "out.csv", dtype=str, keep_default_na=False)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    stats = json.loads(last) if last.startswith("{") else {}
    return out.astype(df.dtypes.to_dict()), stats


def _peers(
    peer_python: str | None,
    pgm_mechanisms: Path | None,
    timeout: float | None,
) -> dict[str, Peer]:
    """smartnoise-synth's MST and AIM (benchmarks/peer_smartnoise.py) and private-pgm's own
    AIM (benchmarks/peer_pgm.py, with ``pgm_mechanisms``: a checkout of private-pgm's
    ``mechanisms`` folder), each run by ``peer_python`` (an interpreter of a separate virtual
    environment, so the project's own dependencies do not change), at most ``timeout`` seconds
    a fit (None: no cap)."""
    if peer_python is None:
        print("no --peer-python given: MST / AIM peer runs skipped")
        return {}
    out: dict[str, Peer] = {}
    check = subprocess.run(
        [peer_python, "-c", "import snsynth"], capture_output=True, text=True, check=False
    )
    if check.returncode == 0:
        script = Path(__file__).with_name("peer_smartnoise.py")

        def smartnoise(name: str) -> Peer:
            def run(df: pd.DataFrame, domains: dict, eps: float, seed: int) -> tuple:
                with tempfile.TemporaryDirectory() as name_:
                    folder = Path(name_)
                    df.to_csv(folder / "in.csv", index=False)
                    command = [peer_python, str(script), name, str(eps)]
                    command += [str(folder / "in.csv"), str(folder / "out.csv"), str(seed)]
                    return _peer_run(command, df, folder, timeout)

            return run

        out["MST (smartnoise)"] = smartnoise("mst")
        out["AIM (smartnoise)"] = smartnoise("aim")
    else:
        print(f"smartnoise-synth is not importable by {peer_python}: its peers skipped")
    if pgm_mechanisms is not None:
        script = Path(__file__).with_name("peer_pgm.py")

        def aim(df: pd.DataFrame, domains: dict, eps: float, seed: int) -> tuple:
            with tempfile.TemporaryDirectory() as name_:
                folder = Path(name_)
                df.to_csv(folder / "in.csv", index=False)
                command = [peer_python, str(script), "aim", str(eps), str(PEER_DELTA)]
                command += [str(folder / "in.csv"), str(_domain_file(df, domains, folder))]
                command += [str(folder / "out.csv"), "--seed", str(seed)]
                command += ["--mechanisms", str(pgm_mechanisms)]
                return _peer_run(command, df, folder, timeout)

        out["AIM (private-pgm)"] = aim
    return out


def write_peer_inputs(datasets: list[str], folder: Path) -> None:
    """``folder/DATA.csv`` and ``folder/DATA.json`` for each data set: what peer_pgm.py reads
    for a fit run on its own (the same data and domain file a live peer run is given)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in datasets:
        real, domains, _ = DATASETS[name]()
        real.to_csv(folder / f"{name}.csv", index=False)
        _domain_file(real, domains, folder).rename(folder / f"{name}.json")
        print(f"wrote {folder / name}.csv and .json")


def _saved_peer(folders: Path | list[Path], prefix: str, variant: str = "") -> Peer:
    """A peer whose fits were run before (one at a time, in the background: private-pgm's AIM
    takes hours on this machine) by benchmarks/peer_pgm.py, read back from the first of
    ``folders`` that holds it: ``{prefix}_{data}_s{seed}{variant}.csv`` (its synthetic data;
    ``variant`` ``".round"`` for the same model's records by private-pgm's rounded synthesis)
    and ``{prefix}_{data}_s{seed}.json`` (the fit's statistics). The data set's name comes
    from the data's ``attrs``."""
    folders = [folders] if isinstance(folders, Path) else list(folders)

    def run(df: pd.DataFrame, domains: dict, eps: float, seed: int) -> tuple:
        name = f"{prefix}_{df.attrs['name']}_s{seed}"
        held = [f for f in folders if (f / f"{name}{variant}.csv").exists()]
        if not held:
            shown = ", ".join(str(f) for f in folders)
            raise FileNotFoundError(f"no saved fit {name}{variant}.csv in {shown}")
        out = pd.read_csv(held[0] / f"{name}{variant}.csv", dtype=str, keep_default_na=False)
        stats_file = held[0] / f"{name}.json"
        stats = json.loads(stats_file.read_text().strip().splitlines()[-1])
        if stats.get("epsilon", eps) != eps:
            raise ValueError(f"{stats_file} is a fit at epsilon {stats['epsilon']}, not {eps}")
        return out.astype(df.dtypes.to_dict()), stats

    return run


def _saved_peers(folders: list[Path], prefix: str = "aim") -> dict[str, Peer]:
    """The saved AIM fits of ``folders`` as peers: i.i.d. records always, and the rounded
    ones (``*.round.csv``) when any folder holds one."""
    out = {"AIM (private-pgm, saved)": _saved_peer(folders, prefix)}
    if any(any(f.glob(f"{prefix}_*_s*.round.csv")) for f in folders):
        out["AIM round (private-pgm, saved)"] = _saved_peer(folders, prefix, ".round")
    return out


def _row(
    name: str,
    eps: object,
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    seconds: float,
    target: str | None,
    cpu: float = float("nan"),
    peak: float = float("nan"),
) -> dict:
    table = marginal_tvd(real, synthetic, (1, 2, 3))
    row = {
        "method": name,
        "eps": eps,
        "tvd1": table.loc[1, "mean"],
        "tvd2": table.loc[2, "mean"],
        "tvd3": table.loc[3, "mean"],
        "tvd2_max": table.loc[2, "max"],
        "seconds": seconds,
        "cpu_s": cpu,
        "peak_mib": peak,
    }
    if target is not None:
        scores = tstr_accuracy(synthetic, real, target)
        row["tstr_auc"] = scores["tstr_auc"]
        row["trtr_auc"] = scores["trtr_auc"]
    return row


def _generators(
    real: pd.DataFrame,
    domains: dict,
    target: str | None,
    eps: float,
    seed: int,
) -> dict[str, Callable[[], pd.DataFrame]]:
    """The runs at one epsilon, each a no-argument callable returning the synthetic data."""
    n = len(real)
    out: dict[str, Callable[[], pd.DataFrame | tuple[pd.DataFrame, dict]]] = {
        **_adaptive_runs(real, domains, eps, seed),
        "PrivBayes k=2": lambda: (
            PrivBayes(eps, k=2, domains=domains, seed=seed).fit(real).sample(n)
        ),
        "PrivBayes k=3": lambda: (
            PrivBayes(eps, k=3, domains=domains, seed=seed).fit(real).sample(n)
        ),
        "DP2-Pub (default, split=auto)": lambda: DP2Pub(
            eps, domains=domains, seed=seed
        ).fit_transform(real),
        "DP2-Pub split=budget (local DP)": lambda: DP2Pub(
            eps, domains=domains, seed=seed, split="budget"
        ).fit_transform(real),
        "DP2-Pub split=users (local DP)": lambda: DP2Pub(
            eps, domains=domains, seed=seed, split="users"
        ).fit_transform(real),
        "GRR+PRAM floor (local DP)": lambda: grr_pram_baseline(
            real, eps, domains=domains, seed=seed
        )[0],
    }
    if target is not None:
        out["ClassConditional"] = lambda: (
            ClassConditional(eps, target=target, domains=domains, seed=seed).fit(real).sample(n)
        )
    return out


def _adaptive_runs(
    real: pd.DataFrame, domains: dict, eps: float, seed: int
) -> dict[str, Callable[[], tuple[pd.DataFrame, dict]]]:
    """``Adaptive`` at (eps, 1e-9) sampled i.i.d. and by rounded counts, one fit shared by
    both (made by the first that runs). Each synthesis starts from a copy of the generator as
    the fit left it, so its records do not depend on which ran first (the i.i.d. ones are
    those of ``Adaptive(...).fit(real).sample(method="iid")``). Each row's ``seconds`` and
    ``cpu_s`` are the fit's plus its own synthesis's."""
    fitted: list[tuple[Adaptive, float, float]] = []

    def synthesis(method: str) -> Callable[[], tuple[pd.DataFrame, dict]]:
        def make() -> tuple[pd.DataFrame, dict]:
            if not fitted:
                start, cpu = time.perf_counter(), time.process_time()
                generator = Adaptive(eps, delta=1e-9, domains=domains, seed=seed).fit(real)
                fitted.append((generator, time.perf_counter() - start, time.process_time() - cpu))
            generator, seconds, cpu_s = fitted[0]
            start, cpu = time.perf_counter(), time.process_time()
            synthetic = copy.deepcopy(generator).sample(method=method)
            seconds += time.perf_counter() - start
            cpu_s += time.process_time() - cpu
            return synthetic, {"seconds": seconds, "cpu_s": cpu_s}

        return make

    return {
        "Adaptive (ours, delta 1e-9)": synthesis("iid"),
        "Adaptive-rounded (ours, delta 1e-9)": synthesis("rounded"),
    }


def _timed(
    label: str,
    eps: object,
    real: pd.DataFrame,
    make: Callable[[], pd.DataFrame | tuple[pd.DataFrame, dict]],
    target: str | None,
) -> dict | None:
    """Run one fit and score it. A peer returns its own process's statistics beside its data:
    its ``seconds``, ``cpu_s`` (all its threads) and ``peak_mib`` replace this process's
    measures, which would count only the wait for it."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        made = make()
    except Exception as err:  # a run's failure is reported, not fatal
        print(f"{label} at eps {eps} failed: {err}", flush=True)
        return None
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    synthetic, stats = made if isinstance(made, tuple) else (made, None)
    if stats is not None:
        seconds = stats.get("seconds", seconds)
        cpu = stats.get("cpu_s", float("nan"))
    peak = float("nan") if stats is None else stats.get("peak_mib", float("nan"))
    return _row(label, eps, real, synthetic, seconds, target, cpu=cpu, peak=peak)


def _summary(rows: list[dict]) -> pd.DataFrame:
    """Mean and standard error over the seeds of every (data, method, eps)."""
    frame = pd.DataFrame(rows)
    columns = ("tvd1", "tvd2", "tvd3", "tvd2_max", "tstr_auc", "seconds", "cpu_s", "peak_mib")
    metrics = [c for c in columns if c in frame]
    grouped = frame.groupby(["data", "method", "eps"], sort=False)[metrics]
    mean, sem = grouped.mean(), grouped.sem()
    out = mean.copy()
    for column in ("tvd1", "tvd2", "tvd3", "tstr_auc"):
        if column in out:
            out[column] = [
                f"{m:.4f}" + ("" if np.isnan(e) else f" ±{e:.4f}")
                for m, e in zip(mean[column], sem[column], strict=True)
            ]
    out["tvd2_max"] = mean["tvd2_max"].round(4)
    out["seconds"] = mean["seconds"].round(1)
    out["cpu_s"] = mean["cpu_s"].round(1)
    out["peak_mib"] = mean["peak_mib"].round(0)
    out["runs"] = grouped.size()
    return out.reset_index()


def peer_ratios(rows: list[dict], ours: str = "Adaptive") -> pd.DataFrame:
    """The issue's target figure: the mean 3-way TVD of each generator whose name starts with
    ``ours`` (column ``ours``) over each peer's (whose name holds "(smartnoise" or
    "(private-pgm"), per data set and epsilon where both ran. Where the rows carry their
    ``seed``, both means are over the seeds both ran (column ``seeds``), so a peer fitted on
    fewer seeds is compared on its own seeds; otherwise over each one's own rows."""
    columns = ["data", "eps", "ours", "peer", "seeds", "ratio_tvd3"]
    frame = pd.DataFrame(rows)
    if frame.empty or "data" not in frame:
        return pd.DataFrame(columns=columns)
    if "seed" not in frame:
        frame["seed"] = -1  # not recorded: each method's rows form one group
    runs = dict(list(frame.groupby(["data", "eps", "method"], sort=False)))
    out = []
    for (data, eps, method), theirs in runs.items():
        if "(smartnoise" not in method and "(private-pgm" not in method:
            continue
        for (d, e, m), mine in runs.items():
            if (d, e) != (data, eps) or not m.startswith(ours):
                continue
            common = sorted(set(theirs["seed"]) & set(mine["seed"]))
            if not common:
                continue
            value = theirs[theirs["seed"].isin(common)]["tvd3"].mean()
            own = mine[mine["seed"].isin(common)]["tvd3"].mean()
            seeds = "all" if common == [-1] else " ".join(str(int(x)) for x in common)
            ratio = {"ours": m, "peer": method, "seeds": seeds, "ratio_tvd3": own / value}
            out.append({"data": data, "eps": eps, **ratio})
    return pd.DataFrame(out, columns=columns)


def run(
    datasets: list[str],
    epsilons: list[float],
    seeds: list[int],
    peers: dict[str, Peer],
    peer_epsilons: list[float],
    methods: list[str] | None = None,
) -> pd.DataFrame:
    rows: list[dict] = []
    for name in datasets:
        real, domains, target = DATASETS[name]()
        real.attrs["name"] = name  # for the saved peer fits, which are named by data set
        n = len(real)
        print(f"\n## {name}: {n} rows, {real.shape[1]} columns", flush=True)
        start_rows = len(rows)
        for seed in seeds:
            rng = np.random.default_rng(seed)  # baselines only: not a privacy-relevant draw
            boot = real.iloc[rng.integers(0, n, n)].reset_index(drop=True)
            rows.append(_row("bootstrap floor", "-", real, boot, 0.0, target))
            indep = pd.DataFrame({c: rng.permutation(real[c].to_numpy()) for c in real.columns})
            rows.append(_row("independent columns", "-", real, indep, 0.0, target))
        for eps in epsilons:
            for seed in seeds:
                for label, make in _generators(real, domains, target, eps, seed).items():
                    if methods and not any(m.lower() in label.lower() for m in methods):
                        continue
                    row = _timed(label, eps, real, make, target)
                    if row is not None:
                        rows.append({**row, "seed": seed})
                        print(
                            f"  {label} eps {eps} seed {seed}: tvd3 {row['tvd3']:.4f}", flush=True
                        )
            if eps in peer_epsilons:
                for label, peer in peers.items():
                    for seed in seeds:
                        run_peer = functools.partial(peer, real, domains, eps, seed)
                        row = _timed(label, eps, real, run_peer, target)
                        if row is not None:
                            rows.append({**row, "seed": seed})
                            print(f"  {label} eps {eps} seed {seed}: tvd3 {row['tvd3']:.4f}")
            for r in rows[start_rows:]:
                r.setdefault("data", name)
            print(_summary(rows[start_rows:]).to_string(index=False), flush=True)
    ratios = peer_ratios(rows)
    if not ratios.empty:
        print(
            "\n# mean 3-way TVD of Adaptive / the peer's, over the seeds both ran "
            "(target: <= 1 on every data set)"
        )
        print(ratios.round(3).to_string(index=False))
    return _summary(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--eps", nargs="+", type=float, default=[0.1, 0.5, 1, 2, 5])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--peer-python",
        default=None,
        help="an interpreter with smartnoise-synth installed (e.g. /work/venv-peer/bin/python)",
    )
    parser.add_argument("--peer-eps", nargs="+", type=float, default=[1.0])
    parser.add_argument("--aim", action="store_true", help="also run smartnoise's AIM (slow)")
    parser.add_argument(
        "--pgm-mechanisms",
        type=Path,
        default=None,
        help="private-pgm's mechanisms folder: also run its AIM (benchmarks/peer_pgm.py; hours)",
    )
    parser.add_argument(
        "--aim-saved",
        type=Path,
        nargs="+",
        default=None,
        help="folders of private-pgm AIM fits run before by peer_pgm.py "
        "(aim_DATA_sSEED.csv / .json; the first folder holding a fit is read): scored as the "
        "peer 'AIM (private-pgm, saved)', and their aim_DATA_sSEED.round.csv, where present, "
        "as 'AIM round (private-pgm, saved)'",
    )
    parser.add_argument(
        "--write-peer-inputs",
        type=Path,
        default=None,
        help="write DATA.csv and DATA.json (the peer's domain file) of every --data into this "
        "folder, for peer_pgm.py fits run on their own, and stop",
    )
    parser.add_argument(
        "--peer-timeout", type=float, default=None, help="cap on one peer fit, in seconds"
    )
    parser.add_argument(
        "--skip-mst", action="store_true", help="do not run the MST peer (with --aim: AIM only)"
    )
    parser.add_argument(
        "--methods", nargs="+", default=None, help="run only generators whose name contains one"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    print("command:", " ".join(["python -m benchmarks.bench_synth", *(argv or sys.argv[1:])]))
    if args.write_peer_inputs is not None:
        write_peer_inputs(args.data, args.write_peer_inputs)
        return 0
    peers = _peers(args.peer_python, args.pgm_mechanisms, args.peer_timeout)
    if not args.aim:
        peers.pop("AIM (smartnoise)", None)
    if args.skip_mst:
        peers.pop("MST (smartnoise)", None)
    if args.aim_saved is not None:
        peers.update(_saved_peers(args.aim_saved))
    table = run(args.data, args.eps, args.seeds, peers, args.peer_eps, args.methods)
    print("\n# all results (mean ±SE over the seeds; peers and baselines as run)")
    print(table.to_string(index=False))
    if args.out is not None:
        table.to_csv(args.out, index=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak resident memory of this process: {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
