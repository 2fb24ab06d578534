"""fp16 and bf16 frames through the group allreduce across processes on loopback (ring and
naive): every rank ends with the same bytes, close to the exact sum, for half of fp32's bytes.
Spawn start method; DDS domain 195."""
from __future__ import annotations

import multiprocessing as mp
import queue
import time

import numpy as np
import pytest

from commlab.codecs import get_codec
from commlab.dds import DdsNode, DdsSettings, Group

pytestmark = pytest.mark.slow
CTX = mp.get_context("spawn")
WORLD = 3
BIG = 300_001  # floats, not divisible by 2 or 3
SIZES = (1, 2, 1001, BIG)  # 1 and 2: fewer floats than ranks
CODECS = ("fp32", "fp16", "bf16")
RELATIVE = {"fp32": 1e-6, "fp16": 2.0**-11, "bf16": 2.0**-8}


def _vector(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng([rank, n]).standard_normal(n).astype(np.float32)


def _rank(domain: int, rank: int, q) -> None:
    settings = DdsSettings(domain_id=domain, write_timeout_s=20.0, chunk_bytes=64 * 1024)
    with DdsNode(f"worker-{rank}", settings) as node:
        g = Group(node, "ddp", rank, WORLD, timeout_s=30.0)
        g.barrier(60)
        results, sent = {}, {}
        for name in CODECS:
            for n in SIZES:
                for collective in ("ring", "naive"):
                    before = node.stats.snapshot()
                    out = g.allreduce(f"{name}/{n}/{collective}", _vector(rank, n), "sum", collective, get_codec(name))
                    results[name, n, collective] = out.tobytes()
                    sent[name, n, collective] = node.stats.since(before)["bytes_sent"]
        g.barrier(60)  # nobody leaves while a peer may still need its last block
        q.put((rank, results, sent))


def test_half_precision_allreduce_agrees_on_every_rank_for_half_the_bytes():
    q = CTX.Queue()
    procs = [CTX.Process(target=_rank, args=(195, r, q), name=f"rank{r}") for r in range(WORLD)]
    for p in procs:
        p.start()
    got, deadline = [], time.monotonic() + 240
    try:
        while len(got) < WORLD:
            try:
                got.append(q.get(timeout=1))
            except queue.Empty:
                dead = [p.name for p in procs if p.exitcode not in (None, 0)]
                assert not dead and time.monotonic() < deadline, f"no result; died: {dead}"
    finally:
        for p in procs:
            p.join(60)
            assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"
    for name in CODECS:
        for n in SIZES:
            exact = sum(_vector(r, n).astype(np.float64) for r in range(WORLD))
            scale = sum(np.abs(_vector(r, n).astype(np.float64)) for r in range(WORLD))
            for collective in ("ring", "naive"):
                outs = [res[name, n, collective] for _, res, _ in got]
                assert all(o == outs[0] for o in outs), f"{name} {collective}, n={n}: ranks differ"
                # Each of at most WORLD roundings (every contribution, or every partial sum) is
                # within the codec's relative bound of what it rounds, which is at most `scale`.
                error = np.abs(np.frombuffer(outs[0], np.float32) - exact)
                assert (error <= WORLD * RELATIVE[name] * scale + 1e-6).all(), (name, collective, n)
    for _, _, sent in got:
        for collective in ("ring", "naive"):
            ratio = {name: sent[name, BIG, collective] / sent["fp32", BIG, collective] for name in ("fp16", "bf16")}
            assert all(0.49 < r < 0.52 for r in ratio.values()), (collective, ratio)
