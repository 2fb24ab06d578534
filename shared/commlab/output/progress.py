"""Progress with ETA for long runs (FL rounds, DDP steps, benchmark cases).

Why: a run takes minutes to hours and its nodes' output scrolls by; one line saying how far it is
and how long is left answers "is it stuck, when is it done". On a terminal the line is a bar
redrawn in place at the bottom (node output goes above it through `log`/`echo`); anywhere else
(CI logs, `> file`) escape codes would be noise, so each update is one plain `[progress]` line.

When the run's nodes are other processes or containers the launcher cannot count their work
directly; it follows the CSV file they append one row per unit to (`watch_csv`).

Stdlib only: this is imported by launchers and benchmarks before anything heavy.
"""
from __future__ import annotations

import csv
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

CLEAR_LINE = "\r\x1b[K"  # back to column 0, erase to the end of the line
UP = "\x1b[{}A"  # the cursor up that many lines
CLEAR_BELOW = "\r\x1b[J"  # back to column 0, erase to the end of the screen
BAR_WIDTH = 20
POLL_S = 0.5

_live: "Progress | None" = None  # the bar drawn on the terminal now, so other output can go around it


def format_duration(seconds: float) -> str:
    """Compact: 45s, 2m05s, 1h03m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Progress of `total` units ("round", "step", ...) written to `stream` (default sys.stderr).

    `start` is the number of units done before this process began (a resumed run): they count
    towards the position but not towards the rate the ETA is estimated from.
    """

    def __init__(self, total: int, unit: str, stream: TextIO | None = None, *, in_place: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, min_line_interval_s: float = 0.0) -> None:
        global _live
        self.total, self.unit = total, unit
        self.stream = stream if stream is not None else sys.stderr
        # None: a bar redrawn in place exactly when the stream is a terminal.
        self.in_place = self.stream.isatty() if in_place is None else in_place
        self.clock = clock
        self.min_line_interval_s = min_line_interval_s  # plain lines only: a step-by-step run would flood a log
        self.started = clock()
        self.start = 0
        self.done = 0
        self.note = ""
        self._last_line_at: float | None = None
        self._unprinted = False  # plain mode: an update held back by min_line_interval_s
        self._shown: str | None = None  # terminal: the bar as drawn now (None: not on screen)
        self.details: list[str] = []  # lines under the bar: the parts' own progress (a sweep's running cells)
        self._closed = False
        self._lock = threading.RLock()  # node relays and the CSV watcher call in from their own threads
        if self.in_place:
            _live = self

    def eta_s(self) -> float | None:
        """elapsed / units done here * units left; None before the first unit."""
        done_here = self.done - self.start
        if done_here <= 0:
            return None
        return (self.clock() - self.started) / done_here * max(0, self.total - self.done)

    def update(self, done: int, note: str = "", details: list[str] | None = None) -> None:
        """`details`: the lines under the bar (each part's own progress, e.g. a sweep's running
        cells); None keeps the ones shown."""
        with self._lock:
            self.done, self.note = done, note
            if details is not None:
                self.details = list(details)
            if self.in_place:
                self._draw()
                return
            now = self.clock()
            if (done >= self.total or self._last_line_at is None
                    or now - self._last_line_at >= self.min_line_interval_s):
                self._write(self.plain_line() + "\n")
                self._last_line_at, self._unprinted = now, False
            else:
                self._unprinted = True

    def refresh(self) -> None:
        """Redraw the bar so its elapsed time keeps moving between updates; nothing in plain mode."""
        with self._lock:
            if self.in_place and not self._closed:
                self._draw()

    def log(self, line: str) -> None:
        """Print an ordinary output line (to sys.stdout) above the bar instead of through it."""
        line = line if line.endswith("\n") else line + "\n"
        with self._lock:
            if self.in_place and not self._closed:
                self._write(self._erase())
                self._shown = None
                sys.stdout.write(line)
                sys.stdout.flush()
                self._draw()
            else:
                sys.stdout.write(line)
                sys.stdout.flush()

    def close(self) -> None:
        """Leave the final bar on its own line (terminal), or print a held-back last update (plain)."""
        global _live
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if _live is self:
                _live = None
            if self.in_place:
                self._draw()
                self._write("\n")
            elif self._unprinted:
                self._write(self.plain_line() + "\n")

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _counts(self) -> tuple[str, str, str]:
        """Percent, elapsed, ETA as shown."""
        percent = 100 * self.done // self.total if self.total > 0 else 0
        eta = self.eta_s()
        elapsed = format_duration(self.clock() - self.started)
        return f"{percent}%", elapsed, "--" if eta is None else format_duration(eta)

    def bar_line(self) -> str:
        """`[#######.............] 3/10 rounds  30%  elapsed 1m02s  ETA 2m25s  acc 0.9712`"""
        percent, elapsed, eta = self._counts()
        filled = BAR_WIDTH * min(self.done, self.total) // self.total if self.total > 0 else 0
        units = self.unit if self.total == 1 else self.unit + "s"
        line = (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} {units} {percent:>4}  "
                f"elapsed {elapsed}  ETA {eta}")
        return f"{line}  {self.note}" if self.note else line

    def plain_line(self) -> str:
        """`[progress] round 3/10 (30%), elapsed 1m02s, ETA 2m25s, acc 0.9712`, and under it a
        `[progress]   <detail>` line per detail."""
        percent, elapsed, eta = self._counts()
        line = f"[progress] {self.unit} {self.done}/{self.total} ({percent}), elapsed {elapsed}, ETA {eta}"
        line = f"{line}, {self.note}" if self.note else line
        return "\n".join([line, *(f"[progress]   {d}" for d in self.details)])

    def _erase(self) -> str:
        """Escape codes back to the start of the bar as drawn, erasing it and its detail lines."""
        rows = 0 if self._shown is None else self._shown.count("\n")
        return UP.format(rows) + CLEAR_BELOW if rows else CLEAR_LINE

    def _draw(self) -> None:
        # A line wider than the terminal wraps, and `\r` would then redraw only its last part.
        width = shutil.get_terminal_size().columns - 1
        text = "\n".join(line[:width] for line in [self.bar_line(), *(f"  {d}" for d in self.details)])
        if text != self._shown:  # a redraw of the same text would only fill recorded logs
            self._write(self._erase() + text)
            self._shown = text

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def echo(line: str) -> None:
    """Print one output line to sys.stdout, above the progress bar when one is on the terminal."""
    bar = _live
    if bar is not None:
        bar.log(line)
    else:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
        sys.stdout.flush()


class CsvProgress:
    """Follows a CSV file another process appends one row per unit to, and updates a Progress.

    Each poll reads only the bytes added since the last one and only complete lines (the writer
    may be mid-row); a missing file is "nothing yet". The position is the last row's `column`
    (numbered from `numbered_from`), so a resumed run starts where it left off; the rows this
    run wrote set the rate for the ETA.
    """

    def __init__(self, path: Path | str, progress: Progress, column: str, numbered_from: int = 1,
                 note_column: str | None = None, note_label: str | None = None) -> None:
        self.path, self.progress, self.column = Path(path), progress, column
        self.numbered_from = numbered_from
        self.note_column, self.note_label = note_column, note_label or note_column
        self.header: list[str] | None = None
        self.rows = 0
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress {self.path.name}", daemon=True)

    def poll_once(self) -> None:
        """Read the new complete rows; update the Progress when there are any, else just redraw it."""
        last = None
        for line in self._new_lines():
            values = next(csv.reader([line]), [])
            if self.header is None:
                self.header = values
            elif len(values) == len(self.header):
                last = dict(zip(self.header, values))
                self.rows += 1
        position = self._position(last) if last is not None else None
        if position is None:
            self.progress.refresh()
            return
        self.progress.start = position - self.rows
        self.progress.update(position, self._note(last))

    def start(self) -> "CsvProgress":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling, take in the last rows, close the Progress. Safe to call twice."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self.progress.closed:
            self.poll_once()
            self.progress.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(POLL_S)

    def _new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, 2) < self._offset:  # rewritten from scratch: start over
                    self.header, self.rows, self._offset = None, 0, 0
                f.seek(self._offset)
                chunk = f.read()
        except OSError:  # not created yet
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [line for line in complete.decode("utf-8", "replace").splitlines() if line.strip()]

    def _position(self, row: dict[str, str]) -> int | None:
        try:
            return int(float(row[self.column])) - self.numbered_from + 1
        except (KeyError, ValueError):
            return None

    def _note(self, row: dict[str, str]) -> str:
        if self.note_column is None:
            return ""
        try:
            return f"{self.note_label} {float(row[self.note_column]):.4f}"
        except (KeyError, ValueError):
            return ""


def watch_csv(path: Path | str, total: int, unit: str, column: str | None = None, numbered_from: int = 1,
              note_column: str | None = None, note_label: str | None = None,
              min_line_interval_s: float = 5.0) -> Callable[[], None]:
    """Show the progress of a run whose nodes append one row per `unit` to `path` (column `column`,
    default the unit's name); polls in a daemon thread. Returns the function that stops it."""
    progress = Progress(total, unit, min_line_interval_s=min_line_interval_s)
    watcher = CsvProgress(path, progress, column or unit, numbered_from, note_column, note_label)
    return watcher.start().stop
