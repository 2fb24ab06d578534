"""matplotlib figures (Agg, PNG) per settings group, one line or bar set per codec or method, and
the bench-matrix figure. Every title carries the group's settings so a figure read alone says what
it shows; figures are returned as objects and saved by `save`, so tests can measure them."""
from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from .ddp import DDP_FIGURES, ddp_figures
from .fl import ADAPTIVE_FIGURES, FL_FIGURES, adaptive_figures, fl_figures
from .matrix import COLUMNS as MATRIX_COLUMNS
from .matrix import matrix_figure

CAPTIONS = {"fl": {**FL_FIGURES, **ADAPTIVE_FIGURES}, "ddp": DDP_FIGURES}  # by kind, then figure name


def settings_items(settings: dict) -> list[str]:
    """The group's settings as `name=value` items for a figure title (wrapped by the figure)."""
    fl = settings["kind"] == "fl"
    size = f"clients={settings['clients']}" if fl else f"world={settings['world']}"
    length = f"rounds={settings['rounds']}" if fl else f"epochs={settings['epochs']}"
    return [f"link={settings['link_profile']}", size, f"model={settings['model']}",
            f"dataset={settings['dataset']}", length, f"backend={settings['backend']}",
            *settings.get("training", "").split(), f"latest run per {'codec' if fl else 'method'}"]


def save(figures: dict[str, Figure], out: Path, group: str) -> list[Path]:
    """`<out>/<group>-<name>.png` for each figure, in the order given."""
    paths = []
    for name, fig in figures.items():
        paths.append(out / f"{group}-{name}.png")
        fig.savefig(paths[-1])
    return paths


__all__ = ["ADAPTIVE_FIGURES", "CAPTIONS", "DDP_FIGURES", "FL_FIGURES", "MATRIX_COLUMNS", "adaptive_figures",
           "ddp_figures", "fl_figures", "matrix_figure", "save", "settings_items"]
