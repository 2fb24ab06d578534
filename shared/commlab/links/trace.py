"""Link rates over time: a trace file and the record of the rates set (the thread that follows a
trace with tc during a run: trace_follower.py).

A trace is a CSV with a header `time_s,node,rate`: from `time_s` seconds after the nodes start,
`node` (a node name, or `*` for every node without a row of its own at that time) has uplink
`rate` (a tc rate such as `10mbit`, or bits per second). A node keeps its rate until a later row
names it or `*`; after the last row the rates stay. Every node needs a rate at time 0.

    profile trace:netem/traces/diurnal.csv
    with TraceFollower(trace, lab.prefix, nodes, run_dir / "link-rates.csv"):
        ...run the nodes...

`link-rates.csv` (unix time, trace time, node, rate in bit/s) is the run's record of every rate
set; the FL controller reads it to put each client's rate into rounds.csv (LinkRates).
"""
from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path

from .spec import LinkError, LinkSpec

RATES_FILE = "link-rates.csv"
RATES_HEADER = ("time_unix_s", "trace_s", "node", "rate_bps")
ANY_NODE = "*"


@dataclass(frozen=True)
class TraceRow:
    time_s: float
    node: str
    rate_bps: float


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return LinkSpec(rate=text).rate_bps
    if not math.isfinite(value) or value <= 0:
        raise LinkError(f"rate {text!r}: must be a positive number of bit/s or a tc rate")
    return value


class Trace:
    def __init__(self, rows: list[TraceRow], source: str):
        self.rows, self.source = rows, source

    def rate_at(self, node: str, t: float) -> float:
        """The rate of `node` at trace time t: its last row at or before t, its own over `*` at
        the same time."""
        best: TraceRow | None = None
        for row in self.rows:
            if row.time_s > t:
                break
            if row.node == node or (row.node == ANY_NODE and (best is None or row.time_s > best.time_s)):
                best = row
        if best is None:
            raise LinkError(f"trace {self.source}: no rate for {node} at {t:g} s (give '*' or {node} a row at 0)")
        return best.rate_bps

    def change_times(self) -> list[float]:
        return sorted({r.time_s for r in self.rows if r.time_s > 0})


def load_trace(path: Path) -> Trace:
    """Parse and check a trace file; LinkError naming the file and line of the first problem."""
    try:
        text = path.read_text()
    except OSError as e:
        raise LinkError(f"trace file {path}: {e.strerror or e}") from None
    reader = csv.reader(text.splitlines())
    header = [h.strip() for h in next(reader, [])]
    if header != ["time_s", "node", "rate"]:
        raise LinkError(f"trace file {path}: header must be time_s,node,rate, got {','.join(header)!r}")
    rows: list[TraceRow] = []
    for line, fields in enumerate(reader, start=2):
        if not fields:
            continue
        if len(fields) != 3:
            raise LinkError(f"trace file {path} line {line}: expected 3 fields, got {len(fields)}")
        try:
            t = float(fields[0])
            rate = _rate(fields[2].strip())
        except (ValueError, LinkError) as e:
            raise LinkError(f"trace file {path} line {line}: {e}") from None
        if not math.isfinite(t) or t < 0 or (rows and t < rows[-1].time_s):
            raise LinkError(f"trace file {path} line {line}: time_s {fields[0]!r} must be >= 0 and not decrease")
        rows.append(TraceRow(t, fields[1].strip(), rate))
    if not rows:
        raise LinkError(f"trace file {path}: no rows")
    return Trace(rows, str(path))


def append_rates(path: Path, trace_s: float, rates: dict[str, float]) -> None:
    """Add rows to link-rates.csv (made with its header when new)."""
    new = not path.exists()
    with open(path, "a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(RATES_HEADER)
        now = time.time()
        for node, rate in rates.items():
            out.writerow([f"{now:.3f}", f"{trace_s:.3f}", node, int(rate)])


class LinkRates:
    """The latest rate of each node in a run's link-rates.csv (re-read when it grew)."""

    def __init__(self, path: Path):
        self.path, self._size, self._rates = path, -1, {}

    def rate_of(self, node: str) -> float | None:
        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if size != self._size:
            with open(self.path, newline="") as f:
                for row in csv.DictReader(f):
                    try:  # a row being written may be read half
                        self._rates[row["node"]] = float(row["rate_bps"])
                    except (TypeError, ValueError):
                        continue
            self._size = size
        return self._rates.get(node)
