"""Running a sweep's cells, as many at once as the machine holds, resumable.

Each cell's run goes to <sweep dir>/runs/<run id> with its log beside it; when it ends, its outcome
(ok, or failed with the one-line reason) is written atomically to <sweep dir>/cells/<run id>.json.
A restarted sweep skips every cell with an outcome (failed ones too, unless retried) and reruns the
rest from scratch: a run folder without an outcome is what an interrupted run left, and is removed
first, since the nodes append to their tables.

How many cells run at once: at most `jobs` (default: the cores divided by the training processes
of a cell; never more than the sweep file's own `jobs`), and a cell starts only when the memory
available holds its processes (NODE_MEMORY_BYTES each) and a DDS domain is free to claim
(commlab.runs.claims). While a cell runs, the sweep's watched stop conditions end it
(commlab.sweep.watch).
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from commlab.bench.children import Outcome, run_logged
from commlab.runs.claims import ClaimError, Claims
from commlab.output.run_folder import write_json_atomic
from commlab.output.progress import Progress, echo

from .cell_progress import cell_line
from .spec import USES_DDS, Cell, Sweep, differing, label
from .watch import Ended, watcher

NODE_MEMORY_BYTES = 700 * 2**20  # peak RSS of one node process training the MNIST CNN, with headroom
INTERRUPTED = "sweep interrupted"
POLL_S = 0.5
# How a cell's run is executed: (argv, log, stop, timeout_s) -> Outcome; commlab.bench.run_logged.
Execute = Callable[[list[str], Path, Callable[[], str | None], float], Outcome]


def run_cell(argv: list[str], log: Path, stop: Callable[[], str | None], timeout_s: float) -> Outcome:
    return run_logged(argv, log, stop=stop, timeout_s=timeout_s)


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def outcome(self, cell: Cell) -> Path:
        return self.root / "cells" / f"{cell.run_id}.json"

    def log(self, cell: Cell) -> Path:
        return self.runs / f"{cell.run_id}.log"


def read_outcome(paths: Paths, cell: Cell) -> dict | None:
    """The recorded outcome of a cell, or None when it has not finished (or the record is unreadable)."""
    try:
        record = json.loads(paths.outcome(cell).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("status") in ("ok", "failed") else None


def to_run(paths: Paths, cells: list[Cell], retry_failed: bool) -> list[Cell]:
    """The cells without an outcome (and the failed ones when retried), in the sweep's order."""
    todo = []
    for cell in cells:
        record = read_outcome(paths, cell)
        if record is None or retry_failed and record["status"] == "failed":
            todo.append(cell)
    return todo


def memory_available() -> int:
    """MemAvailable from /proc/meminfo, in bytes (no limit known: a very large number)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def default_jobs(cells: list[Cell]) -> int:
    """Cores / the most training processes of any cell (the controller mostly waits), at least 1."""
    trainers = max((max(1, c.nodes - (c.launcher == "fl")) for c in cells), default=1)
    return max(1, (os.cpu_count() or 1) // trainers)


class Runner:
    """``Runner(sweep, root, jobs).run()`` -> (ok, failed) counts of this sweep's cells, done now or before."""

    def __init__(self, sweep: Sweep, root: Path, jobs: int | None = None, retry_failed: bool = False,
                 memory: Callable[[], int] = memory_available, execute: Execute = run_cell) -> None:
        self.sweep, self.paths = sweep, Paths(root)
        wanted = jobs or default_jobs(sweep.cells)
        self.jobs = min(wanted, sweep.jobs) if sweep.jobs else wanted
        self.retry_failed = retry_failed
        self.memory, self.execute = memory, execute
        self.interrupted = threading.Event()
        self.finished: queue.Queue[tuple[Cell, Outcome, Claims, Ended | None]] = queue.Queue()
        self.counts = {"ok": 0, "failed": 0}
        self.varying = differing([c.config for c in sweep.cells])  # what the progress lines name a cell by
        self.most_at_once = 0  # the most cells that ran at the same time
        self.running: list[Cell] = []  # in the order they started: the lines under the sweep's bar

    def _start(self, cell: Cell, claims: Claims) -> None:
        domain = claims.take("domain") if cell.launcher in USES_DDS else None
        run_dir = self.paths.runs / cell.run_id
        if run_dir.exists():
            shutil.rmtree(run_dir)  # left by an interrupted run: its tables would be appended to
        check = watcher(self.sweep.watch, run_dir, lambda: self.memory() / 2**20)
        ended: list[Ended] = []

        def stop() -> str | None:
            if self.interrupted.is_set():
                return INTERRUPTED
            found = check()
            if found is not None:
                ended.append(found)
                return found.reason
            return None

        def work() -> None:
            outcome = self.execute(cell.argv(self.paths.runs, domain), self.paths.log(cell), stop,
                                   self.sweep.cell_timeout_s)
            self.finished.put((cell, outcome, claims, ended[0] if ended else None))
        threading.Thread(target=work, name=cell.run_id, daemon=True).start()

    def _record(self, cell: Cell, outcome: Outcome, ended: Ended | None) -> str | None:
        """Write the cell's outcome; None (nothing written) when the sweep interrupted it."""
        if outcome.stopped == INTERRUPTED or self.interrupted.is_set() and not outcome.ok:
            return None  # ended by the interruption (a Ctrl-C reaches the nodes too): rerun on resume
        ok = outcome.ok and (ended is None or ended.ok)
        status = "ok" if ok else "failed"
        write_json_atomic(self.paths.outcome(cell), {
            "status": status, "reason": None if ok else (outcome.failures or [outcome.status])[0],
            "ended": outcome.status,  # ok, why it was ended (a watched stop), or exit N
            "wall_s": round(outcome.wall_s, 2), "run_id": cell.run_id, "settings": cell.settings,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return status

    def _fits(self, cell: Cell, running: int) -> bool:
        return running == 0 or running < self.jobs and self.memory() >= cell.nodes * NODE_MEMORY_BYTES

    def run(self) -> dict[str, int]:
        self.paths.runs.mkdir(parents=True, exist_ok=True)
        (self.paths.root / "cells").mkdir(exist_ok=True)
        todo = to_run(self.paths, self.sweep.cells, self.retry_failed)
        for cell in self.sweep.cells:
            record = read_outcome(self.paths, cell)
            if record is not None and cell not in todo:
                self.counts[record["status"]] += 1
        total = len(self.sweep.cells)
        echo(f"[sweep] {self.sweep.name}: {total} cells, {total - len(todo)} finished before "
             f"({self.counts['failed']} of them failed), {len(todo)} to run, at most {self.jobs} at once")
        progress = Progress(total, "cell")
        progress.start = progress.done = total - len(todo)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while (todo or self.running) and not (self.interrupted.is_set() and not self.running):
                while todo and not self.interrupted.is_set() and self._fits(todo[0], len(self.running)):
                    claims = Claims()
                    try:
                        self._start(todo[0], claims)
                    except ClaimError:
                        claims.release()
                        break  # every domain is held: wait for a cell of ours (or another run) to end
                    echo(f"[sweep] started {todo[0].run_id}: {label(todo[0].config, self.varying)}, seed {todo[0].seed}")
                    self.running.append(todo.pop(0))
                    self.most_at_once = max(self.most_at_once, len(self.running))
                note, details = self._note(), self.cell_lines()
                if note != progress.note or details != progress.details:
                    progress.update(progress.done, note, details)
                progress.refresh()
                try:
                    cell, outcome, claims, ended = self.finished.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                claims.release()
                self.running.remove(cell)
                status = self._record(cell, outcome, ended)
                if status is not None:
                    self.counts[status] += 1
                    echo(f"[sweep] {status} {cell.run_id} in {outcome.wall_s:.0f}s"
                         + ("" if status == "ok" else f": {read_outcome(self.paths, cell)['reason']}"))
                    progress.update(progress.done + 1, self._note(), self.cell_lines())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            progress.close()
        if self.interrupted.is_set():
            echo(f"[sweep] interrupted: {total - sum(self.counts.values())} cells left; "
                 f"the same command resumes from there")
        return self.counts

    def cell_lines(self) -> list[str]:
        """Each running cell's own progress (commlab.sweep.cell_progress), under the sweep's bar."""
        return [cell_line(c, label(c.config, self.varying), self.paths.runs / c.run_id) for c in self.running]

    def _note(self) -> str:
        return f"ok {self.counts['ok']}, running {len(self.running)}, failed {self.counts['failed']}"

    def _on_signal(self, signum: int, frame: object) -> None:
        echo(f"[sweep] {signal.Signals(signum).name}: ending the running cells (they rerun on resume)")
        self.interrupted.set()
