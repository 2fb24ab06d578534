"""matplotlib figures (Agg backend, PNG), four per settings group, one line or bar set per codec or
method. Every title carries the group's settings so a figure read alone says what it shows."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on nodes, CI or containers
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

FL_FIGURES = ("bytes", "comm-time", "round-time", "accuracy", "accuracy-time", "time-split")
ADAPTIVE_FIGURES = ("bits", "rate-share")  # only for runs that allocated bits per client (docs/adaptive.md)
DDP_FIGURES = ("bytes", "accuracy", "comm-time-max", "comm-time-mean")


def subtitle(settings: dict) -> str:
    size = f"clients={settings['clients']}" if settings["kind"] == "fl" else f"world={settings['world']}"
    length = f"rounds={settings['rounds']}" if settings["kind"] == "fl" else f"epochs={settings['epochs']}"
    training = f"\n{settings['training']}" if "training" in settings else ""
    return (f"link={settings['link_profile']}, {size}, model={settings['model']}, "
            f"dataset={settings['dataset']},\n{length}, backend={settings['backend']}; "
            f"latest run per {'codec' if settings['kind'] == 'fl' else 'method'}{training}")


def _colors(series: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {s: cmap(i % 10) for i, s in enumerate(sorted(series))}


def _save(fig, ax, title: str, sub: str, path: Path) -> Path:
    ax.set_title(f"{title}\n{sub}", fontsize=9)
    ax.grid(True, alpha=0.3)
    if ax.get_xlabel() != "client":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds, steps, epochs
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _lines(df: pd.DataFrame, x: str, y: str, colors: dict, ax, style: str = "-o", label: str = "{}") -> None:
    for series, d in df.groupby("series", sort=True):
        ax.plot(d[x], d[y], style, color=colors[series], label=label.format(series), markersize=3)


def _accuracy(df: pd.DataFrame, x: str, ylabel: str, colors: dict, target: float, title: str,
              sub: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _lines(df.dropna(subset=["test_accuracy"]), x, "test_accuracy", colors, ax)
    ax.axhline(target, color="grey", linestyle=":", label=f"target {target:g}")
    ax.set(xlabel=x, ylabel=ylabel)
    return _save(fig, ax, title, sub, path)


def fl_figures(frames: dict[str, pd.DataFrame], settings: dict, group: str, out: Path,
               target: float) -> list[Path]:
    """FL: bytes per round, DDS comm time per client, round time, test accuracy per round and
    over wall time, where a round's time goes; with adaptive runs, their bits and uplink shares."""
    rounds, clients = frames["rounds"], frames["clients"]
    colors, sub, paths = _colors(list(rounds["series"].unique())), subtitle(settings), []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    _lines(rounds, "round", "bytes_up", colors, ax, label="{} up")
    _lines(rounds, "round", "bytes_down", colors, ax, style="--", label="{} down")
    ax.set(xlabel="round", ylabel="bytes on the wire per round (all clients)", yscale="log")
    paths.append(_save(fig, ax, "FL: bytes per round", sub, out / f"{group}-bytes.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    if len(clients):
        stats = clients.groupby(["series", "client_id"])["comm_time_s"].agg(["mean", "max"]).reset_index()
        ids = sorted(stats["client_id"].unique(), key=str)
        series = sorted(stats["series"].unique())
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            d = stats[stats["series"] == s].set_index("client_id").reindex(ids)
            x = np.arange(len(ids)) + i * width
            ax.bar(x, d["mean"], width, color=colors[s], label=f"{s} (bar mean, tick max)")
            ax.errorbar(x, d["mean"], yerr=[np.zeros(len(ids)), d["max"] - d["mean"]], fmt="none",
                        ecolor="black", capsize=3)
        ax.set_xticks(np.arange(len(ids)) + 0.4 - width / 2, [str(i) for i in ids])
    ax.set(xlabel="client", ylabel="DDS communication time per round (s)")
    paths.append(_save(fig, ax, "FL: communication time per client", sub, out / f"{group}-comm-time.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    _lines(rounds, "round", "round_time_s", colors, ax)
    ax.set(xlabel="round", ylabel="round time (s)")
    paths.append(_save(fig, ax, "FL: round time", sub, out / f"{group}-round-time.png"))

    paths.append(_accuracy(rounds, "round", "test accuracy", colors, target,
                           "FL: test accuracy", sub, out / f"{group}-accuracy.png"))
    paths.append(_accuracy(rounds.rename(columns={"elapsed_s": "wall time (s)"}), "wall time (s)", "test accuracy",
                           colors, target, "FL: test accuracy over wall time (sum of round times)", sub,
                           out / f"{group}-accuracy-time.png"))

    split = round_time_split(rounds, clients)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottom = np.zeros(len(split))
    for phase in split.columns:
        ax.bar(split.index, split[phase], bottom=bottom, label=phase)
        bottom += split[phase].to_numpy()
    ax.set(xlabel="codec", ylabel="mean time per round (s)")
    paths.append(_save(fig, ax, "FL: where a round's time goes", sub, out / f"{group}-time-split.png"))
    return paths + adaptive_figures(clients, sub, group, out)


def adaptive_figures(clients: pd.DataFrame, sub: str, group: str, out: Path) -> list[Path]:
    """Per client and round: the qsgd bits and the share of the round's allocated uplink that the
    controller gave it; one panel per run (policy), one line per client; nothing for runs without
    allocations."""
    d = clients.dropna(subset=["bits"])
    if d.empty:
        return []
    d = d.assign(share=d["rate_bps"] / d.groupby(["run_id", "round"])["rate_bps"].transform("sum"))
    series = sorted(d["series"].unique())
    cols = min(len(series), 2)
    rows = -(-len(series) // cols)
    client_colors = _colors([str(c) for c in d["client_id"].unique()])
    paths = []
    for name, column, ylabel in (("bits", "bits", "qsgd bits"),
                                 ("rate-share", "share", "share of the round's allocated uplink")):
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows + 1), sharex=True, sharey=True,
                                 squeeze=False)
        for ax, s in zip(axes.flat, series):
            for client, part in d[d["series"] == s].dropna(subset=[column]).groupby("client_id", sort=True):
                ax.plot(part["round"], part[column], "-o", markersize=3, color=client_colors[str(client)],
                        label=str(client))
            ax.set_title(s, fontsize=9)
            ax.set(xlabel="round", ylabel=ylabel)
            ax.grid(True, alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in list(axes.flat)[len(series):]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"FL adaptive: {ylabel} per client\n{sub}", fontsize=9)
        fig.tight_layout()
        path = out / f"{group}-{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


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


def ddp_figures(frames: dict[str, pd.DataFrame], settings: dict, group: str, out: Path,
                target: float, window: int) -> list[Path]:
    """DDP: bytes per step, test accuracy, max and mean (over ranks) comm time per window."""
    per_step, per_window, epochs = frames["per_step"], frames["per_window"], frames["epochs"]
    colors, sub, paths = _colors(list(per_step["series"].unique())), subtitle(settings), []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    _lines(per_step, "step", "bytes_sent", colors, ax, style="-")
    ax.set(xlabel="step", ylabel="bytes sent per step (mean over ranks)", yscale="log")
    paths.append(_save(fig, ax, "DDP: bytes per step", sub, out / f"{group}-bytes.png"))

    paths.append(_accuracy(epochs, "epoch", "test accuracy (mean over ranks)", colors, target,
                           "DDP: test accuracy", sub, out / f"{group}-accuracy.png"))

    for stat, word in (("max", "maximum"), ("mean", "mean")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _lines(per_window, "step", f"comm_time_{stat}_s", colors, ax)
        per = "per step" if window == 1 else f"per step, averaged over {window}-step windows"
        ax.set(xlabel="step" if window == 1 else "step (end of window)",
               ylabel=f"{stat} over ranks of comm time (s)\n{per}")
        paths.append(_save(fig, ax, f"DDP: {word} communication time", sub,
                           out / f"{group}-comm-time-{stat}.png"))
    return paths


def matrix_figure(matrix: pd.DataFrame, settings: str, out: Path) -> Path:
    """bench-matrix: bytes a node sends as x of fp32 (log scale) against the accuracy delta, one
    point per compressor and mode; the centralized peer (no bytes) as a dashed line per mode."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = matrix[matrix["status"] == "ok"]
    for (mode, marker), color in zip((("fl", "o"), ("ddp", "s")), ("tab:blue", "tab:orange")):
        part = ok[(ok["mode"] == mode) & (ok["compressor"] != "centralized")]
        ceiling = ok[(ok["mode"] == mode) & (ok["compressor"] == "centralized")]
        for _, row in ceiling.iterrows():
            ax.axhline(row["accuracy_delta_pp"], color=color, ls="--", lw=0.8,
                       label=f"centralized ({mode.upper()} budget)")
        if part.empty:
            continue
        ax.scatter(part["bytes_x_of_fp32"], part["accuracy_delta_pp"], marker=marker, color=color, label=mode.upper())
        for _, row in part.iterrows():
            ax.annotate(row["compressor"], (row["bytes_x_of_fp32"], row["accuracy_delta_pp"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("bytes sent per node, x of fp32 (FL: per round; DDP: per step and peer)")
    ax.set_ylabel("test accuracy - fp32/dense (percentage points)")
    ax.set_title(f"Compressor matrix: bytes vs accuracy\n{settings}", fontsize=8)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "matrix.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
