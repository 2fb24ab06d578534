"""The report over results/: load runs, build frames, write summary.csv, report.md and figures."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from .figures import CAPTIONS, MATRIX_COLUMNS, ddp_figures, fl_figures, matrix_figure, save, settings_items
from .frames import ddp_frames, fl_frames, latest_per_series
from .markdown import render
from .runs import Run, Skipped, load_runs
from .summary import summarize

NO_RUNS = ("No runs found under {results}/. Make one first, e.g.\n"
           "    make fl-int8_sparse        (federated learning, int8 + top-k uploads)\n"
           "    make ddp-dgc WORLD=3       (data-parallel training with DGC)\n"
           "then run `make plots` again.")


@dataclass
class Report:
    runs: list[Run]
    skipped: list[Skipped]
    files: list[Path]
    message: str


def _window(runs: list[Run]) -> int:
    """Steps per window so the longest run has about 50 points."""
    steps = max((r.tables["steps"]["step"].nunique() for r in runs), default=0)
    return max(1, steps // 50)


def _matrix_settings(matrix: Path) -> list[str]:
    meta = matrix.with_suffix(".json")
    return list(json.loads(meta.read_text())["settings"].values()) if meta.exists() else []


def group_figures(members: list[Run], settings: dict, target: float) -> dict[str, Figure]:
    """The figures of one settings group's runs (those shown), by name in gallery order."""
    items = settings_items(settings)
    if settings["kind"] == "fl":
        return fl_figures(fl_frames(members), items, target)
    window = _window(members)
    return ddp_figures(ddp_frames(members, window), items, target, window)


def _matrix_section(matrix: Path, out: Path, warnings: list[str]) -> tuple[list[Path], str]:
    """The bench-matrix figure and table, written by benchmarks/bench_matrix.py (make bench-matrix)."""
    table = pd.read_csv(matrix)
    missing = [c for c in MATRIX_COLUMNS if c not in table.columns]
    if missing:
        warnings.append(f"{matrix} lacks columns {missing} (written by an older bench_matrix): "
                        "make bench-matrix again to draw it")
        return [], ""
    path = out / "matrix.png"
    matrix_figure(table, _matrix_settings(matrix)).savefig(path)
    md = matrix.with_suffix(".md")
    return [path], ("\n## Compressor matrix (make bench-matrix)\n\n" + (md.read_text() if md.exists() else "")
                    + "\n![matrix](matrix.png)\n")


def build_report(results: Path, out: Path, run_ids: list[str] | None = None,
                 target: float = 0.97, command: str = "python -m commlab.report") -> Report:
    runs, skipped = load_runs(results, run_ids, exclude=(out, results / "bench", results / "report"))
    out.mkdir(parents=True, exist_ok=True)
    warnings = [w for r in runs for w in r.warnings]
    if not runs:
        message = NO_RUNS.format(results=results)
        if skipped:
            message += "\nSkipped:\n" + "\n".join(f"  {s.path}: {s.reason}" for s in skipped)
        (out / "report.md").write_text("# Experiment report\n\n" + message.replace("\n", "\n\n") + "\n")
        return Report(runs, skipped, [out / "report.md"], message)

    shown, _ = latest_per_series(runs)
    by_kind = {k: [r for r in runs if r.kind == k] for k in ("fl", "ddp")}
    all_frames = {"fl": fl_frames(by_kind["fl"]), "ddp": ddp_frames(by_kind["ddp"], window=1)}
    summary = summarize(runs, shown, all_frames, target)
    files = [out / "summary.csv"]
    summary.to_csv(files[0], index=False)

    groups = {r.group: r.settings for r in sorted(shown, key=lambda r: r.group)}
    figures: dict[str, list[tuple[str, str]]] = {}
    for group, settings in groups.items():
        drawn = group_figures([r for r in shown if r.group == group], settings, target)
        paths = save(drawn, out, group)
        figures[group] = [(CAPTIONS[settings["kind"]][name], p.name) for name, p in zip(drawn, paths)]
        files += paths
    matrix = results / "bench" / "matrix.csv"
    matrix_files, matrix_text = _matrix_section(matrix, out, warnings) if matrix.exists() else ([], "")
    files += matrix_files
    text = render(summary, groups, figures, skipped, warnings, command, target) + matrix_text
    (out / "report.md").write_text(text)
    files.append(out / "report.md")
    message = (f"Report on {len(runs)} run(s) in {len(groups)} settings group(s): {out / 'report.md'}"
               + "".join(f"\nskipped {s.path.name}: {s.reason}" for s in skipped)
               + "".join(f"\nwarning: {w}" for w in warnings))
    return Report(runs, skipped, files, message)
