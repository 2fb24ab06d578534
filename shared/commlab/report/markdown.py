"""report.md: what the table columns mean, then per settings group the summary table of the runs
shown, the runs left out (older duplicates), a gallery of its figures (accuracy over wall time
first), and at the end the skipped folders with the reason."""
from __future__ import annotations

import math

import pandas as pd

from .runs import Skipped

TABLE = {  # summary column -> heading in report.md
    "series": "codec/method", "run_id": "run", "status": "status",
    "bytes_up_per_unit": "bytes up per {unit}, incl. warm-up", "bytes_up_x_of_fp32": "x of fp32",
    "comm_time_mean_s": "comm mean (s)", "comm_time_max_s": "comm max (s)", "unit_time_mean_s": "{unit} time (s)",
    "final_accuracy": "final acc", "final_epsilon": "epsilon", "time_to_target_s": "time to {target:g} (s)", "target_reached_at": "at {length}",
}
# DDP only, after the whole-run ratio: the steady state once the DGC warm-up is over.
LAST_EPOCH = {"bytes_up_per_unit_last_epoch": "bytes up per {unit}, last epoch only",
              "bytes_up_x_of_fp32_last_epoch": "x of fp32, last epoch only"}
MEANING = {  # kind -> summary columns -> what their cells are
    "fl": {
        ("bytes_up_per_unit",): "what all clients uploaded in a round together, mean over every round, the "
                                "rounds a codec warms up in (dgc, powersgd's whole first rounds) included",
        ("bytes_up_x_of_fp32",): "that divided by the same of the group's fp32 run: 1 is fp32, 0.05 a "
                                 "twentieth of its bytes",
        ("comm_time_mean_s", "comm_time_max_s"): "DDS communication time of one client in one round, mean "
                                                 "and maximum over clients and rounds",
        ("unit_time_mean_s",): "mean round time, controller wall clock",
        ("final_accuracy",): "test accuracy after the last evaluated round",
        ("final_epsilon",): "privacy spent by the run's rounds, epsilon at its delta (DP-FedAvg, "
                            "docs/privacy.md); - for a run without differential privacy",
        ("time_to_target_s", "target_reached_at"): "sum of the round times up to the first round at or above "
                                                   "the target, and that round",
    },
    "ddp": {
        ("bytes_up_per_unit",): "bytes a rank sends in a step, mean over every step and rank, DGC's warm-up "
                                "(density 25% down to the final one) included",
        ("bytes_up_x_of_fp32",): "that divided by the same of the group's dense run (the fp32 gradients): 1 "
                                 "is fp32, 0.001 a thousandth of its bytes",
        ("bytes_up_per_unit_last_epoch", "bytes_up_x_of_fp32_last_epoch"):
            "the same two over the steps of the last epoch only, which leave out a warm-up that ended "
            "before it (the steady state)",
        ("comm_time_mean_s", "comm_time_max_s"): "communication time of one rank in one step, mean and "
                                                 "maximum over ranks and steps",
        ("unit_time_mean_s",): "mean over steps of the slowest rank's step time",
        ("final_accuracy",): "test accuracy after the last epoch, mean over ranks",
        ("time_to_target_s", "target_reached_at"): "sum of the epoch times up to the first epoch at or above "
                                                   "the target, and that epoch",
    },
}


def _columns(kind: str) -> dict[str, str]:
    if kind == "fl":
        return TABLE
    cols = [(c, h) for c, h in TABLE.items() if c != "final_epsilon"]  # FL only
    at = list(TABLE).index("bytes_up_x_of_fp32") + 1
    return dict(cols[:at] + list(LAST_EPOCH.items()) + cols[at:])


def headings(kind: str, target: float) -> dict[str, str]:
    unit, length = ("round", "round") if kind == "fl" else ("step", "epoch")
    return {c: h.format(unit=unit, target=target, length=length) for c, h in _columns(kind).items()}


def _cell(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def table(df: pd.DataFrame, headings: dict[str, str]) -> str:
    lines = ["| " + " | ".join(headings.values()) + " |", "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in headings) + " |" for _, row in df.iterrows()]
    return "\n".join(lines)


def legend(kinds: list[str], target: float) -> list[str]:
    """What each column of the tables means, for the kinds the report has."""
    out = ["## Reading the tables", "",
           "Ratios are \"x of fp32\": this run's bytes divided by the reference run's, so 1 is fp32 "
           "and smaller is fewer bytes. `-`: no such value (target not reached, no fp32 run in the group).", ""]
    for kind in kinds:
        names = headings(kind, target)
        out += [f"{'FL (one row per codec)' if kind == 'fl' else 'DDP (one row per method)'}:", ""]
        out += [f"- {' / '.join(f'**{names[c]}**' for c in columns)}: {meaning}"
                for columns, meaning in MEANING[kind].items()] + [""]
    return out


def gallery(files: list[tuple[str, str]]) -> list[str]:
    """files: (caption, file name) in the order to show them."""
    out = []
    for caption, name in files:
        out += [f"**{caption[0].upper()}{caption[1:]}**", "", f"![{caption}]({name})", ""]
    return out


def render(summary: pd.DataFrame, groups: dict[str, dict], figures: dict[str, list[tuple[str, str]]],
           skipped: list[Skipped], warnings: list[str], command: str, target: float) -> str:
    """figures: per group, (caption, file name) of each figure in gallery order."""
    out = ["# Experiment report", "",
           f"Made by `{command}`. Figures and tables show the latest run of each codec (FL) or "
           f"method (DDP) per settings group; runs with different settings are never averaged "
           f"together. All runs, older ones included, are in `summary.csv`.", ""]
    out += legend([k for k in ("fl", "ddp") if any(s["kind"] == k for s in groups.values())], target)
    for group, settings in groups.items():
        g = summary[summary["group"] == group]
        out += [f"## {group}", "",
                "Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) + ".", "",
                table(g[g["shown"]], headings(settings["kind"], target)), ""]
        older = g[~g["shown"]]
        if len(older):
            out += ["Older runs with the same settings and codec/method (in summary.csv, not in the "
                    "figures): " + ", ".join(f"`{r}`" for r in older["run_id"]) + ".", ""]
        out += [f"### Figures: {group}", ""] + gallery(figures[group])
    if skipped:
        out += ["## Skipped runs", ""] + [f"- `{s.path.name}`: {s.reason}" for s in skipped] + [""]
    if warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    return "\n".join(out)
