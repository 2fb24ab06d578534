"""A reader drained by a thread of our own through a WaitSet (never a Listener: a Listener in a
process that blocks in write() deadlocks on the GIL)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from cyclonedds.core import DDSStatus, GuardCondition, InstanceState, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.sub import DataReader
from cyclonedds.util import duration

from .cdr import SampleInfo, Taker, serdata_unref

log = logging.getLogger(__name__)
TAKE_AT_ONCE = 256
TICK = duration(milliseconds=200)


def wait_for_acks(writer, timeout_s: float) -> bool:
    """Until every matched reliable reader acknowledged what `writer` wrote; False after timeout_s.
    cyclonedds 11.0.1's DataWriter.wait_for_acks raises AttributeError on a timeout (its branch
    names a constant that does not exist), so the timeout is read from that."""
    try:
        return writer.wait_for_acks(duration(seconds=timeout_s))
    except AttributeError:
        return False


def matched_handles(list_matched: Callable[[], list[int]], attempts: int = 5) -> list[int]:
    """Instance handles of the matched endpoints, robust to a match arriving mid-call.

    cyclonedds 11.0.1 sizes its buffer from a first count and then indexes by the second call's
    return value, which is the current total: an endpoint matching in between raises IndexError.
    Matching settles within milliseconds, so asking again gives a consistent list.
    """
    for _ in range(attempts - 1):
        try:
            return list_matched()
        except IndexError:
            time.sleep(0.001)
    return list_matched()


class ReaderLoop:
    """Calls on_sample(serdata reference, SampleInfo) for every received sample from its thread,
    and on_tick() at least every 200 ms and, with wake_on_match, as soon as a writer matches or
    unmatches. Samples are taken serialized (cdr.py): the callback copies out what it needs and
    the reference is released when it returns.
    """

    def __init__(self, participant, reader: DataReader, name: str, on_sample: Callable[[int, SampleInfo], None],
                 on_tick: Callable[[], None] = lambda: None, wake_on_match: bool = False):
        self._on_sample, self._on_tick = on_sample, on_tick
        self._taker = Taker(reader._ref, TAKE_AT_ONCE)
        self._waitset = WaitSet(participant)
        self._guard = GuardCondition(participant)
        self._cond = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any)
        self._waitset.attach(self._cond)
        self._waitset.attach(self._guard)
        if wake_on_match:  # on_tick must then read the matched status, which resets the trigger
            reader.set_status_mask(DDSStatus.SubscriptionMatched)
            self._waitset.attach(reader)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"dds-read-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            self._waitset.wait(TICK)
            try:
                while not self._stopping and self._deliver(self._taker.take()):
                    pass
                self._on_tick()
            except Exception:  # a bad sample must not kill the node's only reader thread
                log.exception("reader thread %s", self._thread.name)

    def _deliver(self, n: int) -> int:
        samples, infos = self._taker.samples, self._taker.infos
        for i in range(n):
            try:
                self._on_sample(samples[i], infos[i])
            except Exception:  # a bad sample must not kill the node's only reader thread, nor its neighbours
                log.exception("reader thread %s", self._thread.name)
            finally:
                serdata_unref(samples[i])
        return n

    def stop(self) -> None:
        self._stopping = True
        self._guard.set(True)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
