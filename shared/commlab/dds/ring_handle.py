"""One ring allreduce on one ring of a Group (ring.py): RingHandle runs its 2(W-1) steps block by
block, each as soon as its input has arrived and, with overlap, its values are final."""
from __future__ import annotations

import heapq
import json
import logging
from typing import TYPE_CHECKING, Callable

import numpy as np

from .errors import DdsError, DdsWriteTimeout, PeerLost
from .resend import Ask
from .shm import SharedBlock, release

if TYPE_CHECKING:
    from .collectives import FrameCodec
    from .ring import Ring

log = logging.getLogger(__name__)
Ready = Callable[[int, int], bool]  # ready(lo, hi): vec[lo:hi] holds this rank's final values
Item = tuple[int, int, int, int]  # (step, block, lo, hi): block `block` of step `step` holds vec[lo:hi]


class RingHandle:
    """A ring allreduce (sum) of one vector on one ring; wait() runs its 2(W-1) steps.

    Each block of each step waits in one place until it can go: for the block of the step before
    (fed by Ring when it arrives), then, if it adds this rank's values, for ready() to hold for
    them (asked at each wake-up), then in a heap that gives the earliest step first. So a wake-up
    costs the blocks still waiting for values, not every block of the allreduce."""

    def __init__(self, ring: Ring, key: str, vec: np.ndarray, codec: "FrameCodec", out: np.ndarray,
                 ready: Ready | None = None, divisor: int = 1, kept: bool = False):
        """`out` gets the sum divided by `divisor` (a mean: each block as it completes, so no pass
        over the whole vector follows the last one). `kept`: the caller leaves `vec` unchanged until
        the ring's next allreduce has finished, when the ring forgets what it wrote for this one
        (resend.KEEP_FINISHED), so this rank's own blocks are kept for a resend without a copy."""
        self.ring, self.key, self.vec, self.codec, self.out = ring, key, vec, codec, out
        self.ready, self.divisor, self.kept = ready, divisor, kept
        self.sibling: Ring | None = None  # the rank's other ring, told first if this one fails
        world, n = ring.group.world, vec.size
        self.edges = [j * n // world for j in range(world + 1)]
        self.block = ring.group.node.settings.ring_block_bytes // 4  # floats per message at most
        self._awaiting: dict[tuple[int, int], Item] = {}  # (step, block) -> item: step - 1's block not here yet
        self._unready: list[Item] = []  # adds this rank's values, which ready() did not yet report final
        self._runnable: list[Item] = []  # a heap: can go now
        self._left = 0  # items not run yet
        for step in range(2 * world - 1):
            for b, (lo, hi) in enumerate(self.blocks((ring.position - step) % world)):
                self._left += 1
                if step == 0:
                    self._enqueue((step, b, lo, hi))
                else:
                    self._awaiting[(step, b)] = (step, b, lo, hi)

    def blocks(self, segment: int) -> list[tuple[int, int]]:
        """(lo, hi) of each block of a segment: the fewest blocks of at most self.block floats, of
        one size give or take a float (no small last block costing a message of its own); an empty
        segment still has one (empty) block."""
        lo, hi = self.edges[segment], self.edges[segment + 1]
        count = max(1, -(-(hi - lo) // self.block))
        return [(lo + (hi - lo) * i // count, lo + (hi - lo) * (i + 1) // count) for i in range(count)]

    def _enqueue(self, item: Item) -> None:
        if item[0] <= self.ring.group.world - 1 and self.ready is not None:
            self._unready.append(item)
        else:
            heapq.heappush(self._runnable, item)

    def arrived(self, step: int, block: int) -> None:
        """Block `block` of step `step` is in ring._blocks (under the ring's lock): the block of
        the next step that receives it waits no more for it (a copy written again: nothing to do)."""
        item = self._awaiting.pop((step + 1, block), None)
        if item is not None:
            self._enqueue(item)

    def can_go(self) -> bool:
        """Whether a block can go now (under the ring's lock), after moving those whose values
        ready() now reports final to the heap."""
        if self._unready:
            waiting = []
            for item in self._unready:
                if self.ready is not None and self.ready(item[2], item[3]):
                    heapq.heappush(self._runnable, item)
                else:
                    waiting.append(item)
            self._unready = waiting
        return bool(self._runnable)

    def take(self) -> Item | None:
        """The block that can go now with the earliest step (then block), taken off the queue;
        None if none can (under the ring's lock)."""
        return heapq.heappop(self._runnable) if self.can_go() else None

    def send(self, step: int, block: int, frame: bytes | memoryview, lent: bool = False) -> None:
        """Write a block to the next rank: its place in shared memory when the next rank shares
        this host's, else the bytes. `lent`: `frame` is a view of a block lent from the previous
        rank's shared memory, freed once this returns."""
        g = self.ring.group
        self.ring.wait_for_next()
        fields = {"key": self.key, "step": step, "block": block, "numel": self.vec.size}
        meta = json.dumps(fields)
        # Kept for a resend (which always travels inline); step 0's raw frame is a view of the
        # caller's vector, which may be reused once this allreduce returns unless it is kept.
        payload = bytes(frame) if ((step == 0 and not self.kept) or lent) and not isinstance(frame, bytes) else frame
        self.ring.sent.add(self.key, meta, payload)
        place = self.ring.put_shared(frame)
        try:
            if place is None:
                self.ring.writer.write(meta, payload)
            else:
                self.ring.writer.write(json.dumps({**fields, "shm": place}), b"")
        except DdsWriteTimeout as e:
            if self.ring.next not in self.ring.gone():
                raise
            log.info("group %s: ring block to gone rank %d kept for when it asks: %s", g.name, self.ring.next, e)

    def lacking(self) -> Ask:
        """An ask for the blocks from the previous rank that the steps still to run need and that
        have not arrived (under the ring's lock); the previous rank writes again those it wrote."""
        return Ask(self.key, self.ring.tag, blocks=tuple((step - 1, b) for step, b in sorted(self._awaiting)))

    def receive(self, step: int, block: int) -> bytes | SharedBlock:
        """The block `block` of step `step`, which has arrived: inline bytes or lent from shared memory."""
        ring = self.ring
        with ring._cond:
            numel, payload = ring._blocks.pop((self.key, step, block))
        if numel != self.vec.size:
            release(payload)
            raise DdsError(f"allreduce {self.key!r}: rank {ring.prev} sent a block of a {numel}-float vector, "
                           f"this one has {self.vec.size}")
        return payload

    def decode(self, frame: bytes | memoryview, length: int) -> np.ndarray:
        try:
            return self.codec.decode(frame, length)
        except ValueError as e:
            raise DdsError(f"allreduce {self.key!r}: rank {self.ring.prev} sent a bad block of {length} values: {e}") from None

    def run(self, step: int, block: int, lo: int, hi: int) -> None:
        """Step 0 sends this rank's values; a later step receives step-1's block, adds this rank's
        values during the reduce-scatter and passes it on (none after the last step)."""
        world, out = self.ring.group.world, self.out
        if step == 0:
            self.send(0, block, self.codec.encode(self.vec[lo:hi]))
            return
        received = self.receive(step - 1, block)
        try:
            frame = received.view if isinstance(received, SharedBlock) else received
            got = self.decode(frame, hi - lo)
            if step <= world - 1:  # reduce-scatter: add this rank's values, in ring order
                frame = self.codec.encode(got + self.vec[lo:hi])
            if step == world - 1:  # the complete sum as every other rank will decode it
                got = self.codec.decode(frame, hi - lo)
            if step >= world - 1:  # complete: this rank's own sum, then the allgather's
                if self.divisor == 1:
                    out[lo:hi] = got
                else:
                    np.divide(got, np.float32(self.divisor), out=out[lo:hi])
            if step < 2 * world - 2:
                self.send(step, block, frame, lent=step >= world and isinstance(received, SharedBlock))
        finally:
            release(received)

    def wait(self) -> np.ndarray:
        """Runs every block of every step, each as soon as it can go (earlier steps first); the
        sum lands in `out` (a view of the caller's result), returned. At step s this rank's
        position p handles segment (p - s) mod W. A block that cannot go yet (with overlap: its
        values not final) holds up no other block, and the sums stay those of the step order."""
        ring, g = self.ring, self.ring.group
        try:
            while self._left:
                with ring._cond:
                    item = self.take()
                    abort = ring._aborts.get(self.key)
                if item is not None:
                    self._left -= 1
                    self.run(*item)
                elif abort is not None:  # the previous rank gave up first: the same verdict
                    raise PeerLost(abort[0], g.name, self.key, abort[1])
                else:
                    with ring._cond:
                        want = self.lacking()
                    g.await_ranks(lambda: self.key in ring._aborts or self.can_go(),
                                  lambda: [ring.prev], self.key,
                                  f"no ring block from the previous rank within {g.timeout_s:.1f}s", want=want)
        except PeerLost as e:
            if self.sibling is not None:  # first, so that this rank fails with one verdict
                self.sibling.note_abort(self.key, e)
            ring.abort(self.key, e)
            raise
        finally:
            ring.finish(self.key)
        return self.out
