"""The sending side of protected messages (wire format: envelope.py): an envelope for the first
chunk, the payload encrypted (or only authenticated) chunk by chunk as it is written, and the
trailer for the last chunk. No pass over the payload happens before the first chunk can leave;
where a BLAKE3 digest is taken (its pass is the slow one), each later chunk is sealed in a worker
thread while the one before it is written (the cipher, the hash and the DDS write all release the
GIL): beside the DDS work, not before it."""
from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from . import aegis
from .auth import Keyring
from .chunk import Payload
from .envelope import (MAC_RECIPIENTS_MAX, NONCE, SALT_BYTES, VERSION, Signer, derive, key_label, payload_cipher,
                       payload_digest, payload_mac, signed_bytes, tag, trailer_signed, trailer_tag)


class Sealer:
    """Seals every message of one node: its envelope tagged for every peer, its payload encrypted
    for them (`encrypt`, the default) or only authenticated."""

    def __init__(self, ring: Keyring, incarnation: int, encrypt: bool = True):
        self.ring, self.incarnation, self.seq = ring, incarnation, 0
        self.signer = Signer(ring.signing_key) if ring.signing_key else None
        # Every peer it shares a key with can read its payloads; tags only for the peers that check
        # tags: those that take this node's messages only signed get none.
        self.readers = {p: k for p in ring.peers if (k := ring.key_with(p)) is not None}
        signed = set(ring.signed_for) if self.signer is not None else set()
        self.keys = {p: k for p, k in self.readers.items() if p not in signed}
        self.cipher = "aegis-128x2" if encrypt else "none"
        if self.signer is not None or (not encrypt and len(self.keys) > MAC_RECIPIENTS_MAX):
            self.mac = "blake3"
        else:
            self.mac = "aead" if encrypt else "aegis-mac"
        self._lock = threading.Lock()  # publishers and the announcer seal from several threads
        # Seals the chunk after the one being written; two, so two writers of the node never wait on each other.
        self.worker = ThreadPoolExecutor(2, thread_name_prefix=f"seal-{ring.node}")

    def begin(self, topic: str, meta: str, nbytes: int, out: list[bytearray] | None = None,
              to: Collection[str] = ()) -> "Sealing":
        """Start sealing one message of `nbytes` payload bytes: its envelope (for chunk 0) now,
        its trailer (for the last chunk) once every payload byte went through update(). `out`:
        two buffers to encrypt into, the caller's to reuse for its next message once this one is sent.
        `to`: the only peers that read the topic (a ring's next rank), the message's tags and keys
        for them alone (every tag and MAC is a pass over the payload); empty: every peer."""
        with self._lock:
            self.seq += 1
            seq = self.seq
        auth = {"v": VERSION, "run": self.ring.run_id, "sender": self.ring.node, "incarnation": self.incarnation,
                "seq": seq, "topic": topic, "bytes": nbytes, "salt": secrets.token_hex(SALT_BYTES),
                "cipher": self.cipher, "mac": self.mac}
        return Sealing(self, auth, meta, [bytearray(), bytearray()] if out is None else out, set(to))

    def close(self) -> None:
        self.worker.shutdown()

    def seal(self, topic: str, meta: str, payload: bytes | memoryview, to: Collection[str] = ()) -> tuple[str, bytes]:
        """A whole message in one (a one-chunk message): envelope and trailer together, and the payload as sent."""
        sealing = self.begin(topic, meta, len(payload), to=to)
        sent = bytes(sealing.update(payload))
        return sealing.last_meta(sealing.envelope), sent


class Sealing:
    """One message being sealed: update() each chunk's payload in order (or updates() all of them,
    pipelined), and send what it returns."""

    def __init__(self, sealer: Sealer, auth: dict, meta: str, out: list[bytearray], to: set[str]):
        self.signer, self._worker = sealer.signer, sealer.worker
        self.keys = {p: k for p, k in sealer.keys.items() if p in to} if to else sealer.keys
        self.signed = signed_bytes(auth, meta)
        doc: dict = {"auth": auth, "meta": meta, "tags": {p: tag(k, self.signed) for p, k in self.keys.items()}}
        if self.signer is not None:
            doc["sig"] = self.signer.sign(self.signed)
        self._cipher: aegis.AegisStream | None = None
        if auth["cipher"] != "none":
            salt = bytes.fromhex(auth["salt"])
            readers = {p: k for p, k in sealer.readers.items() if p in to} if to else sealer.readers
            if len(readers) == 1:
                (pair,) = readers.values()
                key = derive(pair, salt, key_label(None), self.signed, aegis.KEY_BYTES)
            else:
                key = secrets.token_bytes(aegis.KEY_BYTES)
                doc["keys"] = {p: AESGCM(derive(k, salt, key_label(p), self.signed))
                               .encrypt(NONCE, key, None).hex() for p, k in readers.items()}
            self._cipher = payload_cipher(key, self.signed)
        self.envelope = json.dumps(doc)
        self._hash = payload_digest() if auth["mac"] == "blake3" else None
        self._macs = {p: payload_mac(k, self.signed) for p, k in self.keys.items()} if auth["mac"] == "aegis-mac" else {}
        # Ciphertext of the last two chunks: one being written while the next is encrypted.
        self._out = out

    def encrypt(self, data: Payload) -> Payload:
        """A chunk's payload as it goes on the wire: encrypted, or `data` itself. What it returns
        stays valid until the encryption after next."""
        if self._cipher is None:
            return data
        self._out.reverse()
        if len(self._out[0]) < len(data):
            self._out[0] = bytearray(len(data))
        out = memoryview(self._out[0])[:len(data)]
        self._cipher.update_into(data, out)
        return out

    def authenticate(self, sent: Payload) -> None:
        """Take the next chunk's payload as sent into the trailer's digest or MACs (in order)."""
        if self._hash is not None:
            self._hash.update(sent)
        for mac in self._macs.values():
            mac.update(sent)

    def update(self, data: Payload) -> Payload:
        """The next chunk's payload, encrypted and authenticated, as it goes on the wire."""
        sent = self.encrypt(data)
        self.authenticate(sent)
        return sent

    def updates(self, pieces: Sequence[Payload]) -> Iterator[Payload]:
        """update() of each piece in turn, as sent (ask for the next only once the last is written).
        Only encryption has to come before a write: the first piece is encrypted here, and while
        the caller writes piece i the worker authenticates it and encrypts piece i + 1 (and
        authenticates that too if it is the last, whose trailer needs the whole payload).
        Without a BLAKE3 digest the writer's thread seals each piece itself: AEGIS takes a small
        fraction of a write's time, less than handing the piece to the worker and back costs."""
        if self._hash is None:
            for piece in pieces:
                yield self.update(piece)
            return
        sent, ahead = self.encrypt(pieces[0]), None
        try:
            for i in range(1, len(pieces)):
                ahead = self._worker.submit(self._advance, sent, pieces[i], i == len(pieces) - 1)
                yield sent
                sent, ahead = ahead.result(), None
        finally:  # closed early (a write failed): the worker leaves the buffers before the next message takes them
            if ahead is not None:
                wait([ahead])
        if len(pieces) == 1:
            self.authenticate(sent)
        yield sent

    def _advance(self, sent: Payload, following: Payload, last: bool) -> Payload:
        self.authenticate(sent)
        following = self.encrypt(following)
        if last:
            self.authenticate(following)
        return following

    def last_meta(self, chunk_meta: str) -> str:
        """The meta of the last chunk: the trailer, merged into the envelope when that chunk is also the first."""
        trailer: dict = {}
        if self._cipher is not None:
            trailer["aead"] = self._cipher.tag().hex()
        if self._hash is not None:
            digest = trailer["digest"] = self._hash.hexdigest()
            trailer["tags"] = {p: trailer_tag(k, self.signed, digest) for p, k in self.keys.items()}
            if self.signer is not None:
                trailer["sig"] = self.signer.sign(trailer_signed(self.signed, digest))
        elif self._macs:
            trailer["tags"] = {p: mac.tag().hex() for p, mac in self._macs.items()}
        return json.dumps({**json.loads(chunk_meta), "trailer": trailer}) if chunk_meta else json.dumps(trailer)
