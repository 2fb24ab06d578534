"""Ring blocks between processes of one host through shared memory instead of loopback UDP.

On loopback every byte of a DDS message is copied by Cyclone into its sample, by the kernel into
and out of a socket and by reassembly into the message: several passes per block and the CPU
time of the two processes that also train. When the next rank's process shares this one's
/dev/shm (the same host, the same mount namespace), the ring writes a block into a slot of a file
there and sends, on its DDS topic as before, a message with the block's place instead of its bytes
(meta "shm": [file, slot, length]); the next rank reads the block where it lies and frees the slot.
Everything else stays as it was: the message is sealed like any other, waits, asks and resends
work as before (a block written again travels inline), and a block that finds no free slot, or is
larger than one, goes inline too.

Who shares: each node that may use shared memory (settings.shared_memory, on unshaped loopback
only: a shaped link must carry the bytes) writes a probe file with a random nonce and announces
its name and nonce; a peer shares this node's memory when that file is there with that nonce.

Files are named commlab-{probe,shm}-<pid>-<random>: the pid of the process that made them, so that
a later node removes those of a process that died without removing its own (sweep_dead_files).
A segment file, made by its writer (mode 0600, so only the same user or root opens it):

    offset  size      field
    0       8         magic b"CLSHM\\x01\\0\\0"
    8       4         slots (uint32)
    12      4         zero
    16      8         slot_bytes (uint64)
    24      slots     one state byte per slot: 1 while it holds a block not yet read, 0 when free
    DATA    slots x slot_bytes

States change with pwrite/pread on the file, not through the mapping: a system call orders them
after the block's bytes (the writer's copy in, the reader's copy out) on any CPU.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

SHM_DIR = Path("/dev/shm")
MAGIC = b"CLSHM\x01\0\0"
HEADER = struct.Struct("<8sI4xQ")
DATA_OFFSET = 4096  # the state bytes fit below it: at most MAX_SLOTS slots
MAX_SLOTS = DATA_OFFSET - HEADER.size
# Blocks a writer may have in flight before the next one goes inline. A slot's pages come when it is
# first written, and the lowest free slot is taken, so only as many as were in flight at once are.
SLOTS = 32
SEGMENT_NAME = re.compile(r"commlab-shm-[0-9]+-[0-9a-f]{32}")
PROBE_NAME = re.compile(r"commlab-probe-[0-9]+-[0-9a-f]{32}")
FREE, FULL = b"\0", b"\1"


class ShmError(ValueError):
    """A block's place that this node cannot read: named in one line."""


def _new_name(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(16)}"


class Probe:
    """This node's probe file: whoever reads the announced nonce in it shares /dev/shm with it."""

    def __init__(self) -> None:
        sweep_dead_files()
        self.name, self.nonce = _new_name("commlab-probe"), secrets.token_hex(16)
        fd = os.open(SHM_DIR / self.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, self.nonce.encode())
        finally:
            os.close(fd)

    def info(self) -> dict[str, str]:
        return {"probe": self.name, "nonce": self.nonce}

    def close(self) -> None:
        (SHM_DIR / self.name).unlink(missing_ok=True)


def shares_memory(info: object) -> bool:
    """Whether a peer that announced `info` ({"probe", "nonce"}) shares /dev/shm with this process."""
    if not isinstance(info, dict) or not PROBE_NAME.fullmatch(str(info.get("probe", ""))):
        return False
    try:
        return (SHM_DIR / str(info["probe"])).read_text() == str(info.get("nonce"))
    except (OSError, UnicodeDecodeError):
        return False


def sweep_dead_files() -> None:
    """Remove the probe and segment files of processes that are gone (killed before they could)."""
    for path in SHM_DIR.glob("commlab-*"):
        if not (SEGMENT_NAME.fullmatch(path.name) or PROBE_NAME.fullmatch(path.name)):
            continue
        try:
            os.kill(int(path.name.split("-")[2]), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except OSError:
            continue  # alive, another user's process


class SlotWriter:
    """A segment of SLOTS slots that one ring writer fills and its one reader frees."""

    def __init__(self, slot_bytes: int, slots: int = SLOTS):
        if not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"slots must be in 1..{MAX_SLOTS}, got {slots}")
        self.name, self.slots, self.slot_bytes = _new_name("commlab-shm"), slots, slot_bytes
        self.path = SHM_DIR / self.name
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        size = DATA_OFFSET + slots * slot_bytes
        os.ftruncate(self._fd, size)  # tmpfs: pages come when first written
        os.pwrite(self._fd, HEADER.pack(MAGIC, slots, slot_bytes), 0)
        self._map = mmap.mmap(self._fd, size)
        self._view = memoryview(self._map)
        self._reserved: set[int] = set()  # slots whose pages tmpfs has given

    def put(self, data: bytes | memoryview) -> tuple[str, int, int] | None:
        """Copy `data` into the lowest free slot: (file, slot, length), or None (no slot free, or
        the block is larger than a slot), when it must travel inline."""
        block = memoryview(data).cast("B")
        if block.nbytes > self.slot_bytes:
            return None
        states = os.pread(self._fd, self.slots, HEADER.size)
        slot = states.find(FREE)
        if slot < 0:
            return None
        start = DATA_OFFSET + slot * self.slot_bytes
        if slot not in self._reserved:
            # Pages taken first: writing through the mapping to a page a full /dev/shm cannot give
            # would kill the process (SIGBUS); a slot it cannot give is no slot, the block goes inline.
            try:
                os.posix_fallocate(self._fd, start, self.slot_bytes)
            except OSError:
                return None
            self._reserved.add(slot)
        self._view[start:start + block.nbytes] = block
        os.pwrite(self._fd, FULL, HEADER.size + slot)
        return self.name, slot, block.nbytes

    def close(self) -> None:
        self._view.release()
        self._map.close()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


@dataclass
class SharedBlock:
    """A block lent from a peer's slot: `view` holds its bytes until release()."""
    view: memoryview
    _segment: "_Segment"
    _slot: int

    def release(self) -> None:
        """Free the slot for the writer's next block; the view must not be read after it."""
        if self._slot >= 0:
            os.pwrite(self._segment.fd, FREE, HEADER.size + self._slot)
            self._slot = -1


def release(payload: object) -> None:
    """Free the slot of a block lent from shared memory (inline bytes: nothing to do)."""
    if isinstance(payload, SharedBlock):
        payload.release()


@dataclass
class _Segment:
    fd: int
    map: mmap.mmap
    slots: int
    slot_bytes: int


class SlotReader:
    """The segments of the peers that write to this node, opened at their first block."""

    MAX_SEGMENTS = 64  # a node reads from a few ring writers; more names than that are refused

    def __init__(self) -> None:
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()  # each ring's reader thread takes blocks

    def take(self, place: object) -> SharedBlock:
        """The block at `place` ([file, slot, length] from an authenticated message), checked
        against the segment's own header; ShmError names what is wrong."""
        if not (isinstance(place, list) and len(place) == 3 and isinstance(place[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in place[1:])):
            raise ShmError(f"block place {place!r} is not [file, slot, length]")
        name, slot, length = place
        segment = self._open(name)
        if not 0 <= slot < segment.slots:
            raise ShmError(f"{name}: slot {slot} of {segment.slots}")
        if not 0 <= length <= segment.slot_bytes:
            raise ShmError(f"{name}: a block of {length} bytes in slots of {segment.slot_bytes}")
        start = DATA_OFFSET + slot * segment.slot_bytes
        return SharedBlock(memoryview(segment.map)[start:start + length], segment, slot)

    def _open(self, name: str) -> _Segment:
        with self._lock:
            return self._open_locked(name)

    def _open_locked(self, name: str) -> _Segment:
        if name in self._segments:
            return self._segments[name]
        if not SEGMENT_NAME.fullmatch(name):
            raise ShmError(f"{name!r} is no segment name")
        if len(self._segments) >= self.MAX_SEGMENTS:
            raise ShmError(f"{name}: already {self.MAX_SEGMENTS} segments open")
        try:
            fd = os.open(SHM_DIR / name, os.O_RDWR)
        except OSError as e:
            raise ShmError(f"{name}: {e.strerror}") from None
        try:
            magic, slots, slot_bytes = HEADER.unpack(os.pread(fd, HEADER.size, 0).ljust(HEADER.size, b"\0"))
            size = os.fstat(fd).st_size
            if magic != MAGIC or not 1 <= slots <= MAX_SLOTS or slot_bytes < 1 or size != DATA_OFFSET + slots * slot_bytes:
                raise ShmError(f"{name}: not a segment ({size} bytes, header {magic!r}, {slots} slots of {slot_bytes})")
            segment = _Segment(fd, mmap.mmap(fd, size, prot=mmap.PROT_READ), slots, slot_bytes)
        except BaseException:
            os.close(fd)
            raise
        self._segments[name] = segment
        return segment

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        for segment in self._segments.values():
            try:
                segment.map.close()
            except BufferError:  # a block still lent: the mapping goes with the process
                pass
            os.close(segment.fd)
        self._segments.clear()
