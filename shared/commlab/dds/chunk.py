"""The one wire type of every commlab topic: a chunk of a message; splitting, encoding, decoding.

A message is (meta: JSON text, payload: bytes). It is cut into chunks of at most chunk_bytes;
(sender, incarnation, msg_id) identifies the message so reassembly never mixes senders or a
restarted sender's old messages; index/count/total_bytes let the receiver validate and order.
`meta` travels in chunk 0 only.

The stock binding (de)serializes `sequence[uint8]` as a Python list of ints (about 20 MB/s), so
the bytes are written and parsed here by hand: encode_head gives everything before the payload
octets (the writer sends head and payload as separate pieces, cdr.py), decode_head parses them
from a prefix of a received sample so the payload can be copied once, straight into place.
tests/dds/test_dds_fastpath.py checks them byte for byte against the binding.
"""
# No `from __future__ import annotations`: the IDL binding resolves these hints at runtime.
import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Union

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


class ChunkHead(NamedTuple):
    """Every field of a Chunk except the payload, plus where the payload octets are in the sample."""
    sender: str
    incarnation: int
    msg_id: int
    index: int
    count: int
    total_bytes: int
    meta: str
    payload_offset: int
    payload_len: int


class PrefixTooShort(Exception):
    """decode_head needs more of the sample than the prefix it was given (a long meta)."""


def encode_head(c: Chunk, payload_len: int, meta_text: str | None = None) -> bytes:
    """Every byte of the sample before the payload octets (up to and including their count);
    `meta_text`: in place of c.meta."""
    sender, meta = c.sender.encode() + b"\0", (c.meta if meta_text is None else meta_text).encode() + b"\0"
    pos = 4 + len(sender)
    out = [LITTLE, struct.pack("<I", len(sender)), sender, b"\0" * (-pos % 8),
           HEAD["<"].pack(c.incarnation, c.msg_id, c.index, c.count, c.total_bytes)]
    pos += -pos % 8 + HEAD["<"].size
    out += [struct.pack("<I", len(meta)), meta, b"\0" * (-(pos + 4 + len(meta)) % 4), struct.pack("<I", payload_len)]
    return b"".join(out)


def padding(head_len: int, payload_len: int) -> bytes:
    """The zeros DataWriter.write appends so the sample is a multiple of 4 bytes."""
    return bytes(-(head_len + payload_len) % 4)


def encode(c: Chunk) -> bytes:
    """The sample exactly as the binding's DataWriter.write serializes it (XCDR1, little endian)."""
    head = encode_head(c, len(c.payload))
    return b"".join([head, c.payload, padding(len(head), len(c.payload))])


def decode_head(data: bytes | bytearray | memoryview, sample_size: int) -> ChunkHead:
    """Parse the fields of a serialized Chunk of `sample_size` bytes from `data`, which may be just
    a prefix of it. MessageError if the sample is malformed; PrefixTooShort if the prefix ends
    before the payload octets do not (the caller then passes the whole sample)."""
    view = memoryview(data)
    short = len(view) < sample_size
    if len(view) < 4 or view[0] != 0 or view[1] not in (0, 1):
        raise MessageError(f"not an XCDR1 Chunk (encapsulation {bytes(view[:4]).hex()})")
    e = "<" if view[1] == 1 else ">"
    try:
        sender, pos = _string(view, 4, e, short)
        pos += -(pos - 4) % 8
        incarnation, msg_id, index, count, total = HEAD[e].unpack_from(view, pos)
        meta, pos = _string(view, pos + HEAD[e].size, e, short)
        pos += -(pos - 4) % 4
        (n,) = struct.unpack_from(e + "I", view, pos)
    except struct.error as err:
        if short:
            raise PrefixTooShort from None
        raise MessageError(f"truncated Chunk of {sample_size} bytes: {err}") from None
    if pos + 4 + n > sample_size:
        raise MessageError(f"Chunk payload of {n} bytes overruns the {sample_size}-byte sample")
    return ChunkHead(sender, incarnation, msg_id, index, count, total, meta, pos + 4, n)


def decode(data: bytes) -> Chunk:
    """Parse a whole serialized Chunk; its payload is a zero-copy view into `data`."""
    h = decode_head(data, len(data))
    payload = memoryview(data)[h.payload_offset:h.payload_offset + h.payload_len]
    return Chunk(h.sender, h.incarnation, h.msg_id, h.index, h.count, h.total_bytes, h.meta, payload)


def _string(view: memoryview, pos: int, e: str, short: bool) -> tuple[str, int]:
    pos += -(pos - 4) % 4
    (n,) = struct.unpack_from(e + "I", view, pos)
    end = pos + 4 + n
    if end > len(view) and short:
        raise PrefixTooShort
    if n == 0 or end > len(view) or view[end - 1] != 0:
        raise MessageError(f"bad string of length {n} at offset {pos}")
    try:
        return bytes(view[pos + 4:end - 1]).decode(), end
    except UnicodeDecodeError as err:
        raise MessageError(f"string at offset {pos} is not UTF-8: {err}") from None
