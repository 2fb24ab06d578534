"""One end of a DDS goodput measurement, runnable inside a network namespace:

    python -m commlab.dds.probe send|recv --domain D --interface IF --peer ADDR --sizes 65536x20,1700000x2 [--mtu]
        [--key-file F [--protect mac|aead]]

The sender publishes `count` ProbeData messages of each size; the receiver acknowledges each batch
with a ProbeAck carrying the SHA-256 of everything it received and the CPU seconds its process
spent on the batch. The sender prints one JSON line per size: bytes, seconds (first write to
acknowledgement), goodput, the CPU seconds of both processes (all their threads) and CommStats deltas.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .auth import read_keyring
from .node import DdsNode, exit_cleanly_on_sigterm
from .settings import DdsSettings


@dataclass
class ProbeData:
    batch: int
    index: int
    payload: bytes = b""


@dataclass
class ProbeAck:
    batch: int
    count: int
    sha256: str
    cpu_s: float


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """'65536x20,1700000x2' -> [(65536, 20), (1700000, 2)]"""
    return [(int(s), int(c)) for s, c in (item.split("x") for item in text.split(","))]


def send(node: DdsNode, sizes: list[tuple[int, int]]) -> None:
    blobs, acks = node.publisher(ProbeData), node.subscriber(ProbeAck)
    node.barrier({"recv"}, 60)
    for batch, (size, count) in enumerate(sizes):
        payload = os.urandom(size)
        before = node.stats.snapshot()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            blobs.publish(ProbeData(batch=batch, index=i, payload=payload))
        ack = acks.receive(600)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        expected = hashlib.sha256(payload * count).hexdigest()
        if ack is None or ack.sha256 != expected:
            raise SystemExit(f"size {size}: no or wrong acknowledgement")
        d = node.stats.since(before)
        print(json.dumps({"size": size, "count": count, "seconds": seconds, "goodput_MBps": size * count / seconds / 1e6,
                          "send_cpu_s": cpu, "recv_cpu_s": ack.cpu_s,
                          "bytes_sent": d["bytes_sent"], "wait_s": d["wait_s"]}), flush=True)


def recv(node: DdsNode, sizes: list[tuple[int, int]]) -> None:
    blobs, acks = node.subscriber(ProbeData), node.publisher(ProbeAck)
    node.barrier({"send"}, 60)
    for batch, (size, count) in enumerate(sizes):
        h, cpu = hashlib.sha256(), time.process_time()  # waiting for the sender costs no CPU
        for _ in range(count):
            msg = blobs.receive(600)
            if msg is None or msg.batch != batch:
                raise SystemExit(f"size {size}: missing message")
            h.update(msg.payload)
        acks.publish(ProbeAck(batch=batch, count=count, sha256=h.hexdigest(), cpu_s=time.process_time() - cpu))
    time.sleep(1.0)  # closing at once could drop the last, not yet acknowledged, ack


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["send", "recv"])
    p.add_argument("--domain", type=int, required=True)
    p.add_argument("--interface", default="lo")
    p.add_argument("--peer", default="127.0.0.1")
    p.add_argument("--sizes", type=parse_sizes, required=True)
    p.add_argument("--mtu", action="store_true", help="MTU-sized fragments (shaped links)")
    p.add_argument("--chunk-bytes", type=int, default=None, help="default: the DdsSettings default of the mode")
    p.add_argument("--key-file", help="keyring (commlab.dds.auth): encrypt and authenticate every message")
    p.add_argument("--protect", choices=["mac", "aead"], help="with --key-file: authenticate only (payloads in "
                   "clear), or encrypt too (default: dds.encrypt's default for the link)")
    a = p.parse_args()
    exit_cleanly_on_sigterm()
    settings = DdsSettings(domain_id=a.domain, interface=a.interface, peers=(a.peer,), loopback_tuned=not a.mtu,
                           chunk_bytes=a.chunk_bytes, write_timeout_s=120.0,
                           keyring=read_keyring(Path(a.key_file)) if a.key_file else None, encrypt=None if a.protect is None else a.protect == "aead")
    with DdsNode(a.role, settings) as node:
        (send if a.role == "send" else recv)(node, a.sizes)


if __name__ == "__main__":
    main()
