"""Which clients train in a round: availability traces and a seeded sampler (docs/scale.md).

With hundreds of clients only a few train each round (`sampling.clients_per_round`). The choice
is a pure function of (training seed, round, available clients), so a controller restarted from
a checkpoint picks the same clients for the same round. An availability trace (CSV, one row per
interval: client_id,first_round,last_round, inclusive) says who may be picked at all: a client
is available in the rounds its rows cover and in no other (no rows: never).
`python -m commlab.fl.sampling` writes a synthetic diurnal trace.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from commlab.config.schema import ConfigError
from commlab.runs.roster import client_name

TRACE_COLUMNS = ["client_id", "first_round", "last_round"]


def per_round_count(spec: int | float | None, clients: int) -> int:
    """Clients per round: an int is a count, a float in (0, 1] a fraction of `clients`; None: all."""
    if spec is None:
        return clients
    if isinstance(spec, int):
        return spec
    return max(1, round(spec * clients))


def sample_clients(candidates: list[str], k: int, seed: int, rnd: int) -> list[str]:
    """k of `candidates` (all of them if fewer), sorted; the same inputs give the same clients.
    Seeded by (seed, rnd) and drawn from the sorted candidates: list order and process history
    do not matter, so a restarted controller repeats the choice."""
    pool = sorted(candidates)
    if k >= len(pool):
        return pool
    rng = np.random.default_rng([seed % 2**63, rnd])  # numpy seeds are non-negative; config seeds need not be
    return sorted(pool[i] for i in rng.choice(len(pool), size=k, replace=False))


@dataclass(frozen=True)
class Availability:
    """Per client, the inclusive round intervals in which it may train."""
    intervals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def available(self, rnd: int, clients: list[str]) -> list[str]:
        return [c for c in clients if any(first <= rnd <= last for first, last in self.intervals.get(c, ()))]


def load_availability(path: str | Path, clients: list[str]) -> Availability:
    """Read a trace CSV; any problem is one ConfigError naming the file and the row (1 = header)."""
    path = Path(path)
    intervals: dict[str, list[tuple[int, int]]] = {}
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header != TRACE_COLUMNS:
                raise ConfigError(f"{path}: row 1: header must be {','.join(TRACE_COLUMNS)}, got {header}")
            for row_no, row in enumerate(reader, start=2):
                client, first, last = _trace_row(row, clients)
                if client is None:
                    raise ConfigError(f"{path}: row {row_no}: {first}")
                intervals.setdefault(client, []).append((first, last))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read availability trace: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{path}: not a CSV availability trace: {e}") from None
    return Availability(intervals)


def _trace_row(row: list[str], clients: list[str]) -> tuple:
    """(client, first, last), or (None, reason, None) for a bad row."""
    if len(row) != 3:
        return None, f"expected 3 fields ({','.join(TRACE_COLUMNS)}), got {len(row)}", None
    client = row[0].strip()
    if client not in clients:
        return None, f"unknown client_id {client[:40]!r} (this run has {clients[0]}..{clients[-1]})", None
    try:
        first, last = int(row[1]), int(row[2])
    except ValueError:
        return None, f"first_round and last_round must be integers, got {row[1][:20]!r}, {row[2][:20]!r}", None
    if not 1 <= first <= last:
        return None, f"need 1 <= first_round <= last_round, got {first}, {last}", None
    return client, first, last


def diurnal_trace(clients: int, rounds: int, period: int, on_fraction: float, seed: int) -> list[list]:
    """Rows of a synthetic day/night trace: client i is on for round(on_fraction * period) rounds
    out of every `period`, shifted by its own seeded phase (a time zone), as intervals clipped to
    1..rounds (a client whose on-window falls outside 1..rounds gets no row: never available)."""
    on = round(on_fraction * period)
    if not 1 <= on <= period:
        raise ValueError(f"on_fraction {on_fraction} of period {period} gives {on} rounds on; need 1..{period}")
    phases = np.random.default_rng(seed).integers(0, period, size=clients)
    rows = []
    for i, phase in enumerate(phases):
        start = 1 - int(phase)  # on for rounds [start + k*period, start + k*period + on - 1]
        while start <= rounds:
            first, last = max(1, start), min(rounds, start + on - 1)
            if first <= last:
                rows.append([client_name(i), first, last])
            start += period
    return rows


def write_trace(path: Path, rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TRACE_COLUMNS)
        w.writerows(rows)


def select_round(rnd: int, clients: list[str], per_round: int, seed: int, availability: Availability | None,
                 min_clients: int, log: Callable[[str], None]) -> list[str]:
    """The clients that train round `rnd`: a seeded sample of the available ones. Fewer available
    than min_clients: one log line, and the round uses those available (an empty list: nobody can
    train; the controller then keeps the model as it is for this round)."""
    pool = clients if availability is None else availability.available(rnd, clients)
    if len(pool) < min_clients:
        log(f"round {rnd}: only {len(pool)} client(s) available ({', '.join(pool) or 'none'}), "
            f"fewer than min_clients={min_clients}: the round uses those")
    return sample_clients(pool, per_round, seed, rnd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commlab.fl.sampling",
                                description="write a synthetic diurnal availability trace (CSV)")
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--period", type=int, default=24, help="rounds per day (default %(default)s)")
    p.add_argument("--on-fraction", type=float, default=0.5, help="share of a day a client is on")
    p.add_argument("--seed", type=int, default=0, help="seeds each client's phase")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.clients < 1 or a.rounds < 1 or a.period < 1:
        p.error("--clients, --rounds and --period must be >= 1")
    try:
        rows = diurnal_trace(a.clients, a.rounds, a.period, a.on_fraction, a.seed)
    except ValueError as e:
        p.error(str(e))
    write_trace(a.out, rows)
    print(f"wrote {a.out}: {len(rows)} intervals for {a.clients} clients over {a.rounds} rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
