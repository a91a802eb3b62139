"""The release: what a TopDown run publishes, and the checks a publisher runs on it.

``Release`` holds the per-level integer counts, the noisy measurements, the privacy ledger, the
solver statistics and (lazily) the synthetic microdata. ``check_correctness`` verifies what the
release promises: non-negative integers, children summing to their parent in every cell at
every level, every constraint and invariant holding at every node, and a ledger whose total is
the strategy's. ``metrics`` compares it with the confidential data, for evaluation only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from constraints.attach import ConstraintSet
from mechanisms.accounting import ZCDP, PureDP
from mechanisms.ledger import Ledger, NoiseSource
from topdown.blue.estimate import Blue
from topdown.errors import ReleaseError
from topdown.estimation.estimate import LevelStats
from topdown.estimation.node_constraints import NodeConstraints
from topdown.estimation.root_total import RootTotal
from topdown.measurement.measure import Measurements
from topdown.measurement.tree import Tree, build_tree, geography_frame
from topdown.outputs.headline import HeadlineFigure
from topdown.outputs.metrics import Metrics, compute_metrics
from topdown.outputs.microdata import expand_microdata
from topdown.schema import Schema
from topdown.strategy import Strategy
from topdown.support.row_blocks import row_blocks

__all__ = ["Release", "CorrectnessReport", "WIDE_TABLE_MAX_VALUES"]

log = logging.getLogger(__name__)
_TOL = 1e-9
#: The most (nodes x cells) values a wide table is built for (``Release.wide_table``): 50
#: million int64 counts are 400 MB, and a level past it is mostly zeros
WIDE_TABLE_MAX_VALUES = 50_000_000
#: Bytes of the BLUE's cell variances of one block of nodes that ``Release.long_table`` holds
LONG_BLOCK_BYTES = 1 << 26


@dataclass(frozen=True)
class CorrectnessReport:
    """Outcome of ``Release.check_correctness``: ``ok`` and one line per failed check."""

    checks: dict[str, bool]
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"{'ok  ' if v else 'FAIL'} {k}" for k, v in self.checks.items()]
        return "\n".join(lines + [f"  - {f}" for f in self.failures])


@dataclass
class Release:
    """A completed TopDown release (see the module docstring).

    ``noise`` is where the noise came from (secure, or seeded and by which seed): set by
    ``release()``, recorded in the ledger too (given here, it is recorded there; left out, it is
    read from there), and the one value every writer labels the release with.

    ``counts[l]`` (nodes x cells) is in the narrowest signed integer type that holds the level
    (``topdown.support.int_types``: int16 for a block level, a quarter of int64's memory); widen
    before integer arithmetic other than ``sum``. The tables written out carry int64 counts.
    """

    schema: Schema
    tree: Tree
    strategy: Strategy
    counts: list[np.ndarray]
    measurements: Measurements
    ledger: Ledger
    stats: list[LevelStats]
    constraints: ConstraintSet | None = None
    invariants: dict[int, dict[int, tuple]] = field(default_factory=dict)
    noise: NoiseSource | None = None
    estimator: str = "topdown"
    blue: Blue | None = None
    blue_seconds: float = 0.0
    # : whether the passes held the root's total at the rounded BLUE total (``estimator="blue"`` :
    # without invariants; a bound of the estimation, not an invariant):
    # ``topdown.estimation.root_total``
    root_total: RootTotal | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds by phase (benchmarks)

    def __post_init__(self) -> None:
        if self.noise is None:
            self.noise = self.ledger.noise
        elif self.ledger.noise is None:
            self.ledger.set_noise(self.noise)
        elif self.ledger.noise != self.noise:
            raise ReleaseError(
                f"noise ({self.noise}) differs from the noise its ledger records "
                f"({self.ledger.noise})"
            )

    # -- published artefacts -----------------------------------------------------------
    @cached_property
    def microdata(self) -> pd.DataFrame:
        """Records of the leaf level, with every hierarchy column and the decoded attributes."""
        return expand_microdata(self.tree, self.schema, self.counts[-1])

    @property
    def tables(self) -> Mapping[int, pd.DataFrame]:
        """Per level, its wide table (``wide_table``), built when the level is read: a
        DHC-sized level has no wide table (its long one is ``long_table``)."""
        return _WideTables(self)

    def wide_table(self, level: int) -> pd.DataFrame:
        """One level as a wide table: one row per node (index = node label), one column per
        cell (MultiIndex of attribute values, in cell order), integer counts (in the level's
        stored type: see the class docstring).

        Raises:
            ReleaseError: the level has more than ``WIDE_TABLE_MAX_VALUES`` (nodes x cells)
                values: a wide table of 400 tracts of the DHC persons domain holds 491
                million, almost all zero (a node has at most its population in nonzero
                cells); ``long_table`` holds its nonzero cells.
        """
        lv = self.tree.levels[level]
        counts = self.counts[level]
        if counts.size > WIDE_TABLE_MAX_VALUES:
            raise ReleaseError(
                f"level {level}'s wide table ({lv.size:,} nodes x {counts.shape[1]:,} cells = "
                f"{counts.size:,} values) exceeds WIDE_TABLE_MAX_VALUES "
                f"({WIDE_TABLE_MAX_VALUES:,}); read the level in long form, "
                f"Release.long_table({level}) (node, attributes, count of its nonzero cells)"
            )
        columns = pd.MultiIndex.from_tuples(
            self.schema.domain.cell_labels(), names=self.schema.domain.names
        )
        return pd.DataFrame(
            counts, index=pd.Index(lv.labels.astype(str), name="node"), columns=columns
        )

    def long_table(self, level: int) -> pd.DataFrame:
        """One level in long format (node, attribute values, count), non-zero cells only; with
        the BLUE (``estimator="blue"``), a ``stderr`` column: its standard error of the cell."""
        counts = self.counts[level]
        node, cell = np.nonzero(counts)
        frame = {"node": self.tree.levels[level].labels.astype(str)[node]}
        for attr, code in zip(
            self.schema.attributes, self.schema.domain.unravel(cell), strict=True
        ):
            frame[attr.name] = np.asarray(attr.domain_values, dtype=object)[code]
        frame["count"] = counts[node, cell].astype(np.int64)  # one type in every table file
        if self.blue is not None and self.blue.blocks:
            # under recodes a cell's standard error depends on its groups' sizes
            cell_se = np.sqrt(self._nonzero_cell_variance(level, node, cell))
            frame["stderr"] = np.round(cell_se, 4)
        elif self.blue is not None:
            # the BLUE's standard error of the cell (the same for every cell of a node)
            frame["stderr"] = np.round(self.blue.stderr(level)[node], 4)
        return pd.DataFrame(frame)

    def _nonzero_cell_variance(self, level: int, node: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """The BLUE's variance of the cells ``(node, cell)`` (``node`` ascending, as
        ``np.nonzero`` gives it), a block of nodes at a time: a level's (nodes, cells) float
        variances are 3.9 GB at 400 DHC tracts."""
        assert self.blue is not None
        out = np.empty(node.size)
        cells = self.counts[level].shape[1]
        for rows in row_blocks(self.tree.levels[level].size, 8 * cells, LONG_BLOCK_BYTES):
            lo, hi = np.searchsorted(node, [rows.start, rows.stop])
            if hi > lo:
                block = self.blue.cell_variance(level, nodes=rows)
                out[lo:hi] = block[node[lo:hi] - rows.start, cell[lo:hi]]
        return out

    def solver_stats(self, *, timings: bool = False) -> pd.DataFrame:
        """Per level: families, problems, the solvers that took them, failsafes.

        Args:
            timings: add each level's L2 and rounding seconds: diagnostics for a solver
                researcher, left out of the release folder (a timing side channel on parallel
                runs; see ``LevelStats.to_dict``).
        """
        return pd.DataFrame([s.to_dict(timings=timings) for s in self.stats])

    # -- checks ------------------------------------------------------------------------
    def check_correctness(self, *, raise_on_failure: bool = False) -> CorrectnessReport:
        """Verify integrality, non-negativity, consistency, constraints and the ledger."""
        failures: list[str] = []
        checks: dict[str, bool] = {}

        def check(name: str, problems: list[str]) -> None:
            checks[name] = not problems
            failures.extend(problems[:20])
            if len(problems) > 20:
                failures.append(f"... and {len(problems) - 20} more failure(s) of {name}")

        check(
            "non-negative integers",
            [
                f"level {i}: {int((c < 0).sum())} negative cell(s)"
                for i, c in enumerate(self.counts)
                if not np.issubdtype(c.dtype, np.integer) or (c < 0).any()
            ],
        )
        check("children sum to parent", self._consistency_failures())
        check("constraints and invariants hold", self._constraint_failures())
        check("ledger total equals the strategy's budget", self._ledger_failures())
        report = CorrectnessReport(checks, tuple(failures))
        if raise_on_failure and not report.ok:
            raise ReleaseError("release failed its checks:\n" + str(report))
        return report

    def _consistency_failures(self) -> list[str]:
        out = []
        for level in range(1, self.tree.n_levels):
            parent = self.tree.levels[level].parent
            # int64 sums: counts stored in a narrower type must not wrap round here
            sums = np.zeros(self.counts[level - 1].shape, dtype=np.int64)
            np.add.at(sums, parent, self.counts[level])
            bad = np.flatnonzero((sums != self.counts[level - 1]).any(axis=1))
            for p in bad:
                diff = int(np.abs(sums[p] - self.counts[level - 1][p]).sum())
                out.append(
                    f"level {level}: children of {self.tree.label_of(level - 1, int(p))!r} "
                    f"differ from it by {diff} unit(s)"
                )
        return out

    def _constraint_failures(self) -> list[str]:
        if self.constraints is None and not self.invariants:
            return []
        book = NodeConstraints(self.schema.domain, self.constraints, self.invariants)
        out = []
        for level in range(self.tree.n_levels):
            labels = self.tree.levels[level].labels
            for i, label in enumerate(labels):
                cs = book.of(level, i, label)
                if not cs:
                    continue
                x = self.counts[level][i]
                zeros = book.zeros(cs)
                if zeros is not None and x[zeros].any():
                    out.append(
                        f"level {level}, node {label!r}: {int(x[zeros].sum())} count(s) in "
                        "structural zeros"
                    )
                rows = book.rows(cs)
                broken = np.flatnonzero(rows.violation(x) > _TOL)
                ax = rows.A[broken] @ x
                for r, value in zip(broken, ax, strict=True):
                    out.append(
                        f"level {level}, node {label!r}: {rows.names[r]} is {value:g}, must be "
                        f"in [{rows.lb[r]:g}, {rows.ub[r]:g}]"
                    )
        return out

    def _ledger_failures(self) -> list[str]:
        """The entries' budgets add up to the strategy's total, and only the root's total
        under replace_one (sensitivity 0, the one true zero) goes uncharged."""
        free = [
            f"ledger entry {e.query!r} at level {e.level} records sensitivity 0 (uncharged); "
            "only the root's total under replace_one neighbours has sensitivity 0"
            for e in self.ledger.entries
            if not e.charged
            and not (
                e.level == 0 and e.query == "total" and self.strategy.neighbouring == "replace_one"
            )
        ]
        total = self.ledger.calibrated_total()
        kind = PureDP if self.strategy.mechanism == "discrete_laplace" else ZCDP
        if not isinstance(total, kind):
            return [f"ledger total {total} is not of the strategy's kind ({kind.__name__})", *free]
        spent = total.epsilon if isinstance(total, PureDP) else total.rho
        if spent != self.strategy.total():
            return [
                f"ledger budgets add up to {spent}, the strategy's total is "
                f"{self.strategy.total()}",
                *free,
            ]
        return free

    # -- evaluation --------------------------------------------------------------------
    def metrics(
        self, true_data: pd.DataFrame, *, headline: Sequence[HeadlineFigure] = ()
    ) -> Metrics:
        """Errors of the release and of the raw noisy measurements against the truth, and the
        ``headline`` figures' errors (``Metrics.headline``; a preset's figures:
        ``topdown.presets.headline_figures(schema)``).

        Reads confidential data: for evaluation, not for publication. ``true_data`` is placed
        on the release's own units (its tree, as a declared geography), so a release made with
        ``geography=`` (units without records included) is compared with the data it was made
        from; a record in a unit the release does not have is refused, naming the unit.
        """
        tree, truth = build_tree(true_data, self.schema, geography=geography_frame(self.tree))
        for mine, theirs in zip(self.tree.levels, tree.levels, strict=True):
            if not np.array_equal(mine.labels.astype(str), theirs.labels.astype(str)):
                raise ReleaseError(
                    f"true_data's level {mine.number} ({mine.column}) has different units than the "
                    "release; pass the data the release was made from"
                )
        extra = [q for ls in self.strategy.levels for q, _ in ls.queries]
        return compute_metrics(
            self.schema.domain,
            self.counts,
            truth.counts,
            self.measurements,
            extra,
            headline=headline,
            level_names=["root", *self.schema.hierarchy],
        )


class _WideTables(Mapping[int, pd.DataFrame]):
    """``Release.tables``: level -> its wide table, each built when it is read (the levels
    past ``WIDE_TABLE_MAX_VALUES`` refuse, naming ``long_table``)."""

    def __init__(self, rel: Release) -> None:
        self._rel = rel

    def __getitem__(self, level: int) -> pd.DataFrame:
        if not isinstance(level, int | np.integer) or not 0 <= level < self._rel.tree.n_levels:
            raise KeyError(level)
        return self._rel.wide_table(int(level))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._rel.tree.n_levels))

    def __len__(self) -> int:
        return self._rel.tree.n_levels
