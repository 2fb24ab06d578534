"""Test-only fault points: a node that reaches a named point halts there until it is killed.

Fault tests must kill a node at a defined place in its protocol, not after a guessed delay (a
client killed "while training" may already have uploaded). A test starts the node with
COMMLAB_HALT_AT="<point>@<n>", e.g. "before_upload@2" (an FL client in round 2, after training,
before its update leaves). The node prints one line "HALTED at before_upload@2" and blocks; the
test waits for that line and kills it, or lets it go on with SIGUSR1 (to order events between
nodes). Without the variable every call is a no-op.

Points: before_upload@<round> (FL client), secagg_before_masked@<round> and
secagg_after_masked@<round> (FL client in a SecAgg+ round: its shares sent, or its masked input
sent and acknowledged), after_round@<round> (FL controller, after the round's
checkpoint and log line), before_exchange@<step> (DDP worker, after forward, before backward:
the step's collective has not started, even the dense ring that overlaps backward).
"""
from __future__ import annotations

import os
import signal
import time

HALT_ENV = "COMMLAB_HALT_AT"


def halt_at(point: str, n: int) -> None:
    """Block until SIGUSR1 if this process was told to halt at `point` number `n`."""
    if os.environ.get(HALT_ENV) != f"{point}@{n}":
        return
    resumed = False

    def resume(signum: int, frame: object) -> None:
        nonlocal resumed
        resumed = True

    previous = signal.signal(signal.SIGUSR1, resume)
    print(f"HALTED at {point}@{n}", flush=True)
    # Polled, not signal.pause(): a signal that the kernel hands to another thread (DDS has
    # several) sets the handler's flag but never wakes a main thread blocked in pause().
    while not resumed:  # other handlers (SIGTERM: clean exit) still run; SIGKILL ends it
        time.sleep(0.05)
    signal.signal(signal.SIGUSR1, previous)
    print(f"RESUMED at {point}@{n}", flush=True)
