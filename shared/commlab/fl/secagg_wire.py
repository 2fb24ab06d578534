"""SecAgg+ in FL rounds on the wire: the round's parameters in a TrainCmd, and the payloads of the
key, share and unmask steps (the masked input has its own frame, privacy.secagg.encode_masked).

Each payload is JSON {"v": 1, "kind": <step>, ...} with bytes as base64 and share values as
decimal strings (they are 521-bit integers); every decoder checks version, kind, names, sizes and
ranges, and raises ValueError naming what is wrong (a client's or the controller's bytes are untrusted).
"""
from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from commlab.privacy import shamir
from commlab.privacy.field import field_steps
from commlab.privacy.secagg import KEY_BYTES, PublicKeys, SecAggParams, UnmaskReply
from commlab.privacy.update_grid import UpdateGrid

WIRE_VERSION = 1
PARAMS_VERSION = 3  # TrainCmd.secagg; 2: the DP noise multiplier "noise"; 3: "rotate", the rotated grid
MAX_SEALED = 1024  # bytes of one encrypted share pair (header, two shares, nonce, tag: ~160)


def round_params(threshold: int, neighbours: int, clip: float, graph_seed: int, record: bool,
                 noise: float = 0.0) -> dict[str, Any]:
    """TrainCmd.secagg of a round; `noise`: the DP noise multiplier z of the sum (0: none). Without
    noise the clients rotate their updates (privacy.update_grid), seeded by the round's public graph seed."""
    return {"v": PARAMS_VERSION, "threshold": threshold, "neighbours": neighbours, "clip": clip,
            "graph_seed": graph_seed, "record": record, "noise": noise, "rotate": not noise}


def grid_of(fields: dict[str, Any], clients: list[str], codec: str, length: int) -> UpdateGrid:
    """The round's UpdateGrid from TrainCmd.secagg, the round's clients, its codec and the model size.
    The noise on the sum is z * clip, in levels of width 2 * clip / steps: z * steps / 2."""
    if fields.get("v") != PARAMS_VERSION:
        raise ValueError(f"secagg parameters of version {fields.get('v')!r}, this client reads {PARAMS_VERSION}")
    for key, kind in (("threshold", int), ("neighbours", int), ("graph_seed", int), ("clip", (int, float)),
                      ("noise", (int, float)), ("rotate", bool)):
        if not isinstance(fields.get(key), kind) or (kind is not bool and isinstance(fields.get(key), bool)):
            raise ValueError(f"secagg parameter {key} is missing or not a {'flag' if kind is bool else 'number'}: "
                             f"{fields.get(key)!r}")
    if not 0 <= fields["noise"] < math.inf:
        raise ValueError(f"secagg parameter noise must be a finite number >= 0, got {fields['noise']!r}")
    if not 0 < fields["clip"] < math.inf:
        raise ValueError(f"secagg parameter clip must be a finite number > 0, got {fields['clip']!r}")
    return UpdateGrid.of_round(float(fields["clip"]), field_steps(codec), len(clients), length, float(fields["noise"]),
                               fields["graph_seed"] if fields["rotate"] else None)


def params_of(fields: dict[str, Any], clients: list[str], codec: str, length: int) -> SecAggParams:
    """The round's SecAggParams (its grid: grid_of) for an update of `length` coordinates."""
    grid = grid_of(fields, clients, codec, length)
    return SecAggParams(tuple(sorted(clients)), fields["neighbours"], fields["threshold"], fields["graph_seed"],
                        grid.quantizer, grid.levels_length)


def _dump(kind: str, body: dict[str, Any]) -> bytes:
    return json.dumps({"v": WIRE_VERSION, "kind": kind, **body}, separators=(",", ":")).encode()


def _load(data: bytes, kind: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise ValueError(f"secagg {kind} payload is not JSON") from None
    if not isinstance(doc, dict) or doc.get("v") != WIRE_VERSION or doc.get("kind") != kind:
        raise ValueError(f"not a secagg {kind} payload of version {WIRE_VERSION}")
    return doc


def _bytes(text: Any, what: str, size: int | None = None, most: int | None = None) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except binascii.Error:
        raw = None
    if raw is None or (size is not None and len(raw) != size) or (most is not None and len(raw) > most):
        raise ValueError(f"{what} is not base64 of {size or f'at most {most}'} bytes")
    return raw


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _names(doc: dict[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
    entries = doc.get(key)
    if not isinstance(entries, dict) or not set(entries) <= allowed:
        raise ValueError(f"secagg {doc['kind']} payload: {key} must map this round's clients, "
                         f"got {sorted(entries) if isinstance(entries, dict) else type(entries).__name__}")
    return entries


def encode_keys(keys: dict[str, PublicKeys]) -> bytes:
    return _dump("keys", {"keys": {c: [_b64(k.share_key), _b64(k.mask_key)] for c, k in keys.items()}})


def decode_keys(data: bytes, clients: set[str]) -> dict[str, PublicKeys]:
    keys = {}
    for client, pair in _names(_load(data, "keys"), "keys", clients).items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"keys of {client!r} are not a pair")
        keys[client] = PublicKeys(client, _bytes(pair[0], f"{client}'s share key", KEY_BYTES),
                                  _bytes(pair[1], f"{client}'s mask key", KEY_BYTES))
    return keys


def decode_own_keys(data: bytes, client: str) -> PublicKeys:
    """The keys a client advertises: its own, and no one else's."""
    keys = decode_keys(data, {client})
    if client not in keys:
        raise ValueError(f"the keys {client!r} advertised do not include its own")
    return keys[client]


def encode_shares(sealed: dict[str, bytes]) -> bytes:
    """Encrypted share pairs by the other client (recipient when sent, sender when relayed)."""
    return _dump("shares", {"shares": {c: _b64(s) for c, s in sealed.items()}})


def decode_shares(data: bytes, clients: set[str]) -> dict[str, bytes]:
    return {c: _bytes(s, f"shares of {c!r}", most=MAX_SEALED)
            for c, s in _names(_load(data, "shares"), "shares", clients).items()}


def encode_unmask_request(survivors: list[str], dropped: list[str]) -> bytes:
    return _dump("unmask", {"survivors": survivors, "dropped": dropped})


def decode_unmask_request(data: bytes, clients: set[str]) -> tuple[list[str], list[str]]:
    doc = _load(data, "unmask")
    lists = [doc.get("survivors"), doc.get("dropped")]
    if not all(isinstance(x, list) and all(isinstance(c, str) and c in clients for c in x) for x in lists):
        raise ValueError("secagg unmask request: survivors and dropped must list this round's clients")
    return lists[0], lists[1]


def encode_unmask_reply(reply: UnmaskReply) -> bytes:
    return _dump("reply", {"self_mask": {c: str(s) for c, s in reply.self_mask_shares.items()},
                           "mask_key": {c: str(s) for c, s in reply.key_shares.items()}})


def decode_unmask_reply(data: bytes, client: str, clients: set[str]) -> UnmaskReply:
    doc = _load(data, "reply")

    def shares(key: str) -> dict[str, int]:
        out = {}
        for owner, text in _names(doc, key, clients).items():
            if not isinstance(text, str) or not text.isdigit() or len(text) > 160 or not int(text) < shamir.PRIME:
                raise ValueError(f"secagg unmask reply: share of {owner!r} is not an element of the field")
            out[owner] = int(text)
        return out
    return UnmaskReply(client, shares("self_mask"), shares("mask_key"))
