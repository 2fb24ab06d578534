"""bench-matrix (results/bench/matrix.csv): bytes against accuracy, one labelled point per
compressor and mode."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

from .layout import REFERENCE, legend_beside, new_figure, set_title

# mode, marker, colour, filled, size: FL hollow and larger, so a DDP point on the same spot shows inside it
MODES = (("fl", "o", "tab:blue", False, 64), ("ddp", "s", "tab:orange", True, 25))
COLUMNS = ("mode", "compressor", "status", "bytes_x_of_fp32", "accuracy_delta_pp")  # what the figure reads


def spread_labels(fig: Figure, labels: list[Annotation]) -> None:
    """Point labels moved up, lowest first, until none overlaps one placed before it: compressors
    of about the same bytes and accuracy (fp32_sparse, minmax4, qsgd4) would print over each other.
    Their leader lines keep pointing at the points."""
    fig.canvas.draw()  # lays the figure out, so the extents below are final
    renderer = fig.canvas.get_renderer()
    placed = []
    for label in sorted(labels, key=lambda a: text_box(a, renderer).y0):
        box = text_box(label, renderer)
        while (hit := next((p for p in placed if p.overlaps(box)), None)) is not None:
            x, y = label.xyann  # offset points
            label.xyann = (x, y + (hit.y1 - box.y0 + 1) * 72 / fig.dpi)
            box = text_box(label, renderer)
        placed.append(box)


def text_box(label: Annotation, renderer):
    """The label's text alone, without its leader line."""
    return Text.get_window_extent(label, renderer)


def matrix_figure(matrix: pd.DataFrame, settings: list[str]) -> Figure:
    """Bytes a node sends as x of fp32 (log scale) against the accuracy delta; the centralized peer
    (no bytes) as a dashed line per mode. `settings`: one line per mode."""
    fig, ax = new_figure(size=(9.0, 5.6))
    ok = matrix[matrix["status"] == "ok"]
    labels = []
    for mode, marker, color, filled, size in MODES:
        part = ok[(ok["mode"] == mode) & (ok["compressor"] != "centralized")]
        for _, row in ok[(ok["mode"] == mode) & (ok["compressor"] == "centralized")].iterrows():
            ax.axhline(row["accuracy_delta_pp"], color=color, ls="--", lw=0.8, gid=REFERENCE,
                       label=f"centralized ({mode.upper()} budget)")
        if part.empty:
            continue
        ax.scatter(part["bytes_x_of_fp32"], part["accuracy_delta_pp"], s=size, marker=marker, edgecolors=color,
                   facecolors=color if filled else "none", label=mode.upper())
        labels += [ax.annotate(row["compressor"], (row["bytes_x_of_fp32"], row["accuracy_delta_pp"]), fontsize=7,
                               xytext=(4, 2), textcoords="offset points",
                               arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "grey", "shrinkA": 0, "shrinkB": 2})
                   for _, row in part.iterrows()]
    ax.set_xscale("log")
    ax.axhline(0, color="grey", lw=0.8, gid=REFERENCE)
    ax.set_xlabel("bytes sent per node, x of fp32 (FL: per round; DDP: per step and peer)")
    ax.set_ylabel("test accuracy minus the fp32 run's (percentage points)")
    ax.grid(True, alpha=0.3, which="both")
    legend_beside(ax)
    set_title(fig, "Compressor matrix: bytes against accuracy", *[line.split(", ") for line in settings])
    spread_labels(fig, labels)
    return fig
