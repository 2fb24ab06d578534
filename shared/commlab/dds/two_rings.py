"""The two rings of a group (ring.py): the first half of a vector goes round the forward ring,
the second half the backward one, each in a thread of its own, so every rank sends to both
neighbours at once."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .resend import Ask, write_again
from .ring import Ready, Ring, RingHandle

if TYPE_CHECKING:
    from .collectives import FrameCodec, Group


class TwoRings:
    """The forward and the backward ring of a group; start() splits a vector between them."""

    def __init__(self, group: "Group"):
        self.group = group
        self.rings = (Ring(group, 1), Ring(group, -1))
        self.writers = [r.writer for r in self.rings]
        self.readers = [r.reader for r in self.rings]

    def write_again(self, rank: int, ask: Ask, asked_at: float) -> int:
        """Write again to `rank` the blocks it asked for on the ring it named; how many."""
        return sum(write_again(ring.writer, ring.sent, ask, asked_at) for ring in self.rings
                   if ring.next == rank and ring.tag == ask.topic)

    def start(self, key: str, vec: np.ndarray, op: str, codec: "FrameCodec",
              ready: Ready | None = None) -> "TwoRingsHandle":
        half = vec.size // 2
        out = np.empty(vec.size, dtype=np.float32)  # each ring fills its half in place
        second_ready = None if ready is None else (lambda lo, hi: ready(half + lo, half + hi))
        first = self.rings[0].start(key, vec[:half], codec, out[:half], ready)
        try:
            second = self.rings[1].start(key, vec[half:], codec, out[half:], second_ready)
        except BaseException:
            self.rings[0].finish(key)
            raise
        first.sibling, second.sibling = self.rings[1], self.rings[0]
        return TwoRingsHandle(self.group, (first, second), op, out)


class TwoRingsHandle:
    def __init__(self, group: "Group", halves: tuple[RingHandle, RingHandle], op: str, out: np.ndarray):
        self.group, self.halves, self.op, self.out = group, halves, op, out

    def wait(self) -> np.ndarray:
        """Both halves at once (the backward one in a thread); the first failure is raised. Both
        threads count their network wait in CommStats.wait_s: the excess over this call's wall
        time is taken off again, so wait_s stays a share of wall time."""
        stats, start = self.group.node.stats, time.perf_counter()
        waited = stats.snapshot()["wait_s"]
        errors: list[BaseException] = []

        def run(k: int) -> None:
            try:
                self.halves[k].wait()
            except BaseException as e:  # re-raised in the caller's thread below
                errors.append(e)
        helper = threading.Thread(target=run, args=(1,), name=f"ring {self.halves[1].key}", daemon=True)
        helper.start()
        run(0)
        helper.join()
        excess = stats.snapshot()["wait_s"] - waited - (time.perf_counter() - start)
        if excess > 0:
            stats.add(wait_s=-excess)
        if errors:
            raise errors[0]
        if self.op == "mean":
            self.out /= np.float32(self.group.world)
        return self.out
