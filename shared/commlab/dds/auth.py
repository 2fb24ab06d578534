"""Authenticated messages: who sent it, for which run, which one in the sender's sequence, and
that nothing in it was changed on the way.

Keys: the launcher draws a random run key. Nodes trusted with it (the FL controller, every DDP
rank) can derive the key any pair of nodes shares; every other node (an FL client) gets only the
pair keys it needs, so it cannot sign as another client, nor read tags meant for others. A pair
key is symmetric, so it alone could not tell a client's messages from the controller's: each
trusted node also gets an Ed25519 signing key, and the untrusted nodes its public key. Towards a
node holding that public key, the trusted node's messages count only with a valid signature
(envelope and payload), which no client key can produce. Key files are JSON, mode 0600, outside
the results folder (containers: a compose secret); never on a command line.

Identities: a node may speak for identities of its own (an FL host for the logical clients it
runs). Each identity has a key of its own, derived from the run key; the node speaking for it gets
it in its file, the run key's holders derive it, and `identity_tag` signs with it what the
application says an identity sent (the transport signs only what a node sent).

A sealed message's first chunk carries an envelope as its meta:
    {"auth": {"run", "sender", "incarnation", "seq", "topic", "bytes", "mac"}, "meta": <the message's
     own meta>, "tags": {recipient: HMAC-SHA256(pair key, canonical auth + meta)[:16]}}
and its last chunk a trailer that authenticates the payload (both in one meta for a one-chunk
message). How, "mac" says, chosen by the sender for the number of recipients it has keys for:
  - "gmac" (at most GMAC_RECIPIENTS_MAX recipients): {"tags": {recipient: AES-256-GMAC of the
    payload}}, under a key derived from the pair key and the signed envelope (new for every message);
  - "blake3" (more recipients): {"digest": BLAKE3 of the payload, "tags": {recipient: HMAC over
    the signed envelope and the digest}}: one pass over the payload however many recipients.
A trusted node's message also carries "sig" (Ed25519 over the signed envelope) in the envelope and
{"digest": BLAKE3 of the payload, "sig": Ed25519 over the envelope and digest} in its trailer.
Both ends feed the payload chunk by chunk as it passes. A receiver opens the envelope from chunk 0
alone, before it reserves anything for the rest of the message, checks the trailer when the last
chunk is in, and drops (counting the reason) what is unauthenticated, of another run, tagged by the
wrong key for its claimed sender, replayed, outside the sequence window or altered.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from commlab.config.schema import ConfigError

from .errors import MessageError

KEY_BYTES = 32
TAG_BYTES = 16
WINDOW = 4096  # sequence numbers a receiver remembers per sender (of its newest incarnation only)
# Measured here on one core: AES-GMAC 28.7 GB/s (AES-NI, VPCLMULQDQ), BLAKE3 8.5 GB/s. Hashing
# once with BLAKE3 cost 12 % of loopback goodput; a GMAC per recipient is cheaper up to 3 of them.
GMAC_RECIPIENTS_MAX = 3
MACS = ("gmac", "blake3")
REASONS = ("unauthenticated", "wrong_run", "wrong_key", "replayed", "out_of_window", "altered")


class AuthError(MessageError):
    """A message that fails authentication; `reason` is one of REASONS (the metrics' key)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class KeyFileError(ConfigError):
    """A key file that is missing, readable by others, or malformed; names the file."""


def pair_key(run_key: bytes, a: str, b: str) -> bytes:
    """The key nodes `a` and `b` share (the same whichever of them asks)."""
    low, high = sorted((a, b))
    return hmac.new(run_key, b"commlab pair key\0" + low.encode() + b"\0" + high.encode(), hashlib.sha256).digest()


def identity_key(run_key: bytes, identity: str) -> bytes:
    """The key of `identity` (one of the identities a node speaks for)."""
    return hmac.new(run_key, b"commlab identity key\0" + identity.encode(), hashlib.sha256).digest()


def identity_tag(key: bytes, data: bytes) -> str:
    """What an identity's key says of `data` (hex, TAG_BYTES)."""
    return hmac.new(key, b"commlab identity\0" + data, hashlib.sha256).digest()[:TAG_BYTES].hex()


@dataclass(frozen=True)
class Keyring:
    """What one node knows: its run, its name, the nodes it talks to, and either the run key
    (derives every pair and identity key) or just the pair keys of its own pairs and the keys of
    the identities it speaks for; a trusted node its Ed25519 signing key, an untrusted one the
    public keys of the trusted nodes (whose messages it accepts only signed)."""
    run_id: str
    node: str
    peers: tuple[str, ...]
    run_key: bytes | None = None
    pair_keys: dict[str, bytes] = field(default_factory=dict)
    identity_keys: dict[str, bytes] = field(default_factory=dict)
    signing_key: bytes | None = None  # raw Ed25519 private key
    signed_for: tuple[str, ...] = ()  # the peers that take this node's messages only signed (no tags for them)
    verify_keys: dict[str, bytes] = field(default_factory=dict)  # node -> raw Ed25519 public key

    def for_node(self, name: str) -> "Keyring":
        """This keyring as node `name` uses it: a node holding the run key may be any node of the
        run (one file serves every DDP rank); any other keyring only the node it was made for."""
        if name == self.node:
            return self
        if self.run_key is None:
            raise KeyFileError(f"the key file is for {self.node!r}, this node is {name!r}")
        peers = tuple(p for p in dict.fromkeys((*self.peers, self.node)) if p != name)
        return Keyring(self.run_id, name, peers, run_key=self.run_key)  # no signing key: it is this node's

    def key_with(self, peer: str) -> bytes | None:
        if self.run_key is not None:
            return pair_key(self.run_key, self.node, peer)
        return self.pair_keys.get(peer)

    def key_of(self, identity: str) -> bytes | None:
        """The key of `identity`: any with the run key, else only those this node speaks for."""
        if self.run_key is not None:
            return identity_key(self.run_key, identity)
        return self.identity_keys.get(identity)


def make_keyrings(run_id: str, nodes: list[str], trusted: set[str],
                  identities: Mapping[str, Sequence[str]] | None = None) -> dict[str, Keyring]:
    """One keyring per node of a run: `trusted` nodes hold the run key; the others the keys they
    share with the trusted nodes (they talk to no one else) and the keys of the identities
    `identities` says they speak for (node -> names)."""
    run_key = secrets.token_bytes(KEY_BYTES)
    identities = identities or {}
    untrusted = tuple(n for n in nodes if n not in trusted)
    # Signatures only where someone needs them: among equals (DDP ranks) the pair tags suffice.
    signing = {node: Ed25519PrivateKey.generate() for node in nodes if node in trusted and untrusted}
    public = {node: key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) for node, key in signing.items()}
    rings = {}
    for node in nodes:
        if node in trusted:
            key = signing.get(node)
            rings[node] = Keyring(run_id, node, tuple(n for n in nodes if n != node), run_key=run_key,
                                  signing_key=None if key is None else key.private_bytes_raw(), signed_for=untrusted)
        else:
            peers = tuple(n for n in nodes if n in trusted)
            rings[node] = Keyring(run_id, node, peers, pair_keys={p: pair_key(run_key, node, p) for p in peers},
                                  identity_keys={i: identity_key(run_key, i) for i in identities.get(node, ())},
                                  verify_keys={p: public[p] for p in peers})
    return rings


def write_keyring(path: Path, ring: Keyring) -> None:
    """Create `path` with mode 0600 (never widened by the umask), refusing to overwrite."""
    doc = {"run_id": ring.run_id, "node": ring.node, "peers": list(ring.peers),
           "run_key": ring.run_key.hex() if ring.run_key else None,
           "pair_keys": {p: k.hex() for p, k in ring.pair_keys.items()},
           "identity_keys": {i: k.hex() for i, k in ring.identity_keys.items()},
           "signing_key": ring.signing_key.hex() if ring.signing_key else None,
           "signed_for": list(ring.signed_for),
           "verify_keys": {n: k.hex() for n, k in ring.verify_keys.items()}}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)


def read_keyring(path: Path) -> Keyring:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyFileError(f"{path}: key file is accessible to group or others (mode {stat.S_IMODE(mode):o}); "
                               "it must be 0600")
        doc = json.loads(path.read_text())
        ring = Keyring(str(doc["run_id"]), str(doc["node"]), tuple(str(p) for p in doc["peers"]),
                       bytes.fromhex(doc["run_key"]) if doc["run_key"] else None,
                       {str(p): bytes.fromhex(k) for p, k in doc["pair_keys"].items()},
                       {str(i): bytes.fromhex(k) for i, k in doc["identity_keys"].items()},
                       bytes.fromhex(doc["signing_key"]) if doc["signing_key"] else None,
                       tuple(str(n) for n in doc["signed_for"]),
                       {str(n): bytes.fromhex(k) for n, k in doc["verify_keys"].items()})
    except KeyFileError:
        raise
    except FileNotFoundError:
        raise KeyFileError(f"{path}: key file not found") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyFileError(f"{path}: not a commlab key file ({type(e).__name__}: {e})") from None
    if any(len(k) != KEY_BYTES for k in [*ring.pair_keys.values(), *ring.identity_keys.values(),
                                          *ring.verify_keys.values(),
                                          *([ring.run_key] if ring.run_key else []),
                                          *([ring.signing_key] if ring.signing_key else [])]):
        raise KeyFileError(f"{path}: keys must be {KEY_BYTES} bytes")
    return ring


def _signed_bytes(auth: dict, meta: str) -> bytes:
    return json.dumps(auth, sort_keys=True, separators=(",", ":")).encode() + b"\0" + meta.encode()


def _tag(key: bytes, signed: bytes) -> str:
    return hmac.new(key, signed, hashlib.sha256).digest()[:TAG_BYTES].hex()


def _trailer_tag(key: bytes, signed: bytes, digest: str) -> str:
    return _tag(key, _trailer_signed(signed, digest))


def _trailer_signed(signed: bytes, digest: str) -> bytes:
    return signed + b"\0trailer\0" + digest.encode()


def _gmac(pair: bytes, signed: bytes) -> CipherContext:
    """AES-256-GCM over no plaintext: the payload goes in as associated data. Its key derives from
    the signed envelope (sender, incarnation, sequence number), so it is new for every message and
    the fixed nonce never repeats under one key."""
    key = hmac.new(pair, b"commlab payload mac\0" + signed, hashlib.sha256).digest()
    return Cipher(algorithms.AES(key), modes.GCM(bytes(12))).encryptor()


def _gmac_tag(mac: CipherContext) -> str:
    mac.finalize()
    return mac.tag[:TAG_BYTES].hex()


class Sealer:
    """The sending side: wraps each message's meta in an envelope tagged for every peer."""

    def __init__(self, ring: Keyring, incarnation: int):
        self.ring, self.incarnation, self.seq = ring, incarnation, 0
        self.signer = Ed25519PrivateKey.from_private_bytes(ring.signing_key) if ring.signing_key else None
        # Tags for the peers that check tags; those that take this node's messages only signed get none.
        signed = set(ring.signed_for) if self.signer is not None else set()
        self.keys = {p: k for p in ring.peers if p not in signed and (k := ring.key_with(p)) is not None}
        self.mac = "gmac" if len(self.keys) <= GMAC_RECIPIENTS_MAX else "blake3"
        self._lock = threading.Lock()  # publishers and the announcer seal from several threads

    def begin(self, topic: str, meta: str, nbytes: int) -> "Sealing":
        """Start sealing one message of `nbytes` payload bytes: its envelope (for chunk 0) now,
        its trailer (for the last chunk) once every payload byte went through update()."""
        with self._lock:
            self.seq += 1
            seq = self.seq
        auth = {"run": self.ring.run_id, "sender": self.ring.node, "incarnation": self.incarnation,
                "seq": seq, "topic": topic, "bytes": nbytes, "mac": self.mac}
        return Sealing(self.keys, auth, meta, self.signer)

    def seal(self, topic: str, meta: str, payload: bytes | memoryview) -> str:
        """A whole message in one: envelope and trailer together (a one-chunk message)."""
        sealing = self.begin(topic, meta, len(payload))
        sealing.update(payload)
        return sealing.last_meta(sealing.envelope)


class Sealing:
    """One message being sealed. The payload is authenticated chunk by chunk as it is written,
    and the tags go into the last chunk: no pass over the payload before the first chunk can leave."""

    def __init__(self, keys: dict[str, bytes], auth: dict, meta: str, signer: Ed25519PrivateKey | None = None):
        self.keys, self.signed, self.signer = keys, _signed_bytes(auth, meta), signer
        doc = {"auth": auth, "meta": meta, "tags": {p: _tag(k, self.signed) for p, k in keys.items()}}
        if signer is not None:
            doc["sig"] = signer.sign(self.signed).hex()
        self.envelope = json.dumps(doc)
        # A signature covers the payload through its BLAKE3 digest, whatever MAC the tags use.
        self._hash = blake3.blake3() if auth["mac"] == "blake3" or signer is not None else None
        self._macs = {} if auth["mac"] == "blake3" else {p: _gmac(k, self.signed) for p, k in keys.items()}

    def update(self, data: bytes | memoryview) -> None:
        if self._hash is not None:
            self._hash.update(data)
        for mac in self._macs.values():
            mac.authenticate_additional_data(data)

    def last_meta(self, chunk_meta: str) -> str:
        """The meta of the last chunk: the trailer, merged into the envelope when that chunk is also the first."""
        digest = None if self._hash is None else self._hash.hexdigest()
        if self._macs or not self.keys:
            trailer: dict = {"tags": {p: _gmac_tag(mac) for p, mac in self._macs.items()}}
        else:
            trailer = {"tags": {p: _trailer_tag(k, self.signed, digest) for p, k in self.keys.items()}}
        if digest is not None:
            trailer["digest"] = digest
        if self.signer is not None:
            trailer["sig"] = self.signer.sign(_trailer_signed(self.signed, digest)).hex()
        return json.dumps({**json.loads(chunk_meta), "trailer": trailer}) if chunk_meta else json.dumps(trailer)


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
        if seq > self.high:
            self.high = seq
            self.seen = {s for s in self.seen if s > seq - WINDOW}


class Opened:
    """An authenticated envelope; its payload, fed through update(), still has to match the trailer.
    With `verify` (the sender's public key) the trailer's signature is checked instead of a tag."""

    def __init__(self, meta: str, sender: str, key: bytes, signed: bytes, trailer: dict | None, node: str, mac: str,
                 verify: Ed25519PublicKey | None = None):
        self.meta, self.sender, self.key, self.signed, self.verify = meta, sender, key, signed, verify
        self.trailer = trailer  # one-chunk messages carry it in the envelope
        self.node = node  # the receiving node (whose tag to check)
        self._hash = blake3.blake3() if mac == "blake3" or verify is not None else None
        self._mac = _gmac(key, signed) if mac == "gmac" and verify is None else None

    def update(self, data: bytes | memoryview) -> None:
        if self._mac is not None:
            self._mac.authenticate_additional_data(data)
        else:
            self._hash.update(data)

    def finish(self, last_meta: str | None = None) -> None:
        """Check the trailer (from the last chunk's meta, or the envelope) against the payload
        seen so far; AuthError if either was altered."""
        try:
            trailer = self.trailer if last_meta is None else json.loads(last_meta)
            proof = trailer["sig"] if self.verify is not None else trailer["tags"][self.node]
            digest = None if self._mac is not None else str(trailer["digest"])
        except (ValueError, TypeError, KeyError, AttributeError):
            raise AuthError("unauthenticated", f"no valid trailer from {self.sender!r}") from None
        if not isinstance(proof, str):
            raise AuthError("unauthenticated", f"no valid trailer from {self.sender!r}")
        if self._mac is not None:
            # GMAC binds payload and message key together: an altered payload and a trailer of
            # another message fail alike.
            if not hmac.compare_digest(_gmac_tag(self._mac), proof):
                raise AuthError("altered", f"payload from {self.sender!r} does not match its authenticated tag")
            return
        if self.verify is not None:
            if not _signature_holds(self.verify, proof, _trailer_signed(self.signed, digest)):
                raise AuthError("wrong_key", f"trailer of {self.sender!r} is not signed with its signing key")
        elif not hmac.compare_digest(_trailer_tag(self.key, self.signed, digest), proof):
            raise AuthError("wrong_key", f"trailer tag does not verify with the key of {self.sender!r}")
        if not hmac.compare_digest(self._hash.hexdigest(), digest):
            raise AuthError("altered", f"payload from {self.sender!r} does not match its authenticated digest")


def _signature_holds(key: Ed25519PublicKey, signature: object, data: bytes) -> bool:
    try:
        key.verify(bytes.fromhex(signature), data)  # type: ignore[arg-type]
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


class Opener:
    """The receiving side: checks envelopes and remembers sequence numbers against replays.

    State is kept only for senders that authenticated, and one sequence window per sender: its
    newest incarnation's (an older incarnation may not speak again), so a flood of fresh
    incarnations, even signed with a stolen key, replaces a window instead of adding one."""

    def __init__(self, ring: Keyring, on_window_replaced: Callable[[], None] = lambda: None):
        self.ring = ring
        self._windows: dict[str, SequenceWindow] = {}
        self._lock = threading.Lock()  # every reader thread of the node opens through this one
        self._verify = {n: Ed25519PublicKey.from_public_bytes(k) for n, k in ring.verify_keys.items()}
        self._on_window_replaced = on_window_replaced  # a newer incarnation of a sender took its window

    def open(self, topic: str, sender: str, incarnation: int, total_bytes: int, envelope: str) -> Opened:
        """The message's own meta, or AuthError; from chunk 0 alone."""
        try:
            doc = json.loads(envelope)
            auth, meta, tag = doc["auth"], doc["meta"], doc["tags"].get(self.ring.node)
            claimed = (auth["run"], auth["sender"], auth["incarnation"], auth["topic"], auth["bytes"])
            seq, trailer, mac, signature = int(auth["seq"]), doc.get("trailer"), auth["mac"], doc.get("sig")
        except (ValueError, TypeError, KeyError, AttributeError):
            raise AuthError("unauthenticated", f"no valid envelope from {sender!r}") from None
        verify = self._verify.get(sender)
        if not isinstance(meta, str) or not isinstance(signature if verify is not None else tag, str):
            raise AuthError("unauthenticated", f"{sender!r} sent no {'signature' if verify else 'tag'} "
                                               f"for {self.ring.node}")
        if mac not in MACS:
            raise AuthError("unauthenticated", f"{sender!r} names no known payload MAC")
        if claimed[0] != self.ring.run_id:
            raise AuthError("wrong_run", f"{sender!r} is in run {claimed[0]!r}")
        if claimed[1:] != (sender, incarnation, topic, total_bytes):
            raise AuthError("unauthenticated", f"envelope of {sender!r} does not match its chunk")
        key, signed = self.ring.key_with(sender), _signed_bytes(auth, meta)
        if verify is not None:
            # The pair key is shared with the sender's counterpart, so only the signature tells
            # that the sender itself wrote this.
            if not _signature_holds(verify, signature, signed):
                raise AuthError("wrong_key", f"envelope is not signed with the signing key of {sender!r}")
        elif key is None or not hmac.compare_digest(_tag(key, signed), tag):
            raise AuthError("wrong_key", f"tag does not verify with the key of {sender!r}")
        with self._lock:
            self._check_sequence(sender, incarnation, seq)
        return Opened(meta, sender, key or b"", signed, trailer, self.ring.node, mac, verify)

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

    def open_whole(self, topic: str, sender: str, incarnation: int, envelope: str, payload: bytes) -> str:
        """A one-piece message (an announcement): open, authenticate the payload, finish; its meta or AuthError."""
        opened = self.open(topic, sender, incarnation, len(payload), envelope)
        opened.update(payload)
        opened.finish()
        return opened.meta
