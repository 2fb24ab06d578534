"""The keys of a run's authenticated and encrypted messages, and the key files that carry them.

The launcher draws a random run key. Nodes trusted with it (the FL controller, every DDP rank) can
derive the key any pair of nodes shares; every other node (an FL client) gets only the pair keys it
needs, so it cannot sign as another client, nor read tags or payloads meant for others. A pair key
is symmetric, so it alone could not tell a client's messages from the controller's: each trusted
node also gets an Ed25519 signing key, and the untrusted nodes its public key. Key files are JSON,
mode 0600, outside the results folder (containers: a compose secret); never on a command line.

Identities: a node may speak for identities of its own (an FL host for the logical clients it
runs). Each identity has a key of its own, derived from the run key; the node speaking for it gets
it in its file, the run key's holders derive it, and `identity_tag` signs with it what the
application says an identity sent (the transport signs only what a node sent).

Discovery tag: every keyring of a run holds the run's Cyclone domain tag, derived from the run key,
and a keyed node's participant carries it (settings.py), so DDS discovery ignores every participant
without it: a process on the domain that has no key file cannot match a reader or writer of the
run. The tag travels in clear in participant announcements; what that leaves: docs/security.md.

What the keys protect on the wire, and how: envelope.py (the format), seal.py and opener.py.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from commlab.config.schema import ConfigError

KEY_BYTES = 32
TAG_BYTES = 16
DISCOVERY_TAG = re.compile(r"[0-9a-f]{64}")  # HMAC-SHA256 in hex: safe in Cyclone's XML, never logged


class KeyFileError(ConfigError):
    """A key file that is missing, readable by others, or malformed; names the file."""


def pair_key(run_key: bytes, a: str, b: str) -> bytes:
    """The key nodes `a` and `b` share (the same whichever of them asks)."""
    low, high = sorted((a, b))
    return hmac.new(run_key, b"commlab pair key\0" + low.encode() + b"\0" + high.encode(), hashlib.sha256).digest()


def identity_key(run_key: bytes, identity: str) -> bytes:
    """The key of `identity` (one of the identities a node speaks for)."""
    return hmac.new(run_key, b"commlab identity key\0" + identity.encode(), hashlib.sha256).digest()


def discovery_tag(run_key: bytes) -> str:
    """The run's Cyclone domain tag: participants of the domain with another tag (or none) are
    ignored by discovery."""
    return hmac.new(run_key, b"commlab discovery tag", hashlib.sha256).hexdigest()


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
    discovery_tag: str = field(repr=False)  # the run's Cyclone domain tag (discovery_tag())
    run_key: bytes | None = None
    pair_keys: dict[str, bytes] = field(default_factory=dict)
    identity_keys: dict[str, bytes] = field(default_factory=dict)
    signing_key: bytes | None = None  # raw Ed25519 private key
    signed_for: tuple[str, ...] = ()  # the peers that take this node's messages only signed (no tags for them)
    verify_keys: dict[str, bytes] = field(default_factory=dict)  # node -> raw Ed25519 public key
    # With the run key: the pair keys of this node's peers, derived once (every message's envelope
    # is checked with one); names outside the run are derived per call and never kept.
    _derived: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.run_key is not None:
            self._derived.update({p: pair_key(self.run_key, self.node, p) for p in self.peers})

    def for_node(self, name: str) -> "Keyring":
        """This keyring as node `name` uses it: a node holding the run key may be any node of the
        run (one file serves every DDP rank); any other keyring only the node it was made for."""
        if name == self.node:
            return self
        if self.run_key is None:
            raise KeyFileError(f"the key file is for {self.node!r}, this node is {name!r}")
        peers = tuple(p for p in dict.fromkeys((*self.peers, self.node)) if p != name)
        return Keyring(self.run_id, name, peers, self.discovery_tag, run_key=self.run_key)  # no signing key: it is this node's

    def key_with(self, peer: str) -> bytes | None:
        if self.run_key is not None:
            return self._derived.get(peer) or pair_key(self.run_key, self.node, peer)
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
    tag = discovery_tag(run_key)
    identities = identities or {}
    untrusted = tuple(n for n in nodes if n not in trusted)
    # Signatures only where someone needs them: among equals (DDP ranks) the pair tags suffice.
    signing = {node: Ed25519PrivateKey.generate() for node in nodes if node in trusted and untrusted}
    public = {node: key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) for node, key in signing.items()}
    rings = {}
    for node in nodes:
        if node in trusted:
            key = signing.get(node)
            rings[node] = Keyring(run_id, node, tuple(n for n in nodes if n != node), tag, run_key=run_key,
                                  signing_key=None if key is None else key.private_bytes_raw(), signed_for=untrusted)
        else:
            peers = tuple(n for n in nodes if n in trusted)
            rings[node] = Keyring(run_id, node, peers, tag, pair_keys={p: pair_key(run_key, node, p) for p in peers},
                                  identity_keys={i: identity_key(run_key, i) for i in identities.get(node, ())},
                                  verify_keys={p: public[p] for p in peers})
    return rings


def write_keyring(path: Path, ring: Keyring) -> None:
    """Create `path` with mode 0600 (never widened by the umask), refusing to overwrite."""
    doc = {"run_id": ring.run_id, "node": ring.node, "peers": list(ring.peers), "discovery_tag": ring.discovery_tag,
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
        ring = Keyring(str(doc["run_id"]), str(doc["node"]), tuple(str(p) for p in doc["peers"]), doc.get("discovery_tag"),
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
    if ring.discovery_tag is None:
        raise KeyFileError(f"{path}: key file has no discovery_tag (written by an earlier release); "
                           "make the run's key files again")
    if not isinstance(ring.discovery_tag, str) or not DISCOVERY_TAG.fullmatch(ring.discovery_tag):
        raise KeyFileError(f"{path}: discovery_tag must be 64 lowercase hex digits")
    return ring


