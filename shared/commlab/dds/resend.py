"""Collectives that survive a lost message: what a rank wrote lately is written again when a peer asks.

A peer whose lease expired (a paused or starved process, a link down for a few seconds) misses
what was written meanwhile: DDS drops a reader's unacknowledged samples when its participant is
lost, and a volatile reader that matches again gets only what is written after; around a rejoin a
message can also be lost while both sides already believe they are matched again. So every rank
keeps what it wrote for the keys in progress and for the last KEEP_FINISHED keys (ranks run the
same collectives in the same order, one at a time: this rank finished a key only after every rank
started it, so a peer still needs at most the last one), and a rank that waits for a live peer
asks that peer to write again what it lacks of the key it waits for. An Ask names the key, the
topic and the index of the first message of that key the asker lacks; the peer writes again the
messages of that key from that index on that it wrote before the ask arrived (one written after
answers the ask by itself: the asker's reader was already waiting for it).

When to ask (Overdue, one per wait): at once after a new cut with that peer (PeerDirectory.gaps),
and whenever nothing arrived from it (no chunk, on any topic of the group) for an interval that
starts at ASK_AFTER_S and doubles with each ask of the wait. A large message still arriving on a
slow link keeps resetting the quiet time, so it is not asked for again; and a peer whose writer
has chunks not yet acknowledged by every reader it sees (still on their way) answers a wait's
first ask, unless it follows a cut, with nothing. One that was lost is asked for again and again,
each later ask insisting, until it arrives or the peer is declared gone (PeerLost,
collectives.py), never left to a silent wait. Receivers drop copies of keys they
have finished and keep one copy of the others, so a repeat is harmless.
"""
from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .endpoints import ChunkWriter

KEEP_FINISHED = 1
MAX_ASKED_BLOCKS = 1 << 16  # an ask naming more is malformed
ASK_AFTER_S = 1.0  # quiet time before the first ask of a wait; doubled after each ask


@dataclass(frozen=True)
class Ask:
    """What a waiting rank lacks from one peer: the messages of `key` on `topic` (the group's own
    topic: "", a ring's: its tag) from the `index`-th on, in the order the peer wrote them; on a
    ring, whose blocks go in whatever order they become ready (ring.py, overlap), only the
    (step, block) pairs in `blocks`. `insist`: write them again even if the peer's writer still has
    chunks on their way (a repeated ask, or one after a cut)."""
    key: str
    topic: str = ""
    index: int = 0
    insist: bool = False
    blocks: tuple[tuple[int, int], ...] = ()

    def meta(self, rank: int, asked: list[int]) -> dict:
        """The meta of the ask message rank `rank` sends to the ranks `asked`."""
        return {"key": self.key, "rank": rank, "ask": asked, "topic": self.topic, "from": self.index,
                "insist": self.insist, "blocks": [list(b) for b in self.blocks]}

    def wants(self, meta: str) -> bool:
        """Whether the message with this `meta` (one of the key's) is one the ask names."""
        if not self.blocks:
            return True
        doc = json.loads(meta)
        return (doc.get("step"), doc.get("block")) in self.blocks


def parse_ask(meta: dict, key: str, topics: tuple[str, ...]) -> tuple[list[int], Ask]:
    """(the ranks asked, what for) of an ask's meta; ValueError/KeyError/TypeError if malformed."""
    ranks, topic, index, insist = [int(r) for r in meta["ask"]], str(meta["topic"]), int(meta["from"]), \
        meta["insist"]
    blocks = tuple((int(s), int(b)) for s, b in meta.get("blocks", ()))
    if topic not in topics or index < 0 or not isinstance(insist, bool) or len(blocks) > MAX_ASKED_BLOCKS:
        raise ValueError(f"ask for topic {topic!r} from message {index}, insist {insist!r}, {len(blocks)} blocks")
    return ranks, Ask(key, topic, index, insist, blocks)


class SentLog:
    """(meta, payload) of every message written for the recent keys of one writer, in order."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys: OrderedDict[str, list[tuple[str, bytes | memoryview, float]]] = OrderedDict()  # + when written
        self._clock = clock
        self._finished: list[str] = []
        self._lock = threading.Lock()

    def add(self, key: str, meta: str, payload: bytes | memoryview) -> None:
        """Keep a message; the payload must not change afterwards (pass a copy of reused buffers)."""
        with self._lock:
            self._keys.setdefault(key, []).append((meta, payload, self._clock()))

    def finish(self, key: str) -> None:
        with self._lock:
            if key not in self._keys or key in self._finished:
                return
            self._finished.append(key)
            while len(self._finished) > KEEP_FINISHED:
                self._keys.pop(self._finished.pop(0), None)

    def messages(self, key: str, index: int = 0, before: float = float("inf")) -> list[tuple[str, bytes | memoryview]]:
        """The messages kept for `key` from the `index`-th on that were written before clock() was `before`."""
        with self._lock:
            return [(meta, payload) for meta, payload, at in self._keys.get(key, ())[index:] if at < before]


class Cuts:
    """The cuts (PeerDirectory.gaps) with each peer that an ask already answered, shared by all
    waits of a group, so that each cut is asked about at once only by the first wait that sees it."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def new(self, name: str, gaps: int) -> bool:
        with self._lock:
            if gaps <= self._seen.get(name, 0):
                return False
            self._seen[name] = gaps
            return True


class Overdue:
    """When one wait asks a peer to write again what it waits for (`want`): at once after a new cut
    with it; otherwise once nothing arrived from it for the wait's current interval (ASK_AFTER_S,
    doubled after each ask), counted from the latest of the wait's start, its last chunk and the
    last ask. Only the first ask of a wait, without a cut, yields to chunks still on their way."""

    def __init__(self, want: Ask, cuts: Cuts, clock: Callable[[], float] = time.monotonic) -> None:
        self.want, self._cuts, self._clock = want, cuts, clock
        self._start = clock()
        self._asked_at: dict[str, float] = {}
        self._interval: dict[str, float] = {}

    def due(self, name: str, gaps: int, heard_at: float) -> Ask | None:
        """What to ask peer `name` for now, if anything; `heard_at`: clock() of the last chunk from it."""
        now = self._clock()
        interval = self._interval.get(name, ASK_AFTER_S)
        insist = self._cuts.new(name, gaps)
        if not insist:
            quiet_since = max(self._start, heard_at, self._asked_at.get(name, self._start))
            if now - quiet_since < interval:
                return None
            insist, interval = name in self._asked_at, interval * 2
        self._asked_at[name], self._interval[name] = now, interval
        return replace(self.want, insist=insist)


def write_again(writer: "ChunkWriter", sent: SentLog, ask: Ask, asked_at: float) -> int:
    """Write again with `writer` the messages of `sent` that `ask`, which arrived at `asked_at`,
    names; how many. None, unless it insists, while the writer has chunks not yet acknowledged: a
    message still on its way (a slow link) is not lost, and a copy would only queue behind it; the
    asker asks again, insisting, if it stays without."""
    messages = [m for m in sent.messages(ask.key, ask.index, asked_at) if ask.wants(m[0])]
    if not messages or not (ask.insist or writer.acknowledged()):
        return 0
    for meta, payload in messages:
        writer.write(meta, payload)
    return len(messages)
