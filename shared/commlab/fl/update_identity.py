"""Which client an update is from, when one process speaks for several (logical clients,
docs/scale.md). The transport authenticates the node that sent a message; the update itself is
signed with the key of the client it names (commlab.dds.auth identity keys: a host has the keys of
the clients it runs, the controller derives any), so a host speaks for its own clients only, each
under a key of its own, and a client's key is no use to another client of the same host."""
from __future__ import annotations

import dataclasses
import hmac
import json

import blake3

from commlab.dds.auth import Keyring, identity_tag
from commlab.dds.messages import from_wire, to_wire
from commlab.fl.messages import ClientUpdate


def signed_bytes(msg: ClientUpdate) -> bytes:
    """Every field but the tag: the report fields as canonical JSON, the payload by its BLAKE3 digest."""
    fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg) if f.name not in ("payload", "identity_tag")}
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\0" + blake3.blake3(msg.payload).digest()


def sign(ring: Keyring | None, msg: ClientUpdate) -> ClientUpdate:
    """`msg` with its client's tag (unchanged in an unauthenticated run or without that client's key),
    computed over the fields as the receiver will read them (e.g. an int in a float field arrives
    as a float)."""
    key = None if ring is None else ring.key_of(str(msg.client_id))
    if key is None:
        return msg
    received = from_wire(ClientUpdate, *to_wire(msg))
    return dataclasses.replace(msg, identity_tag=identity_tag(key, signed_bytes(received)))


def problem(ring: Keyring | None, msg: ClientUpdate) -> str | None:
    """Why `msg` is not signed by the client it names (None: it is, or the run is not authenticated)."""
    if ring is None:
        return None
    key = ring.key_of(str(msg.client_id))
    if key is None:
        return "no key for the client it names"
    if not isinstance(msg.identity_tag, str) or not msg.identity_tag:
        return "not signed by the client it names (no identity tag)"
    if not hmac.compare_digest(msg.identity_tag, identity_tag(key, signed_bytes(msg))):
        return "not signed with the key of the client it names"
    return None
