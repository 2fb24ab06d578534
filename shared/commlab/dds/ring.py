"""Ring allreduce of a Group: reduce-scatter then allgather, W-1 steps each, block by block,
on one ring or two at once (rings.py, settings.ring_directions): with two, the first half of the
vector goes round 0 -> 1 -> ... -> W-1 -> 0, the second half the other way round, each in a thread
of its own, so every rank sends to both neighbours (on 10 Mbit links one writer alone paces itself
well below the link rate waiting for acknowledgements; see docs/transport.md); with one, the whole
vector goes forward.

On one ring, rank r has position p (r on the forward ring, (W - r) mod W on the backward one); a
half of n floats is cut into W segments (segment j is [j*n//W, (j+1)*n//W)). At step s, for
0 <= s < 2(W-1), position p sends segment (p - s) mod W to position p+1 and receives segment
(p - s - 1) mod W from position p-1. During the reduce-scatter (the first W-1 steps) the receiver adds
its own values to the partial sum it got; after it, position p holds the complete sum of segment
(p + 1) mod W, which the allgather passes round the ring unchanged. Each rank sends 2(W-1)/W of
the payload (plus headers) instead of the naive allgather's W-1 times the payload.

Determinism: segment j is summed in one fixed order, ((x_j + x_{j+1}) + x_{j+2}) + ..., at one
place, and then copied byte for byte, so every rank ends with the same bytes. With a lossy codec
(fp16, bf16) every partial sum is rounded to it before it travels, and the rank that completes a
segment keeps the decoded frame it sends, not its float32 sum, so the ranks still agree.

Wire: every step travels as blocks of one segment, as many as it takes to keep each within
settings.ring_block_bytes and all of one size (give or take a float), one message each (in chunks of
settings.ring_chunk_bytes; meta: key, step, block, numel), so a rank forwards a block as soon as it arrives (pipelined)
instead of waiting for the whole segment. The ranks must agree on the directions and the block size. A rank writes on topic coll_<group>_ring<next> (forward) or
coll_<group>_back<next> (backward), which only that next rank reads, so no rank receives (or
counts) what is not for it.

Failure: while waiting for a block, a rank of the group whose node is gone (lease expired or left)
and not back within the group's return_s makes wait() raise PeerLost naming it; a previous rank
silent for timeout_s while every rank is alive is named too. A rank that lacks blocks (back
from a cut, or one was lost) gets them written again when it asks, naming them (resend.py). A rank that fails
so first passes the verdict on to the next rank (an abort message, acknowledged
before it returns), which fails with the same names, and so on round the ring: a survivor that
gives up and leaves is then not mistaken for the rank that vanished first.
Progress happens inside wait(), so every rank must wait for its ring allreduces in the same
order, as with any collective library; allreduce() does.

Overlap: a caller may start the ring before its vector holds all its values (DDP during backward)
and pass `ready(lo, hi)`, true once vec[lo:hi] is final (evaluated under the lock of the node's
directory, whose condition the caller notifies). A block adds this rank's values only once ready()
holds for it, so every element is summed in the same order, with the same bytes, as without
overlap; meanwhile the blocks whose values are final travel, at any step: a rank runs each block
of each step as soon as it can.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from .endpoints import ChunkReader, ChunkWriter
from .errors import DdsError, PeerLost
from .reassembly import Assembled
from .reading import wait_for_acks
from .resend import SentLog
from .ring_handle import Ready, RingHandle
from .shm import SharedBlock, SlotWriter, release

if TYPE_CHECKING:
    from .collectives import FrameCodec, Group

log = logging.getLogger(__name__)
POLL_S = 0.05
SLOT_SLACK = 4096  # a shared-memory slot holds a block's frame: its floats plus a codec's header
ABORT_ACK_S = 1.0
REMEMBERED_KEYS = 4096
GONE = "its node is gone (lease expired or left)"
RING_TAGS = ("ring", "back")  # topic tags of the forward and the backward ring


def _reason(error: PeerLost, key: str) -> str:
    return str(error).partition(f"during {key!r}: ")[2]


class Ring:
    """One direction's topics of a group: a writer to the next rank, a reader of the previous one."""

    def __init__(self, group: "Group", direction: int):
        self.group = g = group
        self.next, self.prev = (g.rank + direction) % g.world, (g.rank - direction) % g.world
        self.position = g.rank if direction == 1 else (g.world - g.rank) % g.world  # next is position + 1
        self._cond = g.node.announcer.directory.changed  # one condition for arrivals and peer changes
        # (key, step, block) -> (numel, payload: inline bytes, or lent from the previous rank's shared memory)
        self._blocks: dict[tuple[str, int, int], tuple[int, bytes | SharedBlock]] = {}
        self._active: dict[str, RingHandle] = {}  # told of each block that arrives for its key
        self._finished: OrderedDict[str, None] = OrderedDict()  # late blocks for these keys are dropped
        self._aborts: dict[str, tuple[list[int], str]] = {}  # key -> (lost ranks, reason) from the previous rank
        self._next_joined = False
        self.sent = SentLog()  # blocks written to the next rank, written again when it asks
        self._slots: tuple[tuple[str, int], SlotWriter] | None = None  # ((next node, incarnation), its slots)
        self._slots_lock = threading.Lock()  # the allreduces of several keys may send at once
        self.tag = tag = RING_TAGS[0] if direction == 1 else RING_TAGS[1]
        self.writer = ChunkWriter(g.node, f"coll_{g.name}_{tag}{self.next}", self._next_node,
                                  chunk_bytes=g.node.settings.ring_chunk_bytes)
        self.reader = ChunkReader(g.node, f"coll_{g.name}_{tag}{g.rank}", self._on_message)
        g.node.add_closable(self.reader)
        g.node.add_closable(self)  # closed before the reader: its shared memory goes first

    def _next_node(self) -> tuple[str, ...]:
        """The node of the next rank, the one reader of this ring's topic (none before it joined)."""
        with self._cond:
            peer = self.group._members().get(self.next)
        return () if peer is None else (peer.name,)

    def _on_message(self, msg: Assembled) -> None:
        try:
            meta = json.loads(msg.meta)
            key = str(meta["key"])
            if "abort" in meta:
                abort = ([int(r) for r in meta["abort"]], str(meta["reason"]))
            else:
                step, block, numel = int(meta["step"]), int(meta["block"]), int(meta["numel"])
                payload = msg.payload if "shm" not in meta else self._take_shared(meta["shm"])
        except (ValueError, KeyError, TypeError) as e:  # a place shm cannot read: a ShmError, a ValueError
            self.group.node.stats.add(malformed_chunks=1)
            log.warning("group %s: ring block from %s dropped: %s", self.group.name, msg.sender, e)
            return
        with self._cond:
            self.group.heard(msg.sender)
            if key in self._finished:
                release(payload if "abort" not in meta else None)
                return
            if "abort" in meta:
                self._aborts.setdefault(key, abort)
            else:
                release(self._blocks.get((key, step, block), (0, None))[1])  # a copy written again
                self._blocks[(key, step, block)] = (numel, payload)
                handle = self._active.get(key)
                if handle is not None:
                    handle.arrived(step, block)
            self._cond.notify_all()

    def _take_shared(self, place: object) -> SharedBlock:
        """The block the previous rank left in its shared memory at `place` (ShmError if unusable)."""
        block = self.group.node.slot_reader.take(place)
        n = block.view.nbytes
        self.group.node.stats.add(bytes_received=n, payload_received=n, shm_bytes_received=n)
        return block

    def put_shared(self, frame: bytes | memoryview) -> list | None:
        """The place of a copy of `frame` in this ring's shared memory when the next rank's process
        shares it (None: the block travels inline)."""
        node = self.group.node
        peer = self._next_node()
        shares, incarnation = node.shares_memory_with(peer[0]) if peer else (False, -1)
        if not shares:
            return None
        with self._slots_lock:
            if self._slots is None or self._slots[0] != (peer[0], incarnation):
                if self._slots is not None:  # blocks the next rank's earlier incarnation never freed
                    self._slots[1].close()
                self._slots = ((peer[0], incarnation), SlotWriter(node.settings.ring_chunk_bytes + SLOT_SLACK))
            place = self._slots[1].put(frame)
        if place is not None:
            n = place[2]
            node.stats.add(bytes_sent=n, payload_sent=n, shm_bytes_sent=n)
        return None if place is None else list(place)

    def close(self) -> None:
        with self._slots_lock:
            if self._slots is not None:
                self._slots[1].close()
                self._slots = None

    def note_abort(self, key: str, error: PeerLost) -> None:
        """The other ring of this rank gave up on `key`: fail the same way at the next wait."""
        with self._cond:
            if key not in self._finished:
                self._aborts.setdefault(key, (error.ranks, _reason(error, key)))
                self._cond.notify_all()

    def abort(self, key: str, error: PeerLost) -> None:
        """Tell the next rank why this rank gave up on `key`; best effort, at most ABORT_ACK_S."""
        try:
            self.writer.write(json.dumps({"key": key, "abort": error.ranks, "reason": _reason(error, key)}), b"")
            wait_for_acks(self.writer.writer, ABORT_ACK_S)
        except Exception as e:  # the next rank may be the one that is gone
            log.info("group %s: abort of %r not passed on: %s", self.group.name, key, e)

    def start(self, key: str, vec: np.ndarray, codec: "FrameCodec", out: np.ndarray,
              ready: Ready | None = None, divisor: int = 1, kept: bool = False) -> "RingHandle":
        """Claim `key`; every step runs in the handle's wait(), which writes the sum (over
        `divisor`) to `out`."""
        with self._cond:
            if key in self._active or key in self._finished:
                raise DdsError(f"group {self.group.name!r}: key {key!r} was already used")
            handle = self._active[key] = RingHandle(self, key, vec, codec, out, ready, divisor, kept)
            for k, step, block in list(self._blocks):  # blocks of ranks that started it before this one
                if k == key:
                    handle.arrived(step, block)
        return handle

    def gone(self) -> list[int]:
        """Ranks of the group whose node is known to be gone."""
        with self._cond:  # the directory's lock (reentrant): the announcement thread updates it
            return sorted(r for r, alive in self.group._ranks().items() if not alive)

    def wait_for_next(self) -> None:
        """A writer only waits for readers that were announced: make sure the next rank has joined."""
        if self._next_joined:
            return
        g = self.group
        with g.node.stats.waiting():
            if not g._directory.wait_for(lambda: self.next in g._ranks(), g.timeout_s):
                raise PeerLost([self.next], g.name, "ring", f"never joined within {g.timeout_s:.1f}s")
        self._next_joined = True

    def finish(self, key: str) -> None:
        self.sent.finish(key)
        with self._cond:
            self._active.pop(key, None)
            for k in [k for k in self._blocks if k[0] == key]:
                release(self._blocks.pop(k)[1])
            self._aborts.pop(key, None)
            self._finished[key] = None
            while len(self._finished) > REMEMBERED_KEYS:
                self._finished.popitem(last=False)
