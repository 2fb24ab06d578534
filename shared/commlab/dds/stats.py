"""Communication counters of one node: bytes on the wire and pure network wait time.

Bytes on the wire are estimated per sample from its serialized size S (CDR, 4-byte encapsulation
header included, padded to 4) and the fragment size F of the configuration, which (settings.py)
puts exactly one RTPS submessage in each UDP datagram:
    S <= F: S + 100   (IPv4 20 + UDP 8 + RTPS header 20 + INFO_DST 16 + INFO_TS 12 + DATA 24)
    S >  F: S + 112 * ceil(S / F)   (same, with a 36-byte DATA_FRAG submessage per fragment)
plus, on a link whose MTU splits a datagram into several IP frames (settings.ip_mtu), 20 bytes of
IPv4 header for every frame after a datagram's first.
A sample sent to k remote participants is counted k times (unicast copies), or once when it goes
to a multicast group (dds.multicast data). Discovery, heartbeats and acknowledgements are not
counted; benchmarks/bench_transport.py compares the estimate with the interface counters of a veth
link (docs/transport.md). A node on a private interface (its own network namespace or container)
also reports that interface's counters, which count everything.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterator

DATAGRAM_HEADERS = 20 + 8 + 20 + 16 + 12  # IPv4, UDP, RTPS header, INFO_DST, INFO_TS
DATA_HEADER = 24
DATA_FRAG_HEADER = 36


def wire_bytes(serialized: int, fragment: int, mtu: int | None = None) -> int:
    """Estimated bytes on the wire for one copy of a sample of `serialized` bytes; `mtu`: the
    link's, when it splits datagrams into IP frames (None: one frame per datagram)."""
    serialized = (serialized + 3) & ~3
    if serialized <= fragment:
        return serialized + DATAGRAM_HEADERS + DATA_HEADER + _extra_frames(serialized + DATA_HEADER, mtu)
    full, last = divmod(serialized, fragment)
    datagrams = full + (last > 0)
    extra = full * _extra_frames(fragment + DATA_FRAG_HEADER, mtu) + (_extra_frames(last + DATA_FRAG_HEADER, mtu)
                                                                       if last else 0)
    return serialized + (DATAGRAM_HEADERS + DATA_FRAG_HEADER) * datagrams + extra


def _extra_frames(submessage: int, mtu: int | None) -> int:
    """IPv4 header bytes of the frames after the first of a datagram whose last submessage has
    `submessage` bytes (with its header)."""
    if mtu is None:
        return 0
    ip_payload = submessage + DATAGRAM_HEADERS - 20  # UDP header, RTPS header, INFO_DST, INFO_TS
    return 20 * (-(-ip_payload // (mtu - 20)) - 1)


@dataclass
class CommStats:
    bytes_sent: int = 0          # wire bytes, payload plus headers
    multicast_bytes_sent: int = 0  # the part of bytes_sent that went to a multicast group
    shm_bytes_sent: int = 0      # the part of bytes_sent that went through shared memory (dds.shm)
    bytes_received: int = 0
    shm_bytes_received: int = 0  # the part of bytes_received read from shared memory
    payload_sent: int = 0        # application payload bytes only
    payload_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    chunks_sent: int = 0
    chunks_received: int = 0
    chunks_accepted: int = 0     # chunks that joined a message (with authentication: an authenticated one)
    wait_s: float = 0.0          # blocked on the network: matching, blocked writes, waiting for data
    duplicate_chunks: int = 0
    malformed_chunks: int = 0
    expired_messages: int = 0    # incomplete messages that received no chunk for reassembly_timeout_s
    evicted_messages: int = 0    # incomplete messages dropped to keep within the reassembly caps
    evicted_bytes: int = 0
    # Messages dropped by authentication (commlab.dds.envelope.REASONS), before anything was reserved.
    auth_unauthenticated: int = 0
    auth_wrong_run: int = 0
    auth_wrong_key: int = 0
    auth_replayed: int = 0
    auth_out_of_window: int = 0
    auth_altered: int = 0
    auth_windows_replaced: int = 0  # a sender's replay window dropped for its newer incarnation's
    # Collectives that lost a message (commlab.dds.resend): asks this node sent, messages it wrote again.
    resend_asks: int = 0
    messages_resent: int = 0
    interface: str | None = field(default=None, repr=False, compare=False)  # counters read if not loopback
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self, name, getattr(self, name) + value)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time the enclosed block as network wait."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(wait_s=time.perf_counter() - start)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("interface", "_lock")}
        if self.interface not in (None, "lo"):
            out.update(interface_counters(self.interface))
        return out

    def since(self, earlier: dict[str, float]) -> dict[str, float]:
        """Counters accumulated since an earlier snapshot (metrics per interval of the caller's choosing)."""
        return delta(earlier, self.snapshot())


def interface_counters(interface: str) -> dict[str, int]:
    """Bytes the interface sent and received, all traffic included; {} if it cannot be read."""
    base = Path("/sys/class/net", interface, "statistics")
    try:
        return {"iface_bytes_sent": int((base / "tx_bytes").read_text()),
                "iface_bytes_received": int((base / "rx_bytes").read_text())}
    except (OSError, ValueError):
        return {}


def delta(earlier: dict[str, float], later: dict[str, float]) -> dict[str, float]:
    return {k: later[k] - earlier[k] for k in later if k in earlier}


class Progress:
    """How long this node has received no chunk of an authenticated message (on any topic).

    A wait for something a large message brings over a slow link counts its timeout from the last
    chunk that arrived, not from its start: it outlasts a fixed limit while the transfer goes on
    and ends once the transfer stalls. A change of chunks_accepted, seen at a poll, is progress:
    chunks that fail authentication are not, so nobody without a key can keep a wait going.

        progress = Progress(node.stats)
        while not ready():
            if progress.idle_s() > timeout_s:
                raise TimeoutError(...)
    """

    def __init__(self, stats: CommStats, clock: Callable[[], float] = time.monotonic):
        self.stats, self.clock = stats, clock
        self._seen, self._at = stats.chunks_accepted, clock()

    def idle_s(self) -> float:
        now, seen = self.clock(), self.stats.chunks_accepted
        if seen != self._seen:
            self._seen, self._at = seen, now
        return now - self._at
