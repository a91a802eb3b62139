"""Run configuration: a TOML (or resolved JSON) file parsed once into the engine's typed objects.

Layout (see ``topdown/data/default.toml`` for a commented example)::

    seed = "none"                      # or an integer: reproducible, NOT for production
    [data]       path, format (csv | parquet), separator, dictionary, [data.derive]
    [schema]     hierarchy = [...], geography (the published units: a file or inline tables,
                 see topdown.product.config_geography),
                 [[schema.attributes]] name, column, values | range | bins, labels, recodes
    [strategy]   mechanism, neighbouring, budgets + queries + first_pass
                 + held, or [[strategy.levels]];
                 or preset (a Census production strategy: topdown.product.config_preset)
    [[constraints]]                    # see topdown.product.config_constraints
    [estimation] method ("blue" | "topdown")
    [solver]     name (one backend, or a table per pass: l2, rounding), strict, options,
                 failsafe, capture (a folder: every problem solved, as MPS)
    [executor]   name, workers, address, stream_by (a hierarchy column: stream the release by
                 its subtrees, see topdown.streaming.run; data.path may then be a folder of Parquet
                 partitions, one per unit)
    [output]     format (csv | parquet)
    [metrics]    truth = true (the input data) | false | "path"

Relative paths resolve against the config file's folder. Every problem is a ``ConfigError``
naming the file, the key (a dotted path such as ``strategy.levels[2].budget``) and the rule.
``RunConfig.resolved()`` is the whole configuration made explicit (domains listed, paths
absolute); written as ``config.json`` into a release folder, it loads back with ``load_config``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

from constraints import ConstraintSet
from topdown.errors import StrategyError, TopDownError
from topdown.estimation.estimators import DEFAULT_ESTIMATOR, ESTIMATORS
from topdown.estimation.passes import PASSES, SolverChoice
from topdown.execution.executors import EXECUTORS, address_rule, shown, workers_rule
from topdown.measurement import budget_bounds
from topdown.product.config_constraints import parse_constraints
from topdown.product.config_geography import GEOGRAPHY_KEY, GeographySpec
from topdown.product.config_preset import PRESET_KEYS, SCHEMA_KEYS, parse_preset
from topdown.product.config_text import text_problem
from topdown.schema import Attribute, Schema, attributes_from_dictionary
from topdown.strategy import MECHANISMS, NEIGHBOURING, LevelStrategy, Query, Strategy, parse_budget

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: ``fail(key, rule)`` builds a ConfigError; ``bad(key, rule)`` raises it.
_Fail = Callable[[str, str], "ConfigError"]
_Bad = Callable[[str, str], NoReturn]

__all__ = [
    "ConfigError",
    "RunConfig",
    "DataSpec",
    "Derive",
    "load_config",
    "parse_config",
    "DEFAULT_CONFIG",
]

DEFAULT_CONFIG = Path(__file__).parents[1] / "data" / "default.toml"
_TOP = {
    "seed",
    "data",
    "schema",
    "strategy",
    "constraints",
    "estimation",
    "solver",
    "executor",
    "output",
    "metrics",
}


class ConfigError(TopDownError, ValueError):
    """A configuration problem: ``file``, ``key`` (dotted path) and ``rule``."""

    def __init__(self, file: str, key: str, rule: str):
        self.file, self.key, self.rule = file, key, rule
        super().__init__(f"{file}: {key}: {rule}" if key else f"{file}: {rule}")


@dataclass(frozen=True)
class Derive:
    """A column computed from another: ``source[start:stop]`` as text."""

    source: str
    start: int
    stop: int | None


@dataclass(frozen=True)
class DataSpec:
    path: Path
    format: str | None = None
    separator: str | None = None
    derive: Mapping[str, Derive] = field(default_factory=dict)


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, typed and validated."""

    file: str
    data: DataSpec
    schema: Schema
    strategy: Strategy
    constraints: ConstraintSet
    constraint_specs: tuple = ()
    seed: int | None = None
    solver: SolverChoice = SolverChoice()
    solver_options: Mapping[str, Any] = field(default_factory=dict)
    failsafe: bool = True
    capture: Path | None = None
    executor: str = "serial"
    workers: int | None = None
    address: str | None = None
    output_format: str = "csv"
    truth: bool | Path = False
    estimator: str | None = None  # None: not chosen, see ``effective_estimator``
    stream_by: str | None = None
    geography: GeographySpec | None = None  # None: the units are read from the data
    address_source: str = "executor.address"  # where ``address`` came from, for messages

    @property
    def effective_estimator(self) -> str:
        """The estimator the run uses: the one chosen, else the engine's default (streamed or
        not: ``topdown.streaming.run`` runs the whole-tree BLUE in two sweeps over the subtrees)."""
        return self.estimator if self.estimator is not None else DEFAULT_ESTIMATOR

    def with_overrides(
        self,
        *,
        seed: int | None = None,
        solver: str | None = None,
        executor: str | None = None,
        workers: int | None = None,
        address: str | None = None,
        capture: Path | None = None,
        estimator: str | None = None,
        stream_by: str | None = None,
    ) -> RunConfig:
        """Command-line overrides, validated like the file's values (key = the option)."""
        out = self
        if stream_by is not None:
            rule = _stream_rule(stream_by, self.schema.hierarchy)
            if rule:
                raise ConfigError("command line", "--stream-by", rule)
            out = replace(out, stream_by=stream_by)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ConfigError(
                    "command line",
                    "--seed",
                    f"must be a non-negative integer (reproducible noise, NOT for production); "
                    f"got {seed!r}",
                )
            out = replace(out, seed=seed)
        if solver is not None:
            name = _check_solver(
                solver, lambda k, r: ConfigError("command line", "--solver", r), "--solver"
            )
            out = replace(out, solver=SolverChoice.of(name, strict=out.solver.strict))
        if executor is not None:
            out = replace(out, executor=_choice("--executor", executor, EXECUTORS, "executors"))
        if workers is not None:
            if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
                raise ConfigError(
                    "command line", "--workers", f"must be a positive integer; got {workers!r}"
                )
            rule = workers_rule(workers)
            if rule:
                raise ConfigError("command line", "--workers", f"{shown(workers)} {rule}")
            out = replace(out, workers=workers)
        if address is not None:
            out = replace(
                out,
                address=_check_address("--address", address, "command line"),
                address_source="--address",
            )
        if capture is not None:
            out = replace(out, capture=capture)
        if estimator is not None:
            out = replace(
                out, estimator=_choice("--estimator", estimator, ESTIMATORS, "estimators")
            )
        return out

    def input_paths(self) -> list[Path]:
        """The files a run reads: the config itself, the data, and the truth if it is a path."""
        paths = [self.data.path]
        if Path(self.file).is_file():
            paths.append(Path(self.file))
        if isinstance(self.truth, Path):
            paths.append(self.truth)
        if self.geography is not None and self.geography.path is not None:
            paths.append(self.geography.path)
        return paths

    def check_inputs(self) -> None:
        """Every input path exists and is a file: checked when a run starts, before any data
        is read or noise drawn (a missing truth file found after estimation wastes the run).

        Raises:
            ConfigError: naming the config file, the key and the path.
        """
        keys = [("data.path", self.data.path)]
        if isinstance(self.truth, Path):
            keys.append(("metrics.truth", self.truth))
        if self.geography is not None and self.geography.path is not None:
            keys.append((GEOGRAPHY_KEY, self.geography.path))
        for key, path in keys:
            if not path.exists():
                raise ConfigError(self.file, key, f"file {str(path)!r} does not exist")
            if key == "data.path" and path.is_dir() and self.data.format in (None, "parquet"):
                continue  # a partitioned Parquet dataset (read on the workers by ``dask``)
            if not path.is_file():
                raise ConfigError(
                    self.file,
                    key,
                    f"{str(path)!r} is not a file"
                    + (" (a folder is read as a Parquet dataset only)" if path.is_dir() else ""),
                )

    def resolved(self) -> dict[str, Any]:
        """The configuration with everything explicit (JSON-serialisable)."""
        attrs = []
        for a in self.schema.attributes:
            entry: dict[str, Any] = {"name": a.name}
            if a.column:
                entry["column"] = a.column
            if a.bins is not None:
                entry.update(bins=[_jsonable(b) for b in a.bins], labels=list(a.labels or ()))
            else:
                entry["values"] = list(a.values or ())
            if a.recodes:
                entry["recodes"] = {
                    name: {label: list(vals) for label, vals in groups.items()}
                    for name, groups in a.recode_map.items()
                }
            attrs.append(entry)
        levels = [
            {
                "budget": str(ls.budget),
                "queries": {q.name: str(s) for q, s in ls.queries},
                "first_pass": list(ls.first_pass),
            }
            | ({} if ls.held is None else {"held": list(ls.held)})
            for ls in self.strategy.levels
        ]
        return {
            "seed": "none" if self.seed is None else self.seed,
            "data": {
                "path": str(self.data.path),
                "format": self.data.format or "",
                "separator": self.data.separator or "",
                "derive": {
                    k: {
                        "from": d.source,
                        "slice": [d.start, d.stop] if d.stop is not None else [d.start],
                    }
                    for k, d in self.data.derive.items()
                },
            },
            "schema": {"hierarchy": list(self.schema.hierarchy), "attributes": attrs}
            | ({"geography": self.geography.to_config()} if self.geography else {}),
            "strategy": {
                "mechanism": self.strategy.mechanism,
                "neighbouring": self.strategy.neighbouring,
                "levels": levels,
            }
            | (
                {}
                if self.strategy.multipass_tolerance is None
                else {"multipass_tolerance": self.strategy.multipass_tolerance}
            ),
            "constraints": list(self.constraint_specs),
            "estimation": {"method": self.effective_estimator},
            "solver": {
                "name": self.solver.to_config(),
                "strict": self.solver.strict,
                "options": dict(self.solver_options),
                "failsafe": self.failsafe,
            },
            "executor": {
                "name": self.executor,
                "workers": self.workers or 0,
                "address": self.address or "",
                "stream_by": self.stream_by or "",
            },
            "output": {"format": self.output_format},
            "metrics": {"truth": str(self.truth) if isinstance(self.truth, Path) else self.truth},
        }


def _stream_rule(value: object, hierarchy: tuple[str, ...]) -> str:
    """Why ``value`` cannot be the stream level ("" when it can): a hierarchy column with a
    level below it."""
    if not isinstance(value, str) or value not in hierarchy[:-1]:
        return (
            f"{value!r} must be a hierarchy column with a level below it, one of "
            f"{list(hierarchy[:-1])}"
        )
    return ""


def _choice(flag: str, value: str, known: Iterable[str], what: str) -> str:
    """A command-line override that must be one of ``known``."""
    if value not in known:
        raise ConfigError("command line", flag, f"{value!r} is unknown; {what} are {list(known)}")
    return value


def load_config(path: str | Path) -> RunConfig:
    """Read and validate a config file (TOML, or JSON for a release's resolved config)."""
    path = Path(path)
    name = str(path)
    if not path.is_file():
        raise ConfigError(
            name, "", "config file does not exist" if not path.exists() else "is not a file"
        )
    try:
        text = path.read_text(encoding="utf-8")
        problem = text_problem(text)  # nesting and digits that would fail inside the parser
        if problem:
            raise ConfigError(name, *problem)
        raw = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(
            name, "", f"is not valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'}: {err}"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(name, "", f"cannot be read: {err}") from None
    except (RecursionError, ValueError) as err:  # a case text_problem did not foresee
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(name, "", f"cannot be parsed: {type(err).__name__}: {err}") from None
    try:
        return parse_config(raw, name, base=path.resolve().parent)
    except (RecursionError, OverflowError) as err:
        raise ConfigError(
            name, "", f"holds a value the parser cannot take: {type(err).__name__}: {err}"
        ) from None


def parse_config(raw: Mapping[str, Any], file: str, *, base: Path) -> RunConfig:
    """Validate a parsed config table; relative paths resolve against ``base``."""

    def fail(key: str, rule: str) -> ConfigError:
        return ConfigError(file, key, rule)

    def bad(key: str, rule: str) -> NoReturn:
        raise fail(key, rule)

    _known(raw, _TOP, "", bad)
    data = _table(raw, "data", bad)
    _known(data, {"path", "format", "separator", "dictionary", "derive"}, "data", bad)
    if not isinstance(data.get("path"), str) or not data["path"]:
        bad("data.path", "is required: the path of the confidential CSV or Parquet file")
    fmt = data.get("format") or None
    if fmt not in (None, "csv", "parquet"):
        bad("data.format", f'{fmt!r} is unknown; it must be "csv" or "parquet"')
    sep = data.get("separator") or None
    if sep is not None and (not isinstance(sep, str) or len(sep) != 1):
        bad("data.separator", f"must be one character; got {sep!r}")
    derive = {}
    for col, spec in _table(data, "derive", bad, "data.").items():
        key = f"data.derive.{col}"
        if not isinstance(spec, Mapping) or set(spec) != {"from", "slice"}:
            bad(key, f'must be a table {{from = "COLUMN", slice = [start, stop]}}; got {spec!r}')
        sl = spec["slice"]
        if (
            not isinstance(sl, list)
            or not 1 <= len(sl) <= 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in sl)
        ):
            bad(f"{key}.slice", f"must be [start] or [start, stop] integers; got {sl!r}")
        derive[col] = Derive(str(spec["from"]), sl[0], sl[1] if len(sl) == 2 else None)
    dictionary = data.get("dictionary")
    data_spec = DataSpec(_path(data["path"], base), fmt, sep, derive)

    schema_table = _table(raw, "schema", bad)
    strategy_table = _table(raw, "strategy", bad)
    if "preset" in strategy_table:
        _known(strategy_table, PRESET_KEYS, "strategy", bad)
        if "attributes" in schema_table:
            bad(
                "schema.attributes",
                f"strategy.preset {strategy_table['preset']!r} declares the attributes; map "
                'them to the data\'s columns with [schema] columns = {key = "COLUMN"} instead',
            )
        _known(schema_table, SCHEMA_KEYS, "schema", bad)
        hierarchy = _hierarchy(schema_table, bad)
        schema, strategy = parse_preset(strategy_table, schema_table, hierarchy, bad)
    else:
        schema = _schema(schema_table, dictionary, base, fail, bad)
        strategy = _strategy(strategy_table, schema, fail, bad)
    geography = GeographySpec.parse(schema_table.get("geography"), schema.hierarchy, base, bad)
    specs = raw.get("constraints", [])
    constraints = parse_constraints(specs, schema.domain, schema.n_levels, fail)

    seed = raw.get("seed", "none")
    if seed == "none":
        seed = None
    elif isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        bad("seed", f'must be "none" (secure noise) or a non-negative integer; got {seed!r}')
    estimation = _table(raw, "estimation", bad)
    _known(estimation, {"method"}, "estimation", bad)
    estimator = estimation.get("method")
    if estimator is not None and estimator not in ESTIMATORS:
        bad(
            "estimation.method",
            f'{estimator!r} is unknown; it must be one of {list(ESTIMATORS)} ("topdown" is the '
            "Census Bureau's 2020 method)",
        )
    solver = _table(raw, "solver", bad)
    _known(solver, {"name", "strict", "options", "failsafe", "capture"}, "solver", bad)
    choice = _solver_choice(solver.get("name", "auto"), solver.get("strict", False), fail, bad)
    options = _table(solver, "options", bad, "solver.")
    failsafe = solver.get("failsafe", True)
    if not isinstance(failsafe, bool):
        bad("solver.failsafe", f"must be true or false; got {failsafe!r}")
    capture = solver.get("capture", "")
    if not isinstance(capture, str):
        bad("solver.capture", f"must be a folder path (a string); got {capture!r}")
    executor = _table(raw, "executor", bad)
    _known(executor, {"name", "workers", "address", "stream_by"}, "executor", bad)
    stream_by = executor.get("stream_by", "") or None
    if stream_by is not None:
        rule = _stream_rule(stream_by, schema.hierarchy)
        if rule:
            bad("executor.stream_by", rule)
    ex_name = executor.get("name", "serial")
    if ex_name not in EXECUTORS:
        bad("executor.name", f"{ex_name!r} is unknown; executors are {list(EXECUTORS)}")
    workers = executor.get("workers", 0)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        bad(
            "executor.workers",
            f"must be a non-negative integer (0 = one per CPU); got {shown(workers)}",
        )
    if workers and workers_rule(workers):
        bad("executor.workers", f"{shown(workers)} {workers_rule(workers)}")
    output = _table(raw, "output", bad)
    _known(output, {"format"}, "output", bad)
    out_fmt = output.get("format", "csv")
    if out_fmt not in ("csv", "parquet"):
        bad("output.format", f'{out_fmt!r} is unknown; it must be "csv" or "parquet"')
    metrics = _table(raw, "metrics", bad)
    _known(metrics, {"truth"}, "metrics", bad)
    truth = metrics.get("truth", False)
    if isinstance(truth, str) and truth:
        truth = _path(truth, base)
    elif not isinstance(truth, bool):
        bad("metrics.truth", f"must be true (the input data), false, or a data path; got {truth!r}")
    return RunConfig(
        file=file,
        data=data_spec,
        schema=schema,
        strategy=strategy,
        constraints=constraints,
        constraint_specs=tuple(specs),
        seed=seed,
        solver=choice,
        solver_options=dict(options),
        failsafe=failsafe,
        capture=_path(capture, base) if capture else None,
        executor=ex_name,
        workers=workers or None,
        address=_check_address("executor.address", executor.get("address", ""), bad) or None,
        output_format=out_fmt,
        truth=truth,
        estimator=estimator,
        stream_by=stream_by,
        geography=geography,
    )


def _schema(spec: Mapping, dictionary: Any, base: Path, fail: _Fail, bad: _Bad) -> Schema:
    _known(spec, {"hierarchy", "attributes", "geography"}, "schema", bad)
    hierarchy = _hierarchy(spec, bad)
    attrs_spec = spec.get("attributes")
    if not isinstance(attrs_spec, list) or not attrs_spec:
        bad("schema.attributes", "must list the query attributes ([[schema.attributes]] tables)")
    attrs = []
    for i, a in enumerate(attrs_spec):
        key = f"schema.attributes[{i}]"
        if not isinstance(a, Mapping):
            bad(key, f"must be a table; got {a!r}")
        _known(
            a,
            {"name", "column", "values", "range", "bins", "labels", "dictionary", "recodes"},
            key,
            bad,
        )
        name = a.get("name")
        if not isinstance(name, str) or not name:
            bad(f"{key}.name", f"must be a non-empty string; got {name!r}")
        column = a.get("column") or None
        kinds = [k for k in ("values", "range", "bins") if k in a]
        if len(kinds) != 1:
            bad(
                key,
                f"attribute {name!r} needs exactly one of values, range, bins; got "
                f"{kinds or 'none'}",
            )
        kind = kinds[0]
        try:
            if kind == "values" and a["values"] == "dictionary":
                path = a.get("dictionary", dictionary)
                if not isinstance(path, str):
                    bad(
                        f"{key}.values",
                        '"dictionary" needs data.dictionary (or the attribute\'s dictionary) = '
                        '"path"',
                    )
                values = attributes_from_dictionary(_path(path, base), [column or name])[
                    column or name
                ]
                attrs.append(Attribute(name, values=values, column=column))
            elif kind == "values":
                if not isinstance(a["values"], list):
                    bad(
                        f"{key}.values",
                        f'must be a list of values or "dictionary"; got {a["values"]!r}',
                    )
                attrs.append(Attribute(name, values=tuple(a["values"]), column=column))
            elif kind == "range":
                r = a["range"]
                if not (
                    isinstance(r, list)
                    and len(r) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
                ):
                    bad(f"{key}.range", f"must be [low, high] integers (inclusive); got {r!r}")
                attrs.append(Attribute.integer_range(name, r[0], r[1], column=column))
            else:
                labels = a.get("labels")
                bins = a["bins"]
                if isinstance(bins, list):
                    bins = tuple(math.inf if b == "inf" else b for b in bins)
                attrs.append(
                    Attribute(
                        name,
                        bins=bins,
                        labels=tuple(labels) if labels is not None else None,
                        column=column,
                    )
                )
        except ConfigError:
            raise
        except (ValueError, TypeError, OSError) as err:
            raise fail(f"{key}.{kind}", str(err)) from None
        if "recodes" in a:
            if not isinstance(a["recodes"], Mapping):
                bad(
                    f"{key}.recodes",
                    "must be a table recode name -> {group label = [values]}; got "
                    f"{a['recodes']!r}",
                )
            try:
                attrs[-1] = replace(attrs[-1], recodes=a["recodes"])
            except ValueError as err:
                raise fail(f"{key}.recodes", str(err)) from None
    try:
        return Schema(tuple(attrs), tuple(hierarchy))
    except ValueError as err:
        raise fail("schema", str(err)) from None


def _hierarchy(spec: Mapping, bad: _Bad) -> tuple[str, ...]:
    """``[schema] hierarchy``: column names, top level first."""
    hierarchy = spec.get("hierarchy")
    if not isinstance(hierarchy, list) or not all(isinstance(h, str) and h for h in hierarchy):
        bad(
            "schema.hierarchy",
            f"must be a list of column names, top level first; got {hierarchy!r}",
        )
    return tuple(hierarchy)


def _strategy(spec: Mapping, schema: Schema, fail: _Fail, bad: _Bad) -> Strategy:
    _known(
        spec,
        {
            "mechanism",
            "neighbouring",
            "budgets",
            "queries",
            "first_pass",
            "held",
            "levels",
            "multipass_tolerance",
        },
        "strategy",
        bad,
    )
    mechanism = spec.get("mechanism", "discrete_gaussian")
    if mechanism not in MECHANISMS:
        bad("strategy.mechanism", f"{mechanism!r} is unknown; mechanisms are {list(MECHANISMS)}")
    neighbouring = spec.get("neighbouring", "add_remove")
    if neighbouring not in NEIGHBOURING:
        bad(
            "strategy.neighbouring",
            f"{neighbouring!r} is unknown; it must be one of {list(NEIGHBOURING)}",
        )
    n = schema.n_levels
    if ("levels" in spec) == ("budgets" in spec):
        bad(
            "strategy",
            "give either budgets = [...] (one per level, same queries everywhere) or "
            "[[strategy.levels]]",
        )
    if "levels" in spec:
        if "queries" in spec or "first_pass" in spec or "held" in spec:
            bad(
                "strategy.queries",
                "with [[strategy.levels]], give queries, first_pass and held per level",
            )
        raw_levels = spec["levels"]
        if not isinstance(raw_levels, list):
            bad("strategy.levels", f"must be a list of tables; got {raw_levels!r}")
        levels = []
        for i, lv in enumerate(raw_levels):
            if not isinstance(lv, Mapping):
                bad(f"strategy.levels[{i}]", f"must be a table; got {lv!r}")
            _known(lv, {"budget", "queries", "first_pass", "held"}, f"strategy.levels[{i}]", bad)
            if "budget" not in lv:
                bad(f"strategy.levels[{i}].budget", "is required")
            levels.append(
                (
                    f"strategy.levels[{i}]",
                    lv["budget"],
                    lv.get("queries"),
                    lv.get("first_pass", []),
                    lv.get("held"),
                )
            )
    else:
        budgets = spec["budgets"]
        if not isinstance(budgets, list):
            bad(
                "strategy.budgets",
                f"must be a list, one budget per level, root first; got {budgets!r}",
            )
        levels = [
            (
                f"strategy.budgets[{i}]",
                b,
                spec.get("queries"),
                spec.get("first_pass", []),
                spec.get("held"),
            )
            for i, b in enumerate(budgets)
        ]
    if len(levels) != n:
        key = "strategy.levels" if "levels" in spec else "strategy.budgets"
        bad(
            key,
            f"gives {len(levels)} level(s) but the hierarchy has {n} (the root + "
            f"{list(schema.hierarchy)}): one per level, root first",
        )
    out = []
    for key, budget, queries, first_pass, held in levels:
        bkey = key if key.startswith("strategy.budgets") else f"{key}.budget"
        try:
            b = parse_budget(budget, "budget")
        except ValueError as err:
            raise fail(bkey, str(err)) from None
        qkey = key + ".queries" if "levels" in spec else "strategy.queries"
        qs = _queries(queries, schema, qkey, fail, bad)
        for q, share in qs:
            if budget_bounds.out_of_range(b, share):
                bad(
                    bkey,
                    f"{shown(budget)} gives query {q.name!r} a budget of "
                    f"{budget_bounds.shown(b * share)} "
                    f"(share {share}); {budget_bounds.budget_range_rule()}",
                )
        try:
            out.append(LevelStrategy(b, qs, tuple(first_pass), held))
        except ValueError as err:
            text = str(err)
            name = "held" if text.startswith("held") else "first_pass"
            raise fail(qkey if name not in text else qkey.replace("queries", name), text) from None
    try:
        return Strategy(
            tuple(out),
            mechanism,
            neighbouring,
            multipass_tolerance=spec.get("multipass_tolerance"),
        )
    except StrategyError as err:
        key = "strategy.multipass_tolerance" if "multipass_tolerance" in str(err) else "strategy"
        raise fail(key, str(err)) from None


def _queries(
    spec: Any, schema: Schema, key: str, fail: _Fail, bad: _Bad
) -> tuple[tuple[Query, Fraction], ...]:
    if spec is None:
        return ((Query(None), Fraction(1)),)
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, list) and all(isinstance(q, Mapping) and "query" in q for q in spec):
        items = [(q["query"], q.get("share", 1)) for q in spec]
    else:
        bad(
            key,
            f'must be a table {{query = share}} (e.g. {{detailed = "3/4", total = "1/4"}}); got '
            f"{spec!r}",
        )
    out = []
    for name, share in items:
        qkey = f"{key}.{name!r}" if " " in str(name) else f"{key}.{name}"
        try:
            q = Query.parse(name)
            q.kept(schema.domain)
        except ValueError as err:
            raise fail(qkey, str(err)) from None
        try:
            out.append((q, parse_budget(share, "share")))
        except ValueError as err:
            raise fail(qkey, str(err)) from None
    return tuple(out)


def _solver_choice(name: Any, strict: Any, fail: _Fail, bad: _Bad) -> SolverChoice:
    """``[solver] name`` (one backend, or a table pass -> backend) and ``strict``."""
    if not isinstance(strict, bool):
        bad("solver.strict", f"must be true or false; got {strict!r}")
    if not isinstance(name, Mapping):
        return SolverChoice.of(_check_solver(name, fail, "solver.name"), strict=strict)
    for key in name:
        if key not in PASSES:
            bad(f"solver.name.{key}", f"is not a pass; the passes are {list(PASSES)}")
    names = {p: _check_solver(v, fail, f"solver.name.{p}") for p, v in name.items()}
    return SolverChoice.of(names, strict=strict)


def _check_solver(name: Any, fail, key: str) -> str:
    import solvers

    if name == "auto":
        return name
    available = solvers.available()
    if name in available:
        return name
    rule = (
        f"{name!r} is registered but not installed"
        if isinstance(name, str) and name in solvers.registered()
        else f"{name!r} is unknown"
    )
    raise fail(key, f"{rule}; installed solvers are {['auto'] + available}")


def _table(raw: Mapping, key: str, bad: _Bad, prefix: str = "") -> Mapping:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        bad(prefix + key, f"must be a table; got {value!r}")
    return value


def _known(table: Mapping, allowed: set[str], key: str, bad: _Bad) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        where = f"{key}.{unknown[0]}" if key else unknown[0]
        bad(where, f"unknown key; allowed keys here are {sorted(allowed)}")


def _path(value: str, base: Path) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _jsonable(v: Any) -> Any:
    return "inf" if v == float("inf") else v


def _check_address(key: str, value: object, bad: Any) -> str:
    """A Dask scheduler address (``tcp://host:8786``, ``topdown.execution.executors.address_rule``),
    or "" for none; ``bad`` is the error callback of the file's parser, or the source name
    (``"command line"``)."""
    if value == "":
        return ""
    rule = address_rule(value)
    if not rule:
        return str(value)
    rule = f"{rule}; got {shown(value)}"
    if callable(bad):
        bad(key, rule)
        return ""
    raise ConfigError(bad, key, rule)
