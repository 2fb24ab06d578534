"""The rings of a group (ring.py), settings.ring_directions of them: with two, the first half of a
vector goes round the forward ring and the second half the backward one, each in a thread of its
own, so every rank sends to both neighbours at once (what fills slow links); with one, the whole
vector goes round the forward ring in the caller's thread (one thread and half the messages per
rank, on loopback where the CPU is the bottleneck)."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .resend import Ask, write_again
from .ring import Ring
from .ring_handle import Ready, RingHandle

if TYPE_CHECKING:
    from .collectives import FrameCodec, Group

DIRECTIONS = (1, -1)  # the forward ring, then the backward one


class Rings:
    """The group's forward ring and, with two directions, its backward ring; start() splits a
    vector between them."""

    def __init__(self, group: "Group"):
        self.group = group
        self.rings = tuple(Ring(group, d) for d in DIRECTIONS[:group.node.settings.ring_directions])
        self.writers = [r.writer for r in self.rings]
        self.readers = [r.reader for r in self.rings]

    def write_again(self, rank: int, ask: Ask, asked_at: float) -> int:
        """Write again to `rank` the blocks it asked for on the ring it named; how many."""
        return sum(write_again(ring.writer, ring.sent, ask, asked_at) for ring in self.rings
                   if ring.next == rank and ring.tag == ask.topic)

    def start(self, key: str, vec: np.ndarray, op: str, codec: "FrameCodec",
              ready: Ready | None = None, kept: bool = False) -> "RingsHandle":
        """The whole of `vec` round the one ring, or its halves (the second the longer) round the two."""
        out = np.empty(vec.size, dtype=np.float32)  # each ring fills its part in place
        edges = [0, vec.size // 2, vec.size] if len(self.rings) == 2 else [0, vec.size]
        divisor = self.group.world if op == "mean" else 1
        parts: list[RingHandle] = []
        try:
            for ring, lo, hi in zip(self.rings, edges, edges[1:]):
                part_ready = None if ready is None else (lambda a, b, lo=lo: ready(lo + a, lo + b))
                parts.append(ring.start(key, vec[lo:hi], codec, out[lo:hi], part_ready, divisor, kept))
        except BaseException:
            for part in parts:
                part.ring.finish(key)
            raise
        if len(parts) == 2:
            parts[0].sibling, parts[1].sibling = parts[1].ring, parts[0].ring
        return RingsHandle(self.group, tuple(parts), out)


class RingsHandle:
    def __init__(self, group: "Group", parts: tuple[RingHandle, ...], out: np.ndarray):
        self.group, self.parts, self.out = group, parts, out

    def wait(self) -> np.ndarray:
        """Every part at once (the first in this thread, any other in a thread of its own); the
        first failure is raised. Every thread counts its network wait in CommStats.wait_s: the
        excess over this call's wall time is taken off again, so wait_s stays a share of wall time."""
        stats, start = self.group.node.stats, time.perf_counter()
        waited = stats.snapshot()["wait_s"]
        errors: list[BaseException] = []

        def run(part: RingHandle) -> None:
            try:
                part.wait()
            except BaseException as e:  # re-raised in the caller's thread below
                errors.append(e)
        helpers = [threading.Thread(target=run, args=(part,), name=f"ring {part.key}", daemon=True)
                   for part in self.parts[1:]]
        for helper in helpers:
            helper.start()
        run(self.parts[0])
        for helper in helpers:
            helper.join()
        excess = stats.snapshot()["wait_s"] - waited - (time.perf_counter() - start)
        if excess > 0:
            stats.add(wait_s=-excess)
        if errors:
            raise errors[0]
        return self.out
