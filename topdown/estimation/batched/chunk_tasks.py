"""The level-batched passes on the executor: one task per chunk of families.

A level whose families share one structure (``topdown.estimation.batched.level.batch_level``
decides) is cut into chunks by ``topdown.estimation.batched.families.level_chunks`` (public
structure and published parent counts only, never the executor or its number of workers). Each
``ChunkTask`` carries only its families' inputs on their support cells: the children's detailed
answers (and node totals, or marginal answers on the families' non-empty groups), their weights, the
parents' counts and the cells' indices; a block group's family is a few dozen cells of the 2,016, so
a task is small to pickle. The worker runs the L2 pass (the closed form of
``topdown.estimation.batched.families``, the dual Newton iteration of
``topdown.estimation.batched.total`` or the marginal Newton iteration of
``topdown.estimation.batched.marginals``) and the rounding pass
(``topdown.estimation.batched.families.round_chunk``) and sends back integer counts on the support;
the parent process only cuts and assembles.

Each family's answer is the same alone as inside any chunk (see
``topdown.estimation.batched.families``), and the chunks do not depend on the executor, so the
release is the same on serial, processes and Dask with any number of workers. Families a chunk
cannot settle (a Newton iteration that does not converge, a rounding the batch cannot make) are
reported by parent, for the per-family path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from topdown.estimation.batched.families import ChunkShape, project_chunk, round_chunk
from topdown.estimation.batched.marginals import LevelMarginal, Marginal, marginal_newton_chunk
from topdown.estimation.batched.multipass import first_pass_totals, held_totals
from topdown.estimation.batched.total import newton_chunk
from topdown.estimation.multipass_newton import HELD_EXACTLY, chunk_two_passes
from topdown.support.int_types import narrowed

__all__ = ["ChunkTask", "ChunkResult", "chunk_task", "solve_chunk"]


@dataclass(frozen=True)
class ChunkTask:
    """Q families of k children on their support cells (width W, padded at the end).

    Attributes:
        level: the children's level (for messages).
        cells: (Q, W) each family's support cells (the rounding's tie spread reads them).
        parent_values: (Q, W) the parents' published counts, 0 in the padding.
        noisy: (Q, k, W) the children's detailed inputs on the support (any real dtype).
        weights: (Q, k) their detailed weights, finite and > 0.
        totals: (Q, k) their node-total inputs, or None: the detailed query alone (closed
            form) or with ``marginals``; with totals the dual Newton iteration fits both.
        total_weights: (Q, k) the totals' weights (>= 0), with ``totals``.
        marginals: the marginal queries on the chunk (``topdown.estimation.batched.marginals``);
            with them (and no totals) the marginal Newton iteration fits the detailed query and
            these.
        first_total: the index in ``marginals`` of the node total when a multipass first
            pass fits it alone (``topdown.estimation.batched.multipass``), else None.
        first_marginals: the indices in ``marginals`` of another multipass first pass
            (``topdown.estimation.multipass_newton``), else empty.
        hold_tolerance: how far pass 2 may move pass 1's answers (with ``first_marginals``).
        held_marginals: the indices in ``marginals`` of those of ``first_marginals`` whose
            answers pass 2 holds (None: all of them; ``LevelStrategy.held``).
        rounding: also run the rounding pass (else the L2 answers come back).
        controlled: the rounding holds each child's total within a unit of its L2 total.
    """

    level: int
    cells: np.ndarray
    parent_values: np.ndarray
    noisy: np.ndarray
    weights: np.ndarray
    totals: np.ndarray | None = None
    total_weights: np.ndarray | None = None
    marginals: tuple[Marginal, ...] = ()
    first_total: int | None = None
    first_marginals: tuple[int, ...] = ()
    hold_tolerance: float = HELD_EXACTLY
    held_marginals: tuple[int, ...] | None = None
    rounding: bool = True
    controlled: bool = True

    def __post_init__(self) -> None:
        if self.held_marginals is not None and not set(self.held_marginals) <= set(
            self.first_marginals
        ):
            raise ValueError(
                f"held_marginals ({self.held_marginals}) must be among first_marginals "
                f"({self.first_marginals}): pass 2 holds only answers pass 1 fitted"
            )
        if self.first_total is not None and not 0 <= self.first_total < len(self.marginals):
            raise ValueError(
                f"first_total ({self.first_total}) must index the {len(self.marginals)} marginals"
            )
        if any(not 0 <= m < len(self.marginals) for m in self.first_marginals):
            raise ValueError(
                f"first_marginals ({self.first_marginals}) must index the "
                f"{len(self.marginals)} marginals"
            )
        if self.first_marginals and self.first_total is not None:
            raise ValueError("a chunk task takes first_total or first_marginals, not both")
        if self.marginals and self.totals is not None:
            raise ValueError("a chunk task takes totals or marginals, not both")
        if (self.totals is None) != (self.total_weights is None):
            raise ValueError(
                f"totals ({'given' if self.totals is not None else None}) and total_weights "
                f"({'given' if self.total_weights is not None else None}) go together"
            )


@dataclass(frozen=True)
class ChunkResult:
    """What a chunk solved.

    Attributes:
        counts: (Q, k, W) integer counts (zero rows for families not rounded), or None when
            the task did not round.
        settled: (Q,) the L2 pass found the family's answer.
        rounded: (Q,) the rounding pass did too.
        l2: (Q, k, W) the L2 answers when some settled family was not rounded (the per-family
            rounding then starts from them), else None.
        l2_seconds, round_seconds: time spent in each pass.
    """

    counts: np.ndarray | None
    settled: np.ndarray
    rounded: np.ndarray
    l2: np.ndarray | None
    l2_seconds: float
    round_seconds: float


def chunk_task(
    level: int,
    chunk: ChunkShape,
    parent_counts: np.ndarray,
    noisy: np.ndarray,
    weights: np.ndarray,
    totals: np.ndarray | None = None,
    total_weights: np.ndarray | None = None,
    *,
    marginals: tuple[LevelMarginal, ...] = (),
    first_total: int | None = None,
    first_marginals: tuple[int, ...] = (),
    hold_tolerance: float = HELD_EXACTLY,
    held_marginals: tuple[int, ...] | None = None,
    rounding: bool = True,
    controlled: bool = True,
) -> ChunkTask:
    """The task of one chunk, from the level's arrays (children x cells, per child)."""
    kids = chunk.children
    return ChunkTask(
        level=level,
        cells=chunk.cells,
        parent_values=chunk.gather_parents(parent_counts),
        noisy=chunk.gather(noisy),
        weights=weights[kids],
        totals=None if totals is None else totals[kids],
        total_weights=None if total_weights is None else total_weights[kids],
        marginals=tuple(m.of_chunk(chunk) for m in marginals),
        first_total=first_total,
        first_marginals=first_marginals,
        hold_tolerance=hold_tolerance,
        held_marginals=held_marginals,
        rounding=rounding,
        controlled=controlled,
    )


def held_positions(first: tuple[int, ...], held: tuple[int, ...] | None) -> list[int] | None:
    """The positions in ``first`` of the marginals ``held`` (None: all of them)."""
    return None if held is None else [j for j, m in enumerate(first) if m in held]


def solve_chunk(task: ChunkTask) -> ChunkResult:
    """The L2 pass and (``task.rounding``) the rounding pass of a chunk's families."""
    start = time.perf_counter()
    p = task.parent_values.astype(float)
    if task.first_total is not None:  # multipass: the totals first, then held
        marginals = list(task.marginals)
        T, first_ok = first_pass_totals(marginals[task.first_total], p)
        marginals[task.first_total] = held_totals(marginals[task.first_total], T)
        x, settled = marginal_newton_chunk(task.noisy, p, task.weights, tuple(marginals))
        settled &= first_ok
    elif task.first_marginals:  # multipass: a first pass of marginals, then held
        x, settled = chunk_two_passes(
            task.noisy,
            p,
            task.weights,
            task.marginals,
            task.first_marginals,
            tolerance=task.hold_tolerance,
            held=held_positions(task.first_marginals, task.held_marginals),
        )
    elif task.marginals:
        x, settled = marginal_newton_chunk(task.noisy, p, task.weights, task.marginals)
    elif task.totals is None or task.total_weights is None:  # both or neither (__post_init__)
        x = project_chunk(task.noisy.astype(float), task.weights, p)
        settled = np.ones(p.shape[0], dtype=bool)
    else:
        x, settled = newton_chunk(task.noisy, task.totals, p, task.weights, task.total_weights)
    l2_seconds = time.perf_counter() - start
    if not task.rounding:
        return ChunkResult(None, settled, np.zeros_like(settled), x, l2_seconds, 0.0)
    start = time.perf_counter()
    # a family the iteration did not settle goes to the per-family path whatever its rounding
    # here; its x may hold NaN, which must not reach the integer casts of the rounding
    x_round = x if settled.all() else np.where(settled[:, None, None], x, np.nan_to_num(x))
    counts, bad = round_chunk(x_round, task.parent_values, task.cells, task.controlled)
    rounded = settled & ~bad
    counts[~rounded] = 0
    l2 = x if np.any(settled & ~rounded) else None
    # sent back in the narrowest type (int8 or int16 at the block level: a quarter of the bytes)
    return ChunkResult(
        narrowed(counts), settled, rounded, l2, l2_seconds, time.perf_counter() - start
    )
