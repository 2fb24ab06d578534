"""FL figures of one settings group, one series per codec (adaptive runs: per allocation policy)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .layout import (category_ticks, counter_axis, finish, legend_beside, natural_key, new_figure,
                     separate_equal_lines, series_styles, set_title, wrap_label)
from .lines import accuracy_figure, line_figure, log_bytes

# Name in the file name -> what the figure shows (its title and its caption in report.md), in
# gallery order: what a reader wants first (how fast does it learn) before how it gets there.
FL_FIGURES = {
    "accuracy-time": "test accuracy over wall time",
    "accuracy": "test accuracy per round",
    "bytes": "bytes per round, up (solid) and down (dashed)",
    "time-split": "where a round's time goes",
    "round-time": "round time",
    "comm-time": "DDS communication time per client",
}
ADAPTIVE_FIGURES = {  # only for runs that allocated bits per client (docs/adaptive.md)
    "bits": "qsgd bits per client",
    "rate-share": "share of the allocated uplink per client",
}
PHASES = ("train", "encode", "upload", "decode", "aggregate", "broadcast")


def bytes_figure(rounds: pd.DataFrame, styles: dict, title: str, settings: list[str]) -> Figure:
    fig, ax = new_figure()
    log_bytes(ax, rounds, "round", "bytes_up", styles, label="{} up")
    log_bytes(ax, rounds, "round", "bytes_down", styles, label="{} down", linestyle="--")
    ax.set(xlabel="round", ylabel="bytes per round, all clients together (bytes)")
    return finish(fig, ax, title, settings)


def client_labels(ids: list) -> list[str]:
    """Client ids without their common prefix when they share one (client0.. -> 0..)."""
    names = [str(i) for i in ids]
    prefix = os.path.commonprefix(names).rstrip("0123456789")
    return [n.removeprefix(prefix) or n for n in names] if prefix and len(names) > 1 else names


def comm_time_figure(clients: pd.DataFrame, styles: dict, title: str, settings: list[str]) -> Figure:
    """Bars: mean over rounds per client and series; ticks above them: the maximum."""
    fig, ax = new_figure()
    ids: list = []
    if len(clients):
        stats = clients.groupby(["series", "client_id"])["comm_time_s"].agg(["mean", "max"]).reset_index()
        ids = sorted(stats["client_id"].unique(), key=natural_key)
        series = sorted(stats["series"].unique())
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            d = stats[stats["series"] == s].set_index("client_id").reindex(ids)
            x = np.arange(len(ids)) + (i - (len(series) - 1) / 2) * width
            ax.bar(x, d["mean"], width, color=styles[s]["color"], label=f"{s} (bar: mean, tick: max)")
            ax.errorbar(x, d["mean"], yerr=[np.zeros(len(ids)), d["max"] - d["mean"]], fmt="none",
                        ecolor="black", capsize=3)
    category_ticks(ax, client_labels(ids))
    ax.set(xlabel="client", ylabel="DDS communication time per round (s)")
    return finish(fig, ax, title, settings)


def round_time_split(rounds: pd.DataFrame, clients: pd.DataFrame) -> pd.DataFrame:
    """Mean seconds per round and series in each phase, adding up to the round time. The slowest
    client sets train and encode; upload is what the collection took beyond them (model wait and
    update transfer), without the controller's decoding; broadcast includes encoding the downlink."""
    per_round = clients.groupby(["series", "round"]).agg(train=("train_time_s", "max"),
                                                         encode=("encode_time_s", "max"))
    r = rounds.set_index(["series", "round"]).join(per_round)
    collect = r["round_time_s"] - r["aggregate_time_s"] - r["broadcast_time_s"]
    out = pd.DataFrame({"train": r["train"], "encode": r["encode"],
                        "upload": (collect - r["train"] - r["encode"] - r["decode_time_s"]).clip(lower=0),
                        "decode": r["decode_time_s"], "aggregate": r["aggregate_time_s"],
                        "broadcast": r["broadcast_time_s"]})
    return out.fillna(0).groupby(level="series").mean()


def time_split_figure(rounds: pd.DataFrame, clients: pd.DataFrame, title: str, settings: list[str]) -> Figure:
    """One stacked bar per series, at most 0.6 of its slot wide so a lone codec is a bar, not a wall."""
    split = round_time_split(rounds, clients)
    fig, ax = new_figure()
    x, bottom = np.arange(len(split)), np.zeros(len(split))
    for phase in PHASES:
        ax.bar(x, split[phase], 0.6, bottom=bottom, label=phase)
        bottom += split[phase].to_numpy()
    category_ticks(ax, list(split.index))
    ax.set(xlabel="codec", ylabel="mean time per round (s)")
    return finish(fig, ax, title, settings)


def adaptive_figures(clients: pd.DataFrame, settings: list[str]) -> dict[str, Figure]:
    """Per client and round: the qsgd bits and the share of the round's allocated uplink that the
    controller gave it; one panel per run (policy), one line per client; nothing for runs without
    allocations."""
    d = clients.dropna(subset=["bits"])
    if d.empty:
        return {}
    d = d.assign(share=d["rate_bps"] / d.groupby(["run_id", "round"])["rate_bps"].transform("sum"))
    return {name: adaptive_panels(d, column, ylabel, f"FL adaptive: {ADAPTIVE_FIGURES[name]}", settings)
            for name, column, ylabel in (("bits", "bits", "qsgd bits (bits per value)"),
                                         ("rate-share", "share", "share of the round's allocated uplink (fraction)"))}


def adaptive_panels(d: pd.DataFrame, column: str, ylabel: str, title: str, settings: list[str]) -> Figure:
    series = sorted(d["series"].unique())
    cols = min(len(series), 2)
    rows = -(-len(series) // cols)
    fig, axes = new_figure(rows, cols, size=(4.6 * cols + 1.6, 3.2 * rows + 1.4), sharex=True, sharey=True,
                           squeeze=False)
    styles = series_styles(d["client_id"].unique())
    for ax, s in zip(axes.flat, series):
        part = d[d["series"] == s].dropna(subset=[column])
        for client in sorted(part["client_id"].unique(), key=natural_key):
            mine = part[part["client_id"] == client]
            ax.plot(mine["round"], mine[column], "-", marker=styles[str(client)]["marker"], markersize=4,
                    color=styles[str(client)]["color"], label=str(client))
        ax.set_title(wrap_label(s, 48), fontsize=9)
        ax.set(xlabel="round", ylabel=ylabel)
        ax.grid(True, alpha=0.3)
        counter_axis(ax)
        separate_equal_lines(ax)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    legend_beside(axes.flat[cols - 1], title="client")  # the top right panel
    set_title(fig, title, settings)
    return fig


def fl_figures(frames: dict[str, pd.DataFrame], settings: list[str], target: float) -> dict[str, Figure]:
    """The group's figures by name, in gallery order (FL_FIGURES, then ADAPTIVE_FIGURES)."""
    rounds, clients = frames["rounds"], frames["clients"]
    styles = series_styles(rounds["series"].unique())
    title = {name: f"FL: {what}" for name, what in FL_FIGURES.items()}
    return {
        "accuracy-time": accuracy_figure(rounds, "elapsed_s", "wall time, sum of round times (s)", styles, target,
                                         title["accuracy-time"], settings),
        "accuracy": accuracy_figure(rounds, "round", "round", styles, target, title["accuracy"], settings),
        "bytes": bytes_figure(rounds, styles, title["bytes"], settings),
        "time-split": time_split_figure(rounds, clients, title["time-split"], settings),
        "round-time": line_figure(rounds, "round", "round_time_s", styles, ("round", "round time (s)"),
                                  title["round-time"], settings),
        "comm-time": comm_time_figure(clients, styles, title["comm-time"], settings),
        **adaptive_figures(clients, settings),
    }

