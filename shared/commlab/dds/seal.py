"""The sending side of protected messages (wire format: envelope.py): an envelope for the first
chunk, the payload encrypted (or only authenticated) chunk by chunk as it is written, and the
trailer for the last chunk. Each chunk is sealed into the sample that carries it (endpoints.py):
encrypted straight into the bytes Cyclone sends, so the cipher's pass takes the place of a copy.
Where a BLAKE3 digest is taken (its pass is the slow one), each chunk after the first is sealed in
a worker thread while the one before it is written (the cipher, the hash and the DDS write all
release the GIL): beside the DDS work, not before it."""
from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from . import aegis
from .auth import TAG_BYTES, Keyring
from .cdr import address_of, copy_into
from .chunk import Payload
from .envelope import (DIGEST_BYTES, MAC_RECIPIENTS_MAX, NONCE, SALT_BYTES, SIGNATURE_BYTES, VERSION, Signer, derive,
                       key_label, payload_cipher, payload_digest, payload_mac, signed_bytes, tag, trailer_signed,
                       trailer_tag)


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
        self.cipher = "aegis-128x4" if encrypt else "none"
        if self.signer is not None or (not encrypt and len(self.keys) > MAC_RECIPIENTS_MAX):
            self.mac = "blake3"
        else:
            self.mac = "aead" if encrypt else "aegis-mac"
        self._lock = threading.Lock()  # publishers and the announcer seal from several threads
        # Seals the chunk after the one being written (under a BLAKE3 digest); two, so two writers of
        # the node never wait on each other.
        self.worker = ThreadPoolExecutor(2, thread_name_prefix=f"seal-{ring.node}")

    def begin(self, topic: str, meta: str, nbytes: int, to: Collection[str] = ()) -> "Sealing":
        """Start sealing one message of `nbytes` payload bytes: its envelope (for chunk 0) now,
        its trailer (for the last chunk) once every payload byte went through seal_into(). `to`:
        the only peers that read the topic (a ring's next rank), the message's tags and keys for
        them alone (every tag and MAC is a pass over the payload); empty: every peer."""
        with self._lock:
            self.seq += 1
            seq = self.seq
        auth = {"v": VERSION, "run": self.ring.run_id, "sender": self.ring.node, "incarnation": self.incarnation,
                "seq": seq, "topic": topic, "bytes": nbytes, "salt": secrets.token_hex(SALT_BYTES),
                "cipher": self.cipher, "mac": self.mac}
        return Sealing(self, auth, meta, set(to))

    def close(self) -> None:
        self.worker.shutdown()

    def seal(self, topic: str, meta: str, payload: bytes | memoryview, to: Collection[str] = ()) -> tuple[str, bytes]:
        """A whole message in one (a one-chunk message): envelope and trailer together, and the payload as sent."""
        sealing = self.begin(topic, meta, len(payload), to=to)
        sent = bytes(sealing.update(payload))
        return sealing.last_meta(first=True), sent


class Sealing:
    """One message being sealed: seal_into() each chunk's payload in order (or sealed() all of them,
    pipelined) where it is sent from, then last_meta() for the last chunk."""

    def __init__(self, sealer: Sealer, auth: dict, meta: str, to: set[str]):
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

    def seal_into(self, data: Payload, out: memoryview) -> None:
        """The next chunk's payload sealed into `out` (its length): encrypted there, or copied, and
        taken as sent into the trailer's digest or MACs (in order)."""
        if self._cipher is not None:
            self._cipher.update_into(data, out)
        else:
            copy_into(address_of(out), data)
        if self._hash is not None:
            self._hash.update(out)
        for mac in self._macs.values():
            mac.update(out)

    def update(self, data: Payload) -> bytearray:
        """The next chunk's payload, sealed, in a new buffer."""
        out = bytearray(len(data))
        self.seal_into(data, memoryview(out))
        return out

    def sealed(self, pieces: Sequence[Payload], place: Callable[[int], memoryview]) -> Iterator[int]:
        """Seal each piece into place(i) (the bytes it goes on the wire in) in order, and yield i once
        piece i is sealed; ask for the next only once the last is written. With a BLAKE3 digest
        the worker places and seals piece i + 1 while the caller writes piece i: the hash is the
        slow pass. Without one the caller's thread seals each piece itself: AEGIS takes about what
        the copy it replaces takes, less than handing the piece to the worker and back costs."""
        if self._hash is None:
            for i, piece in enumerate(pieces):
                self.seal_into(piece, place(i))
                yield i
            return
        self.seal_into(pieces[0], place(0))
        ahead = None
        try:
            for i in range(len(pieces)):
                if i + 1 < len(pieces):
                    ahead = self._worker.submit(self._seal_at, pieces[i + 1], place, i + 1)
                yield i
                if ahead is not None:
                    ahead.result()
                    ahead = None
        finally:  # closed early (a write failed): the worker leaves the places before the caller discards them
            if ahead is not None:
                wait([ahead])

    def _seal_at(self, piece: Payload, place: Callable[[int], memoryview], i: int) -> None:
        self.seal_into(piece, place(i))

    def last_meta(self, first: bool, placeholder: bool = False) -> str:
        """The meta of the last chunk: the trailer, merged into the envelope when that chunk is also
        the `first`. `placeholder`: the same meta before the payload is sealed, every proof in it
        zeros: of the same length (every proof is hex of a fixed size), so the head that carries it
        can be written first and overwritten in place once the payload is sealed."""
        def proof(nbytes: int, make: Callable[[], str]) -> str:
            return "00" * nbytes if placeholder else make()
        trailer: dict = {}
        if self._cipher is not None:
            cipher = self._cipher
            trailer["aead"] = proof(aegis.TAG_BYTES, lambda: cipher.tag().hex())
        if self._hash is not None:
            digest = trailer["digest"] = proof(DIGEST_BYTES, self._hash.hexdigest)
            trailer["tags"] = {p: proof(TAG_BYTES, lambda k=k: trailer_tag(k, self.signed, digest))
                               for p, k in self.keys.items()}
            if self.signer is not None:
                signer = self.signer
                trailer["sig"] = proof(SIGNATURE_BYTES, lambda: signer.sign(trailer_signed(self.signed, digest)))
        elif self._macs:
            trailer["tags"] = {p: proof(aegis.TAG_BYTES, lambda mac=mac: mac.tag().hex()) for p, mac in self._macs.items()}
        text = json.dumps(trailer)
        # The envelope is json.dumps of a dict: the trailer joins it as its last key, as json.dumps would put it.
        return f'{self.envelope[:-1]}, "trailer": {text}}}' if first else text
