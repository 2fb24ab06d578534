"""SecAgg+ (Bell et al. 2020), the protocol of Flower's SecAggPlusWorkflow: the controller learns
the sum of the clients' quantized updates (commlab.privacy.field) and nothing else about any one.

A round, each step one message from every client still in it, relayed by the controller:
  1. advertise: two fresh X25519 public keys, one to encrypt shares, one to agree masks.
  2. share keys: the client splits its self-mask seed b and its mask private key (Shamir,
     `threshold` of `degree` shares) among its neighbours in a sparse random graph, encrypted to each.
  3. masked input: levels + PRG(b) + sum over neighbours j of +-PRG(s_ij) modulo 2**bits, s_ij
     agreed with j's mask key; a pair's two masks cancel in the sum.
  4. unmask: told who sent a masked input (survivors) and who dropped after sharing, a client
     returns its share of b for each surviving neighbour and of the mask key for each dropped one,
     never both for one client. The controller rebuilds each survivor's PRG(b) and each dropped
     client's masks with its surviving neighbours, and takes them off the sum.
A client that drops before its masked input is left out of the sum; one that drops afterwards is
in it. Recovery needs `threshold` answering neighbours per client; a threshold above half the
neighbours means no two disjoint groups of them could reveal both secrets of one client.

The messages of steps 1, 2 and 4 are Python objects here (commlab.privacy.secagg_server runs the
controller's side); the masked input has a wire format (encode_masked / decode_masked).
"""
from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from commlab.privacy import shamir
from commlab.privacy.field import FieldQuantizer

KEY_BYTES = 32
NONCE_BYTES = 12
SHARES_VERSION = 1
MASKED_MAGIC, MASKED_VERSION = b"SAM", 1
_SHARES_HEAD = struct.Struct("<BHH")       # version, sender index, recipient index
_MASKED_HEAD = struct.Struct("<3sBBI")     # magic, version, bits, length


@dataclass(frozen=True)
class SecAggParams:
    """What every party of a round agrees on: its clients (sorted), the graph, the field."""
    clients: tuple[str, ...]
    degree: int        # neighbours per client (even; >= clients - 1: every other client)
    threshold: int     # shares that recover a secret
    graph_seed: int
    quantizer: FieldQuantizer
    length: int        # coordinates of an update

    def __post_init__(self) -> None:
        if len(set(self.clients)) != len(self.clients) or list(self.clients) != sorted(self.clients) or len(self.clients) < 2:
            raise ValueError("secure aggregation needs at least 2 distinct clients, sorted")
        if self.degree < 1 or (self.degree % 2 and self.degree < len(self.clients) - 1):
            raise ValueError(f"degree must be even (or >= clients - 1: every other client), got {self.degree}")
        k = self.neighbour_count
        if not k / 2 < self.threshold <= k:
            raise ValueError(f"threshold must be above half of the {k} neighbours and at most {k}, got {self.threshold}")
        if self.quantizer.clients < len(self.clients) or self.length < 1:
            raise ValueError(f"the field holds {self.quantizer.clients} clients, the round has {len(self.clients)}")

    @property
    def neighbour_count(self) -> int:
        return min(self.degree, len(self.clients) - 1)

    def index(self, client: str) -> int:
        return self.clients.index(client)

    def neighbours(self, client: str) -> list[str]:
        """The client's neighbours: degree / 2 on each side in a seeded random ring (a Harary graph)."""
        n, k = len(self.clients), self.neighbour_count
        if k == n - 1:
            return [c for c in self.clients if c != client]
        ring = [self.clients[i] for i in np.random.default_rng(self.graph_seed).permutation(n)]
        at = ring.index(client)
        return sorted(ring[(at + o) % n] for o in range(-(k // 2), k // 2 + 1) if o != 0)


@dataclass(frozen=True)
class PublicKeys:
    client: str
    share_key: bytes   # X25519: shares sent to this client are encrypted with it
    mask_key: bytes    # X25519: pairwise masks are agreed with it


@dataclass(frozen=True)
class UnmaskReply:
    client: str
    self_mask_shares: dict[str, int]  # surviving neighbour -> this client's share of its self-mask seed
    key_shares: dict[str, int]        # dropped neighbour -> this client's share of its mask private key


def _derive(private: X25519PrivateKey, public: bytes, purpose: bytes) -> bytes:
    return HKDF(hashes.SHA256(), KEY_BYTES, None, b"commlab secagg " + purpose).derive(
        private.exchange(X25519PublicKey.from_public_bytes(public)))


def pair_seed(private: X25519PrivateKey, public: bytes) -> bytes:
    return _derive(private, public, b"mask")


def prg(seed: bytes, length: int, bits: int) -> np.ndarray:
    """`length` uniform integers below 2**bits (uint32) from ChaCha20 keyed by `seed`."""
    stream = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor().update(bytes(4 * length))
    return np.frombuffer(stream, dtype="<u4") & np.uint32((1 << bits) - 1)


def mask_sign(owner: str, other: str) -> int:
    """The lower-named client of a pair adds their mask, the other subtracts it."""
    return 1 if owner < other else -1


class SecAggClient:
    """One client's side of one round. `entropy(n)`: n random bytes (tests pass a seeded source)."""

    def __init__(self, name: str, params: SecAggParams, entropy: Callable[[int], bytes] = os.urandom):
        if name not in params.clients:
            raise ValueError(f"{name!r} is not a client of this round")
        self.name, self.params, self.entropy = name, params, entropy
        self.share_sk = X25519PrivateKey.from_private_bytes(entropy(KEY_BYTES))
        self.mask_sk = X25519PrivateKey.from_private_bytes(entropy(KEY_BYTES))
        self.self_seed = entropy(shamir.SECRET_BYTES)
        self.keys: dict[str, PublicKeys] = {}
        self.held: dict[str, tuple[int, int]] = {}  # neighbour -> its (self-mask seed, mask key) shares

    def advertise(self) -> PublicKeys:
        return PublicKeys(self.name, self.share_sk.public_key().public_bytes_raw(),
                          self.mask_sk.public_key().public_bytes_raw())

    def share_keys(self, keys: dict[str, PublicKeys]) -> dict[str, bytes]:
        """Encrypted shares for each neighbour that advertised keys (recipient -> ciphertext)."""
        p = self.params
        if keys.get(self.name) != self.advertise() or any(k.client != c or c not in p.clients for c, k in keys.items()):
            raise ValueError("the advertised keys do not name this round's clients, or not this client's keys")
        published = [k.mask_key for k in keys.values()] + [k.share_key for k in keys.values()]
        if len(set(published)) != len(published):
            raise ValueError("two advertised keys are the same")
        self.keys = keys
        holders = [j for j in p.neighbours(self.name) if j in keys]
        if len(holders) < p.threshold:
            raise ValueError(f"{len(holders)} neighbours advertised keys, the threshold is {p.threshold}")
        xs = [p.index(j) + 1 for j in holders]
        seeds = shamir.split(self.self_seed, p.threshold, xs, self.entropy)
        secret_keys = shamir.split(self.mask_sk.private_bytes_raw(), p.threshold, xs, self.entropy)
        return {j: self._seal(j, seeds[x], secret_keys[x]) for j, x in zip(holders, xs)}

    def _aead(self, peer: str) -> ChaCha20Poly1305:
        return ChaCha20Poly1305(_derive(self.share_sk, self.keys[peer].share_key, b"shares"))

    def _seal(self, recipient: str, seed_share: int, key_share: int) -> bytes:
        p, nonce = self.params, self.entropy(NONCE_BYTES)
        plain = (_SHARES_HEAD.pack(SHARES_VERSION, p.index(self.name), p.index(recipient))
                 + seed_share.to_bytes(shamir.SHARE_BYTES, "big") + key_share.to_bytes(shamir.SHARE_BYTES, "big"))
        return nonce + self._aead(recipient).encrypt(nonce, plain, None)

    def _open(self, sender: str, sealed: bytes) -> tuple[int, int]:
        p = self.params
        try:
            plain = self._aead(sender).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)
        except (InvalidTag, ValueError):
            raise ValueError(f"shares from {sender!r} do not decrypt") from None
        if len(plain) != _SHARES_HEAD.size + 2 * shamir.SHARE_BYTES:
            raise ValueError(f"shares from {sender!r} are {len(plain)} bytes")
        version, frm, to = _SHARES_HEAD.unpack_from(plain)
        if (version, frm, to) != (SHARES_VERSION, p.index(sender), p.index(self.name)):
            raise ValueError(f"shares from {sender!r}: version {version}, from {frm} to {to}, not for this pair")
        body = plain[_SHARES_HEAD.size:]
        return int.from_bytes(body[:shamir.SHARE_BYTES], "big"), int.from_bytes(body[shamir.SHARE_BYTES:], "big")

    def masked_input(self, received: dict[str, bytes], levels: np.ndarray) -> np.ndarray:
        """levels + self mask + pairwise masks with every neighbour whose shares arrived."""
        p, q = self.params, self.params.quantizer
        neighbours = set(p.neighbours(self.name))
        if not set(received) <= neighbours & set(self.keys):
            raise ValueError(f"shares from clients that are not neighbours: {sorted(set(received) - neighbours)}")
        if levels.shape != (p.length,) or levels.dtype != np.uint32 or int(levels.max(initial=0)) > q.max_level:
            raise ValueError(f"levels must be {p.length} uint32 values in 0..{q.max_level}")
        self.held = {j: self._open(j, sealed) for j, sealed in sorted(received.items())}
        total = levels.astype(np.uint64) + prg(self.self_seed, p.length, q.bits)
        for j in self.held:
            mask = prg(pair_seed(self.mask_sk, self.keys[j].mask_key), p.length, q.bits).astype(np.uint64)
            total += mask if mask_sign(self.name, j) > 0 else (q.modulus - mask)
        return (total % q.modulus).astype(np.uint32)

    def unmask(self, survivors: list[str], dropped: list[str]) -> UnmaskReply:
        """Shares for the controller to remove the masks; refuses a request that could reveal an update."""
        alive, gone = set(survivors), set(dropped)
        if alive & gone or self.name not in alive:
            raise ValueError("a client cannot be both a survivor and dropped, and this client survived")
        if len(alive) < self.params.threshold:
            raise ValueError(f"{len(alive)} survivors are fewer than the threshold {self.params.threshold}")
        if not set(self.held) <= alive | gone:
            raise ValueError(f"neighbours neither surviving nor dropped: {sorted(set(self.held) - alive - gone)}")
        return UnmaskReply(self.name, {j: s for j, (s, _) in self.held.items() if j in alive},
                           {j: k for j, (_, k) in self.held.items() if j in gone})


def encode_masked(masked: np.ndarray, bits: int) -> bytes:
    """A masked input on the wire: header, then each value in `bits` bits, little-endian."""
    value_bits = np.unpackbits(masked.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    return _MASKED_HEAD.pack(MASKED_MAGIC, MASKED_VERSION, bits, masked.size) + \
        np.packbits(value_bits[:, :bits], bitorder="little").tobytes()


def decode_masked(frame: bytes, bits: int, length: int) -> np.ndarray:
    """The masked input of a frame; ValueError naming what is wrong with one from an untrusted client."""
    if len(frame) < _MASKED_HEAD.size:
        raise ValueError(f"masked input of {len(frame)} bytes is shorter than its header")
    magic, version, got_bits, got_length = _MASKED_HEAD.unpack_from(frame)
    if (magic, version) != (MASKED_MAGIC, MASKED_VERSION):
        raise ValueError(f"not a masked input of version {MASKED_VERSION} (magic {magic!r}, version {version})")
    if (got_bits, got_length) != (bits, length):
        raise ValueError(f"masked input of {got_length} values in {got_bits} bits, the round has {length} in {bits}")
    body = np.frombuffer(frame, np.uint8, offset=_MASKED_HEAD.size)
    if body.size != -(-bits * length // 8):
        raise ValueError(f"masked input body is {body.size} bytes, {length} values in {bits} bits are {-(-bits * length // 8)}")
    value_bits = np.unpackbits(body, bitorder="little")[:bits * length].reshape(length, bits)
    whole = np.zeros((length, 32), np.uint8)
    whole[:, :bits] = value_bits
    return np.packbits(whole, axis=1, bitorder="little").view("<u4").reshape(length).astype(np.uint32)
