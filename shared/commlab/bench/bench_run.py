"""One benchmark invocation: progress over its jobs, its runs with their logs, and its table
written as CSV and markdown, the markdown headed like the generated results under docs/results
(command, commit, date, machine, wall time: commlab.report.provenance)."""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from commlab.output.progress import Progress, echo
from commlab.report.markdown import table as markdown_table
from commlab.report.provenance import git_commit, header, machine

from .children import Outcome, run_logged
from .options import ROOT


class BenchRun:
    """``with BenchRun(args, total=len(jobs)) as s:`` then ``s.run(...)`` per run, ``s.step(note)``
    per job done, ``s.write(df, columns, title)`` at the end."""

    def __init__(self, args: argparse.Namespace, total: int, unit: str = "run") -> None:
        self.args = args
        self.commit, self.date, self.started = git_commit(ROOT), datetime.now(timezone.utc), time.monotonic()
        self.progress = Progress(total, unit)

    def __enter__(self) -> "BenchRun":
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.close()

    def run(self, commands: Sequence[str] | Mapping[str, Sequence[str]], log_name: str, *,
            stop: Callable[[], str | None] | None = None, timeout_s: float | None = None) -> Outcome:
        """commlab.bench.run_logged with the log at <results-dir>/<log_name>.log."""
        return run_logged(commands, self.args.results_dir / f"{log_name}.log", stop=stop, timeout_s=timeout_s,
                          cwd=ROOT)

    def step(self, note: str) -> None:
        """One job done: a progress line (a redrawn bar on a terminal) with ``note``."""
        self.progress.update(self.progress.done + 1, note)

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def path(self, suffix: str) -> Path:
        """A file beside the tables: ``path("-runs.csv")`` -> results/bench/<name>-runs.csv."""
        return self.args.tables.with_name(self.args.tables.name + suffix)

    def write(self, df: pd.DataFrame, columns: Mapping[str, str] | None, title: str, *,
              notes: Sequence[str] = (), after: Sequence[str] = (), suffix: str = "",
              shown: pd.DataFrame | None = None) -> Path:
        """<tables><suffix>.csv (every column of ``df``) and .md: the title, the header, ``notes``
        (settings), the markdown table of ``columns`` (heading by column; None: all, as named) of
        ``shown`` when the cells differ from the CSV's numbers (percent, "not reached"), else of
        ``df``, then ``after`` (verdicts, more tables); the markdown is printed too. Returns the CSV."""
        csv_path = self.path(f"{suffix}.csv")
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv_path, index=False)
        headings = dict(columns) if columns is not None else {c: c for c in df.columns}
        head = header(f"`{self.args.command}`", self.commit, self.date, machine(), self.wall_s)
        text = "\n\n".join([f"# {title}", "\n".join(head), *notes,
                            markdown_table((df if shown is None else shown).reindex(columns=list(headings)), headings),
                            *after]) + "\n"
        csv_path.with_suffix(".md").write_text(text)
        echo(f"\n{text}\nwritten: {csv_path} and {csv_path.with_suffix('.md').name}")
        return csv_path
