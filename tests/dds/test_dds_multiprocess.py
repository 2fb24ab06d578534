"""Multi-process DDS tests on loopback: spawn start method, each test on a domain id claimed for it."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from commlab.dds import BarrierTimeout, DdsNode, DdsSettings, DdsWriteTimeout, Group, PeerLost, exit_cleanly_on_sigterm
from commlab.dds.auth import Keyring, make_keyrings
from commlab.dds.chunk import Chunk
from commlab.dds.endpoints import ChunkWriter
from commlab.dds.messages import to_wire

from sample_messages import Blob, Reply, Request

pytestmark = pytest.mark.slow
CTX = mp.get_context("spawn")


def _settings(domain: int, **kw) -> DdsSettings:
    return DdsSettings(domain_id=domain, write_timeout_s=10.0, **kw)


def _digest(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _join(procs, timeout=60):
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"


def _client_echo(domain: int, n: int, done, ring: Keyring | None) -> None:
    with DdsNode("client-0", _settings(domain, chunk_bytes=65536, keyring=ring, encrypt=True)) as node:
        reqs, blobs, up = node.subscriber(Request), node.subscriber(Blob), node.publisher(Reply)
        node.barrier({"controller"}, 20)
        req = reqs.receive(20)
        digests = [_digest(blobs.receive(20).payload) for _ in range(n)]
        up.publish(Reply(seq=req.seq, text=f"{req.tag}:{';'.join(digests)}:{req.params['k']}", count=n,
                         payload=b"u" * 3_000_000))
        done.wait(30)  # stay until the reply was checked: closing may drop unacknowledged data


LONG_TAG = "r" * 2000  # a meta longer than the 512-byte head prefix the reader parses first


@pytest.mark.parametrize("protected", [False, True])
def test_big_chunked_messages_arrive_whole_in_order(domain, protected):
    """Protected: the controller signs and encrypts (each chunk encrypted while the one before is
    written, decrypted from the received sample into place), the client encrypts its reply."""
    payloads = [os.urandom(10_000_000), np.arange(425_000, dtype=np.float32).tobytes(), b""]
    rings = make_keyrings("run", ["controller", "client-0"], trusted={"controller"}) if protected else {}
    done = CTX.Event()
    p = CTX.Process(target=_client_echo, args=(domain, len(payloads), done, rings.get("client-0")), name="client-0")
    p.start()
    try:
        with DdsNode("controller", _settings(domain, keyring=rings.get("controller"), encrypt=True)) as node:
            up, reqs, blobs = node.subscriber(Reply), node.publisher(Request), node.publisher(Blob)
            node.barrier({"client-0"}, 20)
            reqs.publish(Request(seq=4, tag=LONG_TAG, scale=0.1, params={"k": [1, 2]}))
            for i, b in enumerate(payloads):
                blobs.publish(Blob(seq=4, index=i, payload=b))
            reply = up.receive(30)
            assert reply is not None and reply.seq == 4 and reply.count == 3 and up.last_sender == "client-0"
            assert reply.text == LONG_TAG + ":" + ";".join(_digest(b) for b in payloads) + ":[1, 2]"
            assert reply.payload == b"u" * 3_000_000
            s = node.stats.snapshot()
            sent = sum(len(b) for b in payloads)
            assert s["payload_sent"] == sent and sent < s["bytes_sent"] < sent * 1.01
            assert s["payload_received"] == 3_000_000 and s["chunks_received"] == 46
            assert s["malformed_chunks"] == s["duplicate_chunks"] == s["expired_messages"] == 0
            assert not any(v for k, v in s.items() if k.startswith("auth_"))
    finally:
        done.set()
        _join([p])


def _announce_and_wait(domain: int, name: str, done) -> None:
    with DdsNode(name, _settings(domain)) as node:
        node.barrier(set(), 1)
        done.wait(30)


def test_barrier_timeout_names_only_the_missing_peers(domain):
    done = CTX.Event()
    p = CTX.Process(target=_announce_and_wait, args=(domain, "client-1", done))
    p.start()
    try:
        with DdsNode("controller", _settings(domain)) as node:
            node.barrier({"client-1"}, 15)
            t = time.monotonic()
            with pytest.raises(BarrierTimeout) as e:
                node.barrier({"client-1", "client-7", "client-9"}, 1.0)
            assert time.monotonic() - t < 3
            assert "client-7" in str(e.value) and "client-9" in str(e.value) and "client-1" not in str(e.value)
            assert e.value.missing == ["client-7", "client-9"]
    finally:
        done.set()
        _join([p])


def _rank(domain: int, rank: int, world: int, q, die_once=None) -> None:
    with DdsNode(f"worker-{rank}", _settings(domain)) as node:
        g = Group(node, "ddp", rank, world, timeout_s=10.0)
        g.barrier(30)
        if die_once is not None:
            # Die only once every other rank has left the barrier (so it had this rank's barrier
            # message): the test is about a rank dying between collectives, not mid-barrier.
            for entered in die_once:
                entered.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        sizes = {0: 0, 1: 70_000, 2: 300_001}  # rank 0 sends EMPTY bytes
        mine = bytes([rank + 1]) * sizes[rank]
        h1 = g.allgather_async("1/sparse", mine)
        h2 = g.allreduce_async("1/dense", np.full(100_000, rank + 1, np.float32), op="mean")
        h3 = g.allgather_async("1/empty", b"")
        # waited in reverse order: keys keep concurrent calls apart
        empty, dense, gathered = h3.wait(), h2.wait(), h1.wait()
        total = g.allreduce("2/dense", np.arange(5, dtype=np.float32) * rank, op="sum")
        g.barrier(30)
        q.put((rank, [len(x) for x in gathered], [x[:1] for x in gathered], float(dense[0]), dense.shape,
               [len(x) for x in empty], total.tolist(), node.stats.snapshot()))
        g.barrier(30)


def test_allgather_and_allreduce_three_ranks_with_empty_payloads(domain):
    q = CTX.Queue()
    procs = [CTX.Process(target=_rank, args=(domain, r, 3, q), name=f"rank{r}") for r in range(3)]
    for p in procs:
        p.start()
    try:
        results = sorted(q.get(timeout=90) for _ in procs)
    finally:
        _join(procs)
    for rank, lens, firsts, dense0, shape, empty, total, stats in results:
        assert lens == [0, 70_000, 300_001] and firsts == [b"", b"\x02", b"\x03"]
        assert dense0 == pytest.approx(2.0) and shape == (100_000,)
        assert empty == [0, 0, 0]
        assert total == [0.0, 3.0, 6.0, 9.0, 12.0]
        assert stats["bytes_received"] > stats["payload_received"] > 0 and stats["wait_s"] > 0


# A survivor waits in the collective far longer than any lease: a PeerLost that says the node is
# "gone" or "left" can then only come from the lease (and the return window after it) or a clean
# leave, never from the timeout.
SURVIVOR_TIMEOUT_S = 40.0
RETURN_S = 6.0


def _survivor(domain: int, rank: int, q, entered) -> None:
    with DdsNode(f"worker-{rank}", _settings(domain, lease_s=2.0)) as node:
        g = Group(node, "ddp", rank, 3, timeout_s=SURVIVOR_TIMEOUT_S, return_s=RETURN_S)
        g.barrier(30)
        entered.set()
        try:
            g.allreduce("7/dense", np.ones(1000, np.float32))
            q.put((rank, "no error"))
        except PeerLost as e:
            q.put((rank, str(e)))


def test_killed_rank_makes_every_other_rank_fail_with_peer_lost(domain):
    q, entered = CTX.Queue(), [CTX.Event(), CTX.Event()]
    procs = [CTX.Process(target=_survivor, args=(domain, r, q, entered[r])) for r in (0, 1)]
    victim = CTX.Process(target=_rank, args=(domain, 2, 3, q, entered))
    for p in procs + [victim]:
        p.start()
    try:
        results = sorted(q.get(timeout=SURVIVOR_TIMEOUT_S + 60) for _ in procs)
    finally:
        _join(procs)
        victim.join(10)
    assert victim.exitcode == -signal.SIGKILL
    timed_out = f"gone (lease expired or left), not back within {RETURN_S:.0f}s"
    for rank, message in results:
        assert "rank 2 lost" in message and "rank 0" not in message and "rank 1" not in message
        # The survivor that gives up second may see the first one leave before its own wait ends:
        # it still names rank 2, and says who left.
        assert timed_out in message or f"gone (lease expired or left); rank(s) {1 - rank} left meanwhile" in message, message
    assert any(timed_out in message for _, message in results)  # the first to give up waited return_s


def _terminated_rank(domain: int, ready) -> None:
    exit_cleanly_on_sigterm()
    # A lease longer than the survivors' timeout: only the clean leave can tell them it is gone.
    with DdsNode("worker-2", _settings(domain, lease_s=2 * SURVIVOR_TIMEOUT_S)) as node:
        g = Group(node, "ddp", 2, 3, timeout_s=8.0)
        g.barrier(30)
        ready.set()
        time.sleep(60)  # until SIGTERM


def test_sigterm_leaves_cleanly_so_peers_know_before_the_lease_expires(domain):
    q, ready, entered = CTX.Queue(), CTX.Event(), [CTX.Event(), CTX.Event()]
    procs = [CTX.Process(target=_survivor, args=(domain, r, q, entered[r])) for r in (0, 1)]
    victim = CTX.Process(target=_terminated_rank, args=(domain, ready))
    for p in procs + [victim]:
        p.start()
    try:
        assert ready.wait(60) and all(e.wait(60) for e in entered)
        victim.terminate()
        results = [q.get(timeout=SURVIVOR_TIMEOUT_S + 60) for _ in procs]
    finally:
        _join(procs)
        victim.join(10)
    assert victim.exitcode == 128 + signal.SIGTERM  # SystemExit from the handler: `with` closed the node
    for rank, message in results:
        assert "rank 2" in message and "its node left" in message, message


def _bad_sender(domain: int, done) -> None:
    with DdsNode("sender", _settings(domain)) as node:
        node.barrier({"receiver"}, 20)
        w = ChunkWriter(node, "Blob")
        w.wait_for_readers(10)
        meta = '{"seq": 1, "index": 1}'
        raw = [Chunk("sender", node.incarnation, 900, i, 3, 3000, meta if i == 0 else "", bytes([i]) * 1000)
               for i in range(3)]
        for c in (raw[1], raw[0], raw[1], raw[2], raw[2]):  # out of order with duplicates: one good message
            w.writer.write(c)
        w.writer.write(Chunk("sender", node.incarnation, 901, 0, 2, 2000, meta, b"x" * 1000))
        w.writer.write(Chunk("sender", node.incarnation, 901, 1, 5, 2000, "", b"y" * 1000))  # count contradicts
        w.writer.write(Chunk("sender", node.incarnation, 902, 0, 1, 4, "{not json", b"abcd"))  # bad meta
        # The good message last, on the same writer: one writer's samples arrive in order, so the
        # receiver has handled every chunk above once it has this message (another writer on the
        # same topic could overtake them).
        w.write(*to_wire(Blob(seq=2, index=2, payload=b"ok")))
        done.wait(30)


def test_malformed_and_duplicate_chunks_are_dropped_and_counted(domain):
    done = CTX.Event()
    p = CTX.Process(target=_bad_sender, args=(domain, done))
    p.start()
    try:
        with DdsNode("receiver", _settings(domain)) as node:
            blobs = node.subscriber(Blob)
            node.barrier({"sender"}, 20)
            first, second = blobs.receive(20), blobs.receive(20)
            assert first.payload == b"\x00" * 1000 + b"\x01" * 1000 + b"\x02" * 1000
            assert (second.seq, second.payload) == (2, b"ok")
            assert blobs.receive(0.5) is None
            s = node.stats.snapshot()
            assert s["duplicate_chunks"] == 2 and s["malformed_chunks"] == 2
    finally:
        done.set()
        _join([p])


def _controller(domain: int, rnd: int, q) -> None:
    with DdsNode("controller", _settings(domain)) as node:
        up, reqs = node.subscriber(Reply), node.publisher(Request)
        node.barrier({"client-0"}, 20)
        reqs.publish(Request(seq=rnd, tag="restart"))
        reply = up.receive(20)
        q.put(None if reply is None else reply.seq)


def test_clients_survive_a_controller_restart(domain):
    q = CTX.Queue()
    with DdsNode("client-0", _settings(domain)) as node:
        reqs, up = node.subscriber(Request), node.publisher(Reply)
        node.barrier(set(), 1)
        for rnd in (1, 2):  # the second controller is a new participant under the same name
            ctl = CTX.Process(target=_controller, args=(domain, rnd, q))
            ctl.start()
            try:
                req = reqs.receive(30)
                assert req is not None and req.seq == rnd
                up.publish(Reply(seq=rnd, text="client-0", count=1))
                assert q.get(timeout=30) == rnd
            finally:
                _join([ctl])


def _frozen_reader(domain: int, ready) -> None:
    with DdsNode("client-0", _settings(domain, lease_s=30.0)) as node:
        node.subscriber(Blob)
        node.barrier({"controller"}, 20)
        ready.set()
        time.sleep(60)  # SIGSTOPped here by the test, then terminated


def test_blocked_write_raises_write_timeout_naming_topic_and_peer(domain):
    ready = CTX.Event()
    p = CTX.Process(target=_frozen_reader, args=(domain, ready))
    p.start()
    try:
        settings = DdsSettings(domain_id=domain, write_timeout_s=1.5, lease_s=30.0)
        with DdsNode("controller", settings) as node:
            blobs = node.publisher(Blob)
            node.barrier({"client-0"}, 20)
            assert ready.wait(20)
            os.kill(p.pid, signal.SIGSTOP)  # alive for its 30 s lease, but acknowledges nothing
            t = time.monotonic()
            with pytest.raises(DdsWriteTimeout) as e:
                blobs.publish(Blob(seq=1, index=1, payload=bytes(50_000_000)))
            assert time.monotonic() - t < 10
            assert e.value.topic == "Blob" and "'Blob'" in str(e.value) and e.value.peers == ["client-0"]
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.terminate()
        p.join(10)


def _late_controller(domain: int, got) -> None:
    time.sleep(2.0)  # the sender publishes before this node exists
    with DdsNode("controller", _settings(domain)) as node:
        sub = node.subscriber(Blob)
        node.barrier({"client-0"}, 20)
        msg = sub.receive(20)
        got.value = -1 if msg is None else msg.seq
        node.barrier({"client-0"}, 20)  # stay until the sender is done


def test_a_message_for_a_named_node_waits_until_that_node_is_alive(domain):
    # Without `to` the write goes to the readers matched now (none) and is lost without a word:
    # what a client did when the controller's lease lapsed under load.
    got = CTX.Value("i", 0)
    p = CTX.Process(target=_late_controller, args=(domain, got))
    p.start()
    try:
        with DdsNode("client-0", _settings(domain)) as node:
            blobs = node.publisher(Blob)
            blobs.publish(Blob(seq=7, index=0, payload=b"update"), to={"controller"})
            node.barrier({"controller"}, 20)
            p.join(30)
        assert got.value == 7
    finally:
        p.terminate()
        p.join(10)


def test_a_message_for_a_node_that_never_comes_names_it(domain):
    with DdsNode("client-0", DdsSettings(domain_id=domain, write_timeout_s=1.0)) as node:
        t = time.monotonic()
        with pytest.raises(DdsWriteTimeout, match="not alive within 1.0s") as e:
            node.publisher(Blob).publish(Blob(seq=1, index=0, payload=b"x"), to={"controller"})
        assert e.value.peers == ["controller"] and time.monotonic() - t < 5
