"""Typed messages on named topics. A message type is a plain dataclass; its topic is its class
name. On the wire its fields travel as JSON in the first chunk's `meta` and its `payload` field (if
it has one; bytes) as the chunked bytes. The transport defines no message types of its own: the
code using it does."""
from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Any

from .errors import MessageError


def message_type(cls: type) -> type:
    """`cls` itself if it can travel as a message (a dataclass class), else TypeError."""
    if not (isinstance(cls, type) and is_dataclass(cls)):
        raise TypeError(f"a message type is a dataclass class (its topic is the class name), got {cls!r}")
    return cls


def to_wire(msg: Any) -> tuple[str, bytes | memoryview]:
    """(meta JSON, payload) of a message."""
    # Not dataclasses.asdict: it deep-copies every field, and this runs once per message.
    meta = {f.name: getattr(msg, f.name) for f in fields(msg) if f.name != "payload"}
    return json.dumps(meta), getattr(msg, "payload", b"")


def from_wire(cls: type, meta: str, payload: bytes) -> Any:
    """Rebuild a message; a missing or unknown field is a MessageError naming it."""
    try:
        values = json.loads(meta)
    except ValueError as e:
        raise MessageError(f"{cls.__name__}: meta is not JSON: {e}") from None
    if not isinstance(values, dict):
        raise MessageError(f"{cls.__name__}: meta is not a JSON object")
    names = {f.name for f in fields(cls)}
    has_payload = "payload" in names
    unknown = set(values) - names
    missing = {f.name for f in fields(cls) if f.name != "payload" and f.name not in values}
    if unknown or missing:
        raise MessageError(f"{cls.__name__}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    if payload and not has_payload:
        raise MessageError(f"{cls.__name__}: carries no payload, got {len(payload)} bytes")
    return cls(**values, payload=payload) if has_payload else cls(**values)
