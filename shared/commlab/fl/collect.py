"""Gathering one round's ClientUpdates: deadline, min_clients, hard limit, and rejection of bad ones.

Every update is checked before it can reach the strategy: wrong round (stale or future), unknown
or repeated client, sent by another node than the client it names (a stolen key signs only as its
own client), not signed with the key of the client it names (a host speaks for its own clients
only), bad sample count, undecodable or non-finite payload. Rejections are counted
and logged with the reason, and never stop the round.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from commlab.codecs import Codec, CodecError
from commlab.fl.messages import TrainCmd
from commlab.fl.strategy import FitRes, Frame


# A gap this long between two looks at the clients means this process stood still (stopped, starved):
# the clients it then finds gone (their leases expired in its view) may be alive all along, and
# rediscovery starts only now, so their grace starts again rather than counting its own stall.
STALL_S = 5.0


class RoundFailed(RuntimeError):
    """Fewer than min_clients valid updates arrived before the round's hard limit."""


@dataclass
class RoundReplies:
    results: list[FitRes] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (client, reason)
    rejected: int = 0
    decode_s: float = 0.0

    def participants(self) -> list[str]:
        return sorted(r.client_id for r in self.results)


@dataclass
class UpdateCollector:
    """Validates and decodes the updates of round `rnd` as they arrive from `receive`."""
    rnd: int
    expected: list[str]
    codec: Codec
    numel: int
    log: Callable[[str], None]
    node_of: Callable[[str], str | None] = lambda client: client  # the node that may speak for a client
    # Why an update is not signed by the client it names (None: it is; fl.update_identity).
    unsigned: Callable[[Any], str | None] = lambda msg: None
    phase: Callable[[str], AbstractContextManager] = lambda name: nullcontext()  # MemoryWatch.phase: decoding's memory
    replies: RoundReplies = field(default_factory=RoundReplies)

    def offer(self, msg: Any, sender: str | None = None) -> None:
        """`sender`: the node the transport authenticated the message as (None: not known)."""
        reason = self._check(msg, sender)
        if reason is None:
            start = time.perf_counter()
            try:
                with self.phase("decode"):
                    delta = self.codec.decode(msg.payload, numel=self.numel)
                if not np.isfinite(delta).all():
                    reason = "payload holds NaN or Inf"
                else:  # the frame is kept, not the decoded delta: the strategy decodes each again when it adds it
                    frame = Frame(self.codec, msg.payload, self.numel)
                    self.replies.results.append(FitRes(msg.client_id, int(msg.num_samples), frame))
            except CodecError as e:
                reason = f"malformed payload: {e}"
            self.replies.decode_s += time.perf_counter() - start
        if reason is not None:
            self.replies.rejected += 1
            self.replies.failures.append((str(msg.client_id), reason))
            self.log(f"round {self.rnd}: rejected update from {msg.client_id!r} (round {msg.round}): {reason}")

    def _check(self, msg: Any, sender: str | None) -> str | None:
        if msg.round != self.rnd:
            return f"update is for round {msg.round}, not {self.rnd}"
        if msg.client_id not in self.expected:
            return "unknown client"
        if sender is not None and sender != self.node_of(msg.client_id):
            return f"sent by {sender!r}, not by the node of the client it names"
        if (why := self.unsigned(msg)) is not None:
            return why
        if msg.client_id in self.answered():
            return "second update in this round"
        if msg.num_samples <= 0:
            return f"num_samples is {msg.num_samples}"
        return None

    def answered(self) -> set[str]:
        return {r.client_id for r in self.replies.results}

    def collect(self, receive: Callable[[float], Any], started: float, deadline_s: float,
                hard_limit_s: float, min_clients: int, idle_s: Callable[[], float] | None = None,
                alive: Callable[[], set[str]] | None = None, lost_grace_s: float = 30.0,
                clock: Callable[[], float] = time.perf_counter,
                sender: Callable[[], str] | None = None) -> RoundReplies:
        """Offer received updates until every expected client answered, or the deadline passed
        with >= min_clients answers; raise RoundFailed at the hard limit.

        idle_s() (seconds since a chunk last arrived for this node, dds.stats.Progress) makes both
        limits count from the later of `started` and that chunk: an update still arriving over a
        slow link is waited for, a stalled one is not. alive() (names of the peers alive now)
        ends the round early, with RoundFailed, once answered plus alive expected clients stay
        below min_clients for lost_grace_s (a restarted client may come back within it; a stall of
        this process longer than STALL_S starts the grace again). sender() names the node the
        last received message came from (Subscriber.last_sender)."""
        lost_since: float | None = None
        looked = clock()
        while len(self.answered()) < len(self.expected):
            now = clock()
            if now - looked > STALL_S:
                lost_since = None
            looked = now
            waited = now - started if idle_s is None else min(now - started, idle_s())
            enough = len(self.answered()) >= min_clients
            if enough and waited >= deadline_s:
                break
            if waited >= hard_limit_s:
                raise RoundFailed(f"round {self.rnd}: only {len(self.answered())} of min_clients={min_clients} "
                                  f"valid updates after the hard limit of {hard_limit_s:.0f}s "
                                  f"(answered: {sorted(self.answered()) or 'none'})")
            if alive is not None:
                gone = sorted(set(self.expected) - self.answered() - alive())
                if len(self.expected) - len(gone) >= min_clients:
                    lost_since = None
                elif lost_since is None:
                    lost_since = now
                elif now - lost_since >= lost_grace_s:
                    raise RoundFailed(f"round {self.rnd}: too few clients can take part for min_clients={min_clients}: "
                                      f"{', '.join(gone)} gone (exited or lease expired) for {now - lost_since:.0f}s, "
                                      f"answered: {', '.join(sorted(self.answered())) or 'none'}")
            limit = deadline_s if enough else hard_limit_s
            msg = receive(max(0.0, min(limit - waited, 0.5)))
            if msg is not None:
                self.offer(msg, None if sender is None else sender())
        missing = sorted(set(self.expected) - self.answered())
        self.replies.failures += [(c, "no valid update by the deadline") for c in missing]
        return self.replies


@dataclass
class OpenRound:
    """A synchronous round while its updates are collected: what to send again, and to whom."""
    cmd: TrainCmd
    collector: UpdateCollector
    returns: dict[str, int]  # node -> its returns (announce.Peer.returns) when the command last went to it
    asked: set[str] = field(default_factory=set)  # nodes that rejoined (fl.messages.ModelRequest) since

    def unanswered_by_node(self, node_of: Callable[[str], str | None]) -> dict[str, list[str]]:
        by_node: dict[str, list[str]] = {}
        for client in sorted(set(self.collector.expected) - self.collector.answered()):
            by_node.setdefault(node_of(client) or client, []).append(client)
        return by_node
