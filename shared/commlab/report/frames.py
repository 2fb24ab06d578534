"""pandas DataFrames over loaded runs: FL per round and per client, DDP per step and per window.

Every frame carries `run_id`, `group` (the settings group) and `series` (codec or method) so one
frame can hold many runs and be split by either.
"""
from __future__ import annotations

import pandas as pd

from commlab.output.tables import COLUMNS, TEXT

from .runs import Run


def latest_per_series(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """One run per (settings group, codec/method): the latest started. Returns (shown, superseded)."""
    def started(r: Run) -> tuple[str, str]:
        return str(r.manifest.get("started_at") or ""), r.run_id
    shown: dict[tuple[str, str], Run] = {}
    for r in sorted(runs, key=started):
        shown[(r.group, r.series)] = r
    chosen = set(id(r) for r in shown.values())
    return list(shown.values()), [r for r in runs if id(r) not in chosen]


def _tagged(runs: list[Run], table: str) -> pd.DataFrame:
    frames = [r.tables[table].assign(run_id=r.run_id, group=r.group, series=r.series)
              for r in runs if not r.tables[table].empty]
    if not frames:
        # Typed columns so the groupby/cumsum below work on an empty frame too.
        return pd.DataFrame({c: pd.Series(dtype=object if c in TEXT else float) for c in COLUMNS[table]}
                            ).assign(run_id="", group="", series="").iloc[:0]
    return pd.concat(frames, ignore_index=True)


def fl_frames(runs: list[Run]) -> dict[str, pd.DataFrame]:
    """`rounds`: one row a round, plus `elapsed_s` (sum of round times so far); `clients`: one row
    a round and client, all clients*.csv files of a run concatenated."""
    rounds = _tagged(runs, "rounds").sort_values(["run_id", "round"], kind="stable")
    rounds["elapsed_s"] = rounds.groupby("run_id")["round_time_s"].cumsum()
    clients = _tagged(runs, "clients").sort_values(["run_id", "round", "client_id"], kind="stable")
    return {"rounds": rounds.reset_index(drop=True), "clients": clients.reset_index(drop=True)}


def ddp_frames(runs: list[Run], window: int) -> dict[str, pd.DataFrame]:
    """`steps`: one row a step and rank; `per_step`: over ranks (bytes sent mean, comm time mean and
    max, step time max: a synchronous step lasts as long as its slowest rank); `per_window`: the
    per-step values averaged over windows of `window` steps; `epochs`: test accuracy mean over
    ranks, epoch time max over ranks, `elapsed_s` summed over epochs."""
    steps = _tagged(runs, "steps").sort_values(["run_id", "step", "rank"], kind="stable")
    keys = ["run_id", "group", "series", "step"]
    per_step = steps.groupby(keys, as_index=False).agg(
        epoch=("epoch", "max"), bytes_sent=("bytes_sent", "mean"),
        comm_time_mean_s=("comm_time_s", "mean"), comm_time_max_s=("comm_time_s", "max"),
        step_time_s=("step_time_s", "max"), density=("density", "mean"))
    first = per_step.groupby("run_id")["step"].transform("min")
    per_step["window"] = (per_step["step"] - first) // max(window, 1)
    per_window = per_step.groupby(["run_id", "group", "series", "window"], as_index=False).agg(
        step=("step", "max"), bytes_sent=("bytes_sent", "mean"), step_time_s=("step_time_s", "mean"),
        comm_time_mean_s=("comm_time_mean_s", "mean"), comm_time_max_s=("comm_time_max_s", "mean"))
    epochs = _tagged(runs, "epochs")
    per_epoch = epochs.groupby(["run_id", "group", "series", "epoch"], as_index=False).agg(
        test_accuracy=("test_accuracy", "mean"), epoch_time_s=("epoch_time_s", "max"))
    per_epoch = per_epoch.sort_values(["run_id", "epoch"], kind="stable").reset_index(drop=True)
    per_epoch["elapsed_s"] = per_epoch.groupby("run_id")["epoch_time_s"].cumsum()
    return {"steps": steps.reset_index(drop=True), "per_step": per_step, "per_window": per_window,
            "epochs": per_epoch}
