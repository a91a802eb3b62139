"""What the estimation passes take (options, the solver of each pass) and give back (stats).

``EstimateOptions`` is parsed once at the edge (``release``'s arguments, the config's
``[solver]`` table) and travels unchanged into every ``FamilyTask``. ``SolverChoice`` names the
backend of each pass. ``SolveStats`` is the one statistics value: every pass returns one,
a family's is the sum of its passes', a level's the sum of its families' (``+``), so no counter
is kept twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from topdown.errors import OptionsError

if TYPE_CHECKING:
    from topdown.strategy import Strategy

__all__ = [
    "MULTIPASS_TOLERANCE",
    "multipass_options",
    "PASSES",
    "EstimateOptions",
    "LevelStats",
    "SolveStats",
    "SolverChoice",
    "check_solver_options",
    "solve_seconds",
]

#: The passes a solver can be chosen for. The failsafe's slack LP follows ``rounding``.
PASSES: tuple[str, ...] = ("l2", "rounding")


@dataclass(frozen=True)
class SolverChoice:
    """The backend of each pass, and whether a named backend may hand problems on to ``auto``.

    A name other than ``auto`` means "this backend wherever it accepts the problem, ``auto``
    for the rest" (``closed_form`` takes the separable problems and leaves, say, rounding with
    child-total rows to HiGHS). With ``strict`` a problem the named backend declines fails the
    release instead, as a solver benchmark wants.

    Attributes:
        l2: registry name (or ``auto``) for the L2 pass.
        rounding: registry name (or ``auto``) for the rounding pass and the failsafe's LP.
        strict: never hand a declined problem to ``auto``.
    """

    l2: str = "auto"
    rounding: str = "auto"
    strict: bool = False

    def __post_init__(self) -> None:
        for name in PASSES:
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise OptionsError(
                    f"solver for the {name} pass ({value!r}) must be a solver name or 'auto'"
                )
        if not isinstance(self.strict, bool):
            raise OptionsError(f"strict ({self.strict!r}) must be True or False")

    @classmethod
    def of(
        cls, solver: str | Mapping[str, str] | SolverChoice, *, strict: bool = False
    ) -> SolverChoice:
        """One name for every pass, or a mapping pass -> name (missing passes: ``auto``).

        Raises:
            OptionsError: a mapping with a key that is not a pass, or a name that is not a
                non-empty string.
        """
        if isinstance(solver, SolverChoice):
            return SolverChoice(solver.l2, solver.rounding, solver.strict or strict)
        if isinstance(solver, str):
            return cls(solver, solver, strict)
        if isinstance(solver, Mapping):
            unknown = sorted(str(k) for k in solver if k not in PASSES)
            if unknown:
                raise OptionsError(
                    f"solver has unknown pass(es) {unknown}; the passes are {list(PASSES)}"
                )
            return cls(**{str(k): v for k, v in solver.items()}, strict=strict)
        raise OptionsError(
            f"solver ({solver!r}) must be a solver name or a mapping pass -> name "
            f"(passes {list(PASSES)})"
        )

    def for_pass(self, name: str) -> str:
        """The backend asked for pass ``name`` (``failsafe`` follows ``rounding``)."""
        return self.l2 if name == "l2" else self.rounding

    def named(self) -> tuple[str, ...]:
        """The registry names chosen (``auto`` left out), without repeats."""
        return tuple(dict.fromkeys(n for n in (self.l2, self.rounding) if n != "auto"))

    def to_config(self) -> str | dict[str, str]:
        """The config's spelling: one name when every pass has the same, else per pass."""
        if self.l2 == self.rounding:
            return self.l2
        return {"l2": self.l2, "rounding": self.rounding}


#: how far multipass may move the first-pass answers unless the strategy says (held: the
#: solvers' precision; ``Strategy.multipass_tolerance``)
MULTIPASS_TOLERANCE = 1e-6


@dataclass(frozen=True)
class EstimateOptions:
    """Options of the estimation passes (parsed at the edge, read by every family task).

    Attributes:
        solver: the backend of each pass (see ``SolverChoice``).
        solver_options: passed to every solve (``time_limit``, tolerances, backend options).
        failsafe: relax consistency (reported) instead of raising on an infeasible family.
        multipass_tolerance: how far multipass may move the first-pass answers.
        multipass_held: per level that holds only some of its first pass, (level, the names
            held) (``LevelStrategy.held``); a level not listed holds all of its first pass.
        controlled_rounding: also keep each child's total within one unit of its L2 total.
        nested_root_rounding: round the root (when it is fitted with marginals and nothing
            but total bounds is attached) along the longest chain of its nested marginals, each
            of their answers within one unit of its L2 answer
            (``topdown.estimation.nested_rounding``: why, and why it is off by default: on a
            PL94 root it made some coarse marginals off the chain worse); False (the default)
            rounds each cell on its own (``topdown.estimation.root.root_round``).
        capture: a folder to write every problem solved into
            (``topdown.estimation.capture``), or None.
    """

    solver: SolverChoice = SolverChoice()
    solver_options: Mapping[str, Any] = field(default_factory=dict)
    failsafe: bool = True
    multipass_tolerance: float = MULTIPASS_TOLERANCE
    multipass_held: tuple[tuple[int, tuple[str, ...]], ...] = ()
    controlled_rounding: bool = True
    nested_root_rounding: bool = False
    capture: str | Path | None = None

    def held(self, level: int, first_pass: tuple[str, ...]) -> tuple[str, ...]:
        """The names of ``level``'s first-pass queries its second pass holds."""
        return dict(self.multipass_held).get(level, first_pass)


@dataclass(frozen=True)
class SolveStats:
    """What solving took: problems per pass and backend, seconds, widenings, failsafe uses.

    A value that adds up: ``a + b`` merges two (families of a level, passes of a family).

    Attributes:
        families: families estimated.
        problems: solver calls.
        l2_time: seconds in the L2 pass.
        round_time: seconds in the rounding pass.
        solved: ``(pass, backend, problems)``, sorted, one entry per pair.
        widened: roundings that needed the two-unit window.
        failsafe: one note per family whose consistency the failsafe relaxed.
        failsafe_slack: units of slack the failsafe added, in all.
    """

    families: int = 0
    problems: int = 0
    l2_time: float = 0.0
    round_time: float = 0.0
    solved: tuple[tuple[str, str, int], ...] = ()
    widened: int = 0
    failsafe: tuple[str, ...] = ()
    failsafe_slack: float = 0.0

    @classmethod
    def one_solve(cls, pass_name: str, backend: str) -> SolveStats:
        """One problem of ``pass_name`` solved by ``backend``."""
        return cls(problems=1, solved=((pass_name, backend, 1),))

    def __add__(self, other: SolveStats) -> SolveStats:
        if not isinstance(other, SolveStats):
            return NotImplemented
        solved: dict[tuple[str, str], int] = {}
        for p, b, count in self.solved + other.solved:
            solved[(p, b)] = solved.get((p, b), 0) + count
        return SolveStats(
            families=self.families + other.families,
            problems=self.problems + other.problems,
            l2_time=self.l2_time + other.l2_time,
            round_time=self.round_time + other.round_time,
            solved=tuple(sorted((p, b, c) for (p, b), c in solved.items())),
            widened=self.widened + other.widened,
            failsafe=self.failsafe + other.failsafe,
            failsafe_slack=self.failsafe_slack + other.failsafe_slack,
        )

    @property
    def solvers(self) -> tuple[str, ...]:
        """The backends that solved anything, without repeats."""
        return tuple(dict.fromkeys(b for _, b, _ in self.solved))

    def solved_in(self, pass_name: str) -> dict[str, int]:
        """Backend -> problems of ``pass_name`` it solved."""
        return {b: c for p, b, c in self.solved if p == pass_name}


@dataclass(frozen=True, kw_only=True)
class LevelStats(SolveStats):
    """The statistics of one level: its families' ``SolveStats`` summed, and the level."""

    level: int = 0

    @classmethod
    def of(cls, level: int, stats: SolveStats) -> LevelStats:
        """The level's row from the sum of its families' stats."""
        return cls(level=level, **{f.name: getattr(stats, f.name) for f in fields(SolveStats)})

    def to_dict(self, *, timings: bool = False) -> dict[str, Any]:
        """One row of the release's ``solver_stats`` table.

        Args:
            timings: add ``l2_seconds`` and ``rounding_seconds``. They are left out of the
                published table: the passes read only noisy values, but on a parallel run
                another worker's measurement (which reads the records) can slow them, a
                timing side channel. ``topdown run --diagnostics DIR`` keeps them.
        """

        def by_backend(pass_name: str) -> str:
            solved = self.solved_in(pass_name)
            return ", ".join(f"{b}: {c}" for b, c in solved.items()) or "none"

        return {
            "level": self.level,
            "families": self.families,
            "problems_solved": self.problems,
            "solvers": ", ".join(self.solvers) or "none (copied)",
            "l2_solved_by": by_backend("l2"),
            "rounding_solved_by": by_backend("rounding"),
            "failsafe_solved_by": by_backend("failsafe"),
            "widened_roundings": self.widened,
            "failsafe_families": len(self.failsafe),
            "failsafe_slack": self.failsafe_slack,
            "status": "optimal" if not self.failsafe else "failsafe",
        } | (self.seconds() if timings else {})

    def seconds(self) -> dict[str, float]:
        """The level's solve times (diagnostics, not for publication: see ``to_dict``)."""
        return {"l2_seconds": round(self.l2_time, 4), "rounding_seconds": round(self.round_time, 4)}


def solve_seconds(stats: Sequence[LevelStats]) -> dict[str, float]:
    """Each level's solve times as diagnostics entries (``level N: L2 pass``, ``level N:
    rounding pass``), for the run's ``timings`` (``--diagnostics``), never the folder."""
    return {
        f"level {s.level}: {name}": seconds
        for s in stats
        for name, seconds in (("L2 pass", s.l2_time), ("rounding pass", s.round_time))
    }


def controlled_window(total: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Controlled rounding's window for a child's total (Cox 1987): the floor and the ceiling
    of its L2 total, a total within 1e-9 of an integer (the L2 solvers' rounding) counting as
    that integer. One rule for every rounding path (per family, level-batched, root), so their
    answers agree."""
    return np.floor(np.asarray(total) + 1e-9), np.ceil(np.asarray(total) - 1e-9)


def check_solver_options(options: object) -> dict[str, Any]:
    """A release's ``solver_options`` as a plain dict: None (no options) or a mapping from
    option names (strings) to values, which each backend reads.

    Why: ``dict(options)`` of a list, a bool or a mapping with other keys raised ``TypeError``
    or ``ValueError`` from inside the release.

    Raises:
        OptionsError: ``options`` is not a mapping with string keys.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        shown = repr(options)
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
        raise OptionsError(
            f"solver_options ({shown}) must be None or a mapping option name -> value, such "
            "as {'time_limit': 60}"
        )
    return dict(options)


def multipass_options(strategy: Strategy) -> dict[str, Any]:
    """The ``EstimateOptions`` a strategy's multipass sets, for every entry point (``release``,
    the streamed release): its hold tolerance (a production preset's slack; the default where
    it names none) and, per level whose second pass holds only some of its first pass, (level,
    the names held)."""
    return {
        "multipass_tolerance": strategy.multipass_tolerance or MULTIPASS_TOLERANCE,
        "multipass_held": tuple(
            (i, ls.held) for i, ls in enumerate(strategy.levels) if ls.held is not None
        ),
    }
