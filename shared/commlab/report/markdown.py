"""report.md: per settings group the summary table of the runs shown, the figures, and the runs
left out (older duplicates, skipped folders) with the reason."""
from __future__ import annotations

import math

import pandas as pd

from .runs import Skipped

TABLE = {  # summary column -> heading in report.md
    "series": "codec/method", "run_id": "run", "status": "status", "bytes_up_per_unit": "bytes up per {unit}",
    "compression_ratio": "ratio vs {ref}", "comm_time_mean_s": "comm mean (s)",
    "comm_time_max_s": "comm max (s)", "unit_time_mean_s": "{unit} time (s)",
    "final_accuracy": "final acc", "time_to_target_s": "time to {target:g} (s)",
    "target_reached_at": "at {length}",
}
# DDP only, after the whole-run ratio: the steady state once the DGC warm-up is over.
LAST_EPOCH = {"bytes_up_per_unit_last_epoch": "bytes up per {unit}, last epoch",
              "compression_ratio_last_epoch": "ratio vs {ref}, last epoch"}


def _columns(kind: str) -> dict[str, str]:
    if kind == "fl":
        return TABLE
    cols = list(TABLE.items())
    at = list(TABLE).index("compression_ratio") + 1
    return dict(cols[:at] + list(LAST_EPOCH.items()) + cols[at:])


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


def render(summary: pd.DataFrame, groups: dict[str, dict], figures: dict[str, list[str]],
           skipped: list[Skipped], warnings: list[str], command: str, target: float) -> str:
    out = ["# Experiment report", "",
           f"Made by `{command}`. Figures and tables show the latest run of each codec (FL) or "
           f"method (DDP) per settings group; runs with different settings are never averaged "
           f"together. All runs, older ones included, are in `summary.csv`.", ""]
    for group, settings in groups.items():
        g = summary[summary["group"] == group]
        kind = settings["kind"]
        ref = "fp32" if kind == "fl" else "dense"
        headings = {c: h.format(unit=g["unit"].iloc[0], ref=ref, target=target,
                                length="round" if kind == "fl" else "epoch")
                    for c, h in _columns(kind).items()}
        out += [f"## {group}", "",
                "Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) + ".", "",
                table(g[g["shown"]], headings), ""]
        older = g[~g["shown"]]
        if len(older):
            out += ["Older runs with the same settings and codec/method (in summary.csv, not in the "
                    "figures): " + ", ".join(f"`{r}`" for r in older["run_id"]) + ".", ""]
        out += [f"![{name}]({name})" for name in figures[group]] + [""]
    if skipped:
        out += ["## Skipped runs", ""] + [f"- `{s.path.name}`: {s.reason}" for s in skipped] + [""]
    if warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    return "\n".join(out)
