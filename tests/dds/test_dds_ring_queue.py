"""The queue of a ring allreduce's blocks (commlab.dds.ring_handle.RingHandle), without a network: a block
waits for the block of the step before, then (if it adds this rank's values) for them to be final,
and the earliest step goes first; what a block keeps for a resend and what a mean writes."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from commlab.dds.collectives import FLOAT32
from commlab.dds.resend import SentLog
from commlab.dds.ring_handle import RingHandle

WORLD, NUMEL, BLOCK_FLOATS = 3, 24, 4  # segments of 8 floats: 2 blocks each


def handle(ready=None, position: int = 0) -> RingHandle:
    settings = SimpleNamespace(ring_block_bytes=4 * BLOCK_FLOATS)
    ring = SimpleNamespace(group=SimpleNamespace(world=WORLD, node=SimpleNamespace(settings=settings)),
                           position=position, tag="ring")
    vec = np.arange(NUMEL, dtype=np.float32)
    return RingHandle(ring, "k", vec, FLOAT32, np.empty(NUMEL, dtype=np.float32), ready)


def test_a_block_goes_once_the_block_before_it_arrived_earliest_step_first():
    h = handle(position=1)  # at step s: segment (1 - s) mod 3
    assert [h.take(), h.take(), h.take()] == [(0, 0, 8, 12), (0, 1, 12, 16), None]
    assert h.lacking().blocks == tuple((s, b) for s in range(4) for b in range(2))
    h.arrived(1, 1)  # step 2 passes it on whether or not this rank ran step 1 yet
    h.arrived(0, 1)
    h.arrived(5, 0)  # outside the allreduce (a malformed or stray message): ignored
    assert h.lacking().blocks == ((0, 0), (1, 0), (2, 0), (2, 1), (3, 0), (3, 1))
    assert [h.take(), h.take(), h.take()] == [(1, 1, 4, 8), (2, 1, 20, 24), None]
    h.arrived(0, 1)  # a copy written again after it was used
    assert h.take() is None


def test_a_block_adding_this_ranks_values_waits_for_them_and_the_allgather_does_not():
    final: set[tuple[int, int]] = set()
    h = handle(lambda lo, hi: (lo, hi) in final)  # position 0: segments 0, 2, 1, 0, 2 at steps 0..4
    assert not h.can_go()
    for step in range(3):
        h.arrived(step, 0)
    assert [h.take(), h.take()] == [(3, 0, 0, 4), None]  # the allgather adds no values of this rank
    final.add((16, 20))  # step 1's block 0 (segment 2)
    assert [h.take(), h.take()] == [(1, 0, 16, 20), None]
    final.update({(0, 4), (8, 12)})
    assert [h.take(), h.take(), h.take()] == [(0, 0, 0, 4), (2, 0, 8, 12), None]


def test_a_segment_is_cut_into_the_fewest_blocks_of_one_size_within_the_block_size():
    h = handle()  # blocks of at most 4 floats
    h.edges = [0, 9, 9, 13]  # segments of 9, 0 and 4 floats
    assert h.blocks(0) == [(0, 3), (3, 6), (6, 9)]  # not 4 + 4 + 1
    assert h.blocks(1) == [(9, 9)]  # an empty segment: one empty block
    assert h.blocks(2) == [(9, 13)]


def writing_handle(kept: bool = False, divisor: int = 1) -> tuple[RingHandle, list]:
    """A handle at position 0 whose writes are recorded: (meta, payload) of each, inline."""
    written: list = []
    settings = SimpleNamespace(ring_block_bytes=4 * BLOCK_FLOATS)
    ring = SimpleNamespace(group=SimpleNamespace(world=WORLD, node=SimpleNamespace(settings=settings)),
                           position=0, tag="ring", sent=SentLog(), wait_for_next=lambda: None,
                           put_shared=lambda frame: None, gone=lambda: [],
                           writer=SimpleNamespace(write=lambda meta, payload: written.append((meta, bytes(payload)))))
    vec = np.arange(NUMEL, dtype=np.float32)
    return RingHandle(ring, "k", vec, FLOAT32, np.zeros(NUMEL, dtype=np.float32), divisor=divisor, kept=kept), written


def test_this_ranks_own_block_is_kept_for_a_resend_as_a_copy_unless_the_caller_keeps_the_vector():
    for kept in (False, True):
        h, written = writing_handle(kept=kept)
        h.run(0, 0, 0, 4)
        (_, payload), = h.ring.sent.messages("k")
        assert bytes(payload) == h.vec[:4].tobytes() == written[0][1]
        h.vec[:4] = -1.0  # the caller reuses its vector
        assert (bytes(payload) == h.vec[:4].tobytes()) is kept  # a view of a kept vector, else a copy


def test_a_mean_writes_each_completed_block_over_the_world_and_sends_the_sum():
    h, written = writing_handle(divisor=WORLD)
    incoming = np.full(4, 6.0, dtype=np.float32)  # the previous ranks' sum of block 0 of segment 1
    h.ring._blocks = {("k", 1, 0): (NUMEL, incoming.tobytes())}  # WORLD 3: step 2 completes the sum
    h.ring._cond = threading.Condition()
    h.run(2, 0, 8, 12)
    total = incoming + h.vec[8:12]
    assert written[0][1] == total.tobytes()  # passed on as the sum, the allgather's
    assert h.out[8:12].tobytes() == (total / np.float32(WORLD)).tobytes()
