"""Entry points: ``release(...)`` and the seed-compatible ``TopDown`` class.

``release`` is the whole pipeline on typed inputs: schema -> tree and confidential histograms
-> measurement (the only step reading the data) -> top-down estimation -> ``Release``.
``TopDown`` keeps the seed project's API and meaning (``set_privacy_parameters`` takes one budget
per level, root first; ``run()`` returns the private microdata) while fixing its defects: the
Gaussian takes rho (more budget, less noise), the L2 pass weights by inverse variance, and the
domain is declared unless inference is asked for (or the seed-style call gives none, which warns
and is recorded in the ledger).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

import solvers
from constraints.attach import ConstraintSet, check_constraint_set
from constraints.constraint import Constraint
from constraints.contextual_constraints import ContextualConstraint
from mechanisms.ledger import Ledger, NoiseSource
from mechanisms.rng import new_release_key
from topdown.blue.estimate import Blue
from topdown.blue.footprint import check_release_blue
from topdown.errors import DataError, DomainError, StrategyError
from topdown.estimation.estimate import EstimateOptions, SolverChoice, estimate
from topdown.estimation.estimators import (
    DEFAULT_ESTIMATOR,
    check_estimator,
    prepare_blue_by_families,
    prepare_inputs,
)
from topdown.estimation.first_pass_limit import (
    check_root_first_pass,
    first_pass_answers,
    newton_takes_root_first_pass,
)
from topdown.estimation.passes import check_solver_options, multipass_options
from topdown.estimation.root_total import decide, with_root_total
from topdown.execution.executors import make_executor
from topdown.execution.process_memory import hugepage_advice_off
from topdown.measurement import budget_bounds
from topdown.measurement.dask_input import load_input
from topdown.measurement.measure import measure
from topdown.measurement.read import read_data
from topdown.outputs.microdata import write_table
from topdown.release import CorrectnessReport, Release
from topdown.schema import Attribute, Schema
from topdown.strategy import MECHANISMS, Strategy
from topdown.support.progress import Progress
from topdown.support.timing import PhaseClock

__all__ = ["release", "TopDown", "make_schema"]

log = logging.getLogger(__name__)

#: the modules whose functions a release runs as tasks: a parallel executor's workers import
#: them as they start, while this process builds the tree
TASK_MODULES = (
    "topdown.measurement.measure",
    "topdown.estimation.family",
    "topdown.estimation.batched.chunk_tasks",
)


@hugepage_advice_off()
def release(
    data: pd.DataFrame | str | os.PathLike,
    schema: Schema,
    strategy: Strategy,
    *,
    constraints: ConstraintSet | None = None,
    seed: int | None = None,
    solver: str | Mapping[str, str] | SolverChoice = "auto",
    solver_strict: bool = False,
    solver_options: Mapping[str, Any] | None = None,
    executor: str = "serial",
    workers: int | None = None,
    address: str | None = None,
    failsafe: bool = True,
    capture: str | Path | None = None,
    progress: Progress | None = None,
    domain_inferred: bool = False,
    geography: pd.DataFrame | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
) -> Release:
    """Run one TopDown release.

    Args:
        data: confidential records (read by the measurement step only): a DataFrame, a CSV or
            Parquet file, or a partitioned Parquet dataset (a folder), which the ``dask`` executor
            reads on its workers (``topdown.measurement.dask_input``: no record reaches this
            process).
        schema: declared query attributes and hierarchy columns.
        strategy: per-level budgets, queries and shares, mechanism, neighbouring.
        constraints: constraints attached to the tree, levels or nodes.
        seed: reproducible noise for tests and experiments; None (production) draws a secure key.
        solver: a ``solvers`` registry name or ``auto`` for every pass, used where that
            backend accepts the problem and ``auto`` elsewhere (the release's ``solver_stats``
            say which backend solved what); or a mapping per pass (``{"l2": "closed_form",
            "rounding": "highs"}``, missing passes ``auto``).
        solver_strict: fail on a problem the named backend declines instead of handing it to
            ``auto`` (for solver benchmarks).
        solver_options: passed to every solve (``time_limit``, tolerances).
        executor: ``serial``, ``processes`` or ``dask`` (``address`` of a scheduler, or a local
            cluster of ``workers``).
        failsafe: relax consistency (reported) instead of raising on an infeasible family.
        capture: a new or empty folder to write every problem the estimation solves into (MPS
            files and ``index.csv``, see ``topdown.estimation.capture``), for solver benchmarks.
        progress: progress reporting; default a bar on a terminal, log lines elsewhere.
        domain_inferred: the schema's domain was read from the data (recorded as a disclosure).
        geography: the published units (one row per leaf, every hierarchy column, empty units
            included). Without it the units are read from the data, which discloses that each
            has at least one record: recorded in the ledger.
        estimator: ``"blue"`` (a whole-tree BLUE first, its estimates fed to the passes) or
            ``"topdown"`` (the Census Bureau's 2020 method); see ``topdown.estimation.estimators``.
    """
    check_estimator(estimator)
    progress = progress or Progress()
    strategy.check(schema.domain, schema.n_levels)
    budget_bounds.check(strategy)
    choice = SolverChoice.of(solver, strict=solver_strict)
    solver_options = check_solver_options(solver_options)  # before any data is read
    for name in choice.named():  # an unknown name is an error now, not after measurement
        solvers.get(name, problem="release(solver=...)")
    constraints = check_constraint_set(constraints, schema.n_levels)
    # a root first pass the Newton passes do not take is a general QP over every cell: too
    # large is an error now, not after the measurement and the BLUE (first_pass_limit)
    check_root_first_pass(
        strategy.levels[0].first_pass,
        schema.domain.size,
        first_pass_answers(strategy.levels[0], schema.domain),
        l2_solver=choice.l2,
        newton=newton_takes_root_first_pass(
            strategy.levels[0], schema.domain, constraints, l2_solver=choice.l2, capture=capture
        ),
    )
    noise = NoiseSource.from_seed(seed)  # checks the seed; a seeded source records a disclosure
    ledger = Ledger(noise)
    if domain_inferred:
        ledger.record_disclosure(
            "domain inferred from data",
            f"the values of {[a.name for a in schema.attributes]} were read from the confidential "
            "data",
        )
    needs_records = constraints is not None and any(
        isinstance(a.constraint, ContextualConstraint) for a in constraints.invariants()
    )
    timings: dict[str, float] = {}
    clock = PhaseClock(timings)
    options = EstimateOptions(
        solver=choice,
        solver_options=dict(solver_options),
        failsafe=failsafe,
        capture=capture,
        **multipass_options(strategy),
    )
    first_pass = {i: ls.first_pass for i, ls in enumerate(strategy.levels)}
    with make_executor(executor, workers=workers, address=address, preload=TASK_MODULES) as ex:
        with clock("tree"):  # a Parquet dataset on a Dask cluster is counted there
            tree, truth = load_input(
                data, schema, executor=ex, keep_records=needs_records, geography=geography
            )
        # a BLUE whose covariances cannot be held is refused before anything is measured
        check_release_blue(estimator, tree, schema.domain, strategy)
        if geography is None and schema.hierarchy:
            ledger.record_disclosure(
                "units read from data",
                f"the units of {list(schema.hierarchy)} are those with at least one record; "
                "pass geography= (the published list of units; a config's [schema] geography) to "
                "avoid this",
            )
        with clock("measure"):
            measurements, invariants = measure(
                tree,
                truth,
                schema.domain,
                strategy,
                release_key=new_release_key(seed),
                ledger=ledger,
                constraints=constraints,
                progress=progress,
                executor=ex,
                stats=timings,
            )
        del truth  # nothing after measurement reads the confidential histograms
        with clock("estimate"):
            # the workers wait while this process runs the BLUE: its blocks use as many threads
            # (no more than this machine's cores: a remote cluster's workers are elsewhere)
            threads = min(ex.workers, os.cpu_count() or 1)
            # a leaf level too large to hold as floats: the BLUE and the passes take its
            # families a chunk at a time (topdown.blue.leaf_families)
            by_families = (
                prepare_blue_by_families(tree, schema.domain, measurements, invariants)
                if estimator == "blue" and capture is None
                else None
            )
            leaves = None
            blue_estimate: Blue | None
            if by_families is not None:
                inputs, blue_estimate, leaves, blue_seconds = by_families
            else:
                inputs, blue_estimate, blue_seconds = prepare_inputs(
                    estimator, tree, schema.domain, measurements, invariants, threads=threads
                )
            # post-processing: the root's total held at the rounded BLUE total where that is safe
            # (topdown.estimation.root_total); a bound of the passes, not an invariant of the data
            root_total = decide(
                estimator, tree, schema.domain, blue_estimate, constraints, invariants
            )
            bounds = with_root_total(invariants, root_total)
            counts, stats = estimate(
                tree,
                schema.domain,
                inputs,
                first_pass=first_pass,
                constraints=constraints,
                invariants=bounds,
                options=options,
                executor=ex,
                progress=progress,
                leaves=leaves,
            )
    return Release(
        schema=schema,
        tree=tree,
        strategy=strategy,
        counts=counts,
        measurements=measurements,
        ledger=ledger,
        stats=stats,
        constraints=constraints,
        invariants=invariants,
        noise=noise,
        estimator=estimator,
        blue=blue_estimate,
        blue_seconds=blue_seconds,
        root_total=root_total,
        timings=timings,
    )


def make_schema(
    domain: Schema | Mapping[str, Any] | Sequence[Attribute] | None,
    queries: Sequence[str],
    hierarchy: Sequence[str],
    data: pd.DataFrame | None = None,
) -> tuple[Schema, bool]:
    """A schema from the seed-style arguments; returns (schema, domain_was_inferred).

    ``domain`` may be a Schema, a list of Attributes, or a dict column -> list of values (or an
    Attribute). ``None`` infers the domain from ``data`` (warns: not private).
    """
    if isinstance(domain, Schema):
        return domain, False
    if domain is None:
        if data is None:
            raise DataError("domain (None) needs data to infer it from")
        return Schema.infer(data, list(queries), list(hierarchy)), True
    if isinstance(domain, Mapping):
        missing = [q for q in queries if q not in domain]
        if missing:
            raise StrategyError(
                f"domain lacks the query attribute(s) {missing}; it declares {list(domain)}"
            )
        attrs = []
        for q in queries:
            spec = domain[q]
            if isinstance(spec, Attribute):
                attrs.append(spec)
                continue
            if isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
                raise DomainError(
                    f"domain[{q!r}] ({spec!r:.200}) must be a list of values or an Attribute, "
                    f"not {type(spec).__name__}"
                )
            values = tuple(spec)
            for value in values:
                try:
                    hash(value)
                except TypeError:
                    raise DomainError(
                        f"domain[{q!r}] holds {value!r:.100}, which is not hashable; values "
                        "must be numbers, strings or other hashable scalars"
                    ) from None
            attrs.append(Attribute(q, values=values))
        return Schema(tuple(attrs), tuple(hierarchy)), False
    if isinstance(domain, (str, bytes)) or not isinstance(domain, Sequence):
        raise DomainError(
            f"domain ({domain!r:.200}) must be a Schema, a dict column -> values or a list of "
            "Attributes"
        )
    wrong = [a for a in domain if not isinstance(a, Attribute)]
    if wrong:
        raise DomainError(
            f"domain ({list(domain)!r:.200}) must be a Schema, a dict column -> values or a list "
            f"of Attributes; {wrong[0]!r:.100} is a {type(wrong[0]).__name__}"
        )
    return Schema(tuple(domain), tuple(hierarchy)), False


class TopDown:
    """The seed project's API.

    Example:
        >>> td = TopDown(df, ["REGION", "STATE"], ["AGE", "SEX"], domain={...}, seed=1)
        >>> td.set_privacy_parameters([0.5, 0.3, 0.2])
        >>> td.set_mechanism("discrete_laplace")
        >>> td.set_constraint_to_tree(SumEqual(GreaterThan("AGE", 99), 0))
        >>> microdata = td.run()
        >>> td.check_correctness().ok
        True

    Args:
        data_path: a CSV/Parquet path or a DataFrame of confidential records.
        hierarchy: hierarchy columns, root first (the root itself is implicit).
        queries: query attributes (the histogram's axes).
        out_path: where ``run`` writes the microdata (CSV or Parquet by suffix); optional.
        domain: declared domains (dict column -> values or Attribute, list of Attributes, or a
            Schema). None infers from the data, warns, and records the disclosure.
        seed: as in ``release``.
        solver: as in ``release``.
        executor: as in ``release``.
        failsafe: as in ``release``.
        strategy: a Strategy; otherwise built from ``set_privacy_parameters``.
        neighbouring: ``add_remove`` (default) or ``replace_one``.
        sep: CSV separator (sniffed when None).
        geography: the published units, empty ones included (see ``release``).
        infer_domain: True reads the domain from the data (warns, recorded in the ledger);
            False requires ``domain=``; None (the seed's behaviour) infers when no domain is
            given.
        estimator: ``"blue"`` or ``"topdown"`` (as in ``release``).
    """

    def __init__(
        self,
        data_path: str | Path | pd.DataFrame,
        hierarchy: Sequence[str],
        queries: Sequence[str],
        out_path: str | Path | None = None,
        *,
        domain: Schema | Mapping[str, Any] | Sequence[Attribute] | None = None,
        seed: int | None = None,
        solver: str | Mapping[str, str] | SolverChoice = "auto",
        strategy: Strategy | None = None,
        neighbouring: str = "add_remove",
        sep: str | None = None,
        executor: str = "serial",
        failsafe: bool = True,
        geography: pd.DataFrame | None = None,
        infer_domain: bool | None = None,
        estimator: str = DEFAULT_ESTIMATOR,
    ):
        for name, value in (("hierarchy", hierarchy), ("queries", queries)):
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise DataError(
                    f"{name} ({value!r}) must be a list of column names"
                    + (f", e.g. [{value!r}]" if isinstance(value, str) else "")
                )
        NoiseSource.from_seed(seed)  # a bad seed is refused now, not after the data is read
        self.data = read_data(data_path, sep=sep)
        if domain is None and infer_domain is False:
            raise DataError(
                "domain (None) must be declared when infer_domain=False: pass domain= (a dict "
                "column -> values, Attributes or a Schema), or infer_domain=True to read it from "
                "the data (not private; recorded in the ledger)"
            )
        if domain is not None and infer_domain:
            raise DataError("infer_domain=True and a declared domain were both given: pass one")
        self.geography = geography
        self.schema, self._inferred = make_schema(domain, queries, hierarchy, self.data)
        self.schema.check_columns(self.data)
        self.out_path = out_path
        self.seed, self.solver, self.executor, self.failsafe = seed, solver, executor, failsafe
        self.neighbouring = neighbouring
        self.estimator = check_estimator(estimator)
        self._strategy = strategy
        self._budgets: list[Any] | None = None
        self._mechanism = strategy.mechanism if strategy else "discrete_gaussian"
        self.constraints = ConstraintSet()
        self.release: Release | None = None

    def set_privacy_parameters(self, budgets: Iterable[Any]) -> None:
        """One budget per level, root first.

        Budgets are epsilon for the discrete Laplace, rho for the discrete Gaussian.
        """
        self._budgets = list(budgets)
        self._strategy = None

    def set_mechanism(self, name: str) -> None:
        """The noise: ``discrete_laplace`` or ``discrete_gaussian``.

        The Laplace gives pure DP (budgets are epsilon), the Gaussian zCDP (budgets are rho).
        """
        if name not in MECHANISMS:
            raise StrategyError(
                f"mechanism ({name!r}) is unknown; known mechanisms are {list(MECHANISMS)}"
            )
        self._mechanism = name

    def set_constraint_to_tree(self, constraint: Constraint) -> None:
        """Attach to every node of every level."""
        self.constraints.add(constraint)

    def set_constraint_to_level(self, level: int, constraint: Constraint) -> None:
        """Attach to every node of level ``level`` only (0 = root)."""
        self.constraints.add(constraint, level=level)

    def set_constraint_to_nodes(
        self, level: int, nodes: Iterable[Any], constraint: Constraint
    ) -> None:
        """Attach to some nodes of one level."""
        self.constraints.add(constraint, level=level, nodes=nodes)

    @property
    def strategy(self) -> Strategy:
        if self._strategy is not None:
            return self._strategy
        if self._budgets is None:
            raise StrategyError(
                "no privacy parameters: call set_privacy_parameters([...]) with one budget per "
                f"level, root first ({self.schema.n_levels} levels)"
            )
        return Strategy.from_budgets(
            self._budgets, mechanism=self._mechanism, neighbouring=self.neighbouring
        )

    def run(self) -> pd.DataFrame:
        """Measure, estimate, and return the private microdata (also written to ``out_path``)."""
        self.release = release(
            self.data,
            self.schema,
            self.strategy,
            constraints=self.constraints,
            seed=self.seed,
            solver=self.solver,
            executor=self.executor,
            failsafe=self.failsafe,
            domain_inferred=self._inferred,
            geography=self.geography,
            estimator=self.estimator,
        )
        micro = self.release.microdata
        if self.out_path is not None:
            write_table(micro, self.out_path)
            log.info("wrote %d records to %s", len(micro), self.out_path)
        return micro

    def check_correctness(self) -> CorrectnessReport:
        """Verify the last run's release (see ``Release.check_correctness``)."""
        if self.release is None:
            raise StrategyError("check_correctness() needs a release: call run() first")
        return self.release.check_correctness()
