"""A lost message of a live peer is asked for again until it arrives (commlab.dds.resend): when a
wait asks; and with three ranks (processes), a ring block, an allgather contribution and the final
barrier's message, each dropped once on arrival, are asked for and arrive, with the bytes of an
undisturbed run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from commlab.dds import DdsNode, DdsSettings, Group
from commlab.dds.reassembly import Assembled
from commlab.dds.resend import ASK_AFTER_S, Ask, Cuts, Overdue, SentLog, parse_ask, write_again
from spawned_ranks import run_ranks

WORLD = 3
WANT, INSIST = Ask("7/dense", "ring", 3), Ask("7/dense", "ring", 3, insist=True)
TIMEOUT_S = 30.0  # a rank silent this long fails the run; the asks come after 1, 3, 7 and 15 s of quiet


def test_a_wait_asks_after_quiet_then_at_doubling_intervals_and_a_chunk_postpones_it():
    now = [100.0]  # the clock the wait reads
    wait = Overdue(WANT, Cuts(), lambda: now[0])
    now[0] += ASK_AFTER_S * 0.9
    assert wait.due("worker-1", 0, 0.0) is None
    now[0] += ASK_AFTER_S * 0.1
    assert wait.due("worker-1", 0, 0.0) == WANT  # the first ask yields to chunks on their way
    now[0] += ASK_AFTER_S * 1.5  # the second ask waits twice as long
    assert wait.due("worker-1", 0, 0.0) is None
    heard = now[0]  # a chunk of the message on its way: quiet starts again
    now[0] += ASK_AFTER_S
    assert wait.due("worker-1", 0, heard) is None
    now[0] += ASK_AFTER_S
    assert wait.due("worker-1", 0, heard) == INSIST
    assert wait.due("worker-1", 0, heard) is None
    now[0] += ASK_AFTER_S * 3.9
    assert wait.due("worker-1", 0, heard) is None
    now[0] += ASK_AFTER_S * 0.1
    assert wait.due("worker-1", 0, heard) == INSIST  # never given up: until it arrives or the peer is lost


def test_a_new_cut_is_asked_about_at_once_by_the_first_wait_that_sees_it():
    cuts = Cuts()
    first, second = Overdue(WANT, cuts, lambda: 100.0), Overdue(WANT, cuts, lambda: 100.0)
    assert first.due("worker-2", 1, 0.0) == INSIST
    assert second.due("worker-2", 1, 0.0) is None and first.due("worker-2", 1, 0.0) is None
    assert second.due("worker-2", 2, 0.0) == INSIST


def test_the_sent_log_gives_a_key_from_the_message_asked_for():
    log = SentLog()
    for i in range(3):
        log.add("a", f"a{i}", b"x")
    log.add("b", "b0", b"y")
    assert [m for m, _ in log.messages("a", 1)] == ["a1", "a2"]
    assert log.messages("a", 3) == [] and log.messages("unknown") == []
    log.finish("a")
    log.finish("b")  # only the last finished key is kept
    assert log.messages("a") == [] and [m for m, _ in log.messages("b")] == ["b0"]


# (rank that loses it, reader: the group's topic or its forward ring's, meta it matches)
DROPS = [
    # Rank 1 loses rank 0's second block of step 0 on the forward ring (3 blocks of at most 64 KiB).
    (1, "ring", {"key": "lossy", "step": 0, "block": 1}),
    (2, "group", {"key": "gather", "rank": 0}),
    # The final barrier (in leave()): rank 1 loses rank 2's barrier message, which rank 2 wrote
    # before it passed the barrier and went on waiting in leave().
    (1, "group", {"key": "barrier/2", "rank": 2}),
]


def drop_once(reader, match: dict) -> list[dict]:
    """Make `reader` (a ChunkReader) drop the first message (not an ask) whose meta has `match`."""
    dropped: list[dict] = []
    deliver = reader._on_message

    def on_message(msg: Assembled) -> None:
        meta = json.loads(msg.meta)
        if not dropped and "ask" not in meta and match.items() <= meta.items():
            dropped.append(meta)
            return
        deliver(msg)
    reader._on_message = on_message
    return dropped


def vector(rank: int) -> np.ndarray:
    return np.random.default_rng(rank).standard_normal(200_003).astype(np.float32)


def run_rank(domain: int, rank: int, q) -> None:
    """One DDP-like rank: every collective in one thread (a rank answers asks while it waits)."""
    settings = DdsSettings(domain_id=domain, write_timeout_s=TIMEOUT_S, chunk_bytes=64 * 1024,
                           ring_block_bytes=64 * 1024, ring_directions=2)
    with DdsNode(f"worker-{rank}", settings) as node:
        g = Group(node, "ddp", rank, WORLD, timeout_s=TIMEOUT_S)
        readers = {"group": g._reader, "ring": g._ring.rings[0].reader}
        dropped = [drop_once(readers[reader], match) for r, reader, match in DROPS if r == rank]
        g.barrier()
        out = {key: g.allreduce(key, vector(rank), "sum", "ring").tobytes() for key in ("clean", "lossy")}
        out["gather"] = g.allgather("gather", vector(rank).tobytes())
        g.leave()
        q.put((rank, out, [len(d) for d in dropped], node.stats.snapshot()["resend_asks"]))


@pytest.mark.slow
def test_a_dropped_block_contribution_and_barrier_message_are_asked_for_and_arrive(domain):
    got, exitcodes = run_ranks(run_rank, (domain,), WORLD, 4 * TIMEOUT_S + 60)
    got.sort()
    assert exitcodes == [0] * WORLD
    outs = [out for _, out, _, _ in got]
    assert all(dropped == [1] * len(dropped) for _, _, dropped, _ in got)  # each drop happened
    assert len({o["clean"] for o in outs}) == 1 and [o["lossy"] for o in outs] == [o["clean"] for o in outs]
    assert [o["gather"] for o in outs] == [[vector(r).tobytes() for r in range(WORLD)]] * WORLD
    asks = [a for _, _, _, a in got]
    assert asks[1] >= 2 and asks[2] >= 1  # for the block and the barrier message; for the contribution



class Writer:
    """A ChunkWriter's part that write_again uses."""

    def __init__(self, acknowledged: bool) -> None:
        self.done, self.written = acknowledged, []

    def acknowledged(self) -> bool:
        return self.done

    def write(self, meta: str, payload: bytes) -> None:
        self.written.append(meta)


def test_what_is_on_its_way_unless_insisted_or_written_after_the_ask_is_not_written_again():
    now = [100.0]
    log = SentLog(lambda: now[0])
    for i in range(4):
        log.add("a", f"a{i}", b"x")
        now[0] += 1.0
    asked_at = 102.5  # a3 was written after the ask arrived: it answers it by itself
    busy, idle = Writer(acknowledged=False), Writer(acknowledged=True)
    assert write_again(busy, log, Ask("a", "", 1), asked_at) == 0 and busy.written == []
    assert write_again(idle, log, Ask("a", "", 1), asked_at) == 2 and idle.written == ["a1", "a2"]
    assert write_again(busy, log, Ask("a", "", 1, insist=True), asked_at) == 2 and busy.written == ["a1", "a2"]


def test_a_ring_ask_names_its_blocks_and_only_those_written_before_it_are_written_again():
    # Ring blocks go in whatever order they become ready (overlap), so an ask names the blocks, not an index.
    now = [100.0]
    log = SentLog(lambda: now[0])
    for step, block in [(0, 1), (0, 0), (1, 1), (1, 0)]:
        log.add("k", json.dumps({"key": "k", "step": step, "block": block}), b"x")
        now[0] += 1.0
    ask = Ask("k", "ring", blocks=((0, 0), (1, 0), (2, 0)))  # (2, 0) is not written yet
    writer = Writer(acknowledged=True)
    assert write_again(writer, log, ask, asked_at=now[0]) == 2
    assert [(json.loads(m)["step"], json.loads(m)["block"]) for m in writer.written] == [(0, 0), (1, 0)]


def test_an_ask_survives_its_wire_form_and_a_malformed_one_is_refused():
    ask = Ask("k", "back", 0, True, ((3, 1), (4, 0)))
    ranks, parsed = parse_ask(json.loads(json.dumps(ask.meta(0, [1]))), "k", ("", "ring", "back"))
    assert ranks == [1] and parsed == ask
    for bad in ({"topic": "elsewhere"}, {"from": -1}, {"insist": "yes"}, {"blocks": [[1]]}):
        with pytest.raises((ValueError, TypeError)):
            parse_ask({**ask.meta(0, [1]), **bad}, "k", ("", "ring", "back"))
