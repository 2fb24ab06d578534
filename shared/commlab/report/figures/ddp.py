"""DDP figures of one settings group, one series per method (DDS methods and the reference peers:
gloo, centralized)."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .layout import finish, new_figure, series_styles
from .lines import accuracy_figure, line_figure, log_bytes

# Name in the file name -> what the figure shows, in gallery order (see fl.FL_FIGURES).
DDP_FIGURES = {
    "accuracy-time": "test accuracy over wall time",
    "accuracy": "test accuracy per epoch",
    "bytes": "bytes sent per step",
    "step-time": "step time",
    "comm-time-max": "maximum communication time over ranks",
    "comm-time-mean": "mean communication time over ranks",
}


def bytes_figure(per_step: pd.DataFrame, styles: dict, title: str, settings: list[str]) -> Figure:
    fig, ax = new_figure()
    log_bytes(ax, per_step, "step", "bytes_sent", styles)
    ax.set(xlabel="step", ylabel="bytes sent per step, mean over ranks (bytes)")
    return finish(fig, ax, title, settings)


def ddp_figures(frames: dict[str, pd.DataFrame], settings: list[str], target: float,
                window: int) -> dict[str, Figure]:
    """The group's figures by name, in gallery order. Times per step are averaged over windows of
    `window` steps (the y label says so when window > 1)."""
    per_step, per_window, epochs = frames["per_step"], frames["per_window"], frames["epochs"]
    styles = series_styles(per_step["series"].unique())
    title = {name: f"DDP: {what}" for name, what in DDP_FIGURES.items()}
    per = "" if window == 1 else f"\naveraged over {window}-step windows"
    xlabel = "step" if window == 1 else "step (end of window)"
    return {
        "accuracy-time": accuracy_figure(epochs, "elapsed_s", "wall time, sum of epoch times (s)", styles, target,
                                         title["accuracy-time"], settings),
        "accuracy": accuracy_figure(epochs, "epoch", "epoch", styles, target, title["accuracy"], settings),
        "bytes": bytes_figure(per_step, styles, title["bytes"], settings),
        "step-time": line_figure(per_window, "step", "step_time_s", styles,
                                 (xlabel, f"step time, slowest rank (s){per}"), title["step-time"], settings),
        **{f"comm-time-{stat}": line_figure(per_window, "step", f"comm_time_{stat}_s", styles,
                                            (xlabel, f"{stat} over ranks of comm time per step (s){per}"),
                                            title[f"comm-time-{stat}"], settings)
           for stat in ("max", "mean")},
    }
