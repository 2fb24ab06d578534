"""Message types of the DDS tests. The transport carries any dataclass on the topic of its class
name, so its tests bring their own instead of borrowing an application's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    """Meta only: JSON fields of several kinds."""
    seq: int
    tag: str
    scale: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Blob:
    seq: int
    index: int
    payload: bytes = b""


@dataclass
class Reply:
    seq: int
    text: str
    count: int
    payload: bytes = b""
