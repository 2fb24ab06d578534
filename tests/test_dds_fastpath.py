"""Pins the non-public cyclonedds internals the fast path relies on: fails if the binding changes."""
# No `from __future__ import annotations`: the IDL binding resolves StockChunk hints at runtime.

import inspect
from dataclasses import dataclass
from importlib.metadata import version

import cyclonedds.pub
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import sequence, uint8, uint32, uint64

from commlab.dds.chunk import Chunk
from commlab.dds.fastpath import BlobMachine


@dataclass
class StockChunk(IdlStruct, typename="commlab.dds.Chunk"):
    sender: str
    incarnation: uint64
    msg_id: uint64
    index: uint32
    count: uint32
    total_bytes: uint64
    meta: str
    payload: sequence[uint8]


def test_cyclonedds_is_the_pinned_version():
    assert version("cyclonedds") == "11.0.1"


def test_chunk_payload_uses_blob_machine():
    for machine in (Chunk.__idl__.v1_machine, Chunk.__idl__.v2_machine):
        assert isinstance(machine.members_machines["payload"], BlobMachine)


def test_fast_serialization_is_byte_identical_to_stock():
    payload = bytes(range(256)) * 40 + b"\x07"
    fields = ("node", 2**62 + 5, 17, 3, 9, 123456, '{"k": 1}')
    for v2 in (False, True):
        fast = Chunk(*fields, payload).serialize(use_version_2=v2)
        stock = StockChunk(*fields, list(payload)).serialize(use_version_2=v2)
        assert fast == stock
        assert Chunk.deserialize(stock).payload == payload
        assert StockChunk.deserialize(fast).payload == list(payload)


def test_writer_path_we_bypass_is_unchanged():
    # endpoints.py serializes itself and calls ddspy_write with the same 4-byte padding as DataWriter.write.
    src = inspect.getsource(cyclonedds.pub.DataWriter.write)
    assert "ddspy_write(self._ref, ser)" in src and "ser.ljust((len(ser) + 4 - 1) & ~(4 - 1), b'\\0')" in src
    from cyclonedds._clayer import ddspy_take, ddspy_write  # noqa: F401  (reading.py, endpoints.py)
