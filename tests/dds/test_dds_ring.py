"""Ring allreduce (commlab.dds.ring) across processes on loopback: results, bytes sent (through
shared memory or over UDP), a killed rank. Spawn start method; each test on a domain id claimed for it."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from commlab.dds import DdsNode, DdsSettings, Group, PeerLost
from spawned_ranks import results

pytestmark = pytest.mark.slow
CTX = mp.get_context("spawn")
CHUNK = 64 * 1024  # small blocks, so that big segments travel as many pipelined messages
BIG = 700_001      # floats (2.8 MB), not divisible by 2, 3 or 4


def _sizes(world: int) -> list[int]:
    return sorted({1, world - 1, world + 1, 1001, BIG})  # 1 and world - 1: fewer floats than ranks


def _vector(rank: int, n: int) -> np.ndarray:
    return (np.random.default_rng([rank, n]).standard_normal(n) * 10 ** (rank % 3)).astype(np.float32)


def _settings(domain: int, directions: int, **kw) -> DdsSettings:
    return DdsSettings(**{"domain_id": domain, "write_timeout_s": 20.0, "chunk_bytes": CHUNK, "ring_block_bytes": CHUNK,
                          "ring_directions": directions, **kw})


def _ring_rank(domain: int, rank: int, world: int, directions: int, shm: bool, q) -> None:
    # World 4: as on a shaped link, MTU-sized datagrams and blocks of several chunks.
    link = {"loopback_tuned": False, "ring_block_bytes": 3 * CHUNK} if world == 4 else {}
    with DdsNode(f"worker-{rank}", _settings(domain, directions, shared_memory=shm, **link)) as node:
        g = Group(node, "ddp", rank, world, timeout_s=30.0)
        g.barrier(60)
        sums, sent = {}, {}
        for n in _sizes(world):
            for collective in ("ring", "naive"):
                before = node.stats.snapshot()
                sums[n, collective] = g.allreduce(f"{n}/{collective}", _vector(rank, n), "sum", collective).tobytes()
                delta = node.stats.since(before)
                sent[n, collective], sent["shm", n, collective] = delta["bytes_sent"], delta["shm_bytes_sent"]
        before, t = node.stats.snapshot(), time.perf_counter()
        mean = g.allreduce("mean", _vector(rank, BIG), "mean").tobytes()
        sent["wait_s"], sent["wall_s"] = node.stats.since(before)["wait_s"], time.perf_counter() - t
        g.barrier(60)  # nobody leaves while a peer may still need its last block
        sent["shm_received"] = node.stats.snapshot()["shm_bytes_received"]
        q.put((rank, sums, sent, mean))


# Loopback: blocks through shared memory (the default) or over UDP; world 4 as on a shaped link,
# where shared memory is never used.
@pytest.mark.parametrize("world, directions, shm", [(2, 1, True), (3, 1, True), (3, 2, True), (3, 1, False),
                                                    (4, 2, True)])
def test_ring_sum_is_exact_identical_on_every_rank_and_sends_2_w_minus_1_over_w(world, directions, shm, domain):
    q = CTX.Queue()
    procs = [CTX.Process(target=_ring_rank, args=(domain, r, world, directions, shm, q), name=f"rank{r}")
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = sorted(results(q, procs, 240), key=lambda x: x[0])
    finally:
        for p in procs:
            p.join(60)
            assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"
    for n in _sizes(world):
        exact = sum(_vector(r, n).astype(np.float64) for r in range(world))
        for collective in ("ring", "naive"):
            outs = [res[n, collective] for _, res, _, _ in got]
            assert all(o == outs[0] for o in outs), f"{collective}, n={n}: ranks differ"
            result = np.frombuffer(outs[0], np.float32)
            np.testing.assert_allclose(result, exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max())
    payload = 4 * BIG
    for rank, _, sent, mean in got:
        assert sent[BIG, "ring"] <= 2 * (world - 1) / world * payload * 1.1, (rank, sent[BIG, "ring"])
        assert sent[BIG, "naive"] >= (world - 1) * payload
        assert mean == got[0][3]
        assert 0 < sent["wait_s"] <= sent["wall_s"]  # two rings' threads wait at once: counted once
        ring_shm, naive_shm = sent["shm", BIG, "ring"], sent["shm", BIG, "naive"]
        if shm and world < 4:  # the ring's blocks (inline when no slot is free), none of the naive allgather's
            assert (world - 1) / world * payload <= ring_shm <= sent[BIG, "ring"], (rank, ring_shm)
            assert naive_shm == 0 and sent["shm_received"] >= ring_shm
        else:
            assert ring_shm == naive_shm == sent["shm_received"] == 0
    expected_mean = np.frombuffer(got[0][1][BIG, "ring"], np.float32) / np.float32(world)
    assert np.frombuffer(got[0][3], np.float32).tobytes() == expected_mean.tobytes()


# Far longer than the 2 s lease and the return window: a PeerLost saying the node is "gone" can
# only come from the lease and the window after it (or a clean leave), never from the timeout.
SURVIVOR_TIMEOUT_S = 40.0
RETURN_S = 6.0


def _survivor(domain: int, rank: int, world: int, directions: int, q, entered, done) -> None:
    with DdsNode(f"worker-{rank}", _settings(domain, directions, lease_s=2.0)) as node:
        g = Group(node, "ddp", rank, world, timeout_s=SURVIVOR_TIMEOUT_S, return_s=RETURN_S)
        g.barrier(60)
        entered.set()
        t = time.monotonic()
        try:
            g.allreduce("7/dense", np.ones(BIG, np.float32), collective="ring")
            q.put((rank, "no error", time.monotonic() - t))
        except PeerLost as e:
            q.put((rank, str(e), time.monotonic() - t))
        # Stay until every survivor has reported: a survivor that leaves is gone too, and a slower
        # one would rightly name it as well (the ring needs every rank).
        done.wait(SURVIVOR_TIMEOUT_S + 60)


def _victim(domain: int, rank: int, world: int, directions: int, entered) -> None:
    with DdsNode(f"worker-{rank}", _settings(domain, directions, lease_s=2.0)) as node:
        g = Group(node, "ddp", rank, world, timeout_s=SURVIVOR_TIMEOUT_S)
        g.barrier(60)
        # Die once every other rank is past the barrier (it had this rank's barrier message).
        if not all(e.wait(SURVIVOR_TIMEOUT_S + 60) for e in entered):
            raise SystemExit(3)  # a survivor never got there: fail, do not hang the test
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("victim, directions", [(3, 2), (1, 1)])
def test_ring_names_a_killed_rank_on_every_survivor_within_the_timeout(victim, directions, domain):
    world = 4
    survivors = [r for r in range(world) if r != victim]
    q, entered, done = CTX.Queue(), [CTX.Event() for _ in survivors], CTX.Event()
    procs = [CTX.Process(target=_survivor, args=(domain, r, world, directions, q, e, done))
             for r, e in zip(survivors, entered)]
    killed = CTX.Process(target=_victim, args=(domain, victim, world, directions, entered))
    for p in procs + [killed]:
        p.start()
    try:
        verdicts = results(q, procs, SURVIVOR_TIMEOUT_S + 60)
    finally:
        done.set()
        for p in procs:
            p.join(30)
        killed.join(10)
    assert killed.exitcode == -signal.SIGKILL
    assert all(p.exitcode == 0 for p in procs)
    for rank, message, waited in verdicts:
        assert f"rank {victim}" in message and f"gone (lease expired or left), not back within {RETURN_S:.0f}s" in message, \
            (rank, message)
        assert not any(f"rank {r}" in message for r in survivors), (rank, message)
        assert waited < SURVIVOR_TIMEOUT_S, (rank, waited)


def test_auto_schedule_is_naive_only_when_data_is_multicast():
    from types import SimpleNamespace as NS
    for multicast, want in [("data", "naive"), ("off", "ring"), ("discovery", "ring")]:
        group = NS(collective="auto", node=NS(settings=NS(multicast=multicast)))
        assert Group.schedule(group) == want
        assert Group.schedule(group, "ring") == "ring" and Group.schedule(group, "naive") == "naive"
