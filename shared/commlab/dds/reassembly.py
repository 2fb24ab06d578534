"""Reassembly of chunked messages: in order, per (sender, incarnation, msg_id), validated.

Each chunk's payload is copied once, straight to its place in the message's buffer: every chunk
but the last carries the sender's chunk size (the stride), so a chunk's offset follows from its
own head (index * stride; the last one ends at total_bytes) whatever order chunks arrive in.
Duplicated chunks are ignored; a chunk that contradicts its message (index out of range, another
count, total or stride) drops the whole message; partial messages older than the timeout expire.
Every such event is logged and counted in CommStats, never delivered.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from .cdr import unfilled_bytes
from .chunk import ChunkHead
from .stats import CommStats

log = logging.getLogger(__name__)
MessageKey = tuple[str, int, int]
REMEMBERED_DONE = 4096  # completed ids kept to recognise late duplicates of finished messages
MAX_MESSAGE_BYTES = 1 << 32  # a head claiming more is malformed (the buffer is allocated up front)
CopyPayload = Callable[[bytes, int], None]  # (message buffer, offset): copy this chunk's payload there


@dataclass
class Partial:
    count: int
    total_bytes: int
    stride: int
    started: float
    buffer: bytes  # unfilled_bytes(total_bytes), filled chunk by chunk before it is handed out
    meta: str | None = None
    received: set[int] = field(default_factory=set)


@dataclass
class Assembled:
    sender: str
    meta: str
    payload: bytes


def placement(h: ChunkHead) -> tuple[int, int] | str:
    """(stride, offset) of a chunk from its head alone, or what is wrong with it."""
    n, count, total = h.payload_len, h.count, h.total_bytes
    if count == 0 or h.index >= count:
        return "index out of range"
    if total > MAX_MESSAGE_BYTES:
        return f"message of {total} bytes exceeds {MAX_MESSAGE_BYTES}"
    if count == 1:
        return (n, 0) if n == total else f"{n} payload bytes in a one-chunk message of {total}"
    if h.index < count - 1:
        stride = n
    elif 0 < n and (total - n) % (count - 1) == 0:
        stride = (total - n) // (count - 1)
    else:
        return f"last chunk of {n} bytes does not fit {count} chunks of {total} bytes"
    if not (0 < n <= stride and (count - 1) * stride < total <= count * stride):
        return f"{count} chunks of {stride} bytes cannot hold {total} bytes"
    return stride, h.index * stride


class Reassembler:
    def __init__(self, topic: str, stats: CommStats, timeout_s: float):
        self.topic, self.stats, self.timeout_s = topic, stats, timeout_s
        self._partial: dict[MessageKey, Partial] = {}
        self._done: OrderedDict[MessageKey, bool] = OrderedDict()  # value: was delivered

    def add(self, h: ChunkHead, copy_payload: CopyPayload) -> Assembled | None:
        """Feed one chunk; copy_payload is called (once) only if the chunk is accepted. Returns
        the message when this chunk completes it."""
        key = (h.sender, h.incarnation, h.msg_id)
        if key in self._done:
            if self._done[key]:  # a late copy of a delivered message; chunks of a dropped one are just ignored
                self.stats.add(duplicate_chunks=1)
            return None
        place = placement(h)
        p = self._partial.get(key)
        if isinstance(place, str):
            self._drop(key, f"malformed chunk {h.index}/{h.count} from {h.sender}: {place}")
            return None
        stride, offset = place
        if p is None:
            p = self._partial[key] = Partial(h.count, h.total_bytes, stride, time.monotonic(), unfilled_bytes(h.total_bytes))
        elif (h.count, h.total_bytes, stride) != (p.count, p.total_bytes, p.stride):
            self._drop(key, f"malformed chunk {h.index}/{h.count} from {h.sender}: count/total/stride "
                            f"{h.count}/{h.total_bytes}/{stride} differ from {p.count}/{p.total_bytes}/{p.stride}")
            return None
        if h.index in p.received:
            self.stats.add(duplicate_chunks=1)
            return None
        if h.payload_len:
            copy_payload(p.buffer, offset)
        p.received.add(h.index)
        if h.index == 0:
            p.meta = h.meta
        if len(p.received) < p.count:
            return None
        del self._partial[key]
        self._remember(key, delivered=True)
        return Assembled(h.sender, p.meta or "", p.buffer)

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
                        self.topic, k[2], k[0], len(p.received), p.count, self.timeout_s)
        return old
