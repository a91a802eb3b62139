"""``topdown synth METHOD DATA``: synthetic data (or a noisy crosstab) from a CSV/Parquet file.

The output is claimed for the whole run (``FileClaim``: a lock beside it), so a second run of
the same ``--out`` is refused, naming the first. Writes three files, each to a temporary name
in the output's folder, then all renamed, the table last (on an
error the temporary files and any output that did not exist before are removed; with
``--overwrite`` an output already replaced stays replaced): the synthetic table (CSV, or
Parquet for a ``.parquet`` name), its ledger (``NAME.ledger.json``) and a short report
(``NAME.report.html``: TVD per attribute and a few two-way comparisons as plots). The report's
figures compare with the confidential data, so they are not differentially private; the
ledger says so.

``add_synth_parser`` adds the command to the ``topdown`` parser and ``run_synth`` runs it
(errors are raised and mapped to exit codes by the caller, as for ``topdown run``); ``main``
runs it on its own with the same exit codes (0 ok, 1 runtime failure, 2 bad input).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from mechanisms.ledger import Ledger
from synth._domains import SynthError
from synth.metrics import marginal_tvds, tvd_per_attribute
from topdown.errors import DataError, TopDownError
from topdown.measurement.read import read_data
from topdown.outputs.microdata import write_table
from topdown.product.output_claim import FileClaim
from topdown.support.leftovers import owner_tag, remove_leftovers
from topdown.support.optional import require

__all__ = ["add_synth_parser", "run_synth", "main", "METHODS", "METHOD_OPTIONS", "write_outputs"]

log = logging.getLogger("synth.cli")

METHODS = ("classcond", "privbayes", "dp2pub", "crosstab", "adaptive")
_PLOTS = 3
#: the most cells a report's two-way heat map draws (its table is built dense)
_PLOT_CELLS = 250_000


def add_synth_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``synth`` to a ``topdown`` sub-command set (``parser.add_subparsers(...)``)."""
    parser = subparsers.add_parser(
        "synth",
        help="DP synthetic data or a noisy crosstab from one file",
        description="Fit a generator (classcond, privbayes, dp2pub, adaptive) or a noisy crosstab "
        "to a CSV/Parquet file and write the result, its ledger and a short report.",
    )
    parser.add_argument("method", choices=METHODS, help="the generator")
    parser.add_argument("data", type=Path, help="confidential records (CSV or Parquet)")
    parser.add_argument("--epsilon", type=str, required=True, help="total budget, e.g. 1 or 0.5")
    parser.add_argument(
        "--domains",
        type=Path,
        help="JSON file {column: [values, ...]}; omitted columns are read from the data "
        "(a disclosure, recorded in the ledger)",
    )
    parser.add_argument(
        "--delta",
        type=str,
        help="adaptive: the delta of its (epsilon, delta) guarantee (default 1e-9)",
    )
    parser.add_argument(
        "--workload",
        type=Path,
        help="adaptive: JSON file [[column, ...], ...] of the marginals to preserve "
        "(default: every 3-way marginal)",
    )
    parser.add_argument(
        "--sampling",
        help="adaptive: how records are drawn from the model: rounded (default: each "
        "clique's counts rounded from their expected values, unbiased, less sampling noise; "
        "records not independent) or iid (independent draws)",
    )
    parser.add_argument("--out", type=Path, help="output table (.csv or .parquet)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    parser.add_argument(
        "--rows",
        type=int,
        help="synthetic rows (default: the fitted model's noisy total, never the true count; "
        "a number given here is disclosed in the ledger)",
    )
    parser.add_argument("--target", help="class column for classcond (default: the last)")
    parser.add_argument("--k", type=int, help="parents per attribute (privbayes 2, dp2pub 3)")
    parser.add_argument("--columns", nargs="+", help="crosstab columns (default: all)")
    parser.add_argument(
        "--seed", type=int, help="reproducible noise (tests, experiments; NOT for production)"
    )
    return parser


def _read_domains(path: Path | None) -> dict[str, list[Any]] | None:
    if path is None:
        return None
    if not path.is_file():
        raise DataError(f"domains file {str(path)!r} does not exist")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"domains file {str(path)!r} is not valid JSON: {err}") from None
    if not isinstance(content, dict) or not all(isinstance(v, list) for v in content.values()):
        raise DataError(
            f"domains file {str(path)!r} must hold an object mapping each column to a list of "
            "its values"
        )
    return content


def _read_workload(path: Path | None) -> list[list[str]] | None:
    """The ``--workload`` file: a JSON list of marginals, each a non-empty list of names."""
    if path is None:
        return None
    if not path.is_file():
        raise DataError(f"workload file {str(path)!r} does not exist")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"workload file {str(path)!r} is not valid JSON: {err}") from None
    if (
        not isinstance(content, list)
        or not content
        or not all(
            isinstance(m, list) and m and all(isinstance(c, str) for c in m) for m in content
        )
    ):
        raise DataError(
            f"workload file {str(path)!r} must hold a non-empty list of marginals, each a "
            'non-empty list of column names, e.g. [["age", "sex"], ["income"]]'
        )
    return content


def _read_delta(value: str | None) -> float:
    """``--delta`` as a float in (0, 1); 1e-9 when omitted."""
    if value is None:
        return 1e-9
    try:
        delta = float(value)
    except ValueError:
        delta = float("nan")
    if not 0 < delta < 1:
        raise SynthError(f"--delta ({value!r}) must be a number in (0, 1)")
    return delta


def _outputs(out: Path) -> tuple[Path, Path, Path]:
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out, out.with_name(f"{stem}.ledger.json"), out.with_name(f"{stem}.report.html")


def _check_out(out: Path, overwrite: bool) -> None:
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise SynthError(f"--out ({str(out)!r}) must end in .csv or .parquet")
    if out.suffix.lower() != ".csv":  # refuse before fitting, not after
        require("parquet", "writing Parquet output")
    if not out.parent.is_dir():
        raise SynthError(f"the folder of --out ({str(out.parent)!r}) does not exist")
    for path in _outputs(out):
        if path.exists() and not overwrite:
            raise SynthError(f"output {str(path)!r} already exists; pass --overwrite to replace it")


#: The method options each method takes (a method not listed here is not checked).
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "classcond": ("rows", "target"),
    "privbayes": ("rows", "k"),
    "dp2pub": ("rows", "k"),
    "crosstab": ("columns",),
    "adaptive": ("rows", "delta", "workload", "sampling"),
}


def _check_options(method: str, args: argparse.Namespace) -> None:
    """Refuse a method option given to a method that does not take it (it was ignored)."""
    takes = METHOD_OPTIONS.get(method)
    if takes is None:
        return
    for option in sorted({o for opts in METHOD_OPTIONS.values() for o in opts} - set(takes)):
        value = getattr(args, option, None)
        if value is not None:
            users = [m for m, opts in METHOD_OPTIONS.items() if option in opts]
            own = ", ".join(f"--{o}" for o in takes)
            raise SynthError(
                f"--{option} ({value!r}) does not apply to method {method!r} (its options: "
                f"{own}); it is an option of {', '.join(users)}"
            )


def _check_not_inputs(out: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an output (the table, its ledger or its report) that is an input: the same
    path, a symbolic link to it, or a hard link (same device and inode)."""
    for path in _outputs(out):
        for name, item in inputs.items():
            if item is None:
                continue
            same = path.resolve() == Path(item).absolute().resolve()
            if not same and path.exists() and Path(item).exists():
                same = os.path.samefile(path, item)  # a hard link: same device and inode
            if same:
                raise SynthError(
                    f"--out ({str(out)!r}): the output {str(path)!r} is the input {name} "
                    f"({str(item)!r}: the same file, a link to it or a hard link); writing it "
                    "would destroy the input: choose another --out"
                )


def _fit(method: str, args: argparse.Namespace, data: pd.DataFrame, domains: Any):
    """(output table, ledger, synthetic records or None for the crosstab)."""
    from synth import Adaptive, ClassConditional, DP2Pub, NoisyCrosstab, PrivBayes

    if method == "adaptive":
        adaptive = Adaptive(
            args.epsilon,
            delta=args.delta,
            workload=args.workload,
            domains=domains,
            seed=args.seed,
        ).fit(data)
        # default: the model's noisy total, not len(data)
        synthetic = adaptive.sample(args.rows, method=args.sampling)
        return synthetic, adaptive.ledger, synthetic
    rows = args.rows  # None: the fitted model's noisy total, never len(data)
    if method == "classcond":
        model = ClassConditional(args.epsilon, target=args.target, domains=domains, seed=args.seed)
        synthetic = model.fit(data).sample(rows)
        return synthetic, model.ledger, synthetic
    if method == "privbayes":
        pb = PrivBayes(
            args.epsilon, k=2 if args.k is None else args.k, domains=domains, seed=args.seed
        )
        synthetic = pb.fit(data).sample(rows)
        return synthetic, pb.ledger, synthetic
    if method == "dp2pub":
        dp = DP2Pub(
            args.epsilon, k=3 if args.k is None else args.k, domains=domains, seed=args.seed
        )
        synthetic = dp.fit_transform(data, rows=rows)
        return synthetic, dp.ledger, synthetic
    ct = NoisyCrosstab(args.epsilon, args.columns, domains=domains, seed=args.seed).fit(data)
    table = ct.release()
    return (table.reset_index() if len(ct.columns or []) == 2 else table), ct.ledger, None


def run_synth(args: argparse.Namespace) -> int:
    """Run ``topdown synth`` (see the module docstring); returns 0, raises on errors."""
    from synth.class_conditional import check_rows
    from synth.crosstab import check_epsilon
    from synth.graphical.sampling import check_sampling

    method = args.method
    args.epsilon = check_epsilon(args.epsilon, "--epsilon")
    out = (args.out or Path.cwd() / f"synth-{method}-{datetime.now():%Y%m%d-%H%M%S}.csv").absolute()
    _check_out(out, args.overwrite)
    _check_not_inputs(
        out, {"data": args.data, "--domains": args.domains, "--workload": args.workload}
    )
    _check_options(method, args)
    if args.rows is not None:  # a table of no rows publishes nothing; a huge one cannot fit
        check_rows(args.rows, "--rows", least=1)
    if method == "adaptive":
        args.delta = _read_delta(args.delta)
        sampling = "rounded" if args.sampling is None else args.sampling
        args.sampling = check_sampling(sampling, "--sampling")
    args.workload = _read_workload(args.workload)
    with FileClaim(out):  # held until the outputs are in place: a second run is refused
        _check_out(out, args.overwrite)  # again, now that the output is ours
        _remove_leftovers(out)
        domains = _read_domains(args.domains)
        data = read_data(args.data)
        if args.rows is not None:  # the bound for the data's columns, before fitting
            check_rows(args.rows, "--rows", columns=max(1, data.shape[1]), least=1)
        try:
            table, ledger, synthetic = _fit(method, args, data, domains)
        except (DataError, SynthError) as err:
            raise type(err)(f"data file {str(args.data)!r}: {err}") from None
        ledger.record_disclosure(
            "report figures",
            "the report's TVD figures and plots compare with the confidential data and are not "
            "differentially private; publish the table and the ledger, not the report",
        )
        report = _report_html(method, args, data, synthetic, table, ledger)
        write_outputs(out, table, ledger, report)
    print(out)
    return 0


def write_outputs(out: Path, table: pd.DataFrame, ledger: Ledger, report: str) -> None:
    """Write the table, ledger and report under temporary names, then rename them all, the
    table last."""
    targets = _outputs(out)
    temps: list[Path] = []
    placed: list[Path] = []  # targets renamed into place that did not exist before
    try:
        for target in targets:
            prefix = f".{target.name}.partial-{owner_tag()}-"  # named after this process
            fd, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
            os.close(fd)
            temps.append(Path(name))
        # the project's table writer (CSV or Parquet, Parquet only with its extra installed)
        fmt = "csv" if out.suffix.lower() == ".csv" else "parquet"
        write_table(table, temps[0], fmt=fmt)
        temps[1].write_text(json.dumps(ledger.to_dict(), indent=2, default=str), encoding="utf-8")
        temps[2].write_text(report, encoding="utf-8")
        # the table last: a run killed between two renames never leaves a table in place
        # without its ledger and report beside it
        for temp, target in reversed(list(zip(temps, targets, strict=True))):
            os.chmod(temp, 0o644)
            existed = target.exists()
            os.replace(temp, target)
            if not existed:
                placed.append(target)
    except BaseException:
        for path in temps + placed:
            path.unlink(missing_ok=True)
        raise
    log.info("wrote %s and its ledger and report", out)


def _remove_leftovers(out: Path) -> None:
    """Remove the temporary files of a killed run of ``out`` (``write_outputs``' own and the
    table writer's, named after them): the caller holds the claim, so no other run writes
    them, and those of a process that still runs are left alone all the same."""
    names = [target.name for target in _outputs(out)]  # all three in the output's folder
    prefixes = tuple(f"{dots}{name}.partial-" for name in names for dots in (".", ".."))
    remove_leftovers(out.parent, prefixes, claimed=True)


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _report_html(
    method: str,
    args: argparse.Namespace,
    data: pd.DataFrame,
    synthetic: pd.DataFrame | None,
    table: pd.DataFrame,
    ledger: Ledger,
) -> str:
    """A short self-contained HTML page: budget, TVD per attribute, two-way comparisons."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = ledger.total()
    parts = [
        f"<html><head><meta charset='utf-8'><title>topdown synth {html.escape(method)}</title>"
        "</head><body>",
        f"<h1>topdown synth {html.escape(method)}</h1>",
        f"<p>data: {html.escape(str(args.data))} ({len(data)} rows); budget: "
        f"{html.escape(str(total))}; {len(ledger)} measurements.</p>",
        _approx_dp(args, ledger),
        "<p><b>Not private:</b> the figures below compare with the confidential data.</p>",
    ]
    for d in ledger.disclosures:
        parts.append(f"<p>Disclosure: {html.escape(d.name)}: {html.escape(d.description)}</p>")
    if synthetic is None:
        parts.append("<h2>Released table</h2>" + table.head(200).to_html(index=False))
    else:
        per = tvd_per_attribute(data, synthetic).rename("TVD").to_frame()
        parts.append(f"<h2>TVD per attribute (mean {per['TVD'].mean():.4f})</h2>")
        parts.append(per.round(4).to_html())
        if data.shape[1] >= 2:
            pairs = marginal_tvds(data, synthetic, 2).sort_values(ascending=False)
            parts.append("<h2>Two-way comparisons (largest TVD first)</h2>")
            for pair, value in list(pairs.items())[:_PLOTS]:
                a, b = (str(x) for x in pair) if isinstance(pair, tuple) else ("", "")
                shown = max(f[a].nunique() * f[b].nunique() for f in (data, synthetic))
                if shown > _PLOT_CELLS:  # a heat map of millions of cells shows nothing
                    parts.append(
                        f"<h3>{html.escape(a)} x {html.escape(b)}: TVD {value:.4f}</h3><p>not "
                        f"plotted: {shown:,} cells (at most {_PLOT_CELLS:,} are drawn)</p>"
                    )
                    continue
                fig, axes = plt.subplots(1, 2, figsize=(8, 3))
                for ax, frame, title in (
                    (axes[0], data, "real"),
                    (axes[1], synthetic, "synthetic"),
                ):
                    counts = pd.crosstab(frame[a], frame[b], normalize=True)
                    ax.imshow(counts.to_numpy(), aspect="auto", cmap="viridis")
                    ax.set_title(f"{title}: {a} x {b}", fontsize=8)
                    ax.set_xlabel(str(b), fontsize=7)
                    ax.set_ylabel(str(a), fontsize=7)
                fig.tight_layout()
                parts.append(
                    f"<h3>{html.escape(str(a))} x {html.escape(str(b))}: TVD {value:.4f}</h3>"
                    f"<img src='data:image/png;base64,{_png(fig)}'/>"
                )
                plt.close(fig)
    parts.append("<h2>Ledger</h2>" + ledger.to_frame().to_html(index=False))
    parts.append("</body></html>")
    return "\n".join(parts)


def _approx_dp(args: argparse.Namespace, ledger: Ledger) -> str:
    """The (epsilon, delta) view of a zCDP total at ``--delta`` (empty for other methods)."""
    delta = getattr(args, "delta", None)
    if not isinstance(delta, float):
        return ""
    return (
        f"<p>(epsilon, delta) view: epsilon {ledger.epsilon_delta(delta):.6g} at delta "
        f"{delta:g} (Canonne, Kamath, Steinke conversion of the zCDP total).</p>"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m synth.cli METHOD DATA ...`` with the exit codes of ``topdown``."""
    parser = argparse.ArgumentParser(prog="topdown")
    sub = parser.add_subparsers(dest="command", required=True)
    add_synth_parser(sub)
    try:
        args = parser.parse_args(["synth", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return run_synth(args)
    except (TopDownError, ValueError) as err:
        print(f"topdown: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        print(f"topdown: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
