"""The release report: one self-contained HTML file with plots embedded as base64 PNGs.

Built only from the files of a release folder (ledger, resolved config, solver statistics and,
when the truth was given, the metrics), so ``topdown report`` can rebuild it at any time:

- budget allocation by level and query (stacked bars),
- error by level: mean absolute error of the release and of the raw noisy measurements, for
  node totals and detailed cells,
- headline figures: the accuracy figures a preset's agency publishes for its releases (the
  Census Bureau's for PL94: total population and voting-age population by level, each race
  alone by tract), from ``headline.csv`` (``topdown.outputs.headline``),
- bias by node size (mean signed error of node totals, grouped by true size),
- error estimates (estimator "blue"): the BLUE's standard errors and 90% intervals by level, and
  the measured distance of the final counts from the BLUE (``topdown.blue.error_estimates``),
- estimation by level: families and problems solved, and by which solvers (no seconds: solve
  times are diagnostics, ``topdown run --diagnostics DIR``),
- the ledger summary: total budget, its (epsilon, delta) equivalent, invariants, disclosures.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import matplotlib

from mechanisms.ledger import NoiseSource
from topdown.blue.error_estimates import error_section
from topdown.support.writing import naming

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = [
    "build_report",
    "REPORT_NAME",
    "ledger_section",
    "budget_section",
    "headline_section",
    "solver_section",
    "figure_html",
    "table_html",
    "write_page",
]

log = logging.getLogger(__name__)
REPORT_NAME = "report.html"
_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def build_report(folder: str | Path, *, name: str | None = None) -> Path:
    """Write ``report.html`` into the release folder (atomically) and return its path.

    ``name`` is the release's name in the title (default: the folder's name; the writer passes
    the final name while it builds the report in a temporary folder).
    """
    folder = Path(folder)
    ledger = json.loads((folder / "ledger.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    stats = _csv(folder / "solver_stats.csv")
    metrics = _csv(folder / "metrics.csv")
    bias = _csv(folder / "bias_by_size.csv")
    errors = _csv(folder / "error_summary.csv")
    headline = _csv(folder / "headline.csv")

    sections = [
        ("Privacy ledger", ledger_section(ledger, config)),
        ("Budget allocation by level and query", budget_section(ledger)),
    ]
    if metrics is not None and not metrics.empty:
        sections.append(
            (
                "Error by level: release vs raw noisy measurements",
                _img(_error_plot(metrics), "error by level")
                + _table_html(_error_table(metrics))
                + _INVARIANT_NOTE,
            )
        )
    else:
        sections.append(
            (
                "Error by level",
                "<p class=note>No truth was given, so no accuracy figures: run "
                "<code>topdown report RELEASE --truth DATA</code> to add them.</p>",
            )
        )
    if headline is not None and not headline.empty:
        sections.append(("Headline accuracy figures", headline_section(headline)))
    if errors is not None and not errors.empty:
        sections.append(("Error estimates (BLUE standard errors)", error_section(errors)))
    if bias is not None and not bias.empty:
        sections.append(
            ("Bias by node size", _img(_bias_plot(bias), "bias by node size") + _table_html(bias))
        )
    if stats is not None and not stats.empty:
        sections.append(("Estimation by level", solver_section(stats)))
    return write_page(folder, f"TopDown release: {name or folder.name}", sections)


# -- pieces shared with the streamed release's report (topdown.product.stream_report) --------
def ledger_section(ledger: dict[str, Any], config: dict[str, Any]) -> str:
    """The ledger summary, headed by a NOT PRIVATE warning when the noise was seeded."""
    return _not_private_html(ledger) + _ledger_html(ledger, config)


def headline_section(headline: pd.DataFrame) -> str:
    """The headline figures (``headline.csv``) as a table: one row per figure and level."""
    table = headline.rename(
        columns={
            "geolevel": "geographic level",
            "mae": "mean absolute error",
            "mean_true": "mean true count",
        }
    )
    return (
        "<p class=note>Mean over the level's nodes of |released count - true count|, beside "
        "the mean true count it is read against.</p>" + _table_html(table)
    )


def budget_section(ledger: dict[str, Any]) -> str:
    return _img(_budget_plot(ledger), "budget allocation")


def solver_section(stats: pd.DataFrame) -> str:
    return _img(_solver_plot(stats), "estimation by level") + _table_html(stats)


def figure_html(fig: plt.Figure, alt: str) -> str:
    """A matplotlib figure as an embedded PNG (the figure is closed)."""
    return _img(_png(fig), alt)


def table_html(frame: pd.DataFrame) -> str:
    return _table_html(frame)


def write_page(folder: Path, title: str, sections: list[tuple[str, str]]) -> Path:
    """Write ``report.html`` (title, then one section per (heading, HTML) pair) into
    ``folder`` atomically and return its path."""
    body = "\n".join(f"<section><h2>{html.escape(t)}</h2>\n{c}</section>" for t, c in sections)
    page = _PAGE.format(title=html.escape(title), body=body)
    path = folder / REPORT_NAME
    tmp = folder / f".{REPORT_NAME}.tmp"
    with naming(path):  # a full disk names the file
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    log.debug("report written: %s", path)
    return path


def _csv(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.is_file() else None


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _budget_plot(ledger: dict[str, Any]) -> str:
    entries = pd.DataFrame(ledger.get("entries", []))
    fig, ax = plt.subplots(figsize=(8, 4))
    if entries.empty:
        ax.text(0.5, 0.5, "no measurements", ha="center")
        return _png(fig)
    table = entries.pivot_table(
        index="level", columns="query", values="budget_float", aggfunc="sum", fill_value=0
    )
    bottom = pd.Series(0.0, index=table.index)
    for i, query in enumerate(table.columns):
        ax.bar(
            table.index.astype(str),
            table[query],
            bottom=bottom,
            label=query,
            color=_COLOURS[i % len(_COLOURS)],
        )
        bottom += table[query]
    kind = entries["kind"].iloc[0]
    ax.set_xlabel("level (0 = root)")
    ax.set_ylabel("rho (zCDP)" if kind == "zcdp" else "epsilon (pure DP)")
    ax.set_title("Budget by level, split by query")
    ax.legend(title="query", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png(fig)


def _error_table(metrics: pd.DataFrame) -> pd.DataFrame:
    t = metrics[metrics["query"].isin(["total", "detailed"])]
    out = (
        t.pivot_table(index=["level", "query"], columns="estimator", values="mae")
        .round(3)
        .reset_index()
    )
    return out.rename_axis(columns=None).rename(
        columns={"release": "MAE release", "noisy": "MAE noisy"}
    )


def _error_plot(metrics: pd.DataFrame) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, query in zip(axes, ("total", "detailed"), strict=True):
        t = metrics[metrics["query"] == query].pivot_table(
            index="level", columns="estimator", values="mae"
        )
        width = 0.8 / max(len(t.columns), 1)
        for i, est in enumerate(sorted(t.columns, reverse=True)):
            ax.bar(
                t.index + (i - (len(t.columns) - 1) / 2) * width,
                t[est],
                width,
                label=est,
                color=_COLOURS[i % len(_COLOURS)],
            )
        ax.set_xticks(list(t.index))
        ax.set_xlabel("level (0 = root)")
        ax.set_ylabel("mean absolute error")
        ax.set_title(f"{'Node totals' if query == 'total' else 'Detailed cells'}")
        ax.legend(fontsize=8)
    fig.suptitle("Release vs raw noisy measurements (noisy detailed cells clipped at 0)")
    return _png(fig)


def _bias_plot(bias: pd.DataFrame) -> str:
    fig, ax = plt.subplots(figsize=(11, 4))
    groups = bias.assign(
        group=bias["level"].map(lambda v: f"L{v}") + " " + bias["size_bin"].astype(str)
    )
    order = list(dict.fromkeys(groups["group"]))
    t = groups.pivot_table(index="group", columns="estimator", values="mean_error").reindex(order)
    width = 0.8 / max(len(t.columns), 1)
    xs = range(len(order))
    for i, est in enumerate(sorted(t.columns, reverse=True)):
        ax.bar(
            [x + (i - (len(t.columns) - 1) / 2) * width for x in xs],
            t[est],
            width,
            label=est,
            color=_COLOURS[i % len(_COLOURS)],
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("level and true node size")
    ax.set_ylabel("mean signed error of node totals")
    ax.set_title("Bias by node size")
    ax.legend(fontsize=8)
    return _png(fig)


def _solver_plot(stats: pd.DataFrame) -> str:
    """Families and problems solved per level: where the estimation's work is (its seconds
    stay out of the folder, a timing side channel on parallel runs)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    levels = np.arange(len(stats))
    width = 0.4
    ax.bar(levels - width / 2, stats["families"], width, label="families", color=_COLOURS[0])
    ax.bar(
        levels + width / 2,
        stats["problems_solved"],
        width,
        label="problems solved",
        color=_COLOURS[1],
    )
    ax.set_xticks(levels)
    ax.set_xticklabels(stats["level"].astype(str))
    ax.set_yscale("log")
    ax.set_xlabel("level (0 = root)")
    ax.set_ylabel("count (log scale)")
    ax.set_title("Estimation by level")
    ax.legend(fontsize=8)
    return _png(fig)


def _total_text(total: dict[str, Any]) -> str:
    """``3/2 (1.5)`` from the ledger's exact "p/q" string and its rounded-up float."""
    if not total:
        return ""
    return f"{Fraction(total['budget'])} ({total['budget_float']})"


def _noise(ledger: dict[str, Any]) -> tuple[bool, str]:
    """(private, description) from the ledger's own record of its noise source."""
    noise = ledger.get("noise")
    if not isinstance(noise, dict):
        return False, "not recorded: the privacy of this release cannot be stated"
    source = NoiseSource.from_dict(noise)
    if source.private:
        return True, source.describe()
    return False, f"{source.describe()}; for tests and experiments only"


def _not_private_html(ledger: dict[str, Any]) -> str:
    private, text = _noise(ledger)
    out = ""
    if not private:
        out += f"<p class=danger><strong>NOT PRIVATE.</strong> Noise: {html.escape(text)}</p>"
    truth = ledger.get("summary", {}).get("not_publishable") or []
    if truth:
        out += (
            "<p class=danger><strong>NOT PUBLISHABLE AS IS:</strong> "
            f"{html.escape(', '.join(str(f) for f in truth))} hold figures computed from the "
            "confidential data (accuracy against the truth), which are not differentially "
            "private. Publish the other files.</p>"
        )
    return out


def _estimation_text(estimation: dict[str, Any]) -> str:
    """The estimator, and whether the root's total was held at the rounded BLUE total
    (``topdown.estimation.root_total``: post-processing, not an invariant)."""
    text = f"{estimation.get('estimator', '')} (post-processing, no privacy cost)"
    held = estimation.get("root_total")
    if isinstance(held, dict) and held.get("held"):
        text += (
            f"; the root's total held at {held.get('value')}, the BLUE's total "
            f"{held.get('blue_total')} (standard error {held.get('stderr')}) rounded: "
            "not an invariant"
        )
    elif isinstance(held, dict):
        text += f"; the root's total not held: {held.get('reason', '')}"
    return text


def _ledger_html(ledger: dict[str, Any], config: dict[str, Any]) -> str:
    s = ledger.get("summary", {})
    kind = s.get("budget_kind", "budget")
    private, noise = _noise(ledger)
    eps = s.get("epsilon_at_delta")
    rows = [
        ("mechanism", s.get("mechanism", "")),
        ("neighbouring", config.get("strategy", {}).get("neighbouring", "")),
        (f"total {kind}" + ("" if private else " (nominal)"), _total_text(ledger.get("total", {}))),
        (
            f"epsilon at delta = {s.get('delta', '')}",
            f"{eps:.4f}" if private and isinstance(eps, int | float) else "none holds",
        ),
        ("per level", ", ".join(f"level {k}: {v}" for k, v in s.get("by_level", {}).items())),
        ("noise", noise),
    ]
    estimation = s.get("estimation", {})
    if estimation:
        rows.append(("estimation", _estimation_text(estimation)))
    inv = ledger.get("invariants", [])
    dis = ledger.get("disclosures", [])
    rows.append(
        (
            "invariants (published exactly, outside DP)",
            "; ".join(f"{i['name']} at level {i['level']}" for i in inv) or "none",
        )
    )
    rows.append(
        (
            "disclosures (outside DP)",
            "; ".join(f"{d['name']}: {d['description']}" for d in dis) or "none",
        )
    )
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return f"<table class=kv>{body}</table>"


def _table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", classes="data", border=0)


_INVARIANT_NOTE = (
    "<p class=note>A release error of 0 where a total is an invariant (published exactly) is "
    "expected: that figure carries no noise.</p>"
)

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }}
h1 {{ font-size: 1.6em; }}
h2 {{ font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; }}
img {{ max-width: 100%; display: block; margin: .5em 0; }}
table {{ border-collapse: collapse; margin: .5em 0; font-size: .9em; }}
th, td {{ padding: .25em .6em; border: 1px solid #ddd; text-align: left; }}
table.kv th {{ background: #f4f4f4; }} .note {{ color: #666; }}
.danger {{ background: #fde2e1; border: 2px solid #c00; padding: .6em; color: #900; }}
</style></head>
<body><h1>{title}</h1>
{body}
</body></html>
"""
