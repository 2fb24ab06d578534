"""DDP collectives over one DDS topic per group: allgather of variable-size bytes and allreduce.

Each rank publishes its contribution as one chunked message whose meta names (key, rank); every
rank collects `world` contributions per key, so concurrent calls with different keys never mix.
Allreduce has two schedules (COLLECTIVES): "ring" (ring.py) sends 2(W-1)/W of the payload per
rank; "naive" is an allgather of fp32 vectors summed in rank order, (W-1) x the payload unicast
but 1x with dds.multicast "data" (one copy reaches every reader). "auto", the default, picks naive
with data multicast and ring otherwise. Both give every rank bit-identical results.

Allreduce values travel as raw float32 unless a `codec` is given (fp16, bf16, fp32 frames: any
object with encode(vec) -> bytes and decode(frame, numel) -> float32 vector, raising ValueError on
a bad frame): then every contribution, ring block and partial sum crosses the network as one of
its frames, and sums are taken in float32 after decoding.

A rank whose node is gone (lease expired: paused, starved, cut off) gets return_s to come back;
meanwhile the others wait. A rank that waits for a live peer asks it to write again what it lacks,
at once after a cut and whenever nothing arrived from that peer for a while (resend.py), so a lost
message is written again and the collective completes with the same bytes as without the loss. A rank not back
within return_s, or, while every rank is alive, silent for timeout_s, makes wait() raise PeerLost
naming it.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from .endpoints import ChunkReader, ChunkWriter
from .errors import BarrierTimeout, DdsError, PeerLost
from .reassembly import Assembled
from .resend import Ask, Cuts, Overdue, SentLog, parse_ask, write_again
from .ring import GONE, RING_TAGS
from .ring_handle import Ready
from .rings import Rings, RingsHandle

if TYPE_CHECKING:
    from .announce import Peer
    from .node import DdsNode

log = logging.getLogger(__name__)
POLL_S = 0.05
CHECK_S = 0.25  # how often a wait looks at peers gone, back, or asking
REMEMBERED_KEYS = 4096
RETURN_S = 120.0  # default time a gone rank gets to come back: a 60 s pause (30 leases) survives
COLLECTIVES = ("auto", "ring", "naive")  # allreduce schedules; the first is the default
ASK_TOPICS = ("",) + RING_TAGS  # an ask names the group's own topic ("") or a ring's


class FrameCodec(Protocol):
    def encode(self, vec: np.ndarray) -> bytes: ...
    def decode(self, frame: bytes | memoryview, numel: int | None = None) -> np.ndarray: ...


class Float32:
    """The allreduce's own wire: little-endian float32 values, no header."""

    def encode(self, vec: np.ndarray) -> memoryview:
        return memoryview(np.ascontiguousarray(vec, dtype=np.float32)).cast("B")

    def decode(self, frame: bytes | memoryview, numel: int | None = None) -> np.ndarray:
        if numel is not None and len(frame) != 4 * numel:
            raise ValueError(f"{len(frame)} bytes, {numel} float32 values need {4 * numel}")
        return np.frombuffer(frame, dtype=np.float32)


FLOAT32 = Float32()


class Group:
    def __init__(self, node: "DdsNode", name: str, rank: int, world: int, timeout_s: float,
                 collective: str = COLLECTIVES[0], return_s: float = RETURN_S):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world {world}")
        if collective not in COLLECTIVES:
            raise ValueError(f"allreduce collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
        self.collective = collective  # allreduce schedule when a call names none
        self.node, self.name, self.rank, self.world, self.timeout_s = node, name, rank, world, timeout_s
        self.return_s = return_s
        self._directory = node.announcer.directory
        self._parts: dict[str, dict[int, bytes]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()  # late copies for these keys are dropped
        self._barriers = 0
        self._sent = SentLog()  # this rank's contributions, written again when a peer asks
        self._cuts = Cuts()
        self._heard: dict[str, float] = {}  # node -> time.monotonic() of its last contribution or block
        self._asked_by: dict[int, dict[Ask, float]] = {}  # rank -> what it asked for -> when the ask arrived
        self._serving = threading.Lock()
        self._writer = ChunkWriter(node, f"coll_{name}")
        self._reader = ChunkReader(node, f"coll_{name}", self._on_message)
        node.add_closable(self._reader)
        self._ring = Rings(self) if world > 1 else None  # its readers must exist before we announce
        node.announcer.join_group(name, rank)

    def _on_message(self, msg: Assembled) -> None:
        try:
            meta = json.loads(msg.meta)
            key, rank = str(meta["key"]), int(meta["rank"])
            if not 0 <= rank < self.world:
                raise ValueError(f"rank {rank} outside world {self.world}")
            ask = parse_ask(meta, key, ASK_TOPICS) if "ask" in meta else None
        except (ValueError, KeyError, TypeError) as e:
            self.node.stats.add(malformed_chunks=1)
            log.warning("group %s: contribution from %s dropped: %s", self.name, msg.sender, e)
            return
        with self._directory.changed:
            if ask is not None:  # a request to write again, not a contribution
                if self.rank in ask[0]:
                    self._asked_by.setdefault(rank, {})[ask[1]] = time.monotonic()
                    self._directory.changed.notify_all()
                return
            self.heard(msg.sender)
            if key not in self._finished:
                self._parts.setdefault(key, {})[rank] = msg.payload
                self._directory.changed.notify_all()

    def heard(self, sender: str) -> None:
        """A contribution or ring block from node `sender` arrived: it is not overdue."""
        self._heard[sender] = time.monotonic()

    def _heard_at(self, name: str) -> float:
        """When anything last arrived from node `name`: a whole message, or a chunk of one."""
        readers = [self._reader] + (self._ring.readers if self._ring is not None else [])
        return max([self._heard.get(name, 0.0)] + [r.heard_from(name) for r in readers])

    def _ranks(self) -> dict[int, bool]:
        """rank -> alive, for every peer that announced membership of this group."""
        return {r: p.alive for r, p in self._members().items()}

    def _members(self) -> dict[int, "Peer"]:
        return {p.info["groups"][self.name]: p for p in self._directory.peers.values()
                if self.name in p.info.get("groups", {})}

    def await_ranks(self, ready: Callable[[], bool], waited: Callable[[], list[int]], key: str,
                    silence: str, timeout_s: float | None = None, want: Ask | None = None) -> None:
        """Wait until ready() (evaluated under the directory's lock) holds. Meanwhile answer peers
        that asked for a resend, and ask the live ranks in waited() for `want` (default: their
        message of `key` on the group's topic) when it is overdue (resend.Overdue). PeerLost: a
        rank of the group gone and not back within return_s; or, with every rank alive, not ready
        within timeout_s (default self.timeout_s; `silence` says what was missing). The silence
        count starts again while a rank is gone: the others then wait for it too."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        overdue = Overdue(Ask(key) if want is None else want, self._cuts)
        self.serve()
        with self.node.stats.waiting():
            while not self._directory.wait_for(ready, min(CHECK_S, max(0.0, deadline - time.monotonic())), POLL_S):
                now = time.monotonic()
                with self._directory.changed:
                    members = self._members()
                gone = {r: p for r, p in members.items() if not p.alive}
                left = sorted(r for r, p in gone.items() if p.left)
                if left:  # a rank that left may have given up on one still gone: name that one first
                    lost = sorted(set(gone) - set(left))
                    raise PeerLost(lost or left, self.name, key,
                                   f"{GONE}; rank(s) {', '.join(map(str, left))} left meanwhile" if lost else "its node left")
                late = sorted(r for r, p in gone.items() if now - p.lost_at > self.return_s)
                if late:
                    raise PeerLost(late, self.name, key, f"{GONE}, not back within {self.return_s:.0f}s")
                if gone:
                    deadline = now + timeout_s
                self.serve()
                self._ask([r for r in waited() if r in members and members[r].alive], members, overdue)
                if now >= deadline:
                    raise PeerLost(waited(), self.name, key, silence)

    def _ask(self, ranks: list[int], members: dict[int, "Peer"], overdue: Overdue) -> None:
        due: dict[Ask, list[int]] = {}
        for r in ranks:
            p = members[r]
            ask = overdue.due(p.name, self._directory.gaps(p.name), self._heard_at(p.name))
            if ask is not None:
                due.setdefault(ask, []).append(r)
        for ask, asked in due.items():
            log.info("group %s: asking rank(s) %s to write again: %s", self.name, asked, ask)
            self.node.stats.add(resend_asks=1)
            self._writer.write(json.dumps(ask.meta(self.rank, asked)), b"")

    def serve(self) -> None:
        """Write again what ranks asked for (a thread already doing so is enough): a message on
        the group's topic once for all who asked, a ring block to the rank that asked."""
        if not self._asked_by or not self._serving.acquire(blocking=False):
            return
        try:
            with self._directory.changed:
                asked, self._asked_by = self._asked_by, {}
            log.info("group %s: writing again for rank(s) %s", self.name, sorted(asked))
            wants: dict[Ask, float] = {}
            for asks in asked.values():
                for want, at in asks.items():
                    if not want.topic:
                        wants[want] = max(at, wants.get(want, at))
            resent = sum(write_again(self._writer, self._sent, want, at) for want, at in wants.items())
            if self._ring is not None:
                resent += sum(self._ring.write_again(rank, want, at) for rank, asks in asked.items()
                              for want, at in asks.items() if want.topic)
            self.node.stats.add(messages_resent=resent)
        finally:
            self._serving.release()

    def barrier(self, timeout_s: float | None = None) -> None:
        """Every rank waits here until all ranks have arrived (alive, matched, and each sent an
        empty barrier message); BarrierTimeout names the ranks missing at the deadline."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s

        def absent() -> list[int]:
            ranks = self._ranks()
            return [r for r in range(self.world) if r != self.rank and not ranks.get(r)]

        def unmatched() -> list[str]:
            writers = [self._writer] + (self._ring.writers if self._ring else [])
            return [f"reader of {n}" for w in writers for n in w.missing_readers()]
        what = f"members of group {self.name!r}"
        self._barriers += 1
        key = f"barrier/{self._barriers}"
        try:
            self.await_ranks(lambda: not absent() and not unmatched(), absent, key, "not joined", timeout_s)
        except PeerLost as e:
            raise BarrierTimeout([f"rank {r}" for r in e.ranks] or unmatched(), timeout_s, what) from e
        try:
            self._start(key, b"", timeout_s).wait()
        except PeerLost as e:
            raise BarrierTimeout([f"rank {r}" for r in e.ranks], timeout_s, what) from e

    def leave(self) -> None:
        """The last call of a rank that is done: a barrier, then it announces that it is done and
        stays, answering asks, until every rank has said so (at most return_s). A rank that passed
        the barrier needs nothing more; one cut off just before it would otherwise ask a rank that
        has left."""
        self.barrier()
        self.node.announcer.mark_done(self.name)
        end = time.monotonic() + self.return_s

        def all_done() -> bool:
            members = self._members()
            return len(members) == self.world - 1 and all(
                isinstance(p.info.get("done"), list) and self.name in p.info["done"] for p in members.values())
        while not self._directory.wait_for(all_done, CHECK_S):
            if time.monotonic() > end:
                log.warning("group %s: left before every rank was done (waited %.0fs)", self.name, self.return_s)
                return
            self.serve()
        if not self.node.announcer.wait_for_acks(self.return_s):  # so that every rank learns this one is done
            log.warning("group %s: left before every rank heard that this one is done", self.name)

    def _start(self, key: str, data: bytes | memoryview, timeout_s: float | None = None) -> "Handle":
        with self._directory.changed:
            if key in self._finished or self.rank in self._parts.get(key, {}):
                raise DdsError(f"group {self.name!r}: key {key!r} was already used")
            own = self._parts.setdefault(key, {})[self.rank] = bytes(data)
        meta = json.dumps({"key": key, "rank": self.rank})
        self._sent.add(key, meta, own)
        self._writer.write(meta, data)
        return Handle(self, key, self.timeout_s if timeout_s is None else timeout_s)

    def allgather_async(self, key: str, data: bytes | memoryview) -> "Handle":
        return self._start(key, data)

    def allreduce_async(self, key: str, vec: np.ndarray, op: str = "mean", collective: str | None = None,
                        codec: FrameCodec | None = None, ready: Ready | None = None,
                        kept: bool = False) -> "Handle | RingsHandle":
        """Start an allreduce (collective: see schedule(); codec: the values' wire, raw float32 if
        None); ring handles progress in wait(), so wait for them in the same order on every rank.
        ready: the ring may start before `vec` (float32, contiguous) is final (ring.py, overlap).
        kept: the caller leaves `vec` unchanged until the group's next ring allreduce has finished, so
        the ring keeps no copy of it for a resend (RingHandle)."""
        collective = self.schedule(collective)
        if op not in ("sum", "mean"):
            raise ValueError(f"allreduce op must be 'sum' or 'mean', got {op!r}")
        if collective not in COLLECTIVES:
            raise ValueError(f"allreduce collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
        dense = np.ascontiguousarray(vec, dtype=np.float32).ravel()
        if ready is not None and not (collective == "ring" and self._ring is not None and np.shares_memory(dense, vec)):
            raise ValueError("allreduce ready: only the ring (2 ranks or more) reads a vector still being filled, "
                             "and only a contiguous float32 one (not a copy)")
        codec = FLOAT32 if codec is None else codec
        if collective == "ring" and self._ring is not None:
            return self._ring.start(key, dense, op, codec, ready, kept)
        handle = self._start(key, codec.encode(dense))
        handle.reduce = (op, dense.size, codec)
        return handle

    def schedule(self, collective: str | None = None) -> str:
        """The schedule an allreduce runs: `collective` or else self.collective, with "auto" as naive
        when data is multicast (each rank's vector leaves it once, less than the ring's 2(W-1)/W;
        measured 5.9 s vs 9.4 s at WORLD=3 on 10 Mbit uplinks) and as ring otherwise."""
        collective = self.collective if collective is None else collective
        if collective == "auto":
            return "naive" if self.node.settings.multicast == "data" else "ring"
        return collective

    def allgather(self, key: str, data: bytes | memoryview) -> list[bytes]:
        return self.allgather_async(key, data).wait()

    def allreduce(self, key: str, vec: np.ndarray, op: str = "mean", collective: str | None = None,
                  codec: FrameCodec | None = None) -> np.ndarray:
        return self.allreduce_async(key, vec, op, collective, codec).wait()

    def _collect(self, key: str, timeout_s: float) -> list[bytes]:
        def missing() -> list[int]:
            have = self._parts.get(key, {})
            return [r for r in range(self.world) if r not in have]
        try:
            self.await_ranks(lambda: not missing(), missing, key, f"no contribution within {timeout_s:.1f}s", timeout_s)
            with self._directory.changed:
                have = self._parts[key]
                return [have[r] for r in range(self.world)]
        finally:
            with self._directory.changed:
                self._finish(key)

    def _finish(self, key: str) -> None:
        self._parts.pop(key, None)
        self._sent.finish(key)
        self._finished[key] = None
        while len(self._finished) > REMEMBERED_KEYS:
            self._finished.popitem(last=False)


class Handle:
    """A started collective; wait() returns its result or raises PeerLost (see Group.await_ranks)."""

    def __init__(self, group: Group, key: str, timeout_s: float):
        self.group, self.key, self.timeout_s = group, key, timeout_s
        self.reduce: tuple[str, int, FrameCodec] | None = None

    def wait(self):
        parts = self.group._collect(self.key, self.timeout_s)
        if self.reduce is None:
            return parts
        op, numel, codec = self.reduce
        values = []
        for rank, part in enumerate(parts):  # own part too, as its frame: every rank sums the same values
            try:
                values.append(codec.decode(part, numel))
            except ValueError as e:
                raise DdsError(f"allreduce {self.key!r}: rank {rank} sent no {numel}-value contribution: {e}") from None
        total = values[0].copy()
        for v in values[1:]:
            total += v
        return total / np.float32(self.group.world) if op == "mean" else total
