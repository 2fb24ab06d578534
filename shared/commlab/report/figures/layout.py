"""What every report figure shares, so that one read alone is legible: a canvas of its own (Agg, no
pyplot state), the title and the group's settings wrapped to the canvas width, the legend beside
the axes rather than over the data, categorical ticks wrapped or turned so that none overlaps,
integer ticks on round/step/epoch axes, and lines with equal values shifted apart so none hides
another."""
from __future__ import annotations

import math
import re
import textwrap

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import MaxNLocator, PercentFormatter
from matplotlib.transforms import ScaledTranslation

SIZE = (8.0, 4.8)  # inches; at DPI, 800 x 480 pixels
DPI = 100
TITLE_POINTS = 9
LEGEND_POINTS = 8
TICK_POINTS = 9
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
SHIFT_POINTS = 2.5    # how far each line with equal values moves, right and up
HIDDEN_POINTS = 2.0   # points of two lines closer than this hide one another's markers
LEGEND_CHARS = 28     # legend labels wrap at this many characters
TICK_CHARS = 14       # categorical tick labels wrap at this many characters
REFERENCE = "reference"  # gid of guide lines (the target accuracy), which are not data
COUNTERS = ("round", "step", "epoch")  # x axes that count, in whole numbers


def new_figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = SIZE, **subplots) -> tuple[Figure, object]:
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, **subplots)


def series_styles(series) -> dict[str, dict]:
    """Colour and marker per series, by its place among the sorted names, so a codec looks the same
    in every figure of its group and two series differ in shape as well as colour."""
    colors = matplotlib.colormaps["tab10"]
    return {s: {"color": colors(i % 10), "marker": MARKERS[i % len(MARKERS)]}
            for i, s in enumerate(sorted((str(s) for s in series), key=natural_key))}


def natural_key(text: str) -> list:
    """client2 before client10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text))]


def text_width(fig: Figure, text: str, points: float) -> float:
    """Width in pixels of one line of `text` on this figure's canvas."""
    renderer = fig.canvas.get_renderer()
    return renderer.get_text_width_height_descent(text, FontProperties(size=points), ismath=False)[0]


def wrap_to_width(fig: Figure, items: list[str], points: float, fraction: float = 0.94) -> list[str]:
    """`items` joined by ", " into lines no wider than `fraction` of the canvas."""
    limit, lines, line = fraction * fig.bbox.width, [], ""
    for item in items:
        joined = f"{line}, {item}" if line else item
        if line and text_width(fig, joined, points) > limit:
            lines.append(line + ",")
            line = item
        else:
            line = joined
    return lines + [line] if line else lines


def set_title(fig: Figure, title: str, *settings: list[str]) -> None:
    """The figure's title over its whole width, each list of settings wrapped below it so none is
    cut off."""
    lines = [line for items in settings for line in wrap_to_width(fig, items, TITLE_POINTS)]
    fig.suptitle("\n".join([title, *lines]), fontsize=TITLE_POINTS)


def wrap_label(label: str, chars: int = LEGEND_CHARS) -> str:
    return textwrap.fill(label, chars, break_long_words=False)


def legend_beside(ax: Axes, title: str | None = None) -> None:
    """The axes' legend to its right, outside the plotted area, so it never covers data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, [wrap_label(label) for label in labels], loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0, fontsize=LEGEND_POINTS, title=title, title_fontsize=LEGEND_POINTS)


def counter_axis(ax: Axes) -> None:
    """Whole-number ticks on a round, step or epoch axis, also when the runs span a single one."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def percent_axis(ax: Axes) -> None:
    """Fractions shown as percent; the axis label carries the unit."""
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, symbol=""))


def category_ticks(ax: Axes, labels: list[str]) -> None:
    """One tick per category at 0, 1, ...: wrapped labels side by side while they fit their slot,
    else turned upright with as many left out (every k-th kept) as needed to keep them apart."""
    fig, n = ax.figure, len(labels)
    ax.set_xlim(-0.6, n - 0.4)
    wrapped = [wrap_label(str(label), TICK_CHARS) for label in labels]
    slot = 0.7 * fig.bbox.width / max(n, 1)  # the axes take about 70 % of the width
    widest = max((text_width(fig, line, TICK_POINTS) for w in wrapped for line in w.split("\n")), default=0)
    if widest <= 0.9 * slot:
        ax.set_xticks(range(n), wrapped, fontsize=TICK_POINTS)
        return
    every = math.ceil(1.8 * TICK_POINTS * DPI / 72 / slot)
    ax.set_xticks(range(0, n, every), [str(labels[i]) for i in range(0, n, every)], fontsize=TICK_POINTS,
                  rotation=90)


def data_lines(ax: Axes) -> list:
    return [line for line in ax.get_lines() if line.get_gid() != REFERENCE and len(line.get_xdata())]


def display_points(line) -> np.ndarray:
    """The line's finite points in pixels, as its axes place them now."""
    xy = np.column_stack([np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)])
    shown = line.get_transform().transform(xy)
    return shown[np.isfinite(shown).all(axis=1)]


def mostly_on(a: np.ndarray, b: np.ndarray, pixels: float) -> bool:
    """Whether at least half of the points `a` lie within about `pixels` of a point of `b` (on a
    grid of that size, neighbouring cells included, so long runs stay linear in time)."""
    if not len(a) or not len(b):
        return False
    cells = {(int(x), int(y)) for x, y in np.floor(b / pixels)}
    near = [any((x + dx, y + dy) in cells for dx in (-1, 0, 1) for dy in (-1, 0, 1))
            for x, y in np.floor(a / pixels).astype(int)]
    return sum(near) >= len(near) / 2


def separate_equal_lines(ax: Axes) -> None:
    """A line lying mostly on an earlier one (within HIDDEN_POINTS) moves SHIFT_POINTS right and up
    for each slot taken, no two such lines in the same slot; the x label says so. Equal lines are
    common here: every codec downloads the same fp32 model, fp32 uploads as much, many clients get
    the same bits. Lines that only cross or touch here and there stay where they are."""
    ax.viewLim  # brings the autoscaled limits up to date: the pixel positions below depend on them
    lines = data_lines(ax)
    points = [display_points(line) for line in lines]
    pixels = HIDDEN_POINTS * ax.figure.dpi / 72
    slots: list[int] = []
    for i, line in enumerate(lines):
        taken = {slots[j] for j in range(i)
                 if mostly_on(points[i], points[j], pixels) or mostly_on(points[j], points[i], pixels)}
        slot = min(set(range(len(lines))) - taken)
        slots.append(slot)
        if slot:
            step = slot * SHIFT_POINTS / 72
            line.set_transform(line.get_transform() + ScaledTranslation(step, step, ax.figure.dpi_scale_trans))
    if any(slots):
        ax.set_xlabel(f"{ax.get_xlabel()}\n(lines with equal values shifted {SHIFT_POINTS:g} pt right and up each)")


def finish(fig: Figure, ax: Axes, title: str, settings: list[str]) -> Figure:
    ax.grid(True, alpha=0.3)
    if ax.get_xlabel().partition(" ")[0] in COUNTERS:
        counter_axis(ax)
    separate_equal_lines(ax)
    legend_beside(ax)
    set_title(fig, title, settings)
    return fig
