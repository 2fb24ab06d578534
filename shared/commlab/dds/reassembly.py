"""Reassembly of chunked messages: in order, per (sender, incarnation, msg_id), validated.

Duplicated chunks are ignored; a chunk that contradicts its message (index out of range, another
count or total) drops the whole message; partial messages older than the timeout expire. Every
such event is logged and counted in CommStats, never delivered.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .chunk import Chunk
from .stats import CommStats

log = logging.getLogger(__name__)
MessageKey = tuple[str, int, int]
REMEMBERED_DONE = 4096  # completed ids kept to recognise late duplicates of finished messages


@dataclass
class Partial:
    count: int
    total_bytes: int
    started: float
    meta: str | None = None
    parts: dict[int, bytes | memoryview] = field(default_factory=dict)
    size: int = 0


@dataclass
class Assembled:
    sender: str
    meta: str
    payload: bytes


class Reassembler:
    def __init__(self, topic: str, stats: CommStats, timeout_s: float):
        self.topic, self.stats, self.timeout_s = topic, stats, timeout_s
        self._partial: dict[MessageKey, Partial] = {}
        self._done: OrderedDict[MessageKey, bool] = OrderedDict()  # value: was delivered

    def add(self, c: Chunk) -> Assembled | None:
        """Feed one chunk; returns the message when this chunk completes it."""
        key = (c.sender, c.incarnation, c.msg_id)
        if key in self._done:
            if self._done[key]:  # a late copy of a delivered message; chunks of a dropped one are just ignored
                self.stats.add(duplicate_chunks=1)
            return None
        p = self._partial.get(key)
        if p is None:
            p = self._partial[key] = Partial(c.count, c.total_bytes, time.monotonic())
        problem = self._check(c, p)
        if problem:
            self._drop(key, f"malformed chunk {c.index}/{c.count} from {c.sender}: {problem}")
            return None
        if c.index in p.parts:
            self.stats.add(duplicate_chunks=1)
            return None
        p.parts[c.index] = c.payload
        p.size += len(c.payload)
        if c.index == 0:
            p.meta = c.meta
        if len(p.parts) < p.count:
            return None
        del self._partial[key]
        self._remember(key, delivered=p.size == p.total_bytes)
        if p.size != p.total_bytes:
            self.stats.add(malformed_chunks=1)
            log.warning("topic %s: message %s has %d bytes, header says %d; dropped", self.topic, key, p.size, p.total_bytes)
            return None
        payload = b"".join(p.parts[i] for i in range(p.count))  # the one copy out of the received samples
        return Assembled(c.sender, p.meta or "", payload)

    def _check(self, c: Chunk, p: Partial) -> str:
        if c.count == 0 or c.index >= c.count:
            return "index out of range"
        if c.count != p.count or c.total_bytes != p.total_bytes:
            return f"count/total {c.count}/{c.total_bytes} differ from {p.count}/{p.total_bytes}"
        if p.size + len(c.payload) > p.total_bytes:
            return "more bytes than the message total"
        return ""

    def _drop(self, key: MessageKey, why: str) -> None:
        self._partial.pop(key, None)
        self._remember(key, delivered=False)
        self.stats.add(malformed_chunks=1)
        log.warning("topic %s: %s; message dropped", self.topic, why)

    def _remember(self, key: MessageKey, delivered: bool) -> None:
        self._done[key] = delivered
        while len(self._done) > REMEMBERED_DONE:
            self._done.popitem(last=False)

    def expire(self, now: float | None = None) -> list[MessageKey]:
        """Drop partial messages older than the timeout; returns their ids."""
        now = time.monotonic() if now is None else now
        old = [k for k, p in self._partial.items() if now - p.started > self.timeout_s]
        for k in old:
            p = self._partial.pop(k)
            self.stats.add(expired_messages=1)
            log.warning("topic %s: message %s from %s expired with %d/%d chunks after %.1fs",
                        self.topic, k[2], k[0], len(p.parts), p.count, self.timeout_s)
        return old
