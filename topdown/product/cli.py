"""The ``topdown`` command line: run a release, check a folder, rebuild its report, benchmark.

Commands (``topdown COMMAND --help`` for each)::

    topdown run [CONFIG] [--out DIR] [--overwrite] [--seed N] [--solver S] [--executor E]
                 [--workers N] [--address TCP] [--capture-problems DIR]
                 [--estimator blue|topdown] [--stream-by COLUMN]
    topdown check RELEASE
    topdown report RELEASE [--truth DATA]
    topdown bench {estimators,samplers,solvers,scale} [ARGS...]
    topdown synth METHOD DATA --epsilon E [--domains FILE] [--out FILE]

``topdown run`` without a config runs the embedded default (``topdown/data/default.toml`` over
the embedded ACS 2019 excerpt). Global ``--quiet`` shows warnings and errors only; ``--verbose``
shows debug logs and the traceback of an error. Progress is a bar on a terminal and log lines
otherwise.

Exit codes: 0 success; 1 a runtime failure (a solver failure, a release or folder that fails
its checks, an I/O error); 2 a usage, configuration or input-data error (bad option, config
key, data column or value, existing or claimed output folder); 130 interrupted (Ctrl-C), 143
terminated (SIGTERM, handled like Ctrl-C). Errors are one message on stderr naming the file, the
key or column, the value and the rule; nothing is left behind.

``topdown check`` exits 0 for a consistent seeded release but reports it NOT PRIVATE on both
streams: its seed is published, so its noise can be regenerated.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import pandas as pd

from constraints.errors import ConstraintError, DomainError
from synth.cli import add_synth_parser, run_synth
from topdown.errors import DataError, HierarchyError, OptionsError, ReleaseError, TopDownError
from topdown.execution.executors import ExecutorError, SchedulerUnreachable
from topdown.measurement.dask_input import is_dataset
from topdown.measurement.read import read_data
from topdown.measurement.tree import ROOT_LABEL
from topdown.product.config import DEFAULT_CONFIG, ConfigError, RunConfig, load_config
from topdown.product.config_geography import GEOGRAPHY_KEY
from topdown.product.interrupts import TeardownFilter, handling_signals, received
from topdown.product.interrupts import Terminated as _Terminated

__all__ = ["main", "load_data", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

log = logging.getLogger("topdown.product.cli")
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_TERMINATED = 128 + signal.SIGTERM
_BENCHES = {
    "estimators": "bench_estimators.py",
    "samplers": "bench_samplers.py",
    "solvers": "solvers",
    "scale": "bench_pl94.py",
}


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``main`` returns the usage exit code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


#: The output claims of the running command: an interrupt's message says whether its output
#: is in place (complete) or nothing was written.
_CLAIMS: list[Any] = []


def interrupted_line(what: str) -> str:
    """The one line an interrupt prints: the state the output is in."""
    done = [c.out for c in _CLAIMS if getattr(c, "installed", False)]
    if done:
        return (
            f"topdown: {what} after the output was complete: {str(done[-1])!r} is in place and "
            "whole (check it with topdown check)"
        )
    return f"topdown: {what}; nothing was written"


def run() -> NoReturn:
    """The program (``topdown``, ``python -m topdown``): ``main``, then exit with its code.

    An interrupt that lands after ``main`` returned (while the interpreter exits) prints the
    same one line and exits with the documented code, 130 or 143, not a traceback.
    """
    code = main()

    def late(signum: int, frame: FrameType | None) -> None:
        terminated = signum == signal.SIGTERM
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        print(interrupted_line(what), file=sys.stderr)
        os._exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, late)
    # the interpreter's own exit resets the signal handlers to the default before it ends,
    # so an interrupt in that window killed the process silently (exit -2 on a quiet
    # machine): run the exit handlers here, with ``late`` in place, and leave without it
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="topdown", description="Differentially private TopDown releases of hierarchical data."
    )
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument(
        "-q", "--quiet", action="store_true", help="warnings and errors only, no progress"
    )
    verbosity.add_argument(
        "-v", "--verbose", action="store_true", help="debug logs; tracebacks on errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run a release and write a release folder",
        description="Run a TopDown release from a TOML config (default: the embedded ACS "
        "excerpt and topdown/data/default.toml) and write a release folder.",
    )
    run.add_argument(
        "config", nargs="?", type=Path, help="config file (TOML); default: the embedded default"
    )
    run.add_argument(
        "--out", type=Path, help="release folder to create (default: ./release-YYYYmmdd-HHMMSS)"
    )
    run.add_argument(
        "--overwrite", action="store_true", help="replace the output folder if it exists"
    )
    run.add_argument(
        "--seed",
        type=int,
        help="reproducible noise for tests and experiments: NOT private (the seed is published)",
    )
    run.add_argument(
        "--diagnostics",
        type=Path,
        metavar="DIR",
        help="write the run's diagnostics (timings, the number of records read) to "
        "DIR/diagnostics.json: computed from the confidential data, NOT for publication; "
        "never written into the release folder",
    )
    run.add_argument("--solver", help="solver name (see solvers.available()) or auto")
    run.add_argument("--executor", help="serial, processes or dask")
    run.add_argument(
        "--workers",
        type=int,
        help="worker processes of the processes executor or of a local Dask cluster",
    )
    run.add_argument(
        "--address",
        help="a running Dask scheduler (tcp://host:8786) for the dask executor; without it a "
        "local cluster starts",
    )
    run.add_argument(
        "--capture-problems",
        type=Path,
        metavar="DIR",
        help="write every problem solved (MPS + index.csv) into this new folder, for "
        "topdown bench solvers --problems DIR",
    )
    run.add_argument(
        "--estimator", help="blue or topdown (the Census Bureau's 2020 method); overrides the file"
    )
    run.add_argument(
        "--stream-by",
        metavar="COLUMN",
        help="stream the release by the subtrees of this hierarchy column (memory follows the "
        "largest subtree; data.path may be a folder of Parquet partitions, one per unit)",
    )

    check = sub.add_parser(
        "check",
        help="re-verify a release folder",
        description="Verify a release folder without the original data: files vs manifest, "
        "non-negative integers, children sum to parents, constraints, ledger.",
    )
    check.add_argument("release", type=Path, help="release folder")

    report = sub.add_parser(
        "report",
        help="(re)build a release folder's report.html",
        description="Rebuild report.html; with --truth, recompute the accuracy metrics first.",
    )
    report.add_argument("release", type=Path, help="release folder")
    report.add_argument(
        "--truth", type=Path, help="the confidential data the release was made from"
    )

    bench = sub.add_parser(
        "bench",
        help="run a benchmark script of the repository",
        description="Run benchmarks/ scripts (needs a checkout of the repository).",
    )
    bench.add_argument("name", choices=sorted(_BENCHES), help="which benchmark")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    add_synth_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as err:
        print(str(err), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    _setup_logging(args.quiet, args.verbose)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    command = {
        "run": _cmd_run,
        "check": _cmd_check,
        "report": _cmd_report,
        "bench": _cmd_bench,
        "synth": run_synth,
    }[args.command]
    _CLAIMS.clear()
    try:
        with handling_signals():
            code = command(args)
        signum = received()  # a signal Python could not raise where it landed (a __del__)
        if signum is None:
            return code
        terminated = signum == signal.SIGTERM
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        if code == EXIT_OK and not any(getattr(c, "installed", False) for c in _CLAIMS):
            what += " after the command had finished; its output is complete and in place"
            print(f"topdown: {what}", file=sys.stderr)
        else:
            print(interrupted_line(what), file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except _Terminated:
        print(interrupted_line("terminated (SIGTERM)"), file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(interrupted_line("interrupted"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # the edge: one message, a code, a traceback only when asked
        code = (
            EXIT_USAGE
            if isinstance(err, TopDownError) and isinstance(err, ValueError)
            else EXIT_FAILURE
        )
        if args.verbose:
            log.exception("traceback")
        print(f"topdown: error: {err}", file=sys.stderr)
        return code


def _setup_logging(quiet: bool, verbose: bool) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_topdown_cli", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._topdown_cli = True  # type: ignore[attr-defined]
    fmt = (
        "%(asctime)s %(levelname)s %(name)s: %(message)s"
        if verbose
        else "%(levelname)s: %(message)s"
    )
    handler.setFormatter(logging.Formatter(fmt, "%H:%M:%S"))
    handler.addFilter(TeardownFilter(verbose))  # a Dask cluster's INFO lines, its teardown's
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    for noisy in ("matplotlib", "PIL", "numexpr", "numba", "distributed", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


# -- run -------------------------------------------------------------------------------------
def load_data(cfg: RunConfig, path: Path | None = None) -> pd.DataFrame:
    """The confidential data of a config (or ``path`` read the same way), derived columns added.

    Hierarchy columns and derive sources are read as text, so ``01`` keeps its leading zero.
    """
    path = path or cfg.data.path
    text_cols = set(cfg.schema.hierarchy) | {d.source for d in cfg.data.derive.values()}
    try:
        data = read_data(
            path, sep=cfg.data.separator, fmt=cfg.data.format, dtype={c: str for c in text_cols}
        )
        for col, d in cfg.data.derive.items():
            if d.source not in data.columns:
                raise DataError(
                    f"column {d.source!r} (the source of derived column {col!r}) is not in the "
                    "data; "
                    f"its columns are {list(data.columns)}"
                )
            src = data[d.source]
            derived = src.astype(str).str.slice(d.start, d.stop).where(src.notna())
            if col in data.columns:
                _check_derived_matches(col, d.source, data[col], derived, cfg.file)
            data[col] = derived
        cfg.schema.check_columns(data, source=f"data file {str(path)!r}")
        for i, attr in enumerate(cfg.schema.attributes):
            try:
                _check_attribute(attr, data)
            except (DataError, DomainError) as err:
                raise DataError(
                    f"{err} (domain declared in {cfg.file} at schema.attributes[{i}])"
                ) from None
        for col in cfg.schema.hierarchy:
            missing = data[col].isna() | (data[col].astype(str).str.strip() == "")
            if missing.any():
                raise DataError(
                    f"hierarchy column {col!r} has {int(missing.sum())} empty value(s), first at "
                    f"row(s) {missing.to_numpy().nonzero()[0][:5].tolist()}; every record needs "
                    "a unit"
                )
    except DataError as err:
        if str(path) in str(err):
            raise
        raise DataError(f"data file {str(path)!r}: {err}") from None
    return data


def _check_derived_matches(
    col: str, source: str, existing: pd.Series, derived: pd.Series, file: str
) -> None:
    """A derived column that would replace a column of the data: refused unless identical."""
    differ = (existing.astype(str) != derived.astype(str)).to_numpy()
    if differ.any():
        i = int(differ.nonzero()[0][0])
        raise DataError(
            f"derived column {col!r} (data.derive.{col} in {file}, from {source!r}) would "
            f"overwrite the data's own column {col!r}, which differs in {int(differ.sum())} "
            f"row(s) (first at row {i}: {existing.iloc[i]!r} vs derived {derived.iloc[i]!r}); "
            "rename the derived column or drop the data's"
        )
    log.info("derived column %r (from %r) equals the data's own column %r", col, source, col)


def _check_attribute(attr, data: pd.DataFrame) -> None:
    """NaN and values outside the declared domain, for one attribute (before any work)."""
    col = data[attr.source]
    nan = col.isna().to_numpy()
    if nan.any():
        raise DataError(
            f"column {attr.source!r} has {int(nan.sum())} missing (NaN) value(s), first at row(s) "
            f"{nan.nonzero()[0][:5].tolist()}; query attributes must be complete"
        )
    attr.encode(col)


def _cmd_run(args: argparse.Namespace) -> int:
    from topdown.engine import release
    from topdown.presets import headline_figures
    from topdown.product.release_folder import claim_output, write_release_folder
    from topdown.product.report import build_report

    timings: dict[str, float] = {}
    diagnostics: dict[str, Any] = {"timings_seconds": timings}
    start = time.perf_counter()
    cfg = load_config(args.config or DEFAULT_CONFIG)
    cfg = cfg.with_overrides(
        seed=args.seed,
        solver=args.solver,
        executor=args.executor,
        workers=args.workers,
        address=args.address,
        capture=args.capture_problems,
        estimator=args.estimator,
        stream_by=args.stream_by,
    )
    cfg.check_inputs()  # every input path, before any work
    geography = cfg.geography.frame(cfg.file) if cfg.geography is not None else None
    out = (args.out or Path.cwd() / f"release-{datetime.now():%Y%m%d-%H%M%S}").absolute()
    _check_diagnostics(args.diagnostics, out)
    if cfg.stream_by is not None:
        return _run_streamed(args, cfg, out, start, geography)
    with claim_output(out, args.overwrite, inputs=cfg.input_paths()) as claim:
        _CLAIMS.append(claim)
        on_cluster = cfg.executor == "dask" and is_dataset(cfg.data.path)
        data: pd.DataFrame | Path
        if on_cluster:  # a Parquet dataset read on the workers (topdown.measurement.dask_input)
            if cfg.data.derive:
                raise ConfigError(
                    cfg.file,
                    "data.derive",
                    f"derived columns need the records here, but data.path "
                    f"({str(cfg.data.path)!r}) is a Parquet dataset read on the Dask workers; "
                    "write the derived columns into the dataset",
                )
            data = cfg.data.path
            log.info("reading the Parquet dataset %s on the Dask workers", cfg.data.path)
        else:
            data = load_data(cfg)
            _check_node_labels(cfg, data if geography is None else geography)
            # the exact count is confidential: a diagnostic (-v, --diagnostics), not INFO
            log.debug("read %d records from %s", len(data), cfg.data.path)
            diagnostics["records_read"] = len(data)
        timings["read"] = time.perf_counter() - start
        t = time.perf_counter()
        with _engine_errors(cfg):
            rel = release(
                data,
                cfg.schema,
                cfg.strategy,
                capture=cfg.capture,
                **_engine_options(cfg, args, geography),
            )
        timings["release"] = time.perf_counter() - t
        _require_correct(rel)
        metrics = None
        if cfg.truth:
            t = time.perf_counter()
            if cfg.truth is True:
                truth = load_data(cfg) if isinstance(data, Path) else data
            else:
                truth = load_data(cfg, Path(cfg.truth))
            # recorded in the ledger by the writer
            metrics = rel.metrics(truth, headline=headline_figures(rel.schema))
            timings["metrics"] = time.perf_counter() - t
        write_release_folder(
            rel,
            cfg,
            out,
            overwrite=args.overwrite,
            metrics=metrics,
            timings=timings,
            report=lambda folder: build_report(folder, name=out.name),
            claim=claim,
        )
    _write_diagnostics(args.diagnostics, out, diagnostics)
    print(out)
    return EXIT_OK


def _check_diagnostics(folder: Path | None, out: Path) -> None:
    """--diagnostics names a folder outside the release folder (it is not for publication)."""
    if folder is None:
        return
    where = folder.absolute().resolve()
    if where == out.resolve() or out.resolve() in where.parents:
        raise OptionsError(
            f"--diagnostics ({str(folder)!r}) is inside the release folder {str(out)!r}; "
            "diagnostics are computed from the confidential data and must stay out of it"
        )
    if where.exists() and not where.is_dir():
        raise OptionsError(f"--diagnostics ({str(folder)!r}) exists and is not a folder")


def _write_diagnostics(folder: Path | None, out: Path, diagnostics: dict[str, Any]) -> None:
    """DIR/diagnostics.json (timings, records read), or the timings at debug level only."""
    timings = diagnostics.get("timings_seconds", {})
    log.debug("timings (s): %s", ", ".join(f"{k} {v:.3f}" for k, v in timings.items()))
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    document = dict(
        diagnostics,
        release=str(out),
        note="computed from the confidential data: NOT for publication",
        timings_seconds={k: round(v, 4) for k, v in timings.items()},
    )
    (folder / "diagnostics.json").write_text(json.dumps(document, indent=1), encoding="utf-8")
    log.info("wrote the run's diagnostics (not for publication) to %s", folder)


def _run_streamed(
    args: argparse.Namespace,
    cfg: RunConfig,
    out: Path,
    start: float,
    geography: pd.DataFrame | None,
) -> int:
    """``topdown run`` streamed by ``cfg.stream_by`` (``topdown.streaming.run``): the subtrees'
    tables and microdata are written one by one into a hidden folder, checked, then moved into
    place (``topdown.product.stream_folder``)."""
    import shutil

    from topdown.product.release_folder import claim_output, set_modes
    from topdown.product.stream_folder import write_streamed_extras
    from topdown.streaming.run import release_streamed

    if cfg.truth:
        raise ConfigError(cfg.file, "metrics.truth", "is not available with stream_by (yet)")
    if cfg.capture is not None:
        raise ConfigError(cfg.file, "solver.capture", "is not available with stream_by")
    assert cfg.stream_by is not None
    folder_input = cfg.data.path.is_dir()
    if folder_input and cfg.data.derive:
        raise ConfigError(
            cfg.file, "data.derive", "needs a data file; a folder of partitions is read as is"
        )
    timings: dict[str, float] = {}
    with claim_output(out, args.overwrite, inputs=cfg.input_paths()) as claim:
        _CLAIMS.append(claim)
        data: pd.DataFrame | Path = cfg.data.path if folder_input else load_data(cfg)
        tmp = claim.new_partial()
        try:
            t = time.perf_counter()
            with _engine_errors(cfg):
                rel = release_streamed(
                    data,
                    cfg.schema,
                    cfg.strategy,
                    stream_by=cfg.stream_by,
                    out=tmp,
                    microdata_format=cfg.output_format,
                    **_engine_options(cfg, args, geography),
                )
            timings["release"] = time.perf_counter() - t
            _require_correct(rel)
            timings["total"] = time.perf_counter() - start
            write_streamed_extras(rel, cfg, tmp, timings, name=out.name)
            set_modes(tmp)
            claim.install(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _write_diagnostics(args.diagnostics, out, {"timings_seconds": timings})
    print(out)
    return EXIT_OK


@contextmanager
def _engine_errors(cfg: RunConfig) -> Iterator[None]:
    """Engine errors named after their source: a data error after the data file, a config
    value's error after the config file (the release and the streamed release alike)."""
    try:
        yield
    except SchedulerUnreachable as err:
        source = (
            "--address"
            if cfg.address_source == "--address"
            else f"{cfg.address_source} in {cfg.file}"
        )
        raise ExecutorError(
            f"cannot reach the Dask scheduler at {err.address} (from {source}): none answered "
            f"within {err.timeout:g} s ({err.reason}); start one (dask scheduler) or give "
            "another address (none: a local cluster)"
        ) from None
    except HierarchyError as err:
        if cfg.geography is not None and "geography" in str(err):
            raise ConfigError(
                cfg.file,
                GEOGRAPHY_KEY,
                f"does not hold the data's units (data file {str(cfg.data.path)!r}): {err}; "
                "the declared units must include every unit with a record",
            ) from None
        raise DataError(f"data file {str(cfg.data.path)!r}: {err}") from None
    except DataError as err:
        raise DataError(f"data file {str(cfg.data.path)!r}: {err}") from None
    except (DomainError, ValueError) as err:
        if isinstance(err, TopDownError):
            raise type(err)(f"{cfg.file}: {err}") from None
        raise


def _require_correct(rel: Any) -> None:
    """A release that fails its own checks is not written (``Release`` or ``StreamedRelease``)."""
    verdict = rel.check_correctness()
    if not verdict.ok:
        raise ReleaseError("the release failed its checks, nothing was written:\n" + str(verdict))


def _engine_options(
    cfg: RunConfig, args: argparse.Namespace, geography: pd.DataFrame | None
) -> dict[str, Any]:
    """The engine arguments a config sets, the same for a release and a streamed release
    (``geography``: the declared units, ``cfg.geography`` read)."""
    from topdown.support.progress import Progress

    return {
        "constraints": cfg.constraints,
        "seed": cfg.seed,
        "solver": cfg.solver,
        "solver_options": cfg.solver_options,
        "executor": cfg.executor,
        "workers": cfg.workers,
        "address": cfg.address,
        "failsafe": cfg.failsafe,
        "estimator": cfg.effective_estimator,
        "geography": geography,
        "progress": Progress(enabled=not args.quiet),
    }


def _check_node_labels(cfg: RunConfig, data: pd.DataFrame) -> None:
    """Constraints attached to named nodes must name units that exist (a typo applies nowhere):
    units of the data, or of the declared geography when ``data`` is it."""
    labels = {0: [ROOT_LABEL]}
    for k, col in enumerate(cfg.schema.hierarchy, start=1):
        labels[k] = data[col].astype(str).unique().tolist()
    try:
        cfg.constraints.validate(cfg.schema.n_levels, labels)
    except ConstraintError as err:
        raise ConfigError(cfg.file, "constraints", str(err)) from None


# -- check, report, bench --------------------------------------------------------------------
def _existing_release(path: Path) -> Path:
    if path.is_file():
        raise ConfigError(
            "command line", "RELEASE", f"{str(path)!r} is a file, not a release folder"
        )
    if not path.is_dir():
        raise ConfigError("command line", "RELEASE", f"release folder {str(path)!r} does not exist")
    return path


def _cmd_check(args: argparse.Namespace) -> int:
    from topdown.product.release_folder import verify_release_folder
    from topdown.product.stream_folder import is_streamed_folder, verify_streamed_folder

    folder = _existing_release(args.release)
    if is_streamed_folder(folder):
        verdict = verify_streamed_folder(folder)
    else:
        verdict = verify_release_folder(folder)
    if not verdict.private:
        print(f"topdown: WARNING: NOT PRIVATE: noise: {verdict.noise}", file=sys.stderr)
    if verdict.failures:
        for name, ok in verdict.checks.items():
            print(f"{'ok  ' if ok else 'FAIL'} {name}", file=sys.stderr)
        for f in verdict.failures:
            print(f"  - {f}", file=sys.stderr)
        print(f"topdown: check failed: {folder}", file=sys.stderr)
        return EXIT_FAILURE
    label = "" if verdict.private else "; NOT PRIVATE (seeded noise: the seed is published)"
    if verdict.not_publishable:
        files = ", ".join(verdict.not_publishable)
        print(
            f"topdown: WARNING: not publishable as is: {files} (figures computed from the "
            "confidential data; remove them before publishing)",
            file=sys.stderr,
        )
        label += f"; not publishable as is: {files}"
    print(f"ok: {folder} passed {len(verdict.checks)} checks{label}")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from topdown.presets import headline_figures
    from topdown.product.release_folder import (
        REBUILT_BY_REPORT,
        REBUILT_WITH_TRUTH,
        load_release,
        manifest_failures,
        record_metrics_disclosure,
        refresh_manifest,
        set_modes,
        write_ledger,
        write_metrics,
    )
    from topdown.product.report import build_report
    from topdown.product.stream_folder import is_streamed_folder
    from topdown.product.stream_report import build_streamed_report

    folder = _existing_release(args.release)
    streamed = is_streamed_folder(folder)
    if streamed and args.truth is not None:
        raise ConfigError(
            "command line", "--truth", f"{str(folder)!r} is a streamed release: it keeps no truth"
        )
    with_truth = args.truth is not None
    rebuilt = REBUILT_WITH_TRUTH if with_truth else REBUILT_BY_REPORT
    # a report is rebuilt only over an intact release: re-signing a file that someone changed
    # would hide the change from ``topdown check``, so only the files rebuilt here may differ
    # (the ledger is rebuilt from itself: it must match the manifest first)
    tampered = manifest_failures(folder, ignore=tuple(n for n in rebuilt if n != "ledger.json"))
    if tampered:
        raise ReleaseError(
            f"release folder {str(folder)!r} was modified after release, refusing to "
            "rebuild its report: " + "; ".join(tampered[:5])
        )
    if with_truth:
        rel, cfg = load_release(folder, whole_blue=False)  # the ledger's note only
        truth = load_data(cfg, args.truth)
        write_metrics(folder, rel.metrics(truth, headline=headline_figures(rel.schema)))
        record_metrics_disclosure(rel)  # once, however often the report is rebuilt
        write_ledger(folder, rel)
    path = build_streamed_report(folder) if streamed else build_report(folder)
    set_modes(folder, rebuilt)
    refresh_manifest(folder, rebuilt)
    print(path)
    return EXIT_OK


def _repo_root() -> Path:
    """The checkout this module runs from (benchmarks/ lives beside the packages)."""
    return Path(__file__).resolve().parents[2]


def _cmd_bench(args: argparse.Namespace) -> int:
    root = _repo_root()
    bench_dir = root / "benchmarks"
    if not bench_dir.is_dir():
        raise ConfigError(
            "command line",
            "bench",
            f"the benchmarks folder is not there ({bench_dir}): "
            "benchmarks need a checkout of the repository, not an installed package",
        )
    target = bench_dir / _BENCHES[args.name]
    if not target.exists():
        raise ConfigError(
            "command line", f"bench {args.name}", f"benchmark {str(target)!r} does not exist (yet)"
        )
    cmd = (
        [sys.executable, "-m", f"benchmarks.{target.name}"]
        if target.is_dir()
        else [sys.executable, str(target)]
    ) + list(args.args)
    log.info("running %s", " ".join(cmd))
    return subprocess.call(cmd, cwd=root)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
