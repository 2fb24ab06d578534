"""The sending side of protected messages (wire format: envelope.py): an envelope for the first
chunk, the payload encrypted (or only authenticated) chunk by chunk as it is written, and the
trailer for the last chunk. Each chunk is sealed into the sample that carries it (endpoints.py):
encrypted straight into the bytes Cyclone sends, so the cipher's pass takes the place of a copy.
Where a BLAKE3 digest is taken (its pass is the slow one), each chunk after the first is sealed in
a worker thread while the one before it is written (the cipher, the hash and the DDS write all
release the GIL): beside the DDS work, not before it."""
from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from . import aegis
from .auth import TAG_BYTES, Keyring
from .cdr import address_of, copy_into, view_at
from .chunk import Payload
from .envelope import (DIGEST_BYTES, MAC_RECIPIENTS_MAX, NONCE, SALT_BYTES, SIGNATURE_BYTES, Signer, payload_cipher,
                       payload_digest, quote, recipient_keys, sender_auth_text, trailer_signed, trailer_tag)


class Sealer:
    """Seals every message of one node: its envelope tagged for every peer, its payload encrypted
    for them (`encrypt`, the default) or only authenticated."""

    def __init__(self, ring: Keyring, incarnation: int, encrypt: bool = True):
        self.ring, self.incarnation = ring, incarnation
        self._seqs = itertools.count(1)  # next() is atomic: publishers and the announcer seal from several threads
        self.seq = 0  # the last sequence number drawn
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
        self.quoted = {p: quote(p) for p in ring.peers}  # names as JSON keys of the envelope's and trailer's maps
        self.salt = secrets.token_bytes(SALT_BYTES)  # this process's: keeps its keys apart from another's of one incarnation
        # The envelope's fields that never change, as JSON strings; topics' as they come.
        self._own = {"cipher": quote(self.cipher), "mac": quote(self.mac), "run": quote(ring.run_id),
                     "salt": quote(self.salt.hex()), "sender": quote(ring.node)}
        self._topics: dict[str, str] = {}
        # Seals the chunk after the one being written (under a BLAKE3 digest); two, so two writers of
        # the node never wait on each other.
        self.worker = ThreadPoolExecutor(2, thread_name_prefix=f"seal-{ring.node}")

    def begin(self, topic: str, meta: str, nbytes: int, to: Collection[str] = ()) -> "Sealing":
        """Start sealing one message of `nbytes` payload bytes: its envelope (for chunk 0) now,
        its trailer (for the last chunk) once every payload byte went through seal_to(). `to`:
        the only peers that read the topic (a ring's next rank), the message's tags and keys for
        them alone (every tag and MAC is a pass over the payload); empty: every peer."""
        seq = self.seq = next(self._seqs)
        quoted_topic = self._topics.get(topic) or self._topics.setdefault(topic, quote(topic))
        own = self._own
        text = sender_auth_text(nbytes, own["cipher"], self.incarnation, own["mac"], own["run"], own["salt"],
                                own["sender"], seq, quoted_topic)
        return Sealing(self, text, meta, set(to))

    def close(self) -> None:
        self.worker.shutdown()

    def seal(self, topic: str, meta: str, payload: bytes | memoryview, to: Collection[str] = ()) -> tuple[str, bytes]:
        """A whole message in one (a one-chunk message): envelope and trailer together, and the payload as sent."""
        sealing = self.begin(topic, meta, len(payload), to=to)
        sent = bytes(sealing.update(payload))
        return sealing.last_meta(first=True), sent


class Sealing:
    """One message being sealed: seal_to() each chunk's payload in order (or sealed() all of them,
    pipelined) where it is sent from, then last_meta() for the last chunk."""

    def __init__(self, sealer: Sealer, text: str, meta: str, to: set[str]):
        """`text`: the envelope's "auth", canonical (envelope.auth_text)."""
        self.signer, self._worker, self._quoted = sealer.signer, sealer.worker, sealer.quoted
        self.keys = {p: k for p, k in sealer.keys.items() if p in to} if to else sealer.keys
        self.signed = f"{text}\0{meta}".encode()
        readers = {p: k for p, k in sealer.readers.items() if p in to} if to else sealer.readers
        # Each reader's key and envelope tag for this message (envelope.py).
        derived = {p: recipient_keys(k, sealer.salt, p, self.signed) for p, k in readers.items()}
        # The envelope's JSON, written out: every value but the meta is hex or a known name.
        tags = self._map({p: derived[p][1] for p in self.keys})
        envelope = [f'{{"auth": {text}, "meta": {quote(meta)}, "tags": {tags}']
        if self.signer is not None:
            envelope.append(f', "sig": "{self.signer.sign(self.signed)}"')
        self._cipher: aegis.AegisStream | None = None
        if sealer.cipher != "none":
            if len(derived) == 1:
                ((key, _),) = derived.values()
            else:
                key = secrets.token_bytes(aegis.KEY_BYTES)
                wrapped = {p: AESGCM(kek).encrypt(NONCE, key, None).hex() for p, (kek, _) in derived.items()}
                envelope.append(f', "keys": {self._map(wrapped)}')
            self._cipher = payload_cipher(key, self.signed)
        envelope.append("}")
        self.envelope = "".join(envelope)
        self._trailer: str | None = None
        self._hash = payload_digest() if sealer.mac == "blake3" else None
        self._macs = {p: aegis.AegisMac(derived[p][0]) for p in self.keys} if sealer.mac == "aegis-mac" else {}

    def _map(self, hex_of: dict[str, str]) -> str:
        """{peer: hex} as JSON."""
        return "{" + ", ".join(f'{self._quoted[p]}: "{h}"' for p, h in hex_of.items()) + "}"

    def seal_to(self, data: Payload, address: int) -> None:
        """The next chunk's payload sealed into the len(data) bytes at `address`: encrypted there,
        or copied, and taken as sent into the trailer's digest or MACs (in order)."""
        if self._cipher is not None:
            self._cipher.update_to(data, address)
        else:
            copy_into(address, data)
        if self._hash is not None or self._macs:
            sent = view_at(address, len(data))
            if self._hash is not None:
                self._hash.update(sent)
            for mac in self._macs.values():
                mac.update(sent)

    def update(self, data: Payload) -> bytearray:
        """The next chunk's payload, sealed, in a new buffer."""
        out = bytearray(len(data))
        self.seal_to(data, address_of(out))
        return out

    def sealed(self, pieces: Sequence[Payload], place: Callable[[int], int]) -> Iterator[int]:
        """Seal each piece into place(i) (the address of the bytes it goes on the wire in) in order, and yield i once
        piece i is sealed; ask for the next only once the last is written. With a BLAKE3 digest
        the worker places and seals piece i + 1 while the caller writes piece i: the hash is the
        slow pass. Without one the caller's thread seals each piece itself: AEGIS takes about what
        the copy it replaces takes, less than handing the piece to the worker and back costs."""
        if self._hash is None:
            for i, piece in enumerate(pieces):
                self.seal_to(piece, place(i))
                yield i
            return
        self.seal_to(pieces[0], place(0))
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

    def _seal_at(self, piece: Payload, place: Callable[[int], int], i: int) -> None:
        self.seal_to(piece, place(i))

    def last_meta(self, first: bool) -> str:
        """The meta of the last chunk: the trailer, joined to the envelope when that chunk is also the `first`."""
        return self.with_envelope(self.trailer()) if first else self.trailer()

    def with_envelope(self, trailer: str) -> str:
        """The envelope and `trailer` in one meta (a one-chunk message's): the envelope is a JSON
        object, and the trailer joins it as its last key."""
        return f'{self.envelope[:-1]}, "trailer": {trailer}}}'

    def trailer(self, placeholder: bool = False) -> str:
        """The trailer's JSON, once every payload byte went through seal_to(). `placeholder`: the
        same before the payload is sealed, every proof in it zeros: of the same length (every
        proof is hex of a fixed size), so the head that carries it can be written first and its
        trailer overwritten in place once the payload is sealed."""
        if not placeholder and self._trailer is not None:  # the proofs are final: made once
            return self._trailer
        def proof(nbytes: int, make: Callable[[], str]) -> str:
            return "00" * nbytes if placeholder else make()
        trailer = []
        if self._cipher is not None:
            cipher = self._cipher
            trailer.append(f'"aead": "{proof(aegis.TAG_BYTES, lambda: cipher.tag().hex())}"')
        if self._hash is not None:
            digest = proof(DIGEST_BYTES, self._hash.hexdigest)
            tags = {p: proof(TAG_BYTES, lambda k=k: trailer_tag(k, self.signed, digest)) for p, k in self.keys.items()}
            trailer += [f'"digest": "{digest}"', f'"tags": {self._map(tags)}']
            if self.signer is not None:
                signer = self.signer
                signature = proof(SIGNATURE_BYTES, lambda: signer.sign(trailer_signed(self.signed, digest)))
                trailer.append(f'"sig": "{signature}"')
        elif self._macs:
            tags = {p: proof(aegis.TAG_BYTES, lambda mac=mac: mac.tag().hex()) for p, mac in self._macs.items()}
            trailer.append(f'"tags": {self._map(tags)}')
        text = "{" + ", ".join(trailer) + "}"
        if not placeholder:
            self._trailer = text
        return text
