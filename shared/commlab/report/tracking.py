"""Experiment tracking: a run's metrics CSVs as TensorBoard event files beside them.

The CSVs stay the source of truth; every scalar exported is one cell of rounds.csv, clients*.csv,
steps*.csv or epochs*.csv (docs/architecture.md, "Results layout") at its row's round, step or
epoch, stored in float64 so TensorBoard shows the very number the CSV holds. The manifest (the
run's config) becomes the run's hyperparameters.

    results/<run-id>/tensorboard/             rounds.csv (FL): tags rounds/<column>; the hparams
    results/<run-id>/tensorboard/<client-id>/ that client's rows: tags clients/<column>
    results/<run-id>/tensorboard/rank<r>/     DDP rank r: tags steps/<column>, epochs/<column>

Each client and rank is a TensorBoard run of its own, so their series share one chart per column.
Launchers export while the run goes (`live_tensorboard`); `python -m commlab.report.tracking`
rewrites the events of finished runs and logs them to an MLflow file store (report/mlflow_store.py).
"""
from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlab.output.progress import echo
from commlab.output.tables import TEXT

from .runs import METRIC_PATTERNS, RunError, read_manifest

if TYPE_CHECKING:
    from .tb_events import ScalarEvents

EVENTS_DIR = "tensorboard"
# Per table: the column that numbers its rows (the TensorBoard / MLflow step) and the column that
# says whose row it is (a client, a rank), or None for the controller's one row a round.
TABLES: dict[str, tuple[str, str | None]] = {
    "rounds": ("round", None), "clients": ("round", "client_id"),
    "steps": ("step", "rank"), "epochs": ("epoch", "rank")}
# Hyperparameters are the manifest's settings; these fields are outcomes, bulky records, or the
# run's own id and paths (the same for no two runs) instead.
NOT_HPARAMS = {"run_id", "started_at", "finished_at", "status", "client_data", "link_applied",
               "config.run_id", "config.results_dir", "config.checkpoint_dir", "config.dds.key_file"}
# The metrics the HParams dashboard puts beside each run's settings: (sub-run, tag).
HPARAM_METRICS = {
    "fl": [("", "rounds/test_accuracy"), ("", "rounds/test_loss"), ("", "rounds/wall_time_s")],
    "ddp": [("rank0", "epochs/test_accuracy"), ("rank0", "epochs/test_loss"), ("rank0", "steps/train_loss")]}
LIVE_EVERY_S = 5.0


class TrackingError(ValueError):
    """A metrics file that cannot be exported; the message names the file, line and column."""


@dataclass(frozen=True)
class Scalar:
    table: str
    source: str  # "" for the controller's rows, else the client id or "rank<r>"
    column: str
    step: int
    value: float

    @property
    def tag(self) -> str:
        return f"{self.table}/{self.column}"


def metric_files(run_dir: Path) -> list[Path]:
    return sorted({f for pattern in METRIC_PATTERNS for f in run_dir.glob(pattern)})


def _number(file: Path, line: int, column: str, cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise TrackingError(f"{file}: line {line}, column {column}: {cell!r} is not a number") from None


def _source(file: Path, line: int, key: str, cell: str) -> str:
    """The sub-run a row belongs to; it names a folder, so only plain names pass."""
    if key == "rank":
        return f"rank{int(_number(file, line, key, cell))}"
    if not cell or not all(c.isalnum() or c in "-_." for c in cell) or cell.strip(".") == "":
        raise TrackingError(f"{file}: line {line}, column {key}: {cell!r} is not a client id")
    return cell


class CsvFollower:
    """One metrics CSV read as it grows: each call returns the scalars of the whole rows written
    since the last call (a row still being written waits for its newline)."""

    def __init__(self, path: Path):
        self.path = path
        self.table = path.stem.split("-", 1)[0]
        if self.table not in TABLES:
            raise TrackingError(f"{path}: not a metrics table (expected one of {', '.join(TABLES)})")
        self.offset, self.line, self.header = 0, 0, None
        self.pending = b""  # bytes after the last newline

    def new_scalars(self) -> list[Scalar]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            raw = f.read()
        whole = raw[:raw.rfind(b"\n") + 1]
        self.offset += len(whole)
        self.pending = raw[len(whole):]
        try:
            text = whole.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TrackingError(f"{self.path}: not UTF-8 text ({e})") from None
        out: list[Scalar] = []
        for row in csv.reader(text.splitlines()):
            self.line += 1
            if self.header is None:
                self.header = row
                step = TABLES[self.table][0]
                if step not in row:
                    raise TrackingError(f"{self.path}: header lacks column {step!r}")
                continue
            out += self._row_scalars(row)
        return out

    def _row_scalars(self, row: list[str]) -> list[Scalar]:
        assert self.header is not None
        if len(row) != len(self.header):
            raise TrackingError(f"{self.path}: line {self.line} has {len(row)} fields, header has {len(self.header)}")
        cells = dict(zip(self.header, row))
        step_column, key = TABLES[self.table]
        step = int(_number(self.path, self.line, step_column, cells[step_column]))
        source = "" if key is None else _source(self.path, self.line, key, cells.get(key, ""))
        return [Scalar(self.table, source, column, step, _number(self.path, self.line, column, cell))
                for column, cell in cells.items()
                if column not in (step_column, key) and column not in TEXT and cell != ""]

    def all_scalars(self) -> list[Scalar]:
        """Every row of a finished file; a last line without a newline is an error here."""
        out = self.new_scalars()
        if self.pending:
            raise TrackingError(f"{self.path}: truncated (last line has no newline)")
        return out


def run_scalars(run_dir: Path) -> Iterator[Scalar]:
    """Every scalar of a finished run, table by table."""
    for path in metric_files(run_dir):
        yield from CsvFollower(path).all_scalars()


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, bool | int | float | str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}" if prefix else str(k), v)
    elif isinstance(value, (bool, int, float, str)):
        yield prefix, value
    else:  # None and lists: their JSON text
        yield prefix, json.dumps(value)


def hparams(manifest: dict) -> dict[str, bool | int | float | str]:
    """The run's settings, nested config keys joined with dots (config.training.lr)."""
    return {k: v for k, v in _flat("", manifest) if not any(k == n or k.startswith(f"{n}.") for n in NOT_HPARAMS)}


def manifest_time(manifest: dict, field: str) -> float | None:
    """A manifest timestamp (started_at, finished_at) in seconds since the epoch; None if absent."""
    value = manifest.get(field)
    if not value:
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        raise TrackingError(f"manifest {field}: {value!r} is not a time like 2025-01-01T10:00:00+0000") from None


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardExport:
    """Writes <run>/tensorboard/ from the run's CSVs; `update()` adds the rows written since the
    last call, so it can follow a run that is going. A new export replaces any earlier one."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.dir = run_dir / EVENTS_DIR
        shutil.rmtree(self.dir, ignore_errors=True)
        self.followers: dict[Path, CsvFollower] = {}
        self.writers: dict[str, ScalarEvents] = {}
        self.hparams_written = False
        self.written = 0  # scalars so far

    def _writer(self, source: str) -> "ScalarEvents":
        from .tb_events import ScalarEvents  # the tensorboard package: only where it is installed
        if source not in self.writers:
            self.writers[source] = ScalarEvents(self.dir / source)
        return self.writers[source]

    def update(self) -> int:
        """Export the new rows; returns how many scalars were written."""
        if not self.hparams_written and (self.run_dir / "manifest.json").exists():
            self._write_hparams(read_manifest(self.run_dir))
        written = 0
        for path in metric_files(self.run_dir):
            for s in self.followers.setdefault(path, CsvFollower(path)).new_scalars():
                self._writer(s.source).add_scalar(s.tag, s.value, s.step)
                written += 1
        for w in self.writers.values():
            w.flush()
        self.written += written
        return written

    def _write_hparams(self, manifest: dict) -> None:
        from tensorboard.plugins.hparams import summary_v2
        values = hparams(manifest)
        metrics = [summary_v2.Metric(tag, group=group or None) for group, tag in HPARAM_METRICS[manifest["kind"]]]
        config = summary_v2.hparams_config_pb([summary_v2.HParam(k) for k in values], metrics)
        hparams_summary = summary_v2.hparams_pb(values, trial_id=str(manifest.get("run_id", self.run_dir.name)),
                                                 start_time_secs=manifest_time(manifest, "started_at"))
        writer = self._writer("")
        writer.add_summary(config)
        writer.add_summary(hparams_summary)
        self.hparams_written = True

    def close(self) -> None:
        try:
            self.update()
        finally:
            for w in self.writers.values():
                w.close()


def export_tensorboard(run_dir: Path) -> int:
    """(Re)write the events of a finished run; returns the number of scalars. A file that cannot be
    exported whole (TrackingError) leaves the earlier events as they were."""
    list(run_scalars(run_dir))  # every file read whole before the old events are replaced
    read_manifest(run_dir)
    export = TensorBoardExport(run_dir)
    export.close()
    return export.written


@contextmanager
def live_tensorboard(run_dir: Path, every_s: float = LIVE_EVERY_S) -> Iterator[None]:
    """Follow the run's CSVs into TensorBoard events while the block runs, then export the rest.
    Without the tensorboard package, or on a file that cannot be read, says so in one line and
    leaves the run alone (the CSVs are complete either way)."""
    if not tensorboard_installed():
        echo("[run] no TensorBoard events: package tensorboard not installed (pip install -e '.[tracking]')")
        yield
        return
    export, done = TensorBoardExport(run_dir), threading.Event()
    failed: list[str] = []

    def follow() -> None:
        while not done.wait(every_s):
            try:
                export.update()
            except (TrackingError, RunError, OSError) as e:
                failed.append(str(e))
                return

    thread = threading.Thread(target=follow, name="tensorboard-export", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        try:
            export.close()
        except (TrackingError, RunError, OSError) as e:
            failed.append(str(e))
        echo(f"[run] TensorBoard events NOT complete: {failed[0]}" if failed
             else f"[run] TensorBoard: {export.written} scalars in {export.dir} (make tensorboard)" if export.written
             else f"[run] no TensorBoard events: no metrics CSV rows in {run_dir}")
