"""Versioned, self-describing frame header shared by every codec.

Layout (little-endian), 24 bytes of header followed by the codec parameters and the payload:

    offset size field
    0      4    magic b"CLCF"
    4      1    version (3)
    5      1    codec id (see each codec's ``codec_id``)
    6      1    dtype of the decoded vector (1 = float32)
    7      1    length of the codec parameters in bytes
    8      8    numel: number of elements of the decoded vector
    16     8    payload length in bytes
    24     P    codec parameters (fixed struct per codec)
    24+P   L    payload

A frame must be exactly 24 + P + L bytes long: trailing garbage is as suspicious as truncation.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from commlab.codecs.errors import CodecError

MAGIC = b"CLCF"
VERSION = 4  # 4: randomk positions from draws.py's key bytes (were an AES-128-CTR keystream)
# 3: qsgdz levels Rice-coded (runs of zeros, signs, levels above 1; were zstd-compressed),
# or qsgd's payload where that is not larger, a layout byte saying which
# 2: qsgdz levels zstd-compressed (were deflated), randomk positions from an AES keystream
DTYPE_FLOAT32 = 1
# Largest vector any decoder will produce unless the caller lowers it; 2**31 float32 is 8 GiB.
MAX_NUMEL = 2**31
HEADER = struct.Struct("<4sBBBBQQ")


@dataclass(frozen=True)
class Frame:
    """A parsed frame: header fields plus zero-copy views of the parameters and payload."""

    codec_id: int
    numel: int
    params: memoryview
    payload: memoryview


def build(codec_id: int, numel: int, params: bytes, parts: list) -> bytes:
    """Join header, params and payload parts (any buffers) into one frame with a single copy."""
    payload_len = sum(memoryview(p).nbytes for p in parts)
    head = HEADER.pack(MAGIC, VERSION, codec_id, DTYPE_FLOAT32, len(params), numel, payload_len)
    return b"".join([head, params, *parts])


def overhead(params_len: int) -> int:
    """Bytes a frame carries besides its payload."""
    return HEADER.size + params_len


def parse(frame: bytes | bytearray | memoryview, max_numel: int = MAX_NUMEL) -> Frame:
    """Validate the header of untrusted bytes; raises CodecError naming the first problem found."""
    try:
        view = memoryview(frame).cast("B")
    except TypeError as exc:
        raise CodecError(f"frame must be bytes-like, got {type(frame).__name__}") from exc
    if len(view) < HEADER.size:
        raise CodecError(f"frame truncated: {len(view)} bytes, header alone needs {HEADER.size}")
    magic, version, codec_id, dtype, params_len, numel, payload_len = HEADER.unpack_from(view)
    if magic != MAGIC:
        raise CodecError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise CodecError(f"unsupported wire version {version}, this decoder reads {VERSION}")
    if dtype != DTYPE_FLOAT32:
        raise CodecError(f"unsupported dtype code {dtype}, only float32 ({DTYPE_FLOAT32})")
    if numel > max_numel:
        raise CodecError(f"numel {numel} exceeds the cap of {max_numel} elements")
    expected = HEADER.size + params_len + payload_len
    if len(view) != expected:
        kind = "truncated" if len(view) < expected else "oversized"
        raise CodecError(
            f"frame {kind}: {len(view)} bytes, header says "
            f"{HEADER.size}+{params_len}+{payload_len}={expected}"
        )
    start = HEADER.size + params_len
    return Frame(codec_id, numel, view[HEADER.size : start], view[start:])
