"""The receiving side of protected messages (wire format: envelope.py).

A receiver opens the envelope from chunk 0 alone, before it reserves anything for the rest of the
message; authenticates each chunk's payload as it arrives, on the one pass that decrypts (or
copies) it from the received sample into the message's buffer (a payload under a BLAKE3 digest:
copied there, then hashed and decrypted in place by a worker while the next chunk arrives); checks
the trailer when the last chunk is in; and drops (counting the reason) what is unauthenticated, of
another wire version or run, tagged by the wrong key for its claimed sender, replayed, outside the
sequence window or altered. A decrypted payload is handed out only once its tag held.
"""
from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from . import aegis
from .auth import Keyring
from .cdr import address_of, copy_into, writable_view
from .envelope import (CIPHERS, MACS, NONCE, SALT_BYTES, VERSION, WINDOW, AuthError, payload_cipher, payload_digest,
                       recipient_keys, signature_holds, signed_bytes, trailer_signed, trailer_tag)

ALONGSIDE = 256 * 1024  # smaller chunks are hashed in the reader thread: a hand-off costs more than it saves


@dataclass
class SequenceWindow:
    """Sequence numbers of one sender incarnation: each accepted once, and none more than WINDOW
    behind the highest (messages on different topics may arrive out of order, within the window)."""
    incarnation: int = 0
    high: int = 0
    seen: set[int] = field(default_factory=set)

    def admit(self, sender: str, seq: int) -> None:
        if seq <= self.high - WINDOW:
            raise AuthError("out_of_window", f"{sender!r} sequence number {seq} is behind {self.high} - {WINDOW}")
        if seq in self.seen:
            raise AuthError("replayed", f"{sender!r} sequence number {seq} seen before")
        self.seen.add(seq)
        self.high = max(self.high, seq)
        if len(self.seen) > 2 * WINDOW:  # numbers behind the window are refused before `seen` is asked
            self.seen = {s for s in self.seen if s > self.high - WINDOW}


class Opened:
    """An authenticated envelope; its payload, fed through update(), still has to match the trailer.
    With `verify` (the sender's public key) the trailer's signature is checked instead of a tag;
    with `key` (the message key) the payload is decrypted."""

    def __init__(self, meta: str, sender: str, pair: bytes, signed: bytes, trailer: dict | None, node: str, mac: str,
                 verify: bytes | None = None, key: bytes | None = None, worker: Executor | None = None,
                 mac_key: bytes | None = None):
        self.meta, self.sender, self.pair, self.signed, self.verify = meta, sender, pair, signed, verify
        self._worker = worker  # one thread, first in first out: absorbs the large chunks of a hashed payload in order
        self._pending: list[Future] = []
        self.trailer = trailer  # one-chunk messages carry it in the envelope
        self.node = node  # the receiving node (whose tag to check)
        # A signature covers the payload through its BLAKE3 digest, whatever else the sender used.
        self._hash = payload_digest() if mac == "blake3" or verify is not None else None
        self._mac = aegis.AegisMac(mac_key) if mac == "aegis-mac" and mac_key is not None else None
        self._cipher = None if key is None else payload_cipher(key, signed, decrypt=True)

    def update(self, data: bytes | bytearray | memoryview, buffer: bytes | bytearray | None = None, offset: int = 0) -> None:
        """Authenticate the next chunk's payload as received, and decrypt it (or copy it) into its
        place in the message: `buffer` (cdr.unfilled_bytes, still being filled) from `offset`;
        without a buffer, decrypt it in place (`data` writable). A large chunk of a hashed
        payload is copied into place and left to the worker, which hashes it (and decrypts it in
        place) while this thread takes the next chunk: BLAKE3 is the slow pass, and the sample it
        would read is released once this returns. finish() waits for the worker."""
        if buffer is None:
            self._wait()
            self._absorb(data, None)
            return
        large_hashed = self._hash is not None and self._worker is not None and len(data) >= ALONGSIDE
        if large_hashed or self._pending:  # once a chunk went to the worker, all after it do
            into = writable_view(buffer, offset, len(data))  # keeps the buffer alive for the worker
            copy_into(address_of(into), data)
            self._pending.append(self._worker.submit(self._absorb, into, None))  # in place
            return
        self._wait()
        self._absorb(data, address_of(buffer) + offset)

    def _wait(self) -> None:
        for absorbed in self._pending:
            absorbed.result()
        self._pending.clear()

    def _absorb(self, data: bytes | bytearray | memoryview, into: int | None) -> None:
        """One chunk through the digest, the MAC and the cipher, in the order they were fed, into
        the bytes at address `into` (None: in place)."""
        if self._hash is not None:
            self._hash.update(data)  # of the payload as sent: the ciphertext when encrypted
        if self._mac is not None:
            self._mac.update(data)
        if self._cipher is not None:
            if into is None:
                self._cipher.update_into(data, data)
            else:
                self._cipher.update_to(data, into)
        elif into is not None:
            copy_into(into, data)

    def finish(self, last_meta: str | None = None) -> None:
        """Check the trailer (from the last chunk's meta, or the envelope) against the payload
        seen so far; AuthError if either was altered."""
        self._wait()
        try:
            trailer = self.trailer if last_meta is None else json.loads(last_meta)
            aead_tag = bytes.fromhex(trailer["aead"]) if self._cipher is not None else b""
            digest = str(trailer["digest"]) if self._hash is not None else ""
            if self.verify is not None:
                proof = trailer["sig"]
            elif self._hash is not None or self._mac is not None:
                proof = trailer["tags"][self.node]
            else:
                proof = ""  # the AEAD tag is the proof
        except (ValueError, TypeError, KeyError, AttributeError):
            raise AuthError("unauthenticated", f"no valid trailer from {self.sender!r}") from None
        if not isinstance(proof, str):
            raise AuthError("unauthenticated", f"no valid trailer from {self.sender!r}")
        if self._cipher is not None:
            # The AEAD tag binds ciphertext, envelope and message key together: altered ciphertext
            # and a trailer of another message fail alike.
            if not self._cipher.verify(aead_tag):
                raise AuthError("altered", f"ciphertext from {self.sender!r} does not match its AEAD tag")
        if self._mac is not None:
            if not hmac.compare_digest(self._mac.tag().hex(), proof):
                raise AuthError("altered", f"payload from {self.sender!r} does not match its authenticated tag")
        if self._hash is None:
            return
        if self.verify is not None:
            if not signature_holds(self.verify, proof, trailer_signed(self.signed, digest)):
                raise AuthError("wrong_key", f"trailer of {self.sender!r} is not signed with its signing key")
        elif not hmac.compare_digest(trailer_tag(self.pair, self.signed, digest), proof):
            raise AuthError("wrong_key", f"trailer tag does not verify with the key of {self.sender!r}")
        if not hmac.compare_digest(self._hash.hexdigest(), digest):
            raise AuthError("altered", f"payload from {self.sender!r} does not match its authenticated digest")


class Opener:
    """The receiving side: checks envelopes and remembers sequence numbers against replays.

    State is kept only for senders that authenticated, and one sequence window per sender: its
    newest incarnation's (an older incarnation may not speak again), so a flood of fresh
    incarnations, even signed with a stolen key, replaces a window instead of adding one."""

    def __init__(self, ring: Keyring, on_window_replaced: Callable[[], None] = lambda: None):
        self.ring = ring
        self._windows: dict[str, SequenceWindow] = {}
        self._lock = threading.Lock()  # every reader thread of the node opens through this one
        self._verify = dict(ring.verify_keys)  # node -> Ed25519 public key
        self._on_window_replaced = on_window_replaced  # a newer incarnation of a sender took its window
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"open-{ring.node}")

    def close(self) -> None:
        self._worker.shutdown()

    def open(self, topic: str, sender: str, incarnation: int, total_bytes: int, envelope: str) -> Opened:
        """The message's own meta, or AuthError; from chunk 0 alone."""
        try:
            doc = json.loads(envelope)
            auth, meta, own_tag = doc["auth"], doc["meta"], doc["tags"].get(self.ring.node)
            version = auth.get("v", 1)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise AuthError("unauthenticated", f"no valid envelope from {sender!r}") from None
        if version != VERSION:
            raise AuthError("unauthenticated", f"envelope of {sender!r} is wire version {version!r}; "
                                               f"this node reads version {VERSION} only")
        try:
            claimed = (auth["run"], auth["sender"], auth["incarnation"], auth["topic"], auth["bytes"])
            seq, salt, cipher, mac = int(auth["seq"]), bytes.fromhex(auth["salt"]), auth["cipher"], auth["mac"]
            trailer, signature, wrapped = doc.get("trailer"), doc.get("sig"), doc.get("keys")
        except (ValueError, TypeError, KeyError, AttributeError):
            raise AuthError("unauthenticated", f"no valid envelope from {sender!r}") from None
        verify = self._verify.get(sender)
        if not isinstance(meta, str) or not isinstance(signature if verify is not None else own_tag, str):
            raise AuthError("unauthenticated", f"{sender!r} sent no {'signature' if verify else 'tag'} "
                                               f"for {self.ring.node}")
        if cipher not in CIPHERS or mac not in MACS[cipher] or len(salt) != SALT_BYTES:
            raise AuthError("unauthenticated", f"{sender!r} names no known cipher and payload MAC "
                                               f"({cipher!r}, {mac!r}) or a salt of {len(salt)} bytes")
        if claimed[0] != self.ring.run_id:
            raise AuthError("wrong_run", f"{sender!r} is in run {claimed[0]!r}")
        if claimed[1:] != (sender, incarnation, topic, total_bytes):
            raise AuthError("unauthenticated", f"envelope of {sender!r} does not match its chunk")
        pair, signed = self.ring.key_with(sender), signed_bytes(auth, meta)
        own_key, expected_tag = (None, "") if pair is None else recipient_keys(pair, salt, self.ring.node, signed)
        if verify is not None:
            # The pair key is shared with the sender's counterpart, so only the signature tells
            # that the sender itself wrote this.
            if not signature_holds(verify, signature, signed):
                raise AuthError("wrong_key", f"envelope is not signed with the signing key of {sender!r}")
        elif own_key is None or not hmac.compare_digest(expected_tag, own_tag):
            raise AuthError("wrong_key", f"tag does not verify with the key of {sender!r}")
        key = None if cipher == "none" else self._message_key(sender, own_key, wrapped)
        with self._lock:
            self._check_sequence(sender, incarnation, seq)
        return Opened(meta, sender, pair or b"", signed, trailer, self.ring.node, mac, verify, key, self._worker,
                      mac_key=own_key)

    def _message_key(self, sender: str, own_key: bytes | None, wrapped: object) -> bytes:
        """The key of an encrypted message: this node's own key of it (sent to this node alone),
        or unwrapped with that from the envelope's entry for this node (sent to several)."""
        node = self.ring.node
        if own_key is None:
            raise AuthError("wrong_key", f"no key shared with {sender!r} to decrypt its message")
        if wrapped is None:
            return own_key
        try:
            entry = bytes.fromhex(wrapped[node])  # type: ignore[index]
            key = AESGCM(own_key).decrypt(NONCE, entry, None)
        except (KeyError, TypeError, ValueError, InvalidTag):
            raise AuthError("wrong_key", f"{sender!r} wrapped no message key for {node} under their pair key") from None
        if len(key) != aegis.KEY_BYTES:
            raise AuthError("unauthenticated", f"{sender!r} wrapped a message key of {len(key)} bytes, "
                                               f"not {aegis.KEY_BYTES}")
        return key

    def _check_sequence(self, sender: str, incarnation: int, seq: int) -> None:
        # A restarted sender has a new, larger incarnation (commlab.dds.host: time-ordered); its
        # old one may not speak again, so recorded traffic of an earlier process cannot be replayed.
        window = self._windows.get(sender)
        if window is not None and incarnation < window.incarnation:
            raise AuthError("replayed", f"{sender!r} incarnation {incarnation} is older than {window.incarnation}")
        if window is None or incarnation > window.incarnation:
            if window is not None:
                self._on_window_replaced()
            window = self._windows[sender] = SequenceWindow(incarnation)
        window.admit(sender, seq)

    def open_whole(self, topic: str, sender: str, incarnation: int, envelope: str, payload: bytes) -> tuple[str, bytes]:
        """A one-piece message (an announcement): open, decrypt and authenticate the payload,
        finish; its meta and payload, or AuthError."""
        opened = self.open(topic, sender, incarnation, len(payload), envelope)
        plain = bytearray(payload)
        opened.update(plain)
        opened.finish()
        return opened.meta, bytes(plain)
