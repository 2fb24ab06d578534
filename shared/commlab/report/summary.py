"""The summary table: one row per run, comparable within its settings group.

Bytes are what the codec changes: FL uploads per round (all clients together; the download is the
broadcast model), DDP bytes sent per step and rank, both averaged over every round or step, warm-up
included. Ratios follow one convention, "x of fp32": the run's bytes divided by the reference run's
(fp32 for FL, dense for DDP, which sends the fp32 gradients; the latest such run of the same group),
so 1 is the reference and smaller is fewer bytes. DDP also gets the bytes and their ratio over the
last epoch only: the whole-run mean of a DGC run is dominated by its warm-up (density 25% down to
the final one), the last epoch shows the steady state.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .runs import KINDS, Run

REFERENCE = {"fl": "fp32", "ddp": "dense"}  # the series whose bytes are "fp32"
COLUMNS = ["group", "kind", "series", "run_id", "shown", "status", "backend", "model", "dataset",
           "link_profile", "size", "length", "training", "unit", "units", "bytes_up_per_unit",
           "bytes_down_per_unit", "bytes_up_x_of_fp32", "bytes_up_per_unit_last_epoch",
           "bytes_up_x_of_fp32_last_epoch", "comm_time_mean_s", "comm_time_max_s",
           "unit_time_mean_s", "total_time_s", "final_accuracy", "final_epsilon", "target_accuracy",
           "time_to_target_s", "target_reached_at"]


def _to_target(acc: pd.Series, elapsed: pd.Series, at: pd.Series, target: float) -> tuple[float, float]:
    """Elapsed time and round/epoch at the first evaluation reaching `target`, NaN if never."""
    hit = acc >= target
    if not hit.any():
        return np.nan, np.nan
    i = hit.idxmax()
    return float(elapsed[i]), float(at[i])


def _fl_row(run_id: str, f: dict[str, pd.DataFrame], target: float) -> dict:
    r = f["rounds"][f["rounds"]["run_id"] == run_id]
    c = f["clients"][f["clients"]["run_id"] == run_id]
    acc, spent = r["test_accuracy"].dropna(), r["epsilon"].dropna()
    time_to, at = _to_target(r["test_accuracy"], r["elapsed_s"], r["round"], target)
    return {"unit": "round", "units": len(r), "bytes_up_per_unit": r["bytes_up"].mean(),
            "bytes_down_per_unit": r["bytes_down"].mean(),
            "comm_time_mean_s": c["comm_time_s"].mean() if len(c) else np.nan,
            "comm_time_max_s": c["comm_time_s"].max() if len(c) else np.nan,
            "unit_time_mean_s": r["round_time_s"].mean(), "total_time_s": r["round_time_s"].sum(),
            "final_accuracy": acc.iloc[-1] if len(acc) else np.nan,
            "final_epsilon": spent.iloc[-1] if len(spent) else np.nan,
            "time_to_target_s": time_to, "target_reached_at": at}


def _ddp_row(run_id: str, f: dict[str, pd.DataFrame], target: float) -> dict:
    s = f["steps"][f["steps"]["run_id"] == run_id]
    p = f["per_step"][f["per_step"]["run_id"] == run_id]
    e = f["epochs"][f["epochs"]["run_id"] == run_id]
    acc = e["test_accuracy"].dropna()
    time_to, at = _to_target(e["test_accuracy"], e["elapsed_s"], e["epoch"], target)
    last = s[s["epoch"] == s["epoch"].max()]
    return {"unit": "step", "units": len(p), "bytes_up_per_unit": s["bytes_sent"].mean(),
            "bytes_up_per_unit_last_epoch": last["bytes_sent"].mean(),
            "bytes_down_per_unit": s["bytes_received"].mean(),
            "comm_time_mean_s": s["comm_time_s"].mean(), "comm_time_max_s": s["comm_time_s"].max(),
            "unit_time_mean_s": p["step_time_s"].mean(),
            "total_time_s": e["epoch_time_s"].sum() if len(e) else p["step_time_s"].sum(),
            "final_accuracy": acc.iloc[-1] if len(acc) else np.nan,
            "time_to_target_s": time_to, "target_reached_at": at}


def summarize(runs: list[Run], shown: list[Run], frames: dict[str, dict[str, pd.DataFrame]],
              target: float) -> pd.DataFrame:
    """`frames` maps kind to its frames (fl_frames / ddp_frames over all `runs`)."""
    shown_ids = {r.run_id for r in shown}
    rows = []
    for r in runs:
        settings, k = r.settings, KINDS[r.kind]
        row = {"group": r.group, "kind": r.kind, "series": r.series, "run_id": r.run_id,
               "shown": r.run_id in shown_ids, "status": r.manifest.get("status", "unknown"),
               "backend": settings["backend"],
               "model": settings["model"], "dataset": settings["dataset"],
               "link_profile": settings["link_profile"], "size": settings[k["size"]],
               "length": settings[k["length"]], "training": settings.get("training", ""),
               "target_accuracy": target}
        row.update((_fl_row if r.kind == "fl" else _ddp_row)(r.run_id, frames[r.kind], target))
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    ref = df[df["shown"] & (df["series"] == df["kind"].map(REFERENCE))]
    for col, ratio in (("bytes_up_per_unit", "bytes_up_x_of_fp32"),
                       ("bytes_up_per_unit_last_epoch", "bytes_up_x_of_fp32_last_epoch")):
        df[ratio] = df[col] / df["group"].map(ref.set_index("group")[col])
    return df.sort_values(["group", "shown", "series", "run_id"], ascending=[True, False, True, True],
                          kind="stable").reset_index(drop=True)
