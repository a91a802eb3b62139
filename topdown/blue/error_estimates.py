"""Published error estimates: the BLUE's standard errors and 90% intervals, and how far the
final counts moved from the BLUE.

Under ``estimator="blue"`` every node's cells and total have a standard error that follows from
the public noise variances alone (``topdown.blue.estimate``): it is published with the counts at no
privacy cost. The interval ``BLUE +- 1.645 stderr`` covers the true value 90% of the time (the
noise of the discrete Gaussian is close to normal; for the discrete Laplace the interval rests
on the central limit of the BLUE's many terms and is approximate where a node has few).
The published counts are not the BLUE: non-negativity and rounding move them, most where the
BLUE is small or negative. So the intervals describe the BLUE, and this module measures, per
level, how far the final counts are from it: a reader sees how much the stderr can be trusted
for the published numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from topdown.blue.estimate import Blue
from topdown.measurement.tree import Tree
from topdown.strategy import Query
from topdown.support.row_blocks import row_blocks

__all__ = ["Z90", "node_error_table", "error_summary"]

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: a two-sided 90% interval
_BLOCK_VALUES = 2**21  # BLUE cells computed at once by error_summary (16 MiB of floats)


def node_error_table(tree: Tree, counts: list[np.ndarray], estimate: Blue) -> pd.DataFrame:
    """One row per node of every level: the published total, the BLUE's total, its stderr and
    90% interval, and the stderr of each of the node's cells (under recodes, where cells'
    stderrs differ with their groups' sizes, their root mean square; the long tables carry
    each cell's)."""
    frames = []
    for lv in tree.levels:
        total_se = np.sqrt(estimate.variance(lv.number, Query(())))
        blue_total = estimate.totals_at(lv.number)
        frames.append(
            pd.DataFrame(
                {
                    "level": lv.number,
                    "node": lv.labels.astype(str),
                    "total": counts[lv.number].sum(axis=1),
                    "blue_total": np.round(blue_total, 3),
                    "total_stderr": np.round(total_se, 4),
                    "total_low90": np.round(blue_total - Z90 * total_se, 3),
                    "total_high90": np.round(blue_total + Z90 * total_se, 3),
                    "cell_stderr": np.round(estimate.stderr(lv.number), 4),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def error_summary(tree: Tree, counts: list[np.ndarray], estimate: Blue) -> pd.DataFrame:
    """Per level: the median stderr of a cell and of a total, the 90% interval's half width, and
    the measured distance of the final counts from the BLUE (mean absolute difference, and the
    share of final values inside the BLUE's 90% interval)."""
    rows = []
    for lv in tree.levels:
        level = lv.number
        cell_se = estimate.stderr(level)
        total_se = np.sqrt(estimate.variance(level, Query(())))
        total_diff = counts[level].sum(axis=1) - estimate.totals_at(level)
        with np.errstate(invalid="ignore"):
            total_in = np.abs(total_diff) <= Z90 * total_se
        abs_sum = diff_sum = inside = 0.0
        # a block of nodes at a time: the level's BLUE cells are never all held as floats
        width = counts[level].shape[1]
        for rows_ in row_blocks(lv.size, width * 8, block_bytes=_BLOCK_VALUES * 8):
            cell_diff = counts[level][rows_] - estimate.cells_at(level, rows_)
            abs_sum += float(np.abs(cell_diff).sum())
            diff_sum += float(cell_diff.sum())
            # under recodes each cell's own stderr (it depends on its groups' sizes)
            se = (
                np.sqrt(estimate.cell_variance(level, rows_))
                if estimate.blocks
                else cell_se[rows_, None]
            )
            with np.errstate(invalid="ignore"):
                inside += float((np.abs(cell_diff) <= Z90 * se).sum())
        n_values = max(1, counts[level].size)
        rows.append(
            {
                "level": level,
                "column": lv.column or "root",
                "nodes": lv.size,
                "cell_stderr_median": float(np.median(cell_se)),
                "cell_halfwidth90_median": float(Z90 * np.median(cell_se)),
                "total_stderr_median": float(np.median(total_se)),
                "total_halfwidth90_median": float(Z90 * np.median(total_se)),
                "cell_mean_abs_final_minus_blue": abs_sum / n_values,
                "cell_mean_final_minus_blue": diff_sum / n_values,
                "cell_share_final_in_blue90": inside / n_values,
                "total_mean_abs_final_minus_blue": float(np.abs(total_diff).mean()),
                "total_share_final_in_blue90": float(total_in.mean()),
            }
        )
    return pd.DataFrame(rows)


def error_section(summary: pd.DataFrame) -> str:
    """The report's HTML for ``error_summary.csv``: the intervals and an honest note."""
    import html

    rows = []
    for r in summary.to_dict("records"):
        rows.append(
            f"<tr><td>{int(r['level'])} ({html.escape(str(r['column']))})</td>"
            f"<td>{int(r['nodes'])}</td>"
            f"<td>{r['cell_stderr_median']:.3f} (±{r['cell_halfwidth90_median']:.2f})</td>"
            f"<td>{r['total_stderr_median']:.3f} (±{r['total_halfwidth90_median']:.2f})</td>"
            f"<td>{r['cell_mean_abs_final_minus_blue']:.3f} "
            f"({100 * r['cell_share_final_in_blue90']:.1f}%)</td>"
            f"<td>{r['total_mean_abs_final_minus_blue']:.3f} "
            f"({100 * r['total_share_final_in_blue90']:.1f}%)</td></tr>"
        )
    worst = summary["cell_mean_abs_final_minus_blue"].max()
    return (
        "<table><tr><th>level</th><th>nodes</th><th>cell stderr, median (90% interval ±)</th>"
        "<th>total stderr, median (90% interval ±)</th>"
        "<th>cells: mean |final − BLUE| (share inside the BLUE's 90% interval)</th>"
        "<th>totals: mean |final − BLUE| (share inside)</th></tr>" + "".join(rows) + "</table>"
        "<p class=note>The standard errors are those of the best linear unbiased estimate (BLUE) "
        "of each cell and node total, computed from the public noise variances alone "
        "(<code>error_estimates.csv</code> per node, the <code>stderr</code> column of the "
        "tables per cell); the interval BLUE ± 1.645 stderr covers the true value 90% of the "
        "time; a total published exactly (an invariant) has standard error 0. "
        "The published counts are not the BLUE: making them non-negative integers moves "
        f"them, by {worst:.2f} per cell on average at most on any level here (measured above), "
        "most where the BLUE is small or negative (true zeros are pushed up, small counts down). "
        "Read the intervals as the uncertainty of the BLUE, a close guide for large counts and "
        "a loose one for counts near zero.</p>"
    )
