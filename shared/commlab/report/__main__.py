"""`python -m commlab.report [--results DIR] [--runs ID ...] [--out DIR] [--target-accuracy A]`"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .build import build_report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commlab.report", description=__doc__)
    p.add_argument("--results", type=Path, default=Path("results"), help="folder of run folders")
    p.add_argument("--runs", nargs="+", metavar="ID", help="only these run ids (default: all runs)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RESULTS/report)")
    p.add_argument("--target-accuracy", type=float, default=0.97,
                   help="accuracy for the time-to-target column (default 0.97)")
    args = p.parse_args(argv)
    if args.runs:
        unknown = [r for r in args.runs if not (args.results / r).is_dir()]
        if unknown:
            p.error(f"no such run(s) under {args.results}/: {', '.join(unknown)}")
    command = shlex.join(["python", "-m", "commlab.report", *(sys.argv[1:] if argv is None else argv)])
    report = build_report(args.results, args.out or args.results / "report", args.runs,
                          args.target_accuracy, command)
    print(report.message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
