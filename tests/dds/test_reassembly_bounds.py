"""Reassembly bounds with an injected clock: expiry counts from a message's last chunk, and the
buffers of incomplete messages are capped per sender and in total (oldest evicted, counted)."""
from __future__ import annotations

import logging

import pytest

from commlab.dds.chunk import Chunk, decode_head, encode, split
from commlab.dds.reassembly import Assembled, Reassembler
from commlab.dds.settings import DdsSettings, reassembly_caps
from commlab.dds.stats import CommStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def feed(r: Reassembler, c: Chunk) -> Assembled | None:
    data = encode(c)
    head = decode_head(data, len(data))
    payload = bytes(c.payload)
    return r.add(head, payload)


def message(sender: str, msg_id: int, size: int, chunk: int = 100, incarnation: int = 1) -> list[Chunk]:
    return list(split(sender, incarnation, msg_id, "m", bytes([msg_id % 256]) * size, chunk))


def test_a_slow_message_lives_while_its_chunks_keep_coming():
    # 102 chunks, one every 1.1 s: 112 s in all, far beyond the 60 s timeout, never 60 s idle.
    clock, stats = Clock(), CommStats()
    r = Reassembler("t", stats, timeout_s=60, clock=clock)
    chunks = message("controller", 1, 10200)
    done = None
    for c in chunks:
        assert r.expire() == []
        done = feed(r, c)
        clock.now += 1.1
    assert done is not None and done.payload == bytes([1]) * 10200
    assert stats.expired_messages == 0 and r.held_bytes() == 0


def test_a_stalled_message_expires_after_timeout_without_a_chunk_and_stays_dropped(caplog):
    clock, stats = Clock(), CommStats()
    r = Reassembler("t", stats, timeout_s=60, clock=clock)
    chunks = message("controller", 1, 1000)
    for c in chunks[:4]:
        feed(r, c)
        clock.now += 30  # 120 s since the first chunk, 30 s since the last
    assert r.expire() == []
    clock.now += 30.1
    with caplog.at_level(logging.WARNING):
        assert r.expire() == [("controller", 1, 1)]
    assert stats.expired_messages == 1 and r.held_bytes() == 0
    assert "expired with 4/10 chunks: no chunk for 60.1s" in caplog.text
    # Late chunks of the expired message are ignored, not started over as a message that can never complete.
    assert all(feed(r, c) is None for c in chunks[4:]) and r.held_bytes() == 0
    clock.now += 1000
    assert r.expire() == [] and stats.expired_messages == 1


def test_the_sender_cap_evicts_that_senders_longest_idle_message(caplog):
    clock, stats = Clock(), CommStats()
    r = Reassembler("t", stats, timeout_s=60, sender_bytes=2500, total_bytes=10**6, clock=clock)
    a1, a2, a3 = message("a", 1, 1000), message("a", 2, 1000), message("a", 3, 1000)
    b1 = message("b", 1, 1000)
    feed(r, a1[0])
    clock.now += 1
    feed(r, a2[0])
    clock.now += 1
    feed(r, a1[1])  # a1 is now the more recently active of the two
    feed(r, b1[0])
    assert r.held_bytes("a") == 2000 and r.held_bytes() == 3000
    with caplog.at_level(logging.WARNING):
        feed(r, a3[0])  # 3000 > 2500: a's longest idle message (a2) goes, b's stays
    assert stats.evicted_messages == 1 and stats.evicted_bytes == 1000
    assert r.held_bytes("a") == 2000 and r.held_bytes("b") == 1000
    assert caplog.text.count("evicted") == 1 and "message 2 from a evicted with 1/10 chunks" in caplog.text
    assert all(feed(r, c) is None for c in a2)  # the evicted message never comes back
    assert [feed(r, c) for c in a1[2:]][-1].payload == bytes([1]) * 1000
    assert [feed(r, c) for c in a3[1:]][-1].payload == bytes([3]) * 1000


def test_the_total_cap_evicts_the_longest_idle_message_of_any_sender():
    clock, stats = Clock(), CommStats()
    r = Reassembler("t", stats, timeout_s=60, sender_bytes=10**6, total_bytes=2500, clock=clock)
    for sender in ("a", "b", "c"):
        feed(r, message(sender, 1, 1000)[0])
        clock.now += 1
    assert stats.evicted_messages == 1 and r.held_bytes("a") == 0 and r.held_bytes() == 2000


def test_a_message_larger_than_a_cap_is_not_held_and_counted():
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=60, sender_bytes=5000, total_bytes=10**6, clock=Clock())
    small = message("a", 1, 1000)
    feed(r, small[0])
    big = message("a", 2, 5001, chunk=1000)
    assert all(feed(r, c) is None for c in big)
    assert stats.evicted_messages == 1 and stats.evicted_bytes == 5001 and stats.malformed_chunks == 0
    assert r.held_bytes("a") == 1000  # what was held stays
    assert [feed(r, c) for c in small[1:]][-1] is not None


def test_eviction_keeps_holding_bounded_under_many_abandoned_messages():
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=60, sender_bytes=3000, total_bytes=5000, clock=Clock())
    for i in range(1, 200):  # a restarting sender: a new incarnation each time, never finished
        feed(r, message("a", 1, 1000, incarnation=i)[0])
        assert r.held_bytes() <= 3000
    for i in range(1, 50):
        feed(r, message(f"s{i}", 1, 1000)[0])
        assert r.held_bytes() <= 5000
    assert stats.evicted_messages == (199 - 3) + (49 - 2)  # all but 3 of a's; then one per sender past 5000 bytes


def test_caps_follow_from_the_largest_message_and_reach_the_reassembler():
    caps = reassembly_caps(7_200_000, senders=4)
    assert caps["reassembly_sender_bytes"] >= 2 * 7_200_000
    assert caps["reassembly_total_bytes"] == 4 * caps["reassembly_sender_bytes"]
    limits = DdsSettings(domain_id=1, **caps).reassembly_limits()
    r = Reassembler("t", CommStats(), **limits)
    assert (r.sender_bytes, r.total_bytes, r.timeout_s) == (caps["reassembly_sender_bytes"],
                                                             caps["reassembly_total_bytes"], 60.0)
    assert DdsSettings(domain_id=1).reassembly_limits() == {"timeout_s": 60.0}  # defaults: Reassembler's own
    with pytest.raises(ValueError):
        DdsSettings(domain_id=1, reassembly_sender_bytes=0)
