"""`python -m commlab.report.export tensorboard|mlflow [--results DIR] [--runs ID ...] [--store DIR]`

tensorboard: (re)write each run's TensorBoard events (results/<run-id>/tensorboard/) from its CSVs.
mlflow: log each run to the MLflow file store STORE (default RESULTS/mlruns), no server.
Without --runs: every run under RESULTS. A run that cannot be exported is named with the problem
on one line and the others are still exported; the exit code is then 1.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from .runs import RunError, looks_like_run
from .tracking import EVENTS_DIR, TrackingError, export_tensorboard

PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}


def exporter(to: str, store: Path) -> Callable[[Path], str]:
    """The export of one run folder to `to`; it returns a line saying where the run went."""
    if to == "tensorboard":
        return lambda run_dir: f"{export_tensorboard(run_dir)} scalars in {run_dir / EVENTS_DIR}"
    from .mlflow_store import export_run, store_client
    client = store_client(store)
    return lambda run_dir: f"MLflow run {export_run(client, run_dir)} in {store}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commlab.report.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("to", choices=sorted(PACKAGES), help="what to export to")
    p.add_argument("--results", type=Path, default=Path("results"), help="folder of run folders")
    p.add_argument("--runs", nargs="+", metavar="ID", help="only these run ids (default: all runs)")
    p.add_argument("--store", type=Path, default=None, help="MLflow file store folder (default: RESULTS/mlruns)")
    a = p.parse_args(argv)
    if importlib.util.find_spec(PACKAGES[a.to]) is None:
        p.error(f"package {PACKAGES[a.to]} is not installed (pip install -e '.[tracking]', which make venv does)")
    if a.runs:
        unknown = [r for r in a.runs if not (a.results / r).is_dir()]
        if unknown:
            p.error(f"no such run(s) under {a.results}/: {', '.join(unknown)}")
        run_dirs = [a.results / r for r in a.runs]
    else:
        run_dirs = sorted(d for d in a.results.iterdir() if d.is_dir() and looks_like_run(d)) \
            if a.results.is_dir() else []
    if not run_dirs:
        print(f"no runs under {a.results}/ (make one: make fl-int8_sparse)")
        return 0
    export = exporter(a.to, a.store or a.results / "mlruns")
    failed = 0
    for d in run_dirs:
        try:
            print(f"{d.name}: {export(d)}", flush=True)
        except (TrackingError, RunError, OSError) as e:
            print(f"{d.name}: not exported: {e}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
