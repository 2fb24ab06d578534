"""The wire format of protected messages (version 5) and the primitives both ends share.

A protected message's first chunk carries an envelope as its meta:
    {"auth": {"v": 5, "run", "sender", "incarnation", "seq", "topic", "bytes", "salt", "cipher", "mac"},
     "meta": <the message's own meta>, "tags": {recipient: its envelope tag},
     "sig": Ed25519 over signed (a trusted node's message, for the untrusted nodes),
     "keys": {recipient: the message key wrapped for it} (an encrypted message to several)}
where `signed` is the canonical JSON of "auth", a zero byte, and the meta; "salt" is 16 random
bytes the sender drew when it started. The last chunk carries a trailer that authenticates the
payload (both in one meta for a one-chunk message).

Each recipient's pair key gives, for each message, one keyed BLAKE2b-256 (RFC 7693: a PRF under
its key) of the recipient's name and `signed`, salted with the salt: its second half is the
recipient's envelope tag, its first half the recipient's 16-byte key, which is
  - the message key of an encrypted message to it alone;
  - the AES-128-GCM key that wraps the message key for it, in an encrypted message to several
    (the message key is then 16 random bytes drawn for the message);
  - the key of its AEGIS-128X4-MAC of a payload in clear.
Every key here protects one thing once: a derived key is new for every message (incarnation and
sequence number are in `signed`, the salt keeps apart two processes that drew one incarnation),
a random one is drawn per message, so the fixed all-zero nonces (AEGIS and AES-GCM alike) never
meet the same key twice.

"cipher": "aegis-128x4" (dds.encrypt, the default): the payload travels encrypted, one AEGIS-128X4
stream over all its chunks with `signed` as associated data. "none" (dds.encrypt false): in clear.

"mac", how the trailer authenticates the payload:
  - "aead" (encrypted): {"aead": the AEGIS-128X4 tag};
  - "aegis-mac" (in clear, at most MAC_RECIPIENTS_MAX recipients): {"tags": {recipient:
    AEGIS-128X4-MAC of the payload}};
  - "blake3": {"digest": BLAKE3 of the payload as sent, "tags": {recipient: keyed BLAKE2b of
    signed and the digest}} (and "aead" when encrypted): one hash however many recipients, and
    the form a signing sender uses, since an AEAD or MAC tag binds nothing for a recipient that
    knows its key.
A signing sender adds "sig" (Ed25519 over signed and the digest) to the trailer.
"""
from __future__ import annotations

import hashlib
import json

import blake3

from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_open, crypto_sign_seed_keypair
from nacl.exceptions import BadSignatureError

from . import aegis
from .auth import TAG_BYTES
from .errors import MessageError

VERSION = 5
SALT_BYTES = 16  # BLAKE2b's salt
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


# A JSON string as both encoders above write it (ensure_ascii), and an envelope's own "auth" fields
# in the canonical encoder's order and form: formatted in one step, several times faster than the
# encoder, which matters to every message (seal.py and opener.py each canonicalise one per message).
quote = json.encoder.encode_basestring_ascii
_AUTH_KEYS = frozenset(("bytes", "cipher", "incarnation", "mac", "run", "salt", "sender", "seq", "topic", "v"))
_AUTH_TEXT = ('{"bytes":%d,"cipher":%s,"incarnation":%d,"mac":%s,"run":%s,"salt":%s,"sender":%s,"seq":%d,'
              '"topic":%s,"v":%d}')


def sender_auth_text(n: int, cipher: str, incarnation: int, mac: str, run: str, salt: str, sender: str, seq: int,
                     topic: str) -> str:
    """auth_text() of a sender's own fields, every string already quote()d: what a sender formats
    for each message without building the dict."""
    return _AUTH_TEXT % (n, cipher, incarnation, mac, run, salt, sender, seq, topic, VERSION)


def auth_text(auth: dict) -> str:
    """The canonical JSON (sorted keys, compact) of an envelope's "auth": formatted directly when it
    has exactly the fields of this wire version, with integers and strings where they belong (what
    every sender of it writes); through the encoder otherwise (the same text, slower)."""
    if auth.keys() == _AUTH_KEYS and auth["v"] == VERSION:
        n, inc, seq = auth["bytes"], auth["incarnation"], auth["seq"]
        if type(n) is int and type(inc) is int and type(seq) is int and type(auth["v"]) is int:
            try:
                return sender_auth_text(n, quote(auth["cipher"]), inc, quote(auth["mac"]), quote(auth["run"]),
                                        quote(auth["salt"]), quote(auth["sender"]), seq, quote(auth["topic"]))
            except TypeError:  # a field that is no string
                pass
    return _CANONICAL.encode(auth)


def signed_bytes(auth: dict, meta: str) -> bytes:
    return f"{auth_text(auth)}\0{meta}".encode()


def recipient_keys(pair: bytes, salt: bytes, recipient: str, signed: bytes) -> tuple[bytes, str]:
    """What `recipient`'s pair key gives for one message: its 16-byte key and its envelope tag
    (hex). One BLAKE2b call: a keyed hash in the interpreter's own C code takes a fraction of
    what the HMACs of HKDF took through OpenSSL on every message (module docstring)."""
    out = hashlib.blake2b(recipient.encode() + b"\0" + signed, digest_size=aegis.KEY_BYTES + TAG_BYTES, key=pair,
                          salt=salt, person=b"commlab envelope").digest()
    return out[:aegis.KEY_BYTES], out[aegis.KEY_BYTES:].hex()


def trailer_signed(signed: bytes, digest: str) -> bytes:
    return signed + b"\0trailer\0" + digest.encode()


def trailer_tag(pair: bytes, signed: bytes, digest: str) -> str:
    """A recipient's tag over the envelope and the payload's digest."""
    return hashlib.blake2b(trailer_signed(signed, digest), digest_size=TAG_BYTES, key=pair,
                           person=b"commlab trailer").hexdigest()


def payload_digest() -> blake3.blake3:
    """The BLAKE3 of a payload, fed chunk by chunk. One thread: BLAKE3's own thread pool (max_threads)
    spent more CPU per MB and gained no goodput where the sender, the receiver and DDS already
    keep every core busy; the pass runs beside the writes instead (seal.py, opener.py)."""
    return blake3.blake3()


def payload_cipher(key: bytes, signed: bytes, decrypt: bool = False) -> aegis.AegisStream:
    """AEGIS-128X4 under a one-message key, `signed` as associated data; payload chunks go through update_into."""
    return aegis.AegisStream(key, signed, decrypt)


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
