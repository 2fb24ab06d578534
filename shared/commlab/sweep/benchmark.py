"""A benchmark's launcher runs as the cells of a sweep: the benchmark turns its flags into a sweep
file (the same file `make sweep` runs), the runner runs the cells into
<results-dir>/sweeps/<name>/runs, and the benchmark builds its table from their folders.

    spec = {"name": a.tables.name, "cells": [...], "seeds": a.seeds, "stop": {...}}
    with BenchRun(a, len(spec["cells"]) * len(spec["seeds"]), unit="cell") as s:
        for result in run_sweep(spec, a, s):          # one per cell, in the sweep file's order
            ... result.entry, result.seed, result.status, result.run_dir ...

A benchmark measures anew: every cell runs again unless --resume (keep what a stopped run of the
same settings finished) or --retry-failed (--resume, and run the failed cells again); --tables-only
runs nothing and builds the table from what finished. --write-sweep FILE writes the sweep file of
these settings and runs nothing (experiments/sweeps/ holds the benchmarks' default ones).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from commlab.bench import BenchParser, BenchRun

from .runner import Paths, Runner, read_outcome
from .spec import Cell, load


def add_sweep_options(p: BenchParser) -> None:
    p.add_argument("--resume", action="store_true", help="keep the cells a stopped run of these settings "
                   "finished (its sweep: <results-dir>/sweeps/<name>); without it every cell runs anew")
    p.add_argument("--retry-failed", action="store_true", help="--resume, and run the failed cells again")
    p.add_argument("--tables-only", action="store_true", help="run nothing: the tables from the cells finished")
    p.add_argument("--write-sweep", type=Path, metavar="FILE", help="write the sweep file of these settings "
                   "to FILE and run nothing")


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    record: dict  # the cell's outcome (commlab.sweep.runner), {"status": "not run"} without one
    run_dir: Path

    @property
    def entry(self) -> int:
        return self.cell.entry

    @property
    def seed(self) -> int:
        return self.cell.seed

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok"

    @property
    def status(self) -> str:
        """A table cell: ok, why a watched run was ended (diverged ...), or why it failed."""
        return self.record.get("ended") or self.record.get("reason") or self.record["status"]


def write_spec(spec: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1) + "\n")
    return path


def run_sweep(spec: dict, a: argparse.Namespace, s: BenchRun) -> list[CellResult]:
    """Write `spec` beside the tables (<name>-sweep.json), run its cells as a's sweep options say,
    and return every cell's result in the sweep's order."""
    sweep = load(write_spec(spec, s.path("-sweep.json")))
    paths = Paths(a.results_dir / "sweeps" / sweep.name)
    if not (a.resume or a.retry_failed or a.tables_only):  # a benchmark measures anew
        for c in sweep.cells:
            paths.outcome(c).unlink(missing_ok=True)
    if not a.tables_only:
        Runner(sweep, paths.root, retry_failed=a.retry_failed).run()
    results = []
    for c in sweep.cells:
        result = CellResult(c, read_outcome(paths, c) or {"status": "not run"}, paths.runs / c.run_id)
        s.step(f"{result.run_dir.name}: {result.status}")
        results.append(result)
    return results
