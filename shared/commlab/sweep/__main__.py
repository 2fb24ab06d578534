"""`python -m commlab.sweep SWEEP_FILE [--jobs N] [--retry-failed] [--report-only] [--timeline RUN_ID]`

Runs every cell of the sweep not finished yet into <results-dir>/sweeps/<name>/runs/, then writes
report.md, summary.csv and figures/ beside them. Stopped (Ctrl-C, SIGTERM), the same command
resumes: finished cells are not run again. Exit 0 when every cell finished ok, 1 when some failed
or were left, 2 for a sweep file that cannot be run.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from commlab.bench.options import ROOT
from commlab.output.progress import echo
from commlab.report.provenance import git_commit

from .report import build
from .runner import Runner
from .spec import SweepError, load


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", type=Path, help="the sweep file (JSON; YAML with PyYAML installed)")
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="the sweep's folder is <results-dir>/sweeps/<name> (default: results)")
    p.add_argument("--jobs", type=int, help="cells at most at once (default: cores / training processes of a cell)")
    p.add_argument("--retry-failed", action="store_true", help="run the cells recorded as failed again")
    p.add_argument("--report-only", action="store_true", help="write the report of what has finished; run nothing")
    p.add_argument("--timeline", metavar="RUN_ID", help="the run whose per-round timeline the report draws "
                   "(default: the sweep file's `timeline`, else its first finished FL run)")
    a = p.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        p.error(f"--jobs must be at least 1, got {a.jobs}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        sweep = load(a.sweep)
    except SweepError as e:
        print(f"python -m commlab.sweep: {e}", file=sys.stderr)
        return 2
    root = a.results_dir.resolve() / "sweeps" / sweep.name
    root.mkdir(parents=True, exist_ok=True)
    (root / "cells.json").write_text(json.dumps([{"run_id": c.run_id, **c.settings} for c in sweep.cells], indent=1))
    counts = {"ok": 0, "failed": 0}
    if not a.report_only:
        counts = Runner(sweep, root, a.jobs, a.retry_failed).run()
    command = shlex.join(["python", "-m", "commlab.sweep", *(sys.argv[1:] if argv is None else argv)])
    try:
        report = build(sweep, root, command, git_commit(ROOT), a.timeline)
    except ValueError as e:
        print(f"python -m commlab.sweep: {e}", file=sys.stderr)
        return 2
    echo(f"[sweep] report: {report}")
    return 0 if a.report_only or counts["ok"] == len(sweep.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
