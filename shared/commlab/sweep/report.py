"""A sweep's report: <sweep dir>/report.md, summary.csv and figures/*.png from its cells' outcomes
and run folders.

Cells with the same settings but their seed are one row of the table (median, min and max over
the seeds that finished); different settings are never averaged together. The settings shared by
every cell head the report and every figure; each row and line is named by what differs.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from commlab.bench.accuracy import spread, time_to_target, wall_times
from commlab.report.figures.sweep import accuracy_bytes_figure, accuracy_wall_figure, time_to_target_figure
from commlab.report.figures.timeline import timeline_figure
from commlab.report.markdown import table as markdown_table
from commlab.report.provenance import header, machine
from commlab.report.runs import Run, RunError, load_run

from .runner import Paths, read_outcome
from .spec import Cell, Sweep, differing, label

COLUMNS = {"number": "#", "config": "settings", "runs": "runs ok", "accuracy_median": "final accuracy (median)",
           "accuracy_range": "min - max", "MB_median": "MB sent + received (median)", "MB_range": "min - max",
           "wall_median_s": "wall time (s, median)", "ttt": "time to target (s, median [min - max], reached)"}


@dataclass
class CellResult:
    cell: Cell
    record: dict | None  # the outcome, None when the cell has not finished
    run: Run | None      # the run, when it finished ok and its folder reads


def collect(sweep: Sweep, paths: Paths) -> tuple[list[CellResult], list[str]]:
    """Every cell with its outcome and run; the problems met (runs that do not read) as lines."""
    results, problems = [], []
    for cell in sweep.cells:
        record, run = read_outcome(paths, cell), None
        if record is not None and record["status"] == "ok":
            try:
                run = load_run(paths.runs / cell.run_id)
            except (RunError, OSError) as e:
                problems.append(f"{cell.run_id}: finished ok but its run does not read: {e}")
        results.append(CellResult(cell, record, run))
    return results, problems


def shared_items(configs: list[dict], keys: list[str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(configs[0].items()) if k not in keys] if configs else []


def curve(run: Run) -> pd.DataFrame:
    """Per evaluated round (FL) or epoch (DDP, rank 0): test accuracy, cumulative MB over all
    nodes, wall seconds since training started."""
    if run.kind == "fl":
        rounds = run.tables["rounds"].sort_values("round").reset_index(drop=True)
        return pd.DataFrame({"test_accuracy": rounds["test_accuracy"], "wall_s": wall_times(rounds),
                             "cum_MB": (rounds["bytes_up"] + rounds["bytes_down"]).cumsum() / 1e6})
    steps, epochs = run.tables["steps"], run.tables["epochs"]
    rank0 = epochs[epochs["rank"] == 0].sort_values("epoch")
    sent = steps.groupby("epoch")["bytes_sent"].sum().cumsum() / 1e6  # every rank's sends: all the bytes once
    return pd.DataFrame({"test_accuracy": rank0["test_accuracy"].to_numpy(),
                         "wall_s": rank0["epoch_time_s"].cumsum().to_numpy(),
                         "cum_MB": sent.reindex(rank0["epoch"]).ffill().to_numpy()})


def target_time(run: Run, target: float) -> float | None:
    """Wall seconds until the run first reached the target; None: it never did."""
    if run.kind == "fl":
        seconds = time_to_target(run.tables["rounds"].sort_values("round").reset_index(drop=True),
                                 target)["time_to_target_s"]
        return seconds
    c = curve(run)
    hit = c.index[c["test_accuracy"] >= target]
    return float(c["wall_s"][hit[0]]) if len(hit) else None


def summarise(results: list[CellResult], keys: list[str], target: float | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: a row per settings, curves: a row per evaluated point of every run)."""
    rows, curves = [], []
    for cfg_label, group in group_by_config(results, keys).items():
        runs = [r.run for r in group if r.run is not None]
        finals = [run.final_accuracy for run in runs]
        mbs = [float(curve(run)["cum_MB"].iloc[-1]) for run in runs]
        walls = [float(curve(run)["wall_s"].iloc[-1]) for run in runs]
        times = spread([{"s": target_time(run, target)} for run in runs], "s") if runs and target is not None else {}
        for r in group:
            if r.run is not None:
                curves.append(curve(r.run).assign(config=cfg_label, run_id=r.cell.run_id, seed=r.cell.seed))
        rows.append({"config": cfg_label, "runs": f"{len(runs)}/{len(group)}",
                     **range_of("accuracy", finals), **range_of("MB", mbs), "wall_median_s": median(walls),
                     "ttt_median_s": times.get("median_s", math.nan), "ttt_min_s": times.get("min_s", math.nan),
                     "ttt_max_s": times.get("max_s", math.nan), "reached": times.get("reached", "-")})
    summary = pd.DataFrame(rows)
    summary.insert(0, "number", range(1, len(summary) + 1))
    columns = ["config", "run_id", "seed", "test_accuracy", "cum_MB", "wall_s"]
    return summary, pd.concat(curves, ignore_index=True)[columns] if curves else pd.DataFrame(columns=columns)


def group_by_config(results: list[CellResult], keys: list[str]) -> dict[str, list[CellResult]]:
    groups: dict[str, list[CellResult]] = {}
    for r in results:
        groups.setdefault(label(r.cell.config, keys), []).append(r)
    return groups


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def range_of(name: str, values: list[float]) -> dict:
    return {f"{name}_median": median(values), f"{name}_min": min(values, default=math.nan),
            f"{name}_max": max(values, default=math.nan)}


def seconds(value: float) -> str:
    return f"{value:.1f}" if math.isfinite(value) else "not reached"


def fastest(value: float) -> str:
    return f"; fastest {value:.1f}" if math.isfinite(value) else ""


def shown_table(summary: pd.DataFrame, target: float | None) -> pd.DataFrame:
    def pair(low: float, high: float, fmt: str) -> str:
        return "-" if math.isnan(low) else f"{low:{fmt}} - {high:{fmt}}"
    out = summary.copy()
    out["accuracy_median"] = [f"{100 * v:.2f} %" if math.isfinite(v) else "-" for v in summary["accuracy_median"]]
    out["accuracy_range"] = [pair(100 * a, 100 * b, ".2f") for a, b in zip(summary["accuracy_min"], summary["accuracy_max"])]
    out["MB_range"] = [pair(a, b, ".2f") for a, b in zip(summary["MB_min"], summary["MB_max"])]
    out["ttt"] = ["no target" if target is None else "-" if math.isnan(r.ttt_median_s) else
                  f"median not reached ({r.reached}{fastest(r.ttt_min_s)})" if math.isinf(r.ttt_median_s) else
                  f"{r.ttt_median_s:.1f} [{r.ttt_min_s:.1f} - {seconds(r.ttt_max_s)}], {r.reached}"
                  for r in summary.itertuples()]
    return out


def timeline_run(results: list[CellResult], chosen: str | None) -> Run | None:
    """The run the timeline shows: `chosen` (a run id), else the first FL run that finished."""
    runs = [r.run for r in results if r.run is not None and r.run.kind == "fl"]
    if chosen is not None:
        named = [run for run in runs if run.run_id == chosen]
        if not named:
            raise ValueError(f"timeline: no finished FL run {chosen!r} in this sweep")
        return named[0]
    return runs[0] if runs else None


def build(sweep: Sweep, root: Path, command: str, commit: str, timeline: str | None = None) -> Path:
    """Write <root>/report.md, summary.csv, figures/*.png; returns the report's path."""
    started, paths = datetime.now(timezone.utc), Paths(root)
    results, problems = collect(sweep, paths)
    configs = [r.cell.config for r in results]
    keys = differing(configs)
    shared = shared_items(configs, keys)
    target = sweep.target_accuracy
    summary, curves = summarise(results, keys, target)
    summary.to_csv(root / "summary.csv", index=False)
    figures_dir = root / "figures"
    figures_dir.mkdir(exist_ok=True)
    captions: list[tuple[str, str]] = []

    def save(fig, name: str, caption: str) -> None:
        fig.savefig(figures_dir / f"{name}.png")
        captions.append((f"figures/{name}.png", caption))
    if len(curves):
        save(accuracy_bytes_figure(curves, summary, target, shared), "accuracy-bytes",
             "Test accuracy against the MB all nodes sent and received so far, a line per run; stars: the settings "
             "on the Pareto front (median over seeds of final accuracy and total MB)")
        if target is not None:
            save(time_to_target_figure(summary, target, shared), "time-to-target",
                 f"Wall time to {100 * target:g} %: bar at the median of the seeds that reached it, whiskers at "
                 "their min and max; settings numbered as in the table")
        save(accuracy_wall_figure(curves, summary, target, shared), "accuracy-wall",
             "Test accuracy over wall time since training started, a line per run")
    chosen = timeline_run(results, timeline or sweep.timeline)
    if chosen is not None and len(chosen.tables["clients"]):
        cfg_label = label(next(r.cell.config for r in results if r.run is chosen), keys)
        save(timeline_figure(chosen.tables["rounds"], chosen.tables["clients"],
                             [f"run {chosen.run_id}", cfg_label, *shared]), "timeline",
             f"Per-round phases of run {chosen.run_id} ({cfg_label}), a row per client and the controller")
    failed = [f"- `{r.cell.run_id}` ({label(r.cell.config, keys)}, seed {r.cell.seed}): {r.record['reason']}"
              for r in results if r.record is not None and r.record["status"] == "failed"]
    pending = sum(r.record is None for r in results)
    wall = (datetime.now(timezone.utc) - started).total_seconds()
    parts = [f"# Sweep {sweep.name}", "\n".join(header(f"`{command}`", commit, started, machine(), wall)),
             f"Shared by every cell: {', '.join(shared) or 'nothing'}. "
             f"{len(results)} cells: {len(results) - pending - len(failed)} ok, {len(failed)} failed, {pending} not run.",
             markdown_table(shown_table(summary, target), COLUMNS)]
    parts += ["## Failed cells\n\n" + "\n".join(failed)] if failed else []
    parts += ["## Runs that do not read\n\n" + "\n".join(f"- {p}" for p in problems)] if problems else []
    parts += [f"## Figures\n\n" + "\n\n".join(f"![{c}]({f})\n\n{c}" for f, c in captions)] if captions else []
    report = root / "report.md"
    report.write_text("\n\n".join(parts) + "\n")
    return report
