"""Bytes an interface sent and received, from its kernel counters: gloo has no byte counter of its own.

In a network namespace eth0 carries only this node's traffic, so the deltas are the node's wire
bytes (payload plus TCP/IP/Ethernet headers). On loopback every process of the host shares `lo`:
the deltas there are everybody's traffic, an upper bound, and the manifest says so.
"""
from __future__ import annotations

from pathlib import Path


class IfaceCounters:
    def __init__(self, interface: str):
        self.dir = Path("/sys/class/net") / interface / "statistics"
        if not self.dir.is_dir():
            raise FileNotFoundError(f"interface {interface!r}: no counters at {self.dir}")

    def read(self) -> tuple[int, int]:
        """(tx_bytes, rx_bytes) now."""
        return int((self.dir / "tx_bytes").read_text()), int((self.dir / "rx_bytes").read_text())

    def since(self, before: tuple[int, int]) -> tuple[int, int]:
        tx, rx = self.read()
        return tx - before[0], rx - before[1]
