"""DDP collectives over one DDS topic per group: allgather of variable-size bytes and allreduce.

Each rank publishes its contribution as one chunked message whose meta names (key, rank); every
rank collects `world` contributions per key, so concurrent calls with different keys never mix.
Allreduce has two schedules (COLLECTIVES): "ring" (ring.py) sends 2(W-1)/W of the payload per
rank; "naive" is an allgather of fp32 vectors summed in rank order, (W-1) x the payload unicast
but 1x with dds.multicast "data" (one copy reaches every reader). "auto", the default, picks naive
with data multicast and ring otherwise. Both give every rank bit-identical results. A rank whose
node is no longer alive (lease expired or left) or which sends nothing within timeout_s makes
wait() raise PeerLost naming it.

Allreduce values travel as raw float32 unless a `codec` is given (fp16, bf16, fp32 frames: any
object with encode(vec) -> bytes and decode(frame, numel) -> float32 vector, raising ValueError on
a bad frame): then every contribution, ring block and partial sum crosses the network as one of
its frames, and sums are taken in float32 after decoding.
"""
from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .endpoints import ChunkReader, ChunkWriter
from .errors import BarrierTimeout, DdsError, PeerLost
from .reassembly import Assembled
from .ring import TwoRings, TwoRingsHandle

if TYPE_CHECKING:
    from .node import DdsNode

log = logging.getLogger(__name__)
POLL_S = 0.05
REMEMBERED_KEYS = 4096
COLLECTIVES = ("auto", "ring", "naive")  # allreduce schedules; the first is the default


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
                 collective: str = COLLECTIVES[0]):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world {world}")
        if collective not in COLLECTIVES:
            raise ValueError(f"allreduce collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
        self.collective = collective  # allreduce schedule when a call names none
        self.node, self.name, self.rank, self.world, self.timeout_s = node, name, rank, world, timeout_s
        self._directory = node.announcer.directory
        self._parts: dict[str, dict[int, bytes]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()  # late copies for these keys are dropped
        self._barriers = 0
        self._writer = ChunkWriter(node, f"coll_{name}")
        self._reader = ChunkReader(node, f"coll_{name}", self._on_message)
        node.add_closable(self._reader)
        self._ring = TwoRings(self) if world > 1 else None  # its readers must exist before we announce
        node.announcer.join_group(name, rank)

    def _on_message(self, msg: Assembled) -> None:
        try:
            meta = json.loads(msg.meta)
            key, rank = str(meta["key"]), int(meta["rank"])
            if not 0 <= rank < self.world:
                raise ValueError(f"rank {rank} outside world {self.world}")
        except (ValueError, KeyError, TypeError) as e:
            self.node.stats.add(malformed_chunks=1)
            log.warning("group %s: contribution from %s dropped: %s", self.name, msg.sender, e)
            return
        with self._directory.changed:
            if key not in self._finished:
                self._parts.setdefault(key, {})[rank] = msg.payload
                self._directory.changed.notify_all()

    def _ranks(self) -> dict[int, bool]:
        """rank -> alive, for every peer that announced membership of this group."""
        return {p.info["groups"][self.name]: p.alive for p in self._directory.peers.values()
                if self.name in p.info.get("groups", {})}

    def barrier(self, timeout_s: float | None = None) -> None:
        """Every rank waits here until all ranks have arrived (alive, matched, and each sent an
        empty barrier message); BarrierTimeout names the ranks missing at the deadline."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s

        def missing() -> list[str]:
            ranks = self._ranks()
            absent = [f"rank {r}" for r in range(self.world) if r != self.rank and not ranks.get(r)]
            writers = [self._writer] + (self._ring.writers if self._ring else [])
            return absent or [f"reader of {n}" for w in writers for n in w.missing_readers()]
        with self.node.stats.waiting():
            if not self._directory.wait_for(lambda: not missing(), timeout_s):
                raise BarrierTimeout(missing(), timeout_s, f"members of group {self.name!r}")
        self._barriers += 1
        key = f"barrier/{self._barriers}"
        try:
            self._start(key, b"", deadline).wait()
        except PeerLost as e:
            raise BarrierTimeout([f"rank {r}" for r in e.ranks], timeout_s, f"members of group {self.name!r}") from e

    def _start(self, key: str, data: bytes | memoryview, deadline: float | None = None) -> "Handle":
        with self._directory.changed:
            if key in self._finished or self.rank in self._parts.get(key, {}):
                raise DdsError(f"group {self.name!r}: key {key!r} was already used")
            self._parts.setdefault(key, {})[self.rank] = bytes(data)
        self._writer.write(json.dumps({"key": key, "rank": self.rank}), data)
        return Handle(self, key, deadline or time.monotonic() + self.timeout_s)

    def allgather_async(self, key: str, data: bytes | memoryview) -> "Handle":
        return self._start(key, data)

    def allreduce_async(self, key: str, vec: np.ndarray, op: str = "mean", collective: str | None = None,
                        codec: FrameCodec | None = None) -> "Handle | TwoRingsHandle":
        """Start an allreduce (collective: see schedule(); codec: the values' wire, raw float32 if
        None); ring handles progress in wait(), so wait for them in the same order on every rank."""
        collective = self.schedule(collective)
        if op not in ("sum", "mean"):
            raise ValueError(f"allreduce op must be 'sum' or 'mean', got {op!r}")
        if collective not in COLLECTIVES:
            raise ValueError(f"allreduce collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
        dense = np.ascontiguousarray(vec, dtype=np.float32).ravel()
        codec = FLOAT32 if codec is None else codec
        if collective == "ring" and self._ring is not None:
            return self._ring.start(key, dense, op, codec)
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

    def _collect(self, key: str, deadline: float) -> list[bytes]:
        def done_or_lost() -> bool:
            have = self._parts.get(key, {})
            ranks = self._ranks()
            return len(have) == self.world or any(ranks.get(r) is False for r in range(self.world) if r not in have)
        with self.node.stats.waiting():
            self._directory.wait_for(done_or_lost, max(0.0, deadline - time.monotonic()), POLL_S)
        with self._directory.changed:
            have = self._parts.get(key, {})
            missing = [r for r in range(self.world) if r not in have]
            if missing:
                lost = [r for r in missing if self._ranks().get(r) is False]
                reason = ("its node is gone (lease expired or left)" if lost
                          else f"no contribution within {self.timeout_s:.1f}s")
                self._finish(key)
                raise PeerLost(lost or missing, self.name, key, reason)
            self._finish(key)
            return [have[r] for r in range(self.world)]

    def _finish(self, key: str) -> None:
        self._parts.pop(key, None)
        self._finished[key] = None
        while len(self._finished) > REMEMBERED_KEYS:
            self._finished.popitem(last=False)


class Handle:
    """An started collective; wait() returns its result or raises PeerLost by the deadline."""

    def __init__(self, group: Group, key: str, deadline: float):
        self.group, self.key, self.deadline = group, key, deadline
        self.reduce: tuple[str, int, FrameCodec] | None = None

    def wait(self):
        parts = self.group._collect(self.key, self.deadline)
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
