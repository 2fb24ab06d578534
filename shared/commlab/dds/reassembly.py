"""Reassembly of chunked messages: in order, per (sender, incarnation, msg_id), validated.

Each chunk's payload goes once, straight to its place in the message's buffer (copied, or
decrypted on the way when the message is encrypted): every chunk
but the last carries the sender's chunk size (the stride), so a chunk's offset follows from its
own head (index * stride; the last one ends at total_bytes) whatever order chunks arrive in.
Duplicated chunks are ignored; a chunk that contradicts its message (index out of range, another
count, total or stride) drops the whole message.

Bounds, so a slow link never loses a message that is still arriving and a faulty or restarting
sender cannot fill the memory:
- expiry counts from the last chunk of the message, not the first: a message that takes 10
  minutes over a slow link lives as long as its chunks keep coming, and one that receives nothing
  for timeout_s is dropped (its late chunks are then ignored, not started over);
- the buffers of incomplete messages (allocated whole on their first chunk) are capped per sender
  and in total (settings.reassembly_caps derives both from the largest message expected): a new
  message that would exceed a cap evicts the incomplete messages that have gone longest without
  a chunk, that sender's first for the sender cap; one larger than a cap is not held at all.
Every such event is logged (one line) and counted in CommStats, never delivered.

Authenticated (with an Opener): nothing that has not authenticated leaves a trace. A message is
keyed by the DDS writer that carried it as well as by its claimed (sender, incarnation, msg_id),
so chunks that another participant sends under the same claimed id never touch it; a chunk that
fails authentication reserves no buffer, marks no id as done and counts as no progress
(CommStats.chunks_accepted counts only chunks of authenticated messages); its warning is throttled.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from .cdr import address_of, copy_into, unfilled_bytes
from .envelope import AuthError
from .opener import Opened, Opener
from .chunk import ChunkHead
from .stats import CommStats
from .throttle import ThrottledWarning

log = logging.getLogger(__name__)
MessageId = tuple[str, int, int]  # (sender, incarnation, msg_id) as the chunk claims them
MessageKey = tuple[str, int, int, int]  # MessageId and the publication handle of the writer that carried it
REMEMBERED_DONE = 4096  # completed ids kept to recognise late duplicates of finished messages
MAX_MESSAGE_BYTES = 1 << 32  # a head claiming more is malformed (the buffer is allocated up front)
SENDER_BYTES = 1 << 31  # default caps on incomplete messages' buffers; settings.reassembly_caps derives tighter ones
TOTAL_BYTES = 1 << 33


@dataclass
class Partial:
    count: int
    total_bytes: int
    stride: int
    started: float
    last: float  # when its last chunk arrived: expiry counts from here
    buffer: bytes  # unfilled_bytes(total_bytes), filled chunk by chunk before it is handed out
    meta: str | None = None
    received: set[int] = field(default_factory=set)
    opened: Opened | None = None  # its authenticated envelope (with an Opener)


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
    def __init__(self, topic: str, stats: CommStats, timeout_s: float, sender_bytes: int = SENDER_BYTES,
                 total_bytes: int = TOTAL_BYTES, clock: Callable[[], float] = time.monotonic,
                 opener: Opener | None = None):
        self.topic, self.stats, self.timeout_s, self.clock = topic, stats, timeout_s, clock
        self.opener = opener  # set: only authenticated messages are reassembled
        self.sender_bytes, self.total_bytes = sender_bytes, total_bytes
        # Incomplete messages, the one that has gone longest without a chunk first.
        self._partial: OrderedDict[MessageKey, Partial] = OrderedDict()
        self._held: dict[str, int] = {}  # buffer bytes of incomplete messages per sender
        self._done: OrderedDict[MessageKey, bool] = OrderedDict()  # value: was delivered
        self.partial_at: dict[str, float] = {}  # sender -> clock() of its last chunk that completed no message
        self._warn_unauthenticated = ThrottledWarning(log, clock=clock)

    def held_bytes(self, sender: str | None = None) -> int:
        """Buffer bytes of incomplete messages (of one sender, or of all)."""
        return self._held.get(sender, 0) if sender is not None else sum(self._held.values())

    def add(self, h: ChunkHead, payload: bytes | memoryview, writer: int = 0) -> Assembled | None:
        """Feed one chunk carried by DDS writer `writer` (its publication handle), its `payload`
        read (once) only if the chunk is accepted. Returns the message when this chunk completes it."""
        key = (h.sender, h.incarnation, h.msg_id, writer)
        if key in self._done:
            if self._done[key]:  # a late copy of a delivered message; chunks of a dropped one are just ignored
                self.stats.add(duplicate_chunks=1)
            return None
        place = placement(h)
        p = self._partial.get(key)
        if isinstance(place, str):
            if p is None and self.opener is not None:  # belongs to no authenticated message: no trace
                self._ignore(key, "malformed_chunks", f"malformed chunk {h.index}/{h.count}: {place}")
            else:
                self._drop(key, f"malformed chunk {h.index}/{h.count} from {h.sender}: {place}")
            return None
        stride, offset = place
        now = self.clock()
        if p is None:
            opened = self._authenticate(key, h) if self.opener is not None else None
            if self.opener is not None and opened is None:
                return None
            if not self._make_room(key, h.total_bytes):
                return None
            p = self._partial[key] = Partial(h.count, h.total_bytes, stride, now, now, unfilled_bytes(h.total_bytes),
                                             opened=opened)
            self._held[h.sender] = self._held.get(h.sender, 0) + h.total_bytes
        elif (h.count, h.total_bytes, stride) != (p.count, p.total_bytes, p.stride):
            self._drop(key, f"malformed chunk {h.index}/{h.count} from {h.sender}: count/total/stride "
                            f"{h.count}/{h.total_bytes}/{stride} differ from {p.count}/{p.total_bytes}/{p.stride}")
            return None
        if h.index in p.received:
            self.stats.add(duplicate_chunks=1)
            return None
        p.last = now
        self._partial.move_to_end(key)
        if p.opened is not None and h.index != len(p.received):
            # A reliable writer's chunks arrive in order; the digest is computed in that order.
            self._reject(key, AuthError("unauthenticated", f"chunk {h.index} of message {h.msg_id} from {h.sender!r} "
                                                           f"out of order (expected {len(p.received)})"))
            return None
        if h.payload_len:
            if p.opened is not None:  # authenticated, and decrypted into place
                p.opened.update(payload, p.buffer, offset)
            else:
                copy_into(address_of(p.buffer) + offset, payload)
        p.received.add(h.index)
        self.stats.add(chunks_accepted=1)
        if h.index == 0:
            p.meta = h.meta
        if len(p.received) < p.count:
            self.partial_at[h.sender] = now  # a message on its way: a sender's progress before it is whole
            return None
        if p.opened is not None:
            try:
                p.opened.finish(h.meta if h.count > 1 else None)
            except AuthError as e:
                self._reject(key, e)
                return None
            p.meta = p.opened.meta
        self._forget(key, delivered=True)
        return Assembled(h.sender, p.meta or "", p.buffer)

    def _authenticate(self, key: MessageKey, h: ChunkHead) -> Opened | None:
        """The envelope of a new message, from its chunk 0 (a reliable writer's chunks arrive in
        order, so a message whose first chunk seen is another one was never authenticated)."""
        try:
            if h.index != 0:
                raise AuthError("unauthenticated", f"chunk {h.index} of message {h.msg_id} from {h.sender!r} "
                                                   "without its authenticated first chunk")
            return self.opener.open(self.topic, h.sender, h.incarnation, h.total_bytes, h.meta)
        except AuthError as e:
            self._ignore(key, f"auth_{e.reason}", str(e))
            return None

    def _ignore(self, key: MessageKey, counter: str, why: str) -> None:
        """A chunk of no authenticated message: counted, logged (rate-limited), not remembered."""
        self.stats.add(**{counter: 1})
        self._warn_unauthenticated(counter, "topic %s: unauthenticated chunk of message %s claiming to be from %s "
                                            "dropped: %s", self.topic, key[2], key[0], why)

    def _reject(self, key: MessageKey, e: AuthError) -> None:
        self._forget(key, delivered=False)
        self.stats.add(**{f"auth_{e.reason}": 1})
        log.warning("topic %s: message %s from %s rejected: %s", self.topic, key[2], key[0], e)

    def _forget(self, key: MessageKey, delivered: bool) -> Partial | None:
        """Stop holding a message (done or dropped); later chunks of it are ignored."""
        p = self._partial.pop(key, None)
        if p is not None:
            self._held[key[0]] -= p.total_bytes
            if not self._held[key[0]]:
                del self._held[key[0]]
        self._remember(key, delivered)
        return p

    def _drop(self, key: MessageKey, why: str) -> None:
        self._forget(key, delivered=False)
        self.stats.add(malformed_chunks=1)
        log.warning("topic %s: %s; message dropped", self.topic, why)

    def _make_room(self, key: MessageKey, size: int) -> bool:
        """Evict incomplete messages until a new one of `size` bytes fits under both caps: for the
        sender cap that sender's, for the total any sender's, longest without a chunk first.
        False (the message is not held) if it is larger than a cap."""
        sender = key[0]
        if size > min(self.sender_bytes, self.total_bytes):
            self._evict(key, size, f"{size} bytes exceed the cap of {min(self.sender_bytes, self.total_bytes)} "
                                   f"bytes for incomplete messages; not held")
            return False
        for k in list(self._partial):
            over_sender = self.held_bytes(sender) + size > self.sender_bytes
            over_total = self.held_bytes() + size > self.total_bytes
            if not (over_sender or over_total):
                break
            if over_total or k[0] == sender:
                p = self._partial[k]
                self._evict(k, p.total_bytes, f"evicted with {len(p.received)}/{p.count} chunks, idle "
                                              f"{self.clock() - p.last:.1f}s, for message {key[2]} of {size} bytes "
                                              f"from {sender} (caps: {self.sender_bytes} per sender, "
                                              f"{self.total_bytes} in total)")
        return True

    def _evict(self, key: MessageKey, size: int, why: str) -> None:
        self._forget(key, delivered=False)
        self.stats.add(evicted_messages=1, evicted_bytes=size)
        log.warning("topic %s: message %s from %s %s", self.topic, key[2], key[0], why)

    def _remember(self, key: MessageKey, delivered: bool) -> None:
        self._done[key] = delivered
        while len(self._done) > REMEMBERED_DONE:
            self._done.popitem(last=False)

    def expire(self, now: float | None = None) -> list[MessageId]:
        """Drop incomplete messages that received no chunk for timeout_s; returns their ids."""
        now = self.clock() if now is None else now
        old = [k for k, p in self._partial.items() if now - p.last > self.timeout_s]
        for k in old:
            p = self._forget(k, delivered=False)
            self.stats.add(expired_messages=1)
            log.warning("topic %s: message %s from %s expired with %d/%d chunks: no chunk for %.1fs "
                        "(started %.1fs ago)", self.topic, k[2], k[0], len(p.received), p.count,
                        now - p.last, now - p.started)
        return [k[:3] for k in old]
