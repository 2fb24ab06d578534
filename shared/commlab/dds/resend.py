"""Collectives that survive a cut: what a rank wrote lately is written again when a peer asks.

A peer whose lease expired (a paused or starved process, a link down for a few seconds) misses
what was written meanwhile: DDS drops a reader's unacknowledged samples when its participant is
lost, and a volatile reader that matches again gets only what is written after. So every rank keeps
what it wrote for the keys in progress and for the last KEEP_FINISHED keys (ranks run the same
collectives in the same order, one at a time: this rank finished a key only after every rank
started it, so a peer still needs at most the last one), and a rank that waits for a peer after a cut between them (PeerDirectory.gaps)
asks that peer to write it all again. The ask is repeated a few times while the wait lasts: the
first answer may be written before the asker's reader has matched the writer again, and a volatile
reader drops what arrives before its match. Receivers drop copies of keys they have finished and
keep one copy of the others, so a repeat is harmless.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

KEEP_FINISHED = 1
ASK_REPEATS = 5  # asks after one cut, one every ASK_EVERY_S while still waiting
ASK_EVERY_S = 1.0


class SentLog:
    """(meta, payload) of every message written for the recent keys of one writer, in order."""

    def __init__(self) -> None:
        self._keys: OrderedDict[str, list[tuple[str, bytes | memoryview]]] = OrderedDict()
        self._finished: list[str] = []
        self._lock = threading.Lock()

    def add(self, key: str, meta: str, payload: bytes | memoryview) -> None:
        """Keep a message; the payload must not change afterwards (pass a copy of reused buffers)."""
        with self._lock:
            self._keys.setdefault(key, []).append((meta, payload))

    def finish(self, key: str) -> None:
        with self._lock:
            if key not in self._keys or key in self._finished:
                return
            self._finished.append(key)
            while len(self._finished) > KEEP_FINISHED:
                self._keys.pop(self._finished.pop(0), None)

    def messages(self) -> list[tuple[str, bytes | memoryview]]:
        with self._lock:
            return [m for msgs in self._keys.values() for m in msgs]


@dataclass
class _Asked:
    gaps: int  # PeerDirectory.gaps of the peer when this node last started asking
    left: int  # asks still to make for that cut
    at: float = 0.0  # time.monotonic() of the last ask


class Asking:
    """When to ask a peer to write again: once right after each new cut with it, then every
    ASK_EVERY_S while this node still waits for it, ASK_REPEATS times in all."""

    def __init__(self) -> None:
        self._asked: dict[str, _Asked] = {}

    def due(self, name: str, gaps: int) -> bool:
        asked = self._asked.setdefault(name, _Asked(0, 0))
        if gaps > asked.gaps:
            asked.gaps, asked.left = gaps, ASK_REPEATS
        now = time.monotonic()
        if asked.left <= 0 or now - asked.at < ASK_EVERY_S:
            return False
        asked.left, asked.at = asked.left - 1, now
        return True
