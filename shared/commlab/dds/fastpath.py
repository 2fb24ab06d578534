"""Fast serializer for the chunk payload (`sequence<octet>`), replacing the stock binding's.

The stock cyclonedds 11.0.1 binding turns `sequence[uint8]` into a Python list of ints (about
20 MB/s). `BlobMachine` writes and reads the same CDR bytes (uint32 length, then the octets) with
one buffer copy. It replaces a member machine inside the type's non-public `__idl__` support, so
cyclonedds is pinned and tests/test_dds_fastpath.py fails if those internals change.
"""
from __future__ import annotations

from cyclonedds.idl._machinery import PlainCdrV2SequenceOfPrimitiveMachine

# Subclassing keeps every isinstance-based decision of the binding (XCDR2 length codes) unchanged.
class BlobMachine(PlainCdrV2SequenceOfPrimitiveMachine):
    def serialize(self, buffer, value, serialize_kind=None, key_enabled=None):
        buffer.align(4)
        buffer.write("I", 4, len(value))
        if len(value):
            buffer.write_bytes(value)

    def deserialize(self, buffer, deserialize_kind=None, key_enabled=None):
        buffer.align(4)
        return buffer.read_bytes(buffer.read("I", 4))


def install_blob_machine(idl_type: type, member: str) -> None:
    """Make `member` (declared `sequence[uint8]`) of `idl_type` (de)serialize as raw bytes."""
    support = idl_type.__idl__
    support.populate()
    for machine in (support.v1_machine, support.v2_machine):
        stock = machine.members_machines[member]
        if type(stock) is not PlainCdrV2SequenceOfPrimitiveMachine or stock.size != 1:
            raise TypeError(f"{idl_type.__name__}.{member}: unexpected machine {type(stock).__name__}; "
                            "the cyclonedds internals changed, re-check fastpath.py")
        fast = BlobMachine.__new__(BlobMachine)
        fast.__dict__.update(stock.__dict__)
        machine.members_machines[member] = fast
