"""The FL messages. Each is a plain dataclass; on the wire its fields travel as JSON in the first
chunk's `meta` and its `payload` (if it has one) as the chunked bytes. The topic is the class name."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import MessageError


@dataclass
class TrainCmd:
    round: int
    epochs: int
    lr: float
    seed: int
    subset_size: int
    codec: str
    codec_params: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 60.0
    batch_size: int = 32
    run_id: str = ""


@dataclass
class ClientUpdate:
    round: int
    client_id: str
    num_samples: int
    payload: bytes = b""


@dataclass
class ModelBlob:
    round: int
    model_version: int
    payload: bytes = b""


MESSAGES: dict[str, type] = {cls.__name__: cls for cls in (TrainCmd, ClientUpdate, ModelBlob)}


def message_type(topic: str | type) -> type:
    name = topic if isinstance(topic, str) else topic.__name__
    if name not in MESSAGES:
        raise ValueError(f"unknown topic {name!r}; known: {sorted(MESSAGES)}")
    return MESSAGES[name]


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
