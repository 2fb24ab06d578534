"""Collecting the results of ranks started as spawned processes (multiprocessing, spawn method)."""
from __future__ import annotations

import multiprocessing as mp
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


def run_ranks(target, args: tuple, world: int, timeout: float) -> tuple[list, list]:
    """Start `world` spawned processes target(*args, rank, queue), each putting one result on the
    queue; (their results, their exit codes). A process still running after the results is killed."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, r, q), name=f"rank{r}") for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = results(q, procs, timeout)
    finally:
        for p in procs:
            p.join(30)
            if p.exitcode is None:
                p.kill()
                p.join()
    return got, [p.exitcode for p in procs]
