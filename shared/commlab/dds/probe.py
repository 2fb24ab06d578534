"""One end of a DDS goodput measurement, runnable inside a network namespace:

    python -m commlab.dds.probe send|recv --domain D[,D2,D3] --interface IF --peer ADDR --sizes 65536x20,1700000x2
        [--mtu] [--modes plain,mac,aead --key-file F] [--rounds R]

The sender publishes `count` ProbeData messages of each size; the receiver acknowledges each batch
as soon as its last message is delivered, with a ProbeAck carrying the CPU seconds its process spent
on the batch, and then checks the contents outside the timed window: a ProbeCheck with the SHA-256
of everything it received (hashing costs about as much CPU per byte as the transport itself, and
would dilute what the transport's own costs are compared with). The sender prints one JSON line per
batch: its mode and round, bytes, seconds (first write to acknowledgement), goodput, the CPU seconds
of both processes (all their threads) up to the acknowledgement, and CommStats deltas.

Modes, one node each in a domain of its own (--domain lists one per mode), all in this process:
plain (no keys), mac (authenticated, payloads in clear), aead (encrypted and authenticated). Each
round runs the batches of every mode one after the other, starting with the next mode each round,
so the load of a shared machine falls on every mode alike.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from commlab.codecs.scratch import retain_freed_memory

from .auth import read_keyring
from .node import DdsNode, exit_cleanly_on_sigterm
from .settings import DdsSettings

MODES = ("plain", "mac", "aead")
Batch = tuple[int, str, int, int]  # (round, mode, size, count)


@dataclass
class ProbeData:
    batch: int
    index: int
    payload: bytes = b""


@dataclass
class ProbeAck:
    batch: int
    count: int
    cpu_s: float


@dataclass
class ProbeCheck:
    batch: int
    sha256: str


def sha256_of(payloads: list[bytes]) -> str:
    """Of the payloads one after the other, without joining them (a batch is tens of MB)."""
    h = hashlib.sha256()
    for payload in payloads:
        h.update(payload)
    return h.hexdigest()


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """'65536x20,1700000x2' -> [(65536, 20), (1700000, 2)]"""
    return [(int(s), int(c)) for s, c in (item.split("x") for item in text.split(","))]


def parse_modes(text: str) -> list[str]:
    modes = text.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"modes must be distinct ones of {', '.join(MODES)}, got {text!r}")
    return modes


def batches(modes: list[str], sizes: list[tuple[int, int]], rounds: int) -> list[Batch]:
    """Every batch in order: round r runs each mode's sizes, starting with mode r mod len(modes)."""
    out = []
    for r in range(rounds):
        k = r % len(modes)
        out += [(r, mode, size, count) for mode in modes[k:] + modes[:k] for size, count in sizes]
    return out


def send(nodes: dict[str, DdsNode], order: list[Batch]) -> None:
    ends = {mode: (node.publisher(ProbeData), node.subscriber(ProbeAck), node.subscriber(ProbeCheck))
            for mode, node in nodes.items()}
    for node in nodes.values():
        node.barrier({"recv"}, 60)
    for batch, (round_, mode, size, count) in enumerate(order):
        node, (blobs, acks, checks) = nodes[mode], ends[mode]
        payload = os.urandom(size)
        before = node.stats.snapshot()
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            blobs.publish(ProbeData(batch=batch, index=i, payload=payload))
        ack = acks.receive(600)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        check = checks.receive(600)
        if ack is None or ack.batch != batch or ack.count != count:
            raise SystemExit(f"{mode} size {size}: no acknowledgement of batch {batch}")
        if check is None or check.batch != batch or check.sha256 != sha256_of([payload] * count):
            raise SystemExit(f"{mode} size {size}: the receiver got other bytes than were sent")
        d = node.stats.since(before)
        print(json.dumps({"mode": mode, "round": round_, "size": size, "count": count, "seconds": seconds,
                          "goodput_MBps": size * count / seconds / 1e6, "send_cpu_s": cpu, "recv_cpu_s": ack.cpu_s,
                          "bytes_sent": d["bytes_sent"], "wait_s": d["wait_s"]}), flush=True)


def recv(nodes: dict[str, DdsNode], order: list[Batch]) -> None:
    ends = {mode: (node.subscriber(ProbeData), node.publisher(ProbeAck), node.publisher(ProbeCheck))
            for mode, node in nodes.items()}
    for node in nodes.values():
        node.barrier({"send"}, 60)
    for batch, (_, mode, size, count) in enumerate(order):
        blobs, acks, checks = ends[mode]
        got, cpu = [], time.process_time()  # waiting for the sender costs no CPU
        for _ in range(count):
            msg = blobs.receive(600)
            if msg is None or msg.batch != batch:
                raise SystemExit(f"{mode} size {size}: missing message")
            got.append(msg.payload)
        acks.publish(ProbeAck(batch=batch, count=count, cpu_s=time.process_time() - cpu))
        checks.publish(ProbeCheck(batch=batch, sha256=sha256_of(got)))
    time.sleep(1.0)  # closing at once could drop the last, not yet acknowledged, ack


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["send", "recv"])
    p.add_argument("--domain", type=lambda t: [int(d) for d in t.split(",")], required=True,
                   help="domain id, one per mode (comma-separated)")
    p.add_argument("--interface", default="lo")
    p.add_argument("--peer", default="127.0.0.1")
    p.add_argument("--sizes", type=parse_sizes, required=True)
    p.add_argument("--mtu", action="store_true", help="MTU-sized fragments (shaped links)")
    p.add_argument("--chunk-bytes", type=int, default=None, help="default: the DdsSettings default of the mode")
    p.add_argument("--modes", type=parse_modes, default=["plain"], help="plain, mac, aead (comma-separated; "
                   "mac and aead need --key-file)")
    p.add_argument("--rounds", type=int, default=1, help="times every mode's batches run, interleaved")
    p.add_argument("--key-file", help="keyring (commlab.dds.auth) of the mac and aead modes")
    p.add_argument("--lossy-link", action="store_true", help="repair timing for links that drop packets")
    a = p.parse_args()
    if len(a.domain) != len(a.modes):
        p.error(f"--domain needs one id per mode: {len(a.modes)} mode(s), {len(a.domain)} id(s)")
    if a.key_file is None and set(a.modes) - {"plain"}:
        p.error("the mac and aead modes need --key-file")
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    exit_cleanly_on_sigterm()
    # Received messages are fresh buffers of one size, batch after batch: kept by malloc, as DDP
    # workers keep theirs, instead of mapped anew (every page faulting in, at random in the rounds).
    retain_freed_memory()
    keyring = read_keyring(Path(a.key_file)) if a.key_file else None
    with ExitStack() as stack:
        nodes = {mode: stack.enter_context(DdsNode(a.role, DdsSettings(
            domain_id=domain, interface=a.interface, peers=(a.peer,), loopback_tuned=not a.mtu,
            chunk_bytes=a.chunk_bytes, write_timeout_s=120.0, lossy_link=a.lossy_link,
            keyring=None if mode == "plain" else keyring, encrypt=mode == "aead")))
            for mode, domain in zip(a.modes, a.domain)}
        (send if a.role == "send" else recv)(nodes, batches(a.modes, a.sizes, a.rounds))


if __name__ == "__main__":
    main()
