"""Communication counters of one node: bytes on the wire and pure network wait time.

Bytes on the wire are estimated per sample from its serialized size S (CDR, 4-byte encapsulation
header included, padded to 4) and the fragment size F of the configuration, which (settings.py)
puts exactly one RTPS submessage in each UDP datagram:
    S <= F: S + 100   (IPv4 20 + UDP 8 + RTPS header 20 + INFO_DST 16 + INFO_TS 12 + DATA 24)
    S >  F: S + 112 * ceil(S / F)   (same, with a 36-byte DATA_FRAG submessage per fragment)
A sample sent to k remote participants is counted k times (unicast copies). Discovery, heartbeats
and acknowledgements are not counted; benchmarks/bench_transport.py compares the estimate with the
interface counters of a veth link (docs/transport.md).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Iterator

DATAGRAM_HEADERS = 20 + 8 + 20 + 16 + 12  # IPv4, UDP, RTPS header, INFO_DST, INFO_TS
DATA_HEADER = 24
DATA_FRAG_HEADER = 36


def wire_bytes(serialized: int, fragment: int) -> int:
    """Estimated bytes on the wire for one copy of a sample of `serialized` bytes."""
    serialized = (serialized + 3) & ~3
    if serialized <= fragment:
        return serialized + DATAGRAM_HEADERS + DATA_HEADER
    return serialized + (DATAGRAM_HEADERS + DATA_FRAG_HEADER) * -(-serialized // fragment)


@dataclass
class CommStats:
    bytes_sent: int = 0          # wire bytes, payload plus headers
    bytes_received: int = 0
    payload_sent: int = 0        # application payload bytes only
    payload_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    chunks_sent: int = 0
    chunks_received: int = 0
    wait_s: float = 0.0          # blocked on the network: matching, blocked writes, waiting for data
    duplicate_chunks: int = 0
    malformed_chunks: int = 0
    expired_messages: int = 0
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
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def since(self, earlier: dict[str, float]) -> dict[str, float]:
        """Counters accumulated since an earlier snapshot (metrics per interval of the caller's choosing)."""
        return delta(earlier, self.snapshot())


def delta(earlier: dict[str, float], later: dict[str, float]) -> dict[str, float]:
    return {k: later[k] - earlier.get(k, 0) for k in later}
