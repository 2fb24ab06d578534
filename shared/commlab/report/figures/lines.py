"""Line figures both kinds draw: one line per series against rounds, steps, epochs or wall time;
test accuracy with the target marked; bytes on a log axis that says which series sent nothing."""
from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .layout import REFERENCE, finish, new_figure, percent_axis

MARKS = 20  # markers per line at most, so long runs stay lines


def lines(ax: Axes, df: pd.DataFrame, x: str, y: str, styles: dict, label: str = "{}",
          linestyle: str = "-") -> None:
    for series, d in df.groupby("series", sort=True):
        ax.plot(d[x], d[y], linestyle=linestyle, marker=styles[series]["marker"], color=styles[series]["color"],
                markersize=4, markevery=max(1, len(d) // MARKS), label=label.format(series))


def line_figure(df: pd.DataFrame, x: str, y: str, styles: dict, labels: tuple[str, str], title: str,
                settings: list[str]) -> Figure:
    """labels: (x label, y label)."""
    fig, ax = new_figure()
    lines(ax, df, x, y, styles)
    ax.set(xlabel=labels[0], ylabel=labels[1])
    return finish(fig, ax, title, settings)


def accuracy_figure(df: pd.DataFrame, x: str, xlabel: str, styles: dict, target: float, title: str,
                    settings: list[str]) -> Figure:
    fig, ax = new_figure()
    lines(ax, df.dropna(subset=["test_accuracy"]), x, "test_accuracy", styles)
    ax.axhline(target, color="grey", linestyle=":", label=f"target {100 * target:g} %", gid=REFERENCE)
    ax.set(xlabel=xlabel, ylabel="test accuracy (%)")
    percent_axis(ax)
    return finish(fig, ax, title, settings)


def log_bytes(ax: Axes, df: pd.DataFrame, x: str, y: str, styles: dict, label: str = "{}",
              linestyle: str = "-") -> None:
    """Positive values as lines on a log axis; a series without any (the centralized peer sends
    nothing) gets a legend entry that says so instead of vanishing."""
    lines(ax, df[df[y] > 0], x, y, styles, label, linestyle)
    for series, d in df.groupby("series", sort=True):
        if not (d[y] > 0).any():
            ax.plot([], [], " ", label=f"{label.format(series)}: 0 bytes (sends nothing), no line on a log axis")
    ax.set_yscale("log")
