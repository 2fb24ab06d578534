"""Files that carry the SHA-256 of their own content, checked before anything parses them
(checkpoints: an .npz archive for FL, a torch.save file for DDP).

Layout: one ASCII header line, then the payload:

    commlab-sha256 <64 hex digits> <payload bytes>\\n<payload>

`write_checksummed` writes the whole file with commlab.output.run_folder.write_atomic (temporary file, fsync,
rename, directory fsync), so a crash leaves the old file or the new one. It streams: the payload
goes to the file as it is made and is hashed on the way (the header, its size padded to 15
digits, is written last), and `check_checksummed` reads it back in blocks, so a checkpoint of a
large model costs no copy of it in memory. `read_checksummed`
returns the payload or raises ConfigError with one line naming the file and what is wrong with it:
not found, empty, no header (not written by commlab, or before checksums), truncated, trailing
bytes, SHA-256 mismatch. By hand: `tail -c +$(( $(head -1 F | wc -c) + 1 )) F | sha256sum`.
"""
from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable

from commlab.config.schema import ConfigError
from commlab.output.run_folder import write_atomic

MAGIC = b"commlab-sha256 "
_HEADER = re.compile(rb"commlab-sha256 ([0-9a-f]{64}) (\d{1,15})\n")
_MAX_HEADER = len(MAGIC) + 64 + 1 + 15 + 1
_BLOCK = 1 << 20  # check_checksummed's reads


def seal(payload: bytes) -> bytes:
    """Header line + payload."""
    return MAGIC + f"{hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload


class _HashingWriter(io.RawIOBase):
    """A write-only, unseekable stream: what is written goes to `file` and into the hash (zipfile,
    under np.savez and torch.save, writes such a stream front to back)."""

    def __init__(self, file: BinaryIO):
        super().__init__()
        self.file, self.hash, self.size = file, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | memoryview) -> int:  # type: ignore[override]
        self.hash.update(data)
        self.size += len(data)
        return self.file.write(data)

    def tell(self) -> int:
        return self.size


def write_checksummed(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write `data` (bytes, or a function writing to a binary file, e.g. torch.save / np.savez)
    with its header, atomically. Nothing is written if the function raises."""
    def write(file: BinaryIO) -> None:
        file.write(b"\0" * _MAX_HEADER)  # room for the header, written once the hash is known
        sink = _HashingWriter(file)
        if isinstance(data, (bytes, bytearray, memoryview)):
            sink.write(data)
        else:
            data(sink)  # type: ignore[arg-type]  # the writer takes what a binary file takes
        file.seek(0)
        file.write(MAGIC + f"{sink.hash.hexdigest()} {sink.size:015d}\n".encode())
    write_atomic(path, write)


def check_checksummed(path: Path) -> None:
    """What read_checksummed checks, reading the file in blocks; ConfigError "<path>: <problem>"."""
    path = Path(path)
    with _opened(path) as f:
        head = f.read(_MAX_HEADER)
        want, size, start = _header(path, head, path.stat().st_size)
        f.seek(start)
        digest = hashlib.sha256()
        while block := f.read(_BLOCK):
            digest.update(block)
    _compare(path, digest.hexdigest(), want)


def read_checksummed(path: Path) -> bytes:
    """The verified payload of `path`; ConfigError "<path>: <problem>" otherwise."""
    path = Path(path)
    with _opened(path) as f:
        raw = f.read()
    want, size, start = _header(path, raw[:_MAX_HEADER], len(raw))
    payload = raw[start:]
    _compare(path, hashlib.sha256(payload).hexdigest(), want)
    return payload


@contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: unreadable: {e.strerror or e}") from None
    with f:
        yield f


def _header(path: Path, head: bytes, file_size: int) -> tuple[str, int, int]:
    """(SHA-256 the header names, content bytes, where the content starts) of a file that starts
    with `head` and is `file_size` bytes long."""
    if not file_size:
        raise ConfigError(f"{path}: empty file (0 bytes)")
    end = head.find(b"\n")
    header = _HEADER.fullmatch(head[:end + 1]) if end >= 0 else None
    if header is None:
        if head.startswith(MAGIC) or MAGIC.startswith(head):
            raise ConfigError(f"{path}: truncated or damaged SHA-256 header ({file_size} bytes)")
        raise ConfigError(f"{path}: no SHA-256 header (not a commlab checkpoint, or written before checksums)")
    want, size = header.group(1).decode(), int(header.group(2))
    stored = file_size - end - 1
    if stored < size:
        raise ConfigError(f"{path}: truncated: {stored} of {size} content bytes")
    if stored > size:
        raise ConfigError(f"{path}: {stored - size} unexpected bytes after the content")
    return want, size, end + 1


def _compare(path: Path, got: str, want: str) -> None:
    if got != want:
        raise ConfigError(f"{path}: corrupt: SHA-256 of the content is {got[:16]}, the header says {want[:16]}")
