"""The one wire type of every commlab topic: a chunk of a message; splitting, encoding, decoding.

A message is (meta: JSON text, payload: bytes). It is cut into chunks of at most chunk_bytes;
(sender, incarnation, msg_id) identifies the message so reassembly never mixes senders or a
restarted sender's old messages; index/count/total_bytes let the receiver validate and order.
`meta` travels in chunk 0 only.

The stock binding (de)serializes `sequence[uint8]` as a Python list of ints (about 20 MB/s), so
encode/decode below write and parse the same XCDR1 bytes by hand, with one copy of the payload on
the way out and none on the way in. tests/test_dds_fastpath.py checks them byte for byte against
the binding, and pins the non-public C-layer calls that carry these bytes (endpoints.py, reading.py).
"""
# No `from __future__ import annotations`: the IDL binding resolves these hints at runtime.
import struct
import threading
from dataclasses import dataclass
from typing import Iterator, Union

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import sequence, uint8, uint32, uint64

from .errors import MessageError

Payload = Union[bytes, memoryview]


@dataclass
class Chunk(IdlStruct, typename="commlab.dds.Chunk"):
    sender: str
    incarnation: uint64
    msg_id: uint64
    index: uint32
    count: uint32
    total_bytes: uint64
    meta: str
    payload: sequence[uint8]


def split(sender: str, incarnation: int, msg_id: int, meta: str, payload: Payload, chunk_bytes: int) -> Iterator[Chunk]:
    """Chunks of one message; an empty payload still gives one chunk (an empty allgather must not hang)."""
    view = memoryview(payload).cast("B")
    total = len(view)
    count = max(1, -(-total // chunk_bytes))
    for i in range(count):
        yield Chunk(sender=sender, incarnation=incarnation, msg_id=msg_id, index=i, count=count,
                    total_bytes=total, meta=meta if i == 0 else "",
                    payload=view[i * chunk_bytes:(i + 1) * chunk_bytes])


# XCDR1: after the 4-byte encapsulation header, each field is aligned to its size (at most 8)
# counted from the end of that header. Layout: string sender, pad to 8, HEAD, string meta,
# pad to 4, uint32 length + payload octets; DataWriter.write pads the sample to a multiple of 4.
LITTLE = b"\x00\x01\x00\x00"
HEAD = {"<": struct.Struct("<QQIIQ"), ">": struct.Struct(">QQIIQ")}  # incarnation msg_id index count total


def _head(c: Chunk) -> bytes:
    """Every byte of the sample before the payload octets (up to and including their count)."""
    sender, meta = c.sender.encode() + b"\0", c.meta.encode() + b"\0"
    pos = 4 + len(sender)
    out = [LITTLE, struct.pack("<I", len(sender)), sender, b"\0" * (-pos % 8),
           HEAD["<"].pack(c.incarnation, c.msg_id, c.index, c.count, c.total_bytes)]
    pos += -pos % 8 + HEAD["<"].size
    out += [struct.pack("<I", len(meta)), meta, b"\0" * (-(pos + 4 + len(meta)) % 4), struct.pack("<I", len(c.payload))]
    return b"".join(out)


def encode(c: Chunk) -> bytes:
    """The sample exactly as the binding's DataWriter.write serializes it (XCDR1, little endian)."""
    return b"".join([_head(c), c.payload, b"\0" * (-len(c.payload) % 4)])


class Encoder:
    """encode() into one buffer reused for every chunk of a writer. A fresh 1 MiB bytes per chunk
    cost a malloc and page faults each time (about 10% of loopback goodput for 1.7-10 MB messages).
    The returned view is valid until the next call in the same thread (one buffer per thread, as
    threads may publish on one writer); the C layer copies it during write()."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self, c: Chunk) -> memoryview:
        head = _head(c)
        end = len(head) + len(c.payload)
        total = end + (-end % 4)  # the header is 4-aligned, so this pads the payload as encode() does
        buf = getattr(self._local, "buf", b"")
        if len(buf) < total:
            buf = self._local.buf = bytearray(total)  # a new buffer, not a resize: an old view may still exist
        view = memoryview(buf)[:total]
        view[:len(head)] = head
        view[len(head):end] = c.payload
        view[end:total] = bytes(total - end)
        return view


def decode(data: bytes) -> Chunk:
    """Parse a serialized Chunk; its payload is a zero-copy view into `data`. MessageError if malformed."""
    if len(data) < 4 or data[0] != 0 or data[1] not in (0, 1):
        raise MessageError(f"not an XCDR1 Chunk (encapsulation {bytes(data[:4]).hex()})")
    e = "<" if data[1] == 1 else ">"
    view = memoryview(data)
    try:
        sender, pos = _string(view, 4, e)
        pos += -(pos - 4) % 8
        incarnation, msg_id, index, count, total = HEAD[e].unpack_from(view, pos)
        meta, pos = _string(view, pos + HEAD[e].size, e)
        pos += -(pos - 4) % 4
        (n,) = struct.unpack_from(e + "I", view, pos)
    except struct.error as err:
        raise MessageError(f"truncated Chunk of {len(data)} bytes: {err}") from None
    if pos + 4 + n > len(data):
        raise MessageError(f"Chunk payload of {n} bytes overruns the {len(data)}-byte sample")
    return Chunk(sender, incarnation, msg_id, index, count, total, meta, view[pos + 4:pos + 4 + n])


def _string(view: memoryview, pos: int, e: str) -> tuple[str, int]:
    pos += -(pos - 4) % 4
    (n,) = struct.unpack_from(e + "I", view, pos)
    end = pos + 4 + n
    if n == 0 or end > len(view) or view[end - 1] != 0:
        raise MessageError(f"bad string of length {n} at offset {pos}")
    try:
        return bytes(view[pos + 4:end - 1]).decode(), end
    except UnicodeDecodeError as err:
        raise MessageError(f"string at offset {pos} is not UTF-8: {err}") from None
