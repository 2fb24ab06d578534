"""The wire format of protected messages (version 4) and the primitives both ends share.

A protected message's first chunk carries an envelope as its meta:
    {"auth": {"v": 4, "run", "sender", "incarnation", "seq", "topic", "bytes", "salt", "cipher", "mac"},
     "meta": <the message's own meta>, "tags": {recipient: HMAC-SHA256(pair key, signed)[:16]},
     "sig": Ed25519 over signed (a trusted node's message, for the untrusted nodes),
     "keys": {recipient: the message key wrapped for it} (an encrypted message to several)}
where `signed` is the canonical JSON of "auth", a zero byte, and the meta; "salt" is 16 random
bytes drawn for the message. The last chunk carries a trailer that authenticates the payload
(both in one meta for a one-chunk message).

"cipher": "aegis-128x4" (dds.encrypt, the default): the payload travels encrypted, one AEGIS-128X4
stream over all its chunks with `signed` as associated data. Its 16-byte message key:
  - one recipient: HKDF-SHA256(pair key, salt, "commlab message key" | signed);
  - several (a broadcast): 16 random bytes, wrapped for each recipient by AES-256-GCM under
    HKDF-SHA256(pair key, salt, "commlab key wrap" | recipient | signed).
Every key here encrypts one thing once: a derived key is new for every message (salt, incarnation
and sequence number are in `signed`), a random one is drawn per message, so the fixed all-zero
nonces (AEGIS and AES-GCM alike) never meet the same key twice.
"cipher": "none" (dds.encrypt false): the payload in clear.

"mac", how the trailer authenticates the payload:
  - "aead" (encrypted): {"aead": the AEGIS-128X4 tag};
  - "aegis-mac" (in clear, at most MAC_RECIPIENTS_MAX recipients): {"tags": {recipient:
    AEGIS-128X4-MAC of the payload}} under HMAC-SHA256(pair key, "commlab payload mac" | signed)[:16];
  - "blake3": {"digest": BLAKE3 of the payload as sent, "tags": {recipient: HMAC over signed and
    the digest}} (and "aead" when encrypted): one hash however many recipients, and the form a
    signing sender uses, since an AEAD or MAC tag binds nothing for a recipient that knows its key.
A signing sender adds "sig" (Ed25519 over signed and the digest) to the trailer.
"""
from __future__ import annotations

import hashlib
import hmac
import json

import blake3

from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_open, crypto_sign_seed_keypair
from nacl.exceptions import BadSignatureError

from . import aegis
from .auth import KEY_BYTES, TAG_BYTES
from .errors import MessageError

VERSION = 4
SALT_BYTES = 16
DIGEST_BYTES = blake3.blake3.digest_size
SIGNATURE_BYTES = crypto_sign_BYTES
NONCE = bytes(12)  # the AES-GCM key wrap's: every wrapping key is used once (module docstring)
WINDOW = 4096  # sequence numbers a receiver remembers per sender (of its newest incarnation only)
# AEGIS-128X4-MAC runs on the CPU's AES instructions, about eight times BLAKE3's rate per byte on
# one core of an AES-NI/VAES machine: a MAC per recipient costs less than one BLAKE3 pass up to
# several of them (a margin kept for CPUs without VAES).
MAC_RECIPIENTS_MAX = 6
CIPHERS = ("aegis-128x4", "none")
MACS = {"aegis-128x4": ("aead", "blake3"), "none": ("aegis-mac", "blake3")}  # the payload MACs of each cipher
REASONS = ("unauthenticated", "wrong_run", "wrong_key", "replayed", "out_of_window", "altered")
# Built once: json.dumps with any non-default option builds a new encoder on every call, which
# costs more than encoding the envelope (both ends canonicalise every message's envelope).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


class AuthError(MessageError):
    """A message that fails authentication; `reason` is one of REASONS (the metrics' key)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def signed_bytes(auth: dict, meta: str) -> bytes:
    return _CANONICAL.encode(auth).encode() + b"\0" + meta.encode()


def tag(key: bytes, signed: bytes) -> str:
    return hmac.digest(key, signed, "sha256")[:TAG_BYTES].hex()


def trailer_signed(signed: bytes, digest: str) -> bytes:
    return signed + b"\0trailer\0" + digest.encode()


def trailer_tag(key: bytes, signed: bytes, digest: str) -> str:
    return tag(key, trailer_signed(signed, digest))


def derive(pair: bytes, salt: bytes, label: bytes, signed: bytes, length: int = KEY_BYTES) -> bytes:
    """A key for one message: HKDF-SHA256 (RFC 5869) of the pair key, the message's salt, and what
    it is for; one block of output, in two one-shot HMACs (a cryptography HKDF object per message
    costs several times that)."""
    if not 0 < length <= hashlib.sha256().digest_size:
        raise ValueError(f"a derived key is 1 to 32 bytes, not {length}")
    prk = hmac.digest(salt, pair, "sha256")
    return hmac.digest(prk, label + b"\0" + signed + b"\1", "sha256")[:length]


def key_label(wrapped_for: str | None) -> bytes:
    """The HKDF label of the key a recipient derives: the message key itself (None: the message
    has one recipient), or the key that unwraps the message key for `wrapped_for` (one of several)."""
    return b"commlab message key" if wrapped_for is None else b"commlab key wrap\0" + wrapped_for.encode()


def payload_digest() -> blake3.blake3:
    """The BLAKE3 of a payload, fed chunk by chunk. One thread: BLAKE3's own thread pool (max_threads)
    spent more CPU per MB and gained no goodput where the sender, the receiver and DDS already
    keep every core busy; the pass runs beside the writes instead (seal.py, opener.py)."""
    return blake3.blake3()


def payload_cipher(key: bytes, signed: bytes, decrypt: bool = False) -> aegis.AegisStream:
    """AEGIS-128X4 under a one-message key, `signed` as associated data; payload chunks go through update_into."""
    return aegis.AegisStream(key, signed, decrypt)


def payload_mac(pair: bytes, signed: bytes) -> aegis.AegisMac:
    """AEGIS-128X4-MAC of the payload. Its key derives from the signed envelope (sender, incarnation,
    sequence number, salt), so it is new for every message and the fixed nonce never repeats under one key."""
    key = hmac.digest(pair, b"commlab payload mac\0" + signed, "sha256")[:aegis.KEY_BYTES]
    return aegis.AegisMac(key)


class Signer:
    """Ed25519 signatures of one node's envelopes and trailers, by libsodium: two of them per
    message, and libsodium signs in about two thirds and verifies in about half the time OpenSSL
    takes (the same signatures: Ed25519 is deterministic)."""

    def __init__(self, seed: bytes):
        self._secret = crypto_sign_seed_keypair(seed)[1]

    def sign(self, data: bytes) -> str:
        return crypto_sign(data, self._secret)[:SIGNATURE_BYTES].hex()


def signature_holds(public: bytes, signature: object, data: bytes) -> bool:
    """Whether `signature` (hex, untrusted) is the Ed25519 signature of `data` under `public`."""
    try:
        raw = bytes.fromhex(signature)  # type: ignore[arg-type]
        if len(raw) != SIGNATURE_BYTES:
            return False
        crypto_sign_open(raw + data, public)
        return True
    except (BadSignatureError, ValueError, TypeError):
        return False
