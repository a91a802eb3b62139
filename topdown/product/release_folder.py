"""The release folder: written atomically, read back, and verified without the original data.

Contents (``manifest.json`` lists them with sizes and SHA-256)::

    microdata.csv | microdata.parquet     synthetic records of the leaf level
    tables/level_<k>_<column>.csv         per level, long format: node, attributes, count
    hierarchy.csv                         level, column, node, parent: the public tree
    measurements.csv | measurements.parquet  the noisy measurements: the CSV one row per
                                          answer (level, node, query, answer, noisy,
                                          variance), the Parquet one row per node and query
                                          (``topdown.product.measurement_file``)
    ledger.json                           privacy ledger, total, (epsilon, delta) equivalent
    invariants.json                       values published exactly (bound invariants) per node
    config.json                           the resolved configuration (schema, strategy, constraints)
    solver_stats.csv                      estimation statistics per level
    error_estimates.csv, error_summary.csv  (estimator "blue") per node: the BLUE's totals, their
                                          standard errors and 90% intervals, the cells' stderr;
                                          per level: the final counts' distance from the BLUE
    metrics.csv, bias_by_size.csv         accuracy against the truth (when it was given)
    headline.csv                          the presets' headline figures against the truth
    report.html                           the report (see ``topdown.product.report``)
    manifest.json                         files and versions (no timings: they are diagnostics)

Everything is written into a hidden sibling folder that is renamed into place only when complete,
so an interrupted run leaves no half release; an existing folder is replaced only when asked. A run
claims its output path from start to end (``OutputClaim``): a second run of the same path is
refused, and a folder that appears there meanwhile is never replaced or deleted.

``topdown check`` (``verify_release_folder``) re-verifies a folder against its manifest. The
manifest is self-signed: it detects accidental and partial tampering, not a forger who rewrites
the files and the manifest together.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constraints.contextual_constraints import InvariantConstraint
from mechanisms.ledger import SEEDED_DISCLOSURE, Ledger
from topdown.blue.error_estimates import error_summary, node_error_table
from topdown.blue.estimate import blue
from topdown.blue.root_total import root_total_blue
from topdown.errors import ReleaseError, TopDownError
from topdown.estimation.estimate import LevelStats
from topdown.estimation.estimators import exact_totals
from topdown.estimation.passes import solve_seconds
from topdown.estimation.root_total import decide
from topdown.execution.process_memory import hugepage_advice_off
from topdown.measurement.measure import Measurements, QueryMeasurement
from topdown.measurement.tree import ROOT_LABEL, Level, Tree
from topdown.outputs.ledger import (
    DELTA,
    METRICS_DISCLOSURE,
    TRUTH_FILES,
    ledger_document,
    ledger_summary,
    not_publishable,
)
from topdown.outputs.microdata import write_table
from topdown.product.config import RunConfig, load_config, parse_config
from topdown.product.measurement_file import (
    measurement_answers,
    measurement_file_in,
    numbers,
    write_measurement_file,
)
from topdown.product.output_claim import OutputClaim, OutputExistsError, check_output, claim_output
from topdown.release import Release
from topdown.strategy import Query
from topdown.support.int_types import int_type_for
from topdown.support.writing import naming

__all__ = [
    "OutputExistsError",
    "OutputClaim",
    "claim_output",
    "check_output",
    "write_release_folder",
    "load_release",
    "table_name",
    "DELTA",
    "ledger_summary",
]

log = logging.getLogger(__name__)
#: 2: the ledger records its noise source; 3: measurements.parquet under output format parquet
FORMAT = "topdown-release/3"


def table_name(level: int, column: str | None) -> str:
    return f"tables/level_{level}_{column or ROOT_LABEL}.csv"


@hugepage_advice_off()  # its tables and files are large arrays too (process_memory)
def write_release_folder(
    rel: Release,
    cfg: RunConfig,
    out: Path,
    *,
    overwrite: bool = False,
    metrics: Any = None,
    timings: dict[str, float] | None = None,
    report: Callable[[Path], Path] | None = None,
    claim: OutputClaim | None = None,
) -> Path:
    """Write the folder atomically and return its path.

    Args:
        rel: the release (its noise source labels the folder).
        cfg: its configuration (written resolved, as ``config.json``).
        out: the folder to create.
        overwrite: replace an existing folder.
        metrics: a ``topdown.outputs.metrics.Metrics`` (written when given, and recorded in
            the ledger as a disclosure: they are computed from the confidential data).
        timings: seconds per phase; the writing's is added to it. Not written into the folder
            (timings grow with the true number of records: a side channel): the caller
            keeps them as diagnostics (``topdown run --diagnostics DIR``).
        report: builds ``report.html`` inside the folder it is given.
        claim: the claim on ``out`` taken at the start of the run (default: claimed here).

    Raises:
        OutputExistsError: ``out`` cannot be claimed, or changed while the run computed.
        ReleaseError: the release does not record its noise source, or a write failed (the
            message names the folder; nothing is left behind).
    """
    if rel.noise is None:
        raise ReleaseError(
            "the release does not record its noise source (Release.noise); a folder cannot be "
            "labelled without it"
        )
    out = Path(out).absolute()
    own = claim is None
    if claim is None:
        claim = claim_output(out, overwrite)
    elif claim.out != out:
        raise OutputExistsError(f"the claim is for {str(claim.out)!r}, not {str(out)!r}")
    try:
        tmp = claim.new_partial()
        try:
            start = time.perf_counter()
            if metrics is not None:
                record_metrics_disclosure(rel)
            _write_contents(rel, cfg, tmp, metrics)
            if report is not None:
                report(tmp)
            if timings is not None:
                timings.update(solve_seconds(rel.stats))
                timings["write"] = time.perf_counter() - start
            _write_manifest(tmp, rel, cfg)
            set_modes(tmp)
            claim.install(tmp)
        except OSError as err:
            raise ReleaseError(
                f"writing the release folder {str(out)!r} failed (in {str(tmp)!r}, removed): "
                f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
            ) from err
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if own:
            claim.release()
    log.info("release folder written: %s", out)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def set_modes(folder: Path, names: Sequence[str] | None = None) -> None:
    """One mode for the whole folder, under the umask: files 0666, folders 0777 (mkdtemp and
    mkstemp make theirs owner-only; a release is for reading). ``names``: only those files."""
    mask = _umask()
    paths = [folder, *folder.rglob("*")] if names is None else [folder / n for n in names]
    for path in paths:
        if path.exists() and not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def noise_config_value(rel: Release) -> int | str:
    """``config.json``'s ``seed``, from the release's own noise source."""
    if rel.noise is None or rel.noise.seed is None:
        return "none"
    return rel.noise.seed


def write_ledger(folder: Path, rel: Release) -> None:
    _write_json(folder / "ledger.json", ledger_document(rel))


def record_metrics_disclosure(rel: Release) -> None:
    """Accuracy figures are computed from the confidential data: say so in the ledger (once)."""
    rel.ledger.record_disclosure(
        METRICS_DISCLOSURE,
        "metrics.csv, bias_by_size.csv, headline.csv and the report's error tables compare the "
        "release with the confidential data (e.g. the root's true total follows from its "
        "bias); they are not differentially private: remove them before publishing real "
        "confidential data",
    )


def write_metrics(folder: Path, metrics: Any) -> None:
    """metrics.csv, bias_by_size.csv and headline.csv (evaluation against the truth: not
    private); headline.csv has its header only when no headline figure applies."""
    write_table(metrics.table, folder / "metrics.csv")
    write_table(metrics.bias_by_size, folder / "bias_by_size.csv")
    write_table(metrics.headline, folder / "headline.csv")


def hierarchy_frame(tree: Tree) -> pd.DataFrame:
    """The public tree as a table: level, column, node, parent label (empty at the root)."""
    rows = []
    for lv in tree.levels:
        parents = (
            tree.levels[lv.number - 1].labels.astype(str)[lv.parent]
            if lv.number
            else [""] * lv.size
        )
        rows.append(
            pd.DataFrame(
                {
                    "level": lv.number,
                    "column": lv.column or ROOT_LABEL,
                    "node": lv.labels.astype(str),
                    "parent": parents,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def write_invariants(folder: Path, tree: Tree, invariants: dict[int, dict[int, tuple]]) -> None:
    """invariants.json: each bound invariant's published value (level, node, name, value)."""
    rows = [
        {
            "level": level,
            "node": str(tree.levels[level].labels[i]),
            "name": c.name,
            "value": c.value,
        }
        for level, per_node in sorted(invariants.items())
        for i, cs in sorted(per_node.items())
        for c in cs
    ]
    _write_json(folder / "invariants.json", rows)


def _write_contents(rel: Release, cfg: RunConfig, folder: Path, metrics: Any) -> None:
    fmt = cfg.output_format
    write_table(rel.microdata, folder / f"microdata.{fmt}", fmt=fmt)
    for lv in rel.tree.levels:
        write_table(rel.long_table(lv.number), folder / table_name(lv.number, lv.column))
    write_table(hierarchy_frame(rel.tree), folder / "hierarchy.csv")
    write_measurement_file(rel.measurements, rel.tree, folder, fmt)
    write_table(rel.solver_stats(), folder / "solver_stats.csv")
    if rel.blue is not None:
        write_table(
            node_error_table(rel.tree, rel.counts, rel.blue), folder / "error_estimates.csv"
        )
        write_table(error_summary(rel.tree, rel.counts, rel.blue), folder / "error_summary.csv")
    write_ledger(folder, rel)
    write_invariants(folder, rel.tree, rel.invariants)
    _write_json(folder / "config.json", dict(cfg.resolved(), seed=noise_config_value(rel)))
    if metrics is not None:
        write_metrics(folder, metrics)


def _write_manifest(folder: Path, rel: Release, cfg: RunConfig) -> None:
    import numpy

    import topdown

    files = {
        p.relative_to(folder).as_posix(): _file_entry(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    try:
        from importlib.metadata import version

        pkg = version("topdown-dp")
    except Exception:  # not installed as a distribution (running from a checkout)
        pkg = getattr(topdown, "__version__", "unknown")
    manifest = {
        "format": FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_file": cfg.file,
        "noise": rel.noise.describe() if rel.noise is not None else "not recorded",
        "files": files,
        "versions": {
            "topdown-dp": pkg,
            "python": platform.python_version(),
            "numpy": numpy.__version__,
            "pandas": pd.__version__,
        },
    }
    _write_json(folder / "manifest.json", manifest)


def _write_json(path: Path, data: Any) -> None:
    """Standard JSON only: a non-finite float is written as null, never ``Infinity``."""
    text = json.dumps(_finite(data), indent=2, default=_json_default, allow_nan=False)
    with naming(path):  # a full disk names the file
        path.write_text(text + "\n", encoding="utf-8")


def _finite(data: Any) -> Any:
    if isinstance(data, float | np.floating) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return _finite(obj.item())
    if isinstance(obj, Fraction):
        return str(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _file_entry(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- reading back ----------------------------------------------------------------------------
def read_json(folder: Path, name: str) -> Any:
    path = folder / name
    if not path.is_file():
        raise ReleaseError(f"release folder {str(folder)!r} lacks {name}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReleaseError(f"{str(path)!r} is not valid JSON: {err}") from None


def manifest_failures(
    folder: Path, *, ignore: tuple[str, ...] = (), manifest: Any = None
) -> list[str]:
    """Files listed in the manifest (but ``ignore``) that are missing, changed or outside the
    folder, and files in the folder that the manifest does not list. ``manifest``: the
    manifest already read (else it is read here)."""
    folder = Path(folder)
    if manifest is None:
        manifest = read_json(folder, "manifest.json")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        return ["manifest.json: has no 'files' table"]
    root = folder.resolve()
    out = []
    for name, meta in files.items():
        if name in ignore:
            continue
        path = folder / name
        if (
            Path(name).is_absolute()
            or ".." in Path(name).parts
            or root not in path.resolve().parents
        ):
            out.append(f"{name}: the manifest names a path outside the release folder (refused)")
        elif not path.is_file():
            out.append(f"{name}: listed in the manifest but missing")
        elif not isinstance(meta, dict) or _sha256(path) != meta.get("sha256"):
            out.append(
                f"{name}: content differs from the manifest's SHA-256 (modified after release)"
            )
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        listed = name == "manifest.json" or name in files or name in ignore
        if (path.is_file() or path.is_symlink()) and not listed:
            out.append(f"{name}: in the folder but not listed in the manifest")
    return out


def load_release(
    folder: Path, *, config: Any = None, ledger: Any = None, whole_blue: bool = True
) -> tuple[Release, RunConfig]:
    """Rebuild a ``Release`` (counts, tree, measurements, ledger, constraints) from a folder.

    Under the estimator ``"blue"`` the root-total decision (the ledger's estimation note,
    ``topdown.estimation.root_total``) is recomputed from the published measurements, and
    with ``whole_blue`` the whole-tree BLUE too (``Release.blue``, from which the error
    estimates were written). Without it, ``Release.blue`` is None and the decision reads the
    BLUE's root total from its own block alone (``topdown.blue.root_total``: the same total
    and standard error, to round-off): all that ``topdown check`` and ``topdown report`` read
    of the BLUE. At the DHC persons preset the whole BLUE costs what the release's did: about
    75 CPU s at a 20,000-person state, the root total's block about 8 (``docs/benchmarks.md``).

    Args:
        folder: the release folder.
        config: config.json already read (else read here).
        ledger: ledger.json already read (else read here).
        whole_blue: recompute the whole-tree BLUE (``Release.blue``).
    """
    folder = Path(folder)
    _check_is_folder(folder)
    cfg = folder_config(folder, config)
    schema, domain = cfg.schema, cfg.schema.domain
    hier = _read_csv(folder, "hierarchy.csv")
    levels: list[Level] = []
    for number in range(schema.n_levels):
        rows = hier[hier["level"] == str(number)]
        labels = rows["node"].to_numpy(dtype=object)
        if number == 0:
            parent = np.full(len(labels), -1, dtype=np.int64)
        else:
            index = {lab: i for i, lab in enumerate(levels[-1].labels)}
            parent = np.array([index.get(p, -1) for p in rows["parent"]], dtype=np.int64)
            if (parent < 0).any():
                raise ReleaseError(
                    f"hierarchy.csv: level {number} names parents missing from level {number - 1}"
                )
        levels.append(
            Level(number, schema.hierarchy[number - 1] if number else None, labels, parent)
        )
    tree = Tree(tuple(levels))
    counts = []
    for lv in tree.levels:
        table = _read_csv(folder, table_name(lv.number, lv.column))
        index = {lab: i for i, lab in enumerate(lv.labels)}
        node = table["node"].map(index)
        if node.isna().any():
            raise ReleaseError(
                f"{table_name(lv.number, lv.column)}: nodes "
                f"{sorted(set(table['node'][node.isna()]))[:5]} are not in hierarchy.csv"
            )
        cell = schema.published_cells(table, table_name(lv.number, lv.column))
        raw = numbers(table, "count", table_name(lv.number, lv.column))
        counts.append(_level_counts(node.to_numpy(dtype=np.int64), cell, raw, lv.size, domain.size))
    ledger = Ledger.from_dict(read_json(folder, "ledger.json") if ledger is None else ledger)
    measurements = _measurements(folder, tree, cfg, ledger)
    invariants = read_invariants(folder, tree, cfg)
    estimate = decided = None
    if cfg.effective_estimator == "blue":
        exact = exact_totals(invariants, domain)
        if whole_blue:
            estimate = decided = blue(tree, domain, measurements, exact_totals=exact)
        else:
            decided = root_total_blue(tree, domain, measurements, exact_totals=exact)
    rel = Release(
        schema=schema,
        tree=tree,
        strategy=cfg.strategy,
        counts=counts,
        measurements=measurements,
        ledger=ledger,
        stats=[LevelStats(level=i) for i in range(tree.n_levels)],
        constraints=cfg.constraints,
        invariants=invariants,
        estimator=cfg.effective_estimator,
        # post-processing of the published measurements: recomputed, not stored
        blue=estimate,
        root_total=decide(
            cfg.effective_estimator, tree, domain, decided, cfg.constraints, invariants
        ),
    )
    return rel, cfg


def _level_counts(
    node: np.ndarray, cell: np.ndarray, raw: np.ndarray, nodes: int, cells: int
) -> np.ndarray:
    """A level's (nodes, cells) counts from its long table's rows (node, cell, count; a cell
    listed twice is summed): integers in the narrowest type that holds them, as the release
    kept them (``topdown.support.int_types``; int64 counts of a DHC tract level would be 3.9 GB,
    int8 491 MB), floats if a count is not an integer."""
    flat = node * cells + cell
    where, inverse = np.unique(flat, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=raw, minlength=where.size)
    is_int = bool(np.isfinite(raw).all() and (raw == np.round(raw)).all())
    dtype: type = float
    if is_int:
        dtype = int_type_for(min(0, int(sums.min(initial=0))), int(sums.max(initial=0)))
    out: np.ndarray = np.zeros((nodes, cells), dtype=dtype)
    out.reshape(-1)[where] = sums.astype(dtype) if is_int else sums
    return out


def folder_config(folder: Path, config: Any = None) -> RunConfig:
    """A folder's config.json as a ``RunConfig`` (``config``: the document already read)."""
    if config is None:
        return load_config(folder / "config.json")
    if not isinstance(config, dict):
        raise ReleaseError(f"{str(folder / 'config.json')!r} is not a JSON object")
    return parse_config(config, str(folder / "config.json"), base=Path(folder).resolve())


def _check_is_folder(folder: Path) -> None:
    if folder.is_file():
        raise ReleaseError(f"{str(folder)!r} is a file, not a release folder")
    if not folder.is_dir():
        raise ReleaseError(f"release folder {str(folder)!r} does not exist")


def _read_csv(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        raise ReleaseError(f"release folder {str(folder)!r} lacks {name}")
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _measurements(folder: Path, tree: Tree, cfg: RunConfig, ledger: Ledger) -> Measurements:
    answers, variances = measurement_answers(folder)
    name = measurement_file_in(folder)
    budgets = {(e.level, e.query): e.budget for e in ledger.entries}
    per_level = []
    for number, ls in enumerate(cfg.strategy.levels):
        ms = []
        for q, share in ls.queries:
            key = (str(number), q.name)
            n_nodes = tree.levels[number].size
            noisy = answers.get(key, np.zeros(0, dtype=np.int64))
            if n_nodes == 0 or noisy.size == 0 or noisy.size % n_nodes:
                raise ReleaseError(
                    f"{name}: level {number} query {q.name!r} has {noisy.size} answers "
                    f"for {n_nodes} nodes"
                )
            if (number, q.name) not in budgets:
                raise ReleaseError(
                    f"ledger.json: no entry for level {number} query {q.name!r}, which {name} holds"
                )
            variance = variances[key]
            ms.append(
                QueryMeasurement(
                    number,
                    Query.parse(q.name),
                    share,
                    cfg.strategy.mechanism,
                    budgets[(number, q.name)],
                    variance,
                    noisy.reshape(n_nodes, -1),
                )
            )
        per_level.append(tuple(ms))
    return Measurements(tuple(per_level))


def read_invariants(folder: Path, tree: Tree, cfg: RunConfig) -> dict[int, dict[int, tuple]]:
    """invariants.json bound to the configured invariants (level -> node -> constraints)."""
    path = folder / "invariants.json"
    if not path.is_file():
        return {}
    by_name = {
        a.constraint.name: a.constraint
        for a in cfg.constraints.invariants()
        if isinstance(a.constraint, InvariantConstraint)
    }
    out: dict[int, dict[int, list]] = {}
    for item in read_json(folder, "invariants.json"):
        level = int(item["level"])
        index = {str(lab): i for i, lab in enumerate(tree.levels[level].labels)}
        c = by_name.get(item["name"])
        if c is None or item["node"] not in index:
            raise ReleaseError(
                f"invariants.json: {item['name']!r} at {item['node']!r} matches no configured "
                "invariant or node"
            )
        out.setdefault(level, {}).setdefault(index[item["node"]], []).append(c.bind(item["value"]))
    return {lv: {i: tuple(cs) for i, cs in nodes.items()} for lv, nodes in out.items()}


@dataclass(frozen=True)
class Verdict:
    """What ``topdown check`` found: check name -> passed, failure lines, and whether the
    release protects anything (``private``; False for seeded noise, or a source not recorded)."""

    checks: dict[str, bool]
    failures: list[str]
    private: bool
    noise: str
    #: files of the folder holding figures computed from the confidential data
    not_publishable: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures


class CheckList:
    """The checks of ``topdown check`` as they run: name -> passed, and the failure lines
    (at most 20 per check)."""

    def __init__(self) -> None:
        self.checks: dict[str, bool] = {}
        self.failures: list[str] = []

    def __call__(self, name: str, problems: list[str]) -> None:
        self.checks[name] = not problems
        self.failures.extend(f"{name}: {p}" for p in problems[:20])
        if len(problems) > 20:
            self.failures.append(f"{name}: ... and {len(problems) - 20} more")

    def add(self, report: Any) -> None:
        """A ``CorrectnessReport``'s checks and failures."""
        self.checks.update(report.checks)
        self.failures.extend(report.failures)

    def verdict(self, *, private: bool, noise: str, not_publishable: Sequence[str] = ()) -> Verdict:
        return Verdict(
            self.checks,
            self.failures,
            private=private,
            noise=noise,
            not_publishable=tuple(not_publishable),
        )


@dataclass(frozen=True)
class Loaded:
    """What a folder's loader gives ``verify_folder``: the release to check for correctness
    (``check_correctness``), the ``Release`` whose ledger and noise ledger.json records, and
    the checks of its own kind of folder (name, problems)."""

    checked: Any
    release: Release
    extra: Callable[[], list[tuple[str, list[str]]]]


def verify_folder(folder: Path, load: Callable[[Path, dict[str, Any]], Loaded]) -> Verdict:
    """The steps every ``topdown check`` runs, for a release folder or a streamed one: the
    manifest, then (``load``, given the folder's JSON documents, each read once) the release's
    correctness, ledger.json against its entries, the noise source, and the folder's own
    checks."""
    folder = Path(folder)
    _check_is_folder(folder)
    check = CheckList()
    docs = {"manifest.json": read_json(folder, "manifest.json")}
    tampered = manifest_failures(folder, manifest=docs["manifest.json"])
    check("files match the manifest", tampered)
    try:
        docs.update({name: read_json(folder, name) for name in ("config.json", "ledger.json")})
        loaded = load(folder, docs)
    except (TopDownError, ValueError, OSError, KeyError) as err:
        changed = [t.split(":")[0] for t in tampered if "content differs" in t]
        prefix = f"{', '.join(changed)} changed after release; " if changed else ""
        check("release folder can be read", [f"{prefix}{err}"])
        return check.verdict(private=False, noise="unknown")
    rel = loaded.release
    check.add(loaded.checked.check_correctness())
    check("ledger.json totals match its entries", ledger_failures(rel, docs["ledger.json"]))
    check("noise source recorded", noise_failures(rel, docs["config.json"]))
    for name, problems in loaded.extra():
        check(name, problems)
    noise = rel.noise.describe() if rel.noise is not None else "not recorded"
    # by the ledger's disclosure, and by the files themselves (a truth file without it)
    truth = set(not_publishable(rel.ledger))
    if any((folder / name).is_file() for name in TRUTH_FILES[:-1]):
        truth.update(TRUTH_FILES)
    present = [name for name in TRUTH_FILES if name in truth and (folder / name).is_file()]
    return check.verdict(private=rel.ledger.private, noise=noise, not_publishable=present)


def verify_release_folder(folder: Path) -> Verdict:
    """Re-verify a folder: manifest, integers, consistency, constraints, ledger, microdata,
    and the noise source. Needs no confidential data.

    What it proves: the files are those the manifest lists (no file changed, missing, added or
    outside the folder) and they form a consistent, non-negative, integer release whose ledger
    adds up; under the estimator ``"blue"``, that the ledger's note on the root total (the
    BLUE's root total, its standard error, whether and at which integer the passes held it)
    is the one the published measurements give: recomputed from the root total's block of the
    BLUE (``topdown.blue.root_total``), which gives the whole BLUE's total and standard error,
    not from the whole BLUE. What it does not: the manifest is self-signed, so a forger who
    rewrites files and manifest together passes; a seeded release passes but is reported as
    not private; error_estimates.csv and error_summary.csv (the whole BLUE's figures) are
    checked against the manifest only, not recomputed (``load_release`` does that).
    """

    def load(folder: Path, docs: dict[str, Any]) -> Loaded:
        rel, cfg = load_release(
            folder, config=docs["config.json"], ledger=docs["ledger.json"], whole_blue=False
        )
        microdata = ("microdata matches the leaf table", _microdata_failures(folder, rel, cfg))
        return Loaded(rel, rel, lambda: [microdata])

    return verify_folder(folder, load)


def ledger_failures(rel: Release, written: Any) -> list[str]:
    """ledger.json's total and summary (``written``, as read) against those its entries and
    the release give (the estimation note recomputed from the published measurements)."""
    if not isinstance(written, dict):
        return ["ledger.json is not a JSON object"]
    expected = ledger_document(rel)
    return [
        f"{key} is {written.get(key)!r}, its entries give {expected[key]!r}"
        for key in ("total", "summary")
        if written.get(key) != expected[key]
    ]


def noise_failures(rel: Release, config: Any) -> list[str]:
    """The ledger names its noise source, a seeded one with its disclosure, and config.json
    agrees with it."""
    if rel.noise is None:
        return ["ledger.json does not record its noise source ('noise')"]
    out = []
    if not rel.noise.private and SEEDED_DISCLOSURE not in [d.name for d in rel.ledger.disclosures]:
        out.append(f"ledger.json: seeded noise without the {SEEDED_DISCLOSURE!r} disclosure")
    if config.get("seed") != noise_config_value(rel):
        out.append(
            f"config.json: seed is {config.get('seed')!r}, the ledger records "
            f"{rel.noise.describe()!r}"
        )
    return out


def _microdata_failures(folder: Path, rel: Release, cfg: RunConfig) -> list[str]:
    path = folder / f"microdata.{cfg.output_format}"
    if not path.is_file():
        return [f"{path.name} is missing"]
    micro = (
        pd.read_parquet(path)
        if cfg.output_format == "parquet"
        else pd.read_csv(path, dtype=str, keep_default_na=False)
    )
    leaf = rel.tree.levels[-1]
    index = {str(lab): i for i, lab in enumerate(leaf.labels)}
    node = micro[leaf.column].astype(str).map(index)
    if node.isna().any():
        return [f"{int(node.isna().sum())} record(s) name leaf units missing from the tables"]
    try:
        cell = rel.schema.published_cells(micro, path.name)
    except ReleaseError as err:
        return [str(err)]
    diff = _differing_nodes(node.to_numpy(dtype=np.int64), cell, rel.counts[-1])
    return [
        f"unit {leaf.labels[i]!r}: microdata records differ from its table counts" for i in diff
    ]


def _differing_nodes(node: np.ndarray, cell: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The nodes whose records (one per (node, cell) pair given) differ from their counts in
    some cell, compared in long form (the occupied cells only): no (nodes, cells) int64 array
    of the records is built (3.9 GB at a DHC tract level)."""
    cells = counts.shape[1]
    flat = np.asarray(counts).reshape(-1)
    have, got = np.unique(node * cells + cell, return_counts=True)
    want = np.flatnonzero(flat)
    if np.array_equal(have, want) and np.array_equal(got, flat[want]):
        return np.zeros(0, dtype=np.int64)
    every = np.union1d(have, want)
    records = np.zeros(every.size, dtype=np.int64)
    records[np.searchsorted(every, have)] = got
    bad = every[records != flat[every]]
    return np.unique(bad // cells)


REBUILT_BY_REPORT = ("report.html",)
REBUILT_WITH_TRUTH = (
    "report.html",
    "metrics.csv",
    "bias_by_size.csv",
    "headline.csv",
    "ledger.json",
)


def refresh_manifest(folder: Path, names: tuple[str, ...]) -> None:
    """Re-sign the files ``topdown report`` rebuilt, and only those: a file changed by anyone
    else must keep failing ``topdown check``."""
    folder = Path(folder)
    manifest = read_json(folder, "manifest.json")
    for name in names:
        path = folder / name
        if path.is_file():
            manifest["files"][name] = _file_entry(path)
        else:
            manifest["files"].pop(name, None)
    manifest["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _write_json(folder / "manifest.json", manifest)
