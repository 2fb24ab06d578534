"""A hypothesis-drawn corruption of a valid frame: bits flipped, bytes cut out or inserted."""
from __future__ import annotations

from hypothesis import strategies as st


def mutated(data: st.DataObject, frame: bytes, max_edits: int = 4) -> bytes:
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, max_edits))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del buf[pos:pos + data.draw(st.integers(1, 8))]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    return bytes(buf)
