"""Chunked, reliable publisher and subscriber of one topic.

Publisher: waits until every live peer that announced this topic is matched, then writes the
message chunk by chunk; a write blocked past write_timeout_s raises DdsWriteTimeout (the sample
was not delivered). Subscriber: a reader thread reassembles chunks; receive() hands out whole
messages. Both count wire bytes and pure network wait in the node's CommStats.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from typing import Any, Callable, Collection

from cyclonedds.core import DDSException
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from .cdr import (SampleInfo, SampleToFill, address_of, serdata_bytes, serdata_size, serdata_to_ser, serdata_view,
                  sertype_of, write_iov)
from .chunk import Chunk, ChunkHead, PrefixTooShort, decode_head, encode_head, padding, split
from .errors import DdsWriteTimeout, MessageError
from .host import EndpointHost
from .messages import from_wire, to_wire
from .qos import lossless
from .reading import ReaderLoop, matched_handles, wait_for_acks
from .reassembly import Assembled, Reassembler
from .seal import Sealing
from .stats import wire_bytes


log = logging.getLogger(__name__)
RETCODE_TIMEOUT = DDSException.DDS_RETCODE_TIMEOUT
ZEROS = bytes(4)
ZEROS_ADDRESS = address_of(ZEROS)
# Bytes read to parse a chunk's head: room for an authenticated message's envelope and trailer to a few
# recipients (a one-chunk message, e.g. a ring block, carries both); a longer meta costs a copy of
# the whole sample (at 512 bytes, every ring block of a signed DDP run was copied twice).
HEAD_PREFIX = 4096


def chunk_topic(node: EndpointHost, name: str) -> Topic:
    return node.topic(f"commlab_{name}", Chunk, lossless(node.settings.write_timeout_s))


class ChunkWriter:
    """Writes (meta, payload) messages as chunks on one topic."""

    def __init__(self, node: EndpointHost, name: str, readers: Callable[[], Collection[str]] | None = None,
                 chunk_bytes: int | None = None):
        """`readers`: the nodes that read this topic when only some do (asked at each message; empty:
        not known yet): with authentication, messages are sealed for them alone. `chunk_bytes`: this
        topic's chunk size (None: the node's settings.chunk_bytes)."""
        self.node, self.name, self.readers = node, name, readers
        self.chunk_bytes = node.settings.chunk_bytes if chunk_bytes is None else chunk_bytes
        self.writer = DataWriter(node.participant, chunk_topic(node, name), qos=lossless(node.settings.write_timeout_s))
        self._ids = itertools.count(1)
        self._sertype = sertype_of(self.writer._ref)
        self._matched: set[str] = set()
        self._matched_version: tuple[int, int] = (-1, -1)
        self._ready_at: tuple[int, tuple[int, int]] | None = None  # (directory generation, match version)
        self._lock = threading.Lock()  # one message at a time (a collective's resends come from any thread)
        node.writers.append(self)

    def _match_version(self) -> tuple[int, int]:
        status = self.writer.get_publication_matched_status()
        return status.total_count, status.current_count

    def matched_participants(self) -> set[str]:
        """Participants of the matched readers; recomputed only when the match counts change,
        since the lookup costs about a millisecond and runs before every message."""
        version = self._match_version()
        if version != self._matched_version:
            out = set()
            for handle in matched_handles(self.writer.get_matched_subscriptions):
                data = self.writer.get_matched_subscription_data(handle)
                if data is not None:
                    out.add(str(data.participant_key))
            self._matched, self._matched_version = out, version
        return self._matched

    def missing_readers(self) -> list[str]:
        """Live peers that announced a reader of this topic which is not matched yet on both sides
        (our writer sees their reader, and they announced that their reader sees our writer)."""
        matched, me = self.matched_participants(), self.node.participant_id
        return sorted(p.name for p in self.node.announcer.directory.alive().values()
                      if self.name in p.info.get("subscribes", ())
                      and (p.participant not in matched or me not in p.info.get("matched", {}).get(self.name, ())))

    def wait_for_readers(self, timeout_s: float) -> None:
        directory = self.node.announcer.directory
        if self._ready_at == (directory.generation, self._match_version()):
            return  # no announcement and no match changed since every reader was matched

        def ready() -> bool:  # evaluated under the directory's lock
            if self.missing_readers():
                return False
            self._ready_at = (directory.generation, self._matched_version)
            return True
        with self.node.stats.waiting():
            if not directory.wait_for(ready, timeout_s):
                raise DdsWriteTimeout(self.name, self.missing_readers(), f"readers not matched within {timeout_s:.1f}s")

    def wait_for_nodes(self, nodes: Collection[str], timeout_s: float) -> None:
        """Until every node named is alive: a node whose lease lapsed (a starved process) is not
        among the readers a write waits for, and would silently get nothing."""
        directory = self.node.announcer.directory
        with self.node.stats.waiting():
            if not directory.wait_for(lambda: set(nodes) <= set(directory.alive()), timeout_s):
                raise DdsWriteTimeout(self.name, sorted(set(nodes) - set(directory.alive())),
                                      f"not alive within {timeout_s:.1f}s")

    def acknowledged(self) -> bool:
        """Whether every matched reader acknowledged every chunk written so far: if not, the last
        messages are still on their way (and reliable) to a reader that sees this writer."""
        return wait_for_acks(self.writer, 0.0)

    def write(self, meta: str, payload: bytes | memoryview, to: Collection[str] = ()) -> None:
        with self._lock:
            self._write(meta, payload, to)

    def _sample_to_fill(self, samples: dict[int, SampleToFill], chunk: Chunk, sealing: Sealing) -> int:
        """Chunk's sample with its payload left to seal into, and where that payload goes (the last
        chunk's head with a trailer of zeros, overwritten once the payload is sealed); called
        from the sealing worker too."""
        n = len(chunk.payload)
        trailer = sealing.trailer(placeholder=True) if chunk.index == chunk.count - 1 else None
        meta = None if trailer is None else sealing.with_envelope(trailer) if chunk.index == 0 else trailer
        head = encode_head(chunk, n, meta)
        sample = samples[chunk.index] = SampleToFill(self._sertype, head, n, len(padding(len(head), n)))
        if trailer is not None:  # the trailer ends the meta: where the real one goes
            sample.trailer_at = head.rindex(trailer.encode())
        return sample.payload_address

    def _write(self, meta: str, payload: bytes | memoryview, to: Collection[str]) -> None:
        s = self.node.settings
        if to:
            self.wait_for_nodes(to, s.write_timeout_s)
        self.wait_for_readers(s.write_timeout_s)
        # One unicast copy per remote participant (current as of the wait); with data multicast,
        # Cyclone sends one copy to the group for all of them.
        copies = len(self._matched)
        multicast = s.multicast == "data" and copies > 1
        if multicast:
            copies = 1
        msg_id = next(self._ids)
        sent = chunks = 0
        waited = 0.0
        view = memoryview(payload).cast("B")
        base = address_of(view) if len(view) else 0
        # Protected: an envelope in the first chunk, the payload's tag or digest in the last.
        sealer = self.node.sealer
        sealing = None if sealer is None else sealer.begin(self.name, meta, len(view),
                                                           self.readers() if self.readers is not None else ())
        message = list(split(self.node.name, self.node.incarnation, msg_id,
                             meta if sealing is None else sealing.envelope, view, self.chunk_bytes))
        # Sealed: each chunk's sample is built around an unfilled payload, and the payload sealed into it.
        samples: dict[int, SampleToFill] = {}
        sealed = None
        try:
            if sealing is not None:
                sealed = sealing.sealed([c.payload for c in message], lambda i: self._sample_to_fill(
                    samples, message[i], sealing))
            for chunk in message:
                n = len(chunk.payload)
                if sealed is None:
                    head = encode_head(chunk, n)
                    pad = len(padding(len(head), n))
                    size = len(head) + n + pad
                    pieces = [(address_of(head), len(head)), (base + chunk.index * self.chunk_bytes, n), (ZEROS_ADDRESS, pad)]
                    start = time.perf_counter()
                    ret = write_iov(self.writer._ref, self._sertype, [p for p in pieces if p[1]])
                else:
                    next(sealed)
                    sample = samples.pop(chunk.index)
                    if chunk.index == chunk.count - 1:  # the trailer, now that the whole payload is sealed
                        sample.overwrite_head(sample.trailer_at, sealing.trailer().encode())
                    size = sample.size
                    start = time.perf_counter()
                    ret = sample.write(self.writer._ref)
                waited += time.perf_counter() - start
                if ret == RETCODE_TIMEOUT:
                    peers, unannounced = self.node.peer_names(self.matched_participants())
                    raise DdsWriteTimeout(self.name, peers, f"chunk {chunk.index + 1}/{chunk.count} blocked for "
                                                            f"{s.write_timeout_s:.1f}s", unannounced)
                if ret < 0:
                    raise DDSException(ret, f"writing chunk {chunk.index} on topic {self.name!r}")
                sent += copies * wire_bytes(size, s.fragment_bytes, s.ip_mtu)
                chunks += copies
        except BaseException:
            if sealed is not None:
                sealed.close()
            for sample in samples.values():
                sample.discard()
            self.node.stats.add(bytes_sent=sent, chunks_sent=chunks, wait_s=waited)
            raise
        # counted once per message: the per-chunk loop is the hot path
        self.node.stats.add(bytes_sent=sent, chunks_sent=chunks, wait_s=waited,
                            payload_sent=copies * len(view), messages_sent=copies,
                            multicast_bytes_sent=sent if multicast else 0)


class ChunkReader:
    """Reassembles messages of one topic in its own thread and passes each to on_message."""

    def __init__(self, node: EndpointHost, name: str, on_message: Callable[[Assembled], None]):
        self.node, self.name, self._on_message = node, name, on_message
        self.reader = DataReader(node.participant, chunk_topic(node, name), qos=lossless(node.settings.write_timeout_s))
        self._assembler = Reassembler(name, node.stats, opener=node.opener, **node.settings.reassembly_limits())
        self._matched_version: tuple[int, int] = (-1, -1)
        self._prefix = bytearray(HEAD_PREFIX)  # used by the reader thread only
        self._prefix_address = address_of(self._prefix)
        node.announcer.add_subscription(name)
        self._loop = ReaderLoop(node.participant, self.reader, name, self._on_sample, self._on_tick, wake_on_match=True)

    def _on_tick(self) -> None:
        self._assembler.expire()
        status = self.reader.get_subscription_matched_status()
        version = (status.total_count, status.current_count)
        if version != self._matched_version:
            self._matched_version = version
            writers = set()
            for handle in matched_handles(self.reader.get_matched_publications):
                data = self.reader.get_matched_publication_data(handle)
                if data is not None:
                    writers.add(str(data.participant_key))
            self.node.announcer.set_matched_writers(self.name, writers)

    def _on_sample(self, sample: int, info: SampleInfo) -> None:
        if not info.valid_data:  # a writer left or disposed: nothing to read
            return
        size = serdata_size(sample)
        settings = self.node.settings
        self.node.stats.add(bytes_received=wire_bytes(size, settings.fragment_bytes, settings.ip_mtu), chunks_received=1)
        try:
            head = self._decode_head(sample, size)
        except MessageError as e:
            self.node.stats.add(malformed_chunks=1)
            log.warning("topic %s: undecodable chunk of %d bytes dropped: %s", self.name, size, e)
            return
        with serdata_view(sample, head.payload_offset, head.payload_len) as payload:
            done = self._assembler.add(head, payload, info.publication_handle)
        if done is not None:
            self.node.stats.add(messages_received=1, payload_received=len(done.payload))
            self._on_message(done)

    def heard_from(self, sender: str) -> float:
        """time.monotonic() of the last chunk from node `sender` that completed no message (0: none):
        a large message still arriving on a slow link shows here before it is whole."""
        return self._assembler.partial_at.get(sender, 0.0)

    def _decode_head(self, sample: int, size: int) -> ChunkHead:
        """The chunk's fields from a copy of the sample's first bytes (all of it if the meta is long)."""
        n = min(size, len(self._prefix))
        serdata_to_ser(sample, 0, n, self._prefix_address)
        try:
            return decode_head(memoryview(self._prefix)[:n], size)
        except PrefixTooShort:
            return decode_head(serdata_bytes(sample), size)

    def close(self) -> None:
        self._loop.stop()


class Publisher:
    def __init__(self, node: EndpointHost, cls: type):
        self.cls = cls
        self._writer = ChunkWriter(node, cls.__name__)

    def publish(self, msg: Any, to: Collection[str] = ()) -> None:
        """Write msg to every matched reader; `to`: nodes that must get it, waited for (up to
        write_timeout_s, then DdsWriteTimeout) when they are not alive now."""
        if not isinstance(msg, self.cls):
            raise TypeError(f"publisher of {self.cls.__name__} got {type(msg).__name__}")
        self._writer.write(*to_wire(msg), to=to)

    def wait_for_readers(self, timeout_s: float) -> None:
        self._writer.wait_for_readers(timeout_s)

    def wait_for_acks(self, timeout_s: float) -> bool:
        """Block until every matched reader acknowledged everything published (False after
        timeout_s): a node that leaves right after publishing would otherwise cut its last
        message short on a slow link."""
        return wait_for_acks(self._writer.writer, timeout_s)


class Subscriber:
    def __init__(self, node: EndpointHost, cls: type):
        self.cls, self._stats = cls, node.stats
        self.last_sender = ""  # node name of the sender of the last message received
        self._queue: queue.Queue = queue.Queue()
        self._reader = ChunkReader(node, cls.__name__, self._queue.put)

    def receive(self, timeout_s: float | None = None) -> Any | None:
        """The next whole message, or None after timeout_s. A malformed message is logged, counted
        and skipped; it never ends the wait early."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            with self._stats.waiting():
                try:
                    got: Assembled = self._queue.get(timeout=left)
                except queue.Empty:
                    return None
            try:
                msg = from_wire(self.cls, got.meta, got.payload)
                self.last_sender = got.sender
                return msg
            except MessageError as e:
                self._stats.add(malformed_chunks=1)
                log.warning("topic %s: message from %s dropped: %s", self.cls.__name__, got.sender, e)

    def close(self) -> None:
        self._reader.close()
