"""Typed messages on named topics. A message type is a plain dataclass; its topic is its class
name. On the wire its fields travel as JSON in the first chunk's `meta` and its `payload` field (if
it has one; bytes) as the chunked bytes. The transport defines no message types of its own: the
code using it does."""
from __future__ import annotations

import functools
import json
import math
import typing
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


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def from_wire(cls: type, meta: str, payload: bytes) -> Any:
    """Rebuild a message from untrusted bytes: every field must be present, known and of its
    declared type (checked_value); anything else is a MessageError naming the field."""
    try:
        values = json.loads(meta, parse_constant=_no_constant)  # NaN and Infinity are no JSON numbers
    except (ValueError, RecursionError) as e:
        raise MessageError(f"{cls.__name__}: meta is not JSON: {e}") from None
    if not isinstance(values, dict):
        raise MessageError(f"{cls.__name__}: meta is not a JSON object")
    declared = {f.name: f for f in fields(cls)}
    has_payload = "payload" in declared
    unknown = set(values) - set(declared) | ({"payload"} & set(values))  # the payload travels as bytes only
    missing = {n for n in declared if n != "payload" and n not in values}
    if unknown or missing:
        raise MessageError(f"{cls.__name__}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    if payload and not has_payload:
        raise MessageError(f"{cls.__name__}: carries no payload, got {len(payload)} bytes")
    hints = _hints(cls)
    checked = {n: checked_value(f"{cls.__name__}.{n}", hints[n], v) for n, v in values.items()}
    return cls(**checked, payload=payload) if has_payload else cls(**checked)


MAX_TEXT = 4096      # characters in one string field
MAX_INT = 2**63 - 1  # what a C int64 (numpy, torch) can hold


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def checked_value(where: str, tp: Any, value: Any) -> Any:
    """`value` (parsed JSON) if it is of type `tp` (int, float, str, bool, dict[str, ...] of JSON
    scalars), else MessageError: bool is no int, floats are finite, ints fit int64, strings are short."""
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str) and len(value) <= MAX_TEXT
    elif typing.get_origin(tp) is dict:
        ok = isinstance(value, dict) and len(value) <= 64 and all(
            isinstance(k, str) and len(k) <= MAX_TEXT and _json_scalar(v) for k, v in value.items())
    else:
        raise TypeError(f"{where}: message fields of type {tp} are not supported")
    if not ok:
        raise MessageError(f"{where}: {_short(value)} is not a valid {getattr(tp, '__name__', tp)}")
    return value


def _json_scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, int):
        return abs(v) <= MAX_INT
    if isinstance(v, str):
        return len(v) <= MAX_TEXT
    if isinstance(v, list):
        return len(v) <= 64 and all(_json_scalar(x) for x in v)
    return v is None or isinstance(v, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
