"""Serialized samples in and out of Cyclone through its C API (ctypes), one payload copy per side.

Why not the binding: `ddspy_write` wants the whole sample in one Python buffer (so the chunk
header and payload had to be copied together first) and then copies it again into a zeroed
allocation; `ddspy_take` copies every received sample twice (into a zeroed allocation, then into a
Python bytes), and reassembly copied it a third time. Those passes were most of the loopback
cost of a large message (docs/transport.md).

Here a write hands the header and the caller's payload to `ddsi_serdata_from_ser_iov` as
separate pieces, so the payload is copied once, into the sample Cyclone sends, and
`dds_writecdr` sends it (ctypes releases the GIL while it blocks, ddspy_write did not). A take
gets references to the received samples from `dds_takecdr`; the caller reads a small prefix,
reads the payload in place (`ddsi_serdata_to_ser_ref`) on its one pass to where it belongs (a
copy, or decryption straight into the message's buffer), and releases the reference.

All calls are exported by the libddsc that the pinned cyclonedds==11.0.1 wheel loads;
`dds_takecdr`/`dds_writecdr` are public API, the `ddsi_serdata_*` helpers are exported but
lower level. tests/dds/test_dds_fastpath.py fails if any of this stops behaving as relied on here.
"""
from __future__ import annotations

import ctypes as ct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Sequence

import numpy as np
from cyclonedds.internal import load_cyclonedds

from .errors import DdsError

_lib = load_cyclonedds()  # the library instance the binding itself uses
# The same library, called without releasing the GIL: for calls of a microsecond or two, where
# giving the GIL away and queueing for it again (behind a busy consumer thread) costs more than
# the call itself; the reader thread makes several of them per sample.
_lib_gil = ct.PyDLL(_lib._name, handle=_lib._handle)
SDK_DATA = 2  # enum ddsi_serdata_kind { SDK_EMPTY, SDK_KEY, SDK_DATA }


class SampleInfo(ct.Structure):
    """dds_sample_info_t of Cyclone 11."""

    _fields_ = [("sample_state", ct.c_uint32), ("view_state", ct.c_uint32), ("instance_state", ct.c_uint32),
                ("valid_data", ct.c_bool), ("source_timestamp", ct.c_int64), ("instance_handle", ct.c_uint64),
                ("publication_handle", ct.c_uint64), ("disposed_generation_count", ct.c_uint32),
                ("no_writers_generation_count", ct.c_uint32), ("sample_rank", ct.c_uint32),
                ("generation_rank", ct.c_uint32), ("absolute_generation_rank", ct.c_uint32)]


class IoVec(ct.Structure):
    """ddsrt_iovec_t on Linux: struct iovec."""

    _fields_ = [("base", ct.c_void_p), ("len", ct.c_size_t)]


def _fn(lib: ct.CDLL, name: str, restype, *argtypes):
    f = getattr(lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


# Releasing the GIL: calls that copy a whole payload or may block.
_writecdr = _fn(_lib, "dds_writecdr", ct.c_int32, ct.c_int32, ct.c_void_p)
_from_ser_iov = _fn(_lib, "ddsi_serdata_from_ser_iov", ct.c_void_p, ct.c_void_p, ct.c_int, ct.c_size_t, ct.POINTER(IoVec), ct.c_size_t)
_to_ser_releasing_gil = _fn(_lib, "ddsi_serdata_to_ser", None, ct.c_void_p, ct.c_size_t, ct.c_size_t, ct.c_void_p)
# Holding the GIL: short calls.
_takecdr = _fn(_lib_gil, "dds_takecdr", ct.c_int32, ct.c_int32, ct.POINTER(ct.c_void_p), ct.c_uint32, ct.POINTER(SampleInfo), ct.c_uint32)
_get_sertype = _fn(_lib_gil, "dds_get_entity_sertype", ct.c_int32, ct.c_int32, ct.POINTER(ct.c_void_p))
_to_ser_holding_gil = _fn(_lib_gil, "ddsi_serdata_to_ser", None, ct.c_void_p, ct.c_size_t, ct.c_size_t, ct.c_void_p)
_to_ser_ref = _fn(_lib_gil, "ddsi_serdata_to_ser_ref", ct.c_void_p, ct.c_void_p, ct.c_size_t, ct.c_size_t, ct.POINTER(IoVec))
_to_ser_unref = _fn(_lib_gil, "ddsi_serdata_to_ser_unref", None, ct.c_void_p, ct.POINTER(IoVec))
_memmove_releasing_gil = _fn(ct.CDLL(None), "memmove", ct.c_void_p, ct.c_void_p, ct.c_void_p, ct.c_size_t)
_memmove_holding_gil = _fn(ct.PyDLL(None), "memmove", ct.c_void_p, ct.c_void_p, ct.c_void_p, ct.c_size_t)
serdata_size = _fn(_lib_gil, "ddsi_serdata_size", ct.c_uint32, ct.c_void_p)
serdata_unref = _fn(_lib_gil, "ddsi_serdata_unref", None, ct.c_void_p)
COPY_RELEASING_GIL = 256 * 1024  # below this a copy takes some tens of microseconds at most: keep the GIL


def serdata_to_ser(sample: int, offset: int, size: int, dest: int) -> None:
    """Copy size bytes of a serialized sample, from offset, to address dest."""
    (_to_ser_releasing_gil if size >= COPY_RELEASING_GIL else _to_ser_holding_gil)(sample, offset, size, dest)


@contextmanager
def serdata_view(sample: int, offset: int, size: int) -> Iterator[memoryview]:
    """size bytes of a serialized sample from offset, read in place (no copy): valid inside the block only."""
    if not size:
        yield memoryview(b"")
        return
    iov = IoVec()
    ref = _to_ser_ref(sample, offset, size, ct.byref(iov))
    try:
        yield memoryview((ct.c_char * size).from_address(iov.base)).cast("B").toreadonly()
    finally:
        _to_ser_unref(ref, ct.byref(iov))


def copy_into(dest: int, src) -> None:
    """Copy the contiguous buffer `src` to address dest."""
    n = len(src)
    if n:
        (_memmove_releasing_gil if n >= COPY_RELEASING_GIL else _memmove_holding_gil)(dest, address_of(src), n)


def sertype_of(entity: int) -> int:
    """The C sertype of a reader's or writer's topic (needed to build samples of that type)."""
    out = ct.c_void_p()
    ret = _get_sertype(entity, ct.byref(out))
    if ret < 0 or not out.value:
        raise DdsError(f"dds_get_entity_sertype({entity}) failed with {ret}")
    return out.value


def write_iov(writer: int, sertype: int, pieces: Sequence[tuple[int, int]]) -> int:
    """Write one sample made of (address, length) pieces, in order; returns the DDS return code.

    The pieces are copied into the new sample before this returns, so the caller's buffers may
    change afterwards; dds_writecdr consumes the sample's reference on every path.
    """
    iov = (IoVec * len(pieces))(*pieces)
    size = sum(n for _, n in pieces)
    sample = _from_ser_iov(sertype, SDK_DATA, len(pieces), iov, size)
    if not sample:  # the binding's type rejected the bytes: our encoder is wrong, not the peer
        raise DdsError(f"Cyclone rejected a serialized sample of {size} bytes")
    return _writecdr(writer, sample)


class SampleToFill:
    """One sample to write whose payload is filled in place: a sealed chunk is encrypted straight
    into the bytes Cyclone sends, so the cipher's pass replaces write_iov's copy instead of adding
    to it. The sample is allocated zeroed (the binding's dds_alloc) around the head, so its
    `padding` bytes after the payload are already the zeros they must be; the payload_bytes at
    `payload_address` are the caller's to fill until write() or discard(), and part of the head
    may be overwritten in place (a trailer known only once the payload is sealed)."""

    def __init__(self, sertype: int, head: bytes, payload_bytes: int, padding: int):
        self.size = len(head) + payload_bytes + padding
        iov = IoVec(address_of(head), len(head))
        self._sample = _from_ser_iov(sertype, SDK_DATA, 1, ct.byref(iov), self.size)
        if not self._sample:
            raise DdsError(f"Cyclone rejected a sample of {self.size} bytes with a head of {len(head)}")
        self._head_bytes = len(head)
        self.trailer_at: int | None = None  # where in the head a trailer to overwrite starts (its writer knows)
        self._iov = IoVec()
        self._ref = _to_ser_ref(self._sample, 0, self.size, ct.byref(self._iov))
        self._base = self._iov.base
        self.payload_address, self.payload_bytes = self._base + len(head), payload_bytes

    def overwrite_head(self, offset: int, data: bytes) -> None:
        """Replace len(data) bytes of the head from `offset`."""
        if not 0 <= offset <= offset + len(data) <= self._head_bytes:
            raise DdsError(f"{len(data)} bytes at {offset} do not fit a head of {self._head_bytes}")
        copy_into(self._base + offset, data)

    def _release_ref(self) -> None:
        if self._ref is not None:
            _to_ser_unref(self._ref, ct.byref(self._iov))
            self._ref = None

    def write(self, writer: int) -> int:
        """Send the sample (dds_writecdr consumes it on every path); the DDS return code."""
        self._release_ref()
        sample, self._sample = self._sample, None
        return _writecdr(writer, sample)

    def discard(self) -> None:
        """Drop a sample that will not be written (a write before it failed)."""
        self._release_ref()
        if self._sample is not None:
            serdata_unref(self._sample)
            self._sample = None


def serdata_bytes(sample: int) -> bytes:
    """A copy of a whole serialized sample (the key only, for an invalid sample of a keyed topic)."""
    out = bytearray(serdata_size(sample))
    if out:
        serdata_to_ser(sample, 0, len(out), address_of(out))
    return bytes(out)


class Taker:
    """Takes up to `capacity` serialized samples at a time from one reader.

    take() returns the number n (0 when there is nothing); samples[i] is a serdata reference and
    infos[i] its sample info for i < n. Every reference must be released with serdata_unref
    before the next take.
    """

    def __init__(self, reader: int, capacity: int):
        self.reader, self.capacity = reader, capacity
        self.samples = (ct.c_void_p * capacity)()
        self.infos = (SampleInfo * capacity)()

    def take(self) -> int:
        n = _takecdr(self.reader, self.samples, self.capacity, self.infos, 0)
        if n < 0:
            raise DdsError(f"dds_takecdr on reader {self.reader} failed with {n}")
        return n


_new_bytes = ct.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype, _new_bytes.argtypes = ct.py_object, [ct.c_void_p, ct.c_ssize_t]


def unfilled_bytes(n: int) -> bytes:
    """A new bytes object of n bytes whose contents are not initialised: CPython's C API builds
    bytes in place this way (PyBytes_FromStringAndSize with NULL), which saves the zeroing pass of
    bytearray(n). Only for a buffer written completely (via address_of) before anyone else sees it."""
    return _new_bytes(None, n)


def writable_view(buf: bytes, offset: int, n: int) -> memoryview:
    """n bytes of `buf` from offset, writable: for a buffer from unfilled_bytes that is still
    being filled (decrypted in place) before anyone else sees it. The view keeps `buf` alive: a
    worker may still fill it after its message was dropped."""
    return view_at(address_of(buf) + offset, n, owner=buf)


def view_at(address: int, n: int, owner: object = None) -> memoryview:
    """The n bytes at `address` as a writable view, which keeps `owner` (what holds them) alive."""
    place = (ct.c_char * n).from_address(address)
    place.owner = owner
    return memoryview(place).cast("B")


def address_of(buf) -> int:
    """Address of the first byte of a contiguous buffer, read-only ones (bytes) included."""
    if type(buf) is bytes:  # the common case, three times faster than through numpy
        return ct.cast(buf, ct.c_void_p).value or 0
    return np.frombuffer(buf, np.uint8).ctypes.data
