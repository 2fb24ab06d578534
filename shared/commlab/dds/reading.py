"""A reader drained by a thread of our own through a WaitSet (never a Listener: a Listener in a
process that blocks in write() deadlocks on the GIL)."""
from __future__ import annotations

import logging
import threading
from typing import Callable

from cyclonedds._clayer import ddspy_take
from cyclonedds.core import DDSStatus, GuardCondition, InstanceState, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.sub import DataReader
from cyclonedds.util import duration

log = logging.getLogger(__name__)
TAKE_AT_ONCE = 256
TICK = duration(milliseconds=200)


class ReaderLoop:
    """Calls on_samples(list of (serialized bytes, SampleInfo)) from its thread, and on_tick() at
    least every 200 ms and, with wake_on_match, as soon as a writer matches or unmatches.

    Taking serialized samples through the C layer (non-public, pinned, see fastpath.py) gives the
    exact sample size for byte counting; deserialization is left to the callback.
    """

    def __init__(self, participant, reader: DataReader, name: str, on_samples: Callable[[list], None],
                 on_tick: Callable[[], None] = lambda: None, wake_on_match: bool = False):
        self._reader, self._on_samples, self._on_tick = reader, on_samples, on_tick
        self._waitset = WaitSet(participant)
        self._guard = GuardCondition(participant)
        self._cond = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any)
        self._waitset.attach(self._cond)
        self._waitset.attach(self._guard)
        if wake_on_match:  # on_tick must then read the matched status, which resets the trigger
            reader.set_status_mask(DDSStatus.SubscriptionMatched)
            self._waitset.attach(reader)
        self._mask = self._cond.mask
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"dds-read-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            self._waitset.wait(TICK)
            try:
                while not self._stopping:
                    got = ddspy_take(self._reader._ref, self._mask, TAKE_AT_ONCE)
                    if isinstance(got, int) or not got:
                        break
                    self._on_samples(got)
                self._on_tick()
            except Exception:  # a bad sample must not kill the node's only reader thread
                log.exception("reader thread %s", self._thread.name)

    def stop(self) -> None:
        self._stopping = True
        self._guard.set(True)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
