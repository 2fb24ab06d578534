"""The figures of a sweep report (commlab.sweep.report): accuracy against cumulative bytes with the
Pareto front of the settings marked, time to target as bars with min/max whiskers over seeds, and
accuracy over wall time. One colour per settings (a `config` label naming what differs between
them); the seeds of one settings share it and are drawn each, never averaged with other settings.

Inputs: `curves` has a row per evaluated round/epoch of each run (config, run_id, seed,
test_accuracy, cum_MB, wall_s); `summary` a row per config (median/min/max columns).
"""
from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .layout import (REFERENCE, category_ticks, finish, legend_beside, new_figure, percent_axis, series_styles,
                     set_title)

PLAIN = FuncFormatter(lambda v, _: f"{v:g}")  # 30, 40, 60 on a log axis rather than 3x10^1


def run_lines(ax, curves: pd.DataFrame, x: str, styles: dict) -> None:
    """One line per run, its settings' colour and marker; the legend names each settings once."""
    for (config, _), d in curves.groupby(["config", "run_id"], sort=True):
        named = config not in {t.get_label() for t in ax.get_lines()}
        ax.plot(d[x], d["test_accuracy"], color=styles[config]["color"], marker=styles[config]["marker"],
                markersize=3, linewidth=1, alpha=0.8, label=config if named else "_")


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """The settings no other beats on both: fewer MB and at least the accuracy, or the same MB and
    more accuracy. Sorted by MB."""
    ordered = points.sort_values(["MB_median", "accuracy_median"], ascending=[True, False])
    front, best = [], -math.inf
    for _, row in ordered.iterrows():
        if row["accuracy_median"] > best:
            front.append(row)
            best = row["accuracy_median"]
    return pd.DataFrame(front)


def accuracy_bytes_figure(curves: pd.DataFrame, summary: pd.DataFrame, target: float | None,
                          settings: list[str]) -> Figure:
    fig, ax = new_figure()
    styles = series_styles(summary["config"])
    run_lines(ax, curves, "cum_MB", styles)
    done = summary.dropna(subset=["MB_median", "accuracy_median"])
    front = pareto_front(done)
    if len(front):
        ax.plot(front["MB_median"], front["accuracy_median"], color="black", linestyle="--", marker="*",
                markersize=12, linewidth=1, label="Pareto front (median over seeds: fewest MB for the accuracy)",
                gid=REFERENCE)
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", label=f"target {100 * target:g} %", gid=REFERENCE)
    ax.set(xlabel="MB sent and received by all nodes, cumulative (log)", ylabel="test accuracy (%)", xscale="log")
    ax.xaxis.set_major_formatter(PLAIN)
    ax.xaxis.set_minor_formatter(PLAIN)
    percent_axis(ax)
    return finish(fig, ax, "Test accuracy against cumulative bytes, one line per run", settings)


def time_to_target_figure(summary: pd.DataFrame, target: float, settings: list[str]) -> Figure:
    """Bars at the median time over the finished seeds (a seed that never reached the target counts
    as infinitely slow), whiskers to their min and max; each bar says how many seeds reached it;
    settings whose median is not reached, or that have no finished run, have no bar and say so."""
    fig, ax = new_figure()
    styles = series_styles(summary["config"])
    top = max((t for t in [*summary["ttt_median_s"], *summary["ttt_max_s"]] if math.isfinite(t)), default=1.0)
    for i, row in enumerate(summary.itertuples()):
        if not math.isfinite(row.ttt_median_s):
            fastest = f"\nfastest {row.ttt_min_s:.1f} s" if math.isfinite(row.ttt_min_s) else ""
            text = "no finished run" if math.isnan(row.ttt_median_s) else f"median not reached\n({row.reached}){fastest}"
            ax.text(i, 0, text, ha="center", va="bottom", fontsize=8)
            continue
        high = row.ttt_max_s if math.isfinite(row.ttt_max_s) else row.ttt_median_s
        ax.bar(i, row.ttt_median_s, color=styles[row.config]["color"], label=f"{row.number}: {row.config}",
               yerr=[[row.ttt_median_s - row.ttt_min_s], [high - row.ttt_median_s]], capsize=4)
        unreached = "" if math.isfinite(row.ttt_max_s) else ",\nmax: not reached"
        ax.text(i, high + 0.02 * top, f"reached {row.reached}{unreached}", ha="center", va="bottom", fontsize=8)
    category_ticks(ax, [str(n) for n in summary["number"]])
    ax.set(xlabel="settings (numbered as in the legend and the report's table)",
           ylabel=f"wall time to {100 * target:g} % (s)")
    ax.set_ylim(0, 1.2 * top)
    ax.grid(True, axis="y", alpha=0.3)
    legend_beside(ax)
    set_title(fig, f"Time to {100 * target:g} % test accuracy: median bar, min/max whiskers over seeds", settings)
    return fig


def accuracy_wall_figure(curves: pd.DataFrame, summary: pd.DataFrame, target: float | None,
                         settings: list[str]) -> Figure:
    fig, ax = new_figure()
    run_lines(ax, curves, "wall_s", series_styles(summary["config"]))
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", label=f"target {100 * target:g} %", gid=REFERENCE)
    ax.set(xlabel="wall time since training started (s)", ylabel="test accuracy (%)")
    percent_axis(ax)
    return finish(fig, ax, "Test accuracy over wall time, one line per run", settings)
