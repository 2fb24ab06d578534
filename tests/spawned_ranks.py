"""Collecting the results of ranks started as spawned processes (multiprocessing, spawn method)."""
from __future__ import annotations

import queue
import time


def results(q, procs, timeout: float) -> list:
    """One result per process; fails at once (not at the timeout) if a process died without one."""
    out, deadline = [], time.monotonic() + timeout
    while len(out) < len(procs):
        try:
            out.append(q.get(timeout=1))
        except queue.Empty:
            dead = [p.name for p in procs if p.exitcode not in (None, 0)]
            assert not dead and time.monotonic() < deadline, f"no result; died: {dead}"
    return out
