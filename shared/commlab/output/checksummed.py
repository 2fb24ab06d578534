"""Files that carry the SHA-256 of their own content, checked before anything parses them
(checkpoints: an .npz archive for FL, a torch.save file for DDP).

Layout: one ASCII header line, then the payload:

    commlab-sha256 <64 hex digits> <payload bytes>\\n<payload>

`write_checksummed` writes the whole file with commlab.output.run_folder.write_atomic (temporary file, fsync,
rename, directory fsync), so a crash leaves the old file or the new one. `read_checksummed`
returns the payload or raises ConfigError with one line naming the file and what is wrong with it:
not found, empty, no header (not written by commlab, or before checksums), truncated, trailing
bytes, SHA-256 mismatch. By hand: `tail -c +$(( $(head -1 F | wc -c) + 1 )) F | sha256sum`.
"""
from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from typing import BinaryIO, Callable

from commlab.config.schema import ConfigError
from commlab.output.run_folder import write_atomic

MAGIC = b"commlab-sha256 "
_HEADER = re.compile(rb"commlab-sha256 ([0-9a-f]{64}) (\d{1,15})\n")
_MAX_HEADER = len(MAGIC) + 64 + 1 + 15 + 1


def seal(payload: bytes) -> bytes:
    """Header line + payload."""
    return MAGIC + f"{hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload


def write_checksummed(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write `data` (bytes, or a function writing to a binary file, e.g. torch.save / np.savez)
    with its header, atomically. Nothing is written if the function raises."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        buf = io.BytesIO()
        data(buf)
        data = buf.getvalue()
    write_atomic(path, seal(bytes(data)))


def read_checksummed(path: Path) -> bytes:
    """The verified payload of `path`; ConfigError "<path>: <problem>" otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: unreadable: {e.strerror or e}") from None
    if not raw:
        raise ConfigError(f"{path}: empty file (0 bytes)")
    end = raw.find(b"\n", 0, _MAX_HEADER)
    header = _HEADER.fullmatch(raw[:end + 1]) if end >= 0 else None
    if header is None:
        if raw.startswith(MAGIC) or MAGIC.startswith(raw):
            raise ConfigError(f"{path}: truncated or damaged SHA-256 header ({len(raw)} bytes)")
        raise ConfigError(f"{path}: no SHA-256 header (not a commlab checkpoint, or written before checksums)")
    want, size = header.group(1).decode(), int(header.group(2))
    payload = raw[end + 1:]
    if len(payload) < size:
        raise ConfigError(f"{path}: truncated: {len(payload)} of {size} content bytes")
    if len(payload) > size:
        raise ConfigError(f"{path}: {len(payload) - size} unexpected bytes after the content")
    got = hashlib.sha256(payload).hexdigest()
    if got != want:
        raise ConfigError(f"{path}: corrupt: SHA-256 of the content is {got[:16]}, the header says {want[:16]}")
    return payload
