"""The one wire type of every commlab topic: a chunk of a message, plus splitting into chunks.

A message is (meta: JSON text, payload: bytes). It is cut into chunks of at most chunk_bytes;
(sender, incarnation, msg_id) identifies the message so reassembly never mixes senders or a
restarted sender's old messages; index/count/total_bytes let the receiver validate and order.
`meta` travels in chunk 0 only.
"""
# No `from __future__ import annotations`: the IDL binding resolves these hints at runtime.

from dataclasses import dataclass
from typing import Iterator

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import sequence, uint8, uint32, uint64

from .fastpath import install_blob_machine


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


install_blob_machine(Chunk, "payload")


def split(sender: str, incarnation: int, msg_id: int, meta: str, payload: bytes | memoryview,
          chunk_bytes: int) -> Iterator[Chunk]:
    """Chunks of one message; an empty payload still gives one chunk (an empty allgather must not hang)."""
    view = memoryview(payload).cast("B")
    total = len(view)
    count = max(1, -(-total // chunk_bytes))
    for i in range(count):
        yield Chunk(sender=sender, incarnation=incarnation, msg_id=msg_id, index=i, count=count,
                    total_bytes=total, meta=meta if i == 0 else "",
                    payload=view[i * chunk_bytes:(i + 1) * chunk_bytes])
