"""AEGIS-128X4 (libaegis, through pyaegis's cffi binding) as one payload's cipher and MAC.

pyaegis's own stream and MAC classes copy every chunk into a buffer they allocate; these contexts
hand libaegis the caller's buffers instead (in place, or into the message's buffer), and cffi
releases the GIL for each call, so a chunk is sealed beside a DDS write. libaegis picks its
implementation at run time: its four AES lanes per round fill a 512-bit VAES unit where the CPU
has one, and run as two 256-bit halves (AEGIS-128X2's rate) or interleaved AES-NI where it has not.
"""
from __future__ import annotations

from pyaegis._aegis_ffi import ffi, lib

KEY_BYTES = 16
NONCE_BYTES = 16
TAG_BYTES = 16
_NONCE = bytes(NONCE_BYTES)  # every key is used for one payload (envelope.py)

lib.aegis_init()  # runtime CPU detection; pyaegis does the same on import, this binding may come first


def _check_key(key: bytes) -> None:
    if len(key) != KEY_BYTES:
        raise ValueError(f"an AEGIS-128X4 key is {KEY_BYTES} bytes, not {len(key)}")


class AegisStream:
    """One AEGIS-128X4 encryption (or decryption) over a payload fed chunk by chunk, `associated`
    authenticated with it. The nonce is fixed: callers give every key one message only."""

    def __init__(self, key: bytes, associated: bytes, decrypt: bool = False):
        _check_key(key)
        self._state = ffi.new("aegis128x4_state *")
        lib.aegis128x4_state_init(self._state, associated, len(associated), _NONCE, key)
        self._update = lib.aegis128x4_state_decrypt_update if decrypt else lib.aegis128x4_state_encrypt_update

    def update_into(self, data: bytes | bytearray | memoryview, out: bytearray | memoryview) -> None:
        """The next chunk through the cipher into `out` (its length; `data` itself to work in place)."""
        if len(out) != len(data):
            raise ValueError(f"output of {len(out)} bytes for a chunk of {len(data)}")
        if len(data):
            src = ffi.from_buffer(data)
            dst = src if out is data else ffi.from_buffer(out, require_writable=True)
            if self._update(self._state, dst, src, len(data)) != 0:
                raise ValueError("AEGIS-128X4 refused a chunk")

    def update_to(self, data: bytes | bytearray | memoryview, address: int) -> None:
        """The next chunk through the cipher into len(data) writable bytes at `address` (the
        sample a chunk is sent in, or its place in a message's buffer; `data`'s own address to
        work in place): no buffer object to make per chunk."""
        if len(data) and self._update(self._state, ffi.cast("uint8_t *", address), ffi.from_buffer(data), len(data)) != 0:
            raise ValueError("AEGIS-128X4 refused a chunk")

    def tag(self) -> bytes:
        """The encryption's tag, once every chunk went through update_into() or update_to()."""
        out = ffi.new("uint8_t[]", TAG_BYTES)
        lib.aegis128x4_state_encrypt_final(self._state, out, TAG_BYTES)
        return bytes(ffi.buffer(out, TAG_BYTES))

    def verify(self, tag: bytes) -> bool:
        """Whether the decrypted payload and the associated data match `tag` (constant time)."""
        return len(tag) == TAG_BYTES and lib.aegis128x4_state_decrypt_final(self._state, tag, TAG_BYTES) == 0


class AegisMac:
    """AEGIS-128X4-MAC of a payload fed chunk by chunk, under a key used for this one payload."""

    def __init__(self, key: bytes):
        _check_key(key)
        self._state = ffi.new("aegis128x4_mac_state *")
        lib.aegis128x4_mac_init(self._state, key, _NONCE)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) and lib.aegis128x4_mac_update(self._state, ffi.from_buffer(data), len(data)) != 0:
            raise ValueError("AEGIS-128X4-MAC refused a chunk")

    def tag(self) -> bytes:
        out = ffi.new("uint8_t[]", TAG_BYTES)
        lib.aegis128x4_mac_final(self._state, out, TAG_BYTES)
        return bytes(ffi.buffer(out, TAG_BYTES))
