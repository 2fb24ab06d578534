"""DDS vs a plain TCP socket between the same two endpoints, with the same payloads.

    python benchmarks/bench_transport.py            # loopback, then a 10 Mbit/s tbf link between namespaces

Each measurement: the sender writes `count` messages of one size; the receiver acknowledges the
batch once the last one is in, then sends the SHA-256 of everything it got (hashed outside the
timed window, which holds the transport alone); goodput = payload bytes / (first write -> ack).
DDS ends are `python -m commlab.dds.probe`; TCP ends are this script's tcp-send/tcp-recv.
Writes the median goodput of both over alternating repetitions and the DDS/TCP ratio
(targets: >= 0.5 loopback, >= 0.9 shaped) to results/bench/transport.{csv,md}.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.dds.probe import parse_sizes
from commlab.links.netns import NetnsUnavailable, veth_pair
from commlab.runs.claims import hold

HERE = Path(__file__).resolve()
LOOPBACK_SIZES = "65536x100,1700000x20,10000000x5"
SHAPED_SIZES = "65536x20,1700000x2,10000000x1"
LEN = struct.Struct("!Q")
Sides = tuple[dict, dict]  # the sender's and the receiver's interface ("if") and address ("addr")
Prefixes = tuple[list[str], list[str]]  # what runs a command on each side (ip netns exec NS)
LOOPBACK: tuple[Prefixes, Sides] = (([], []), ({"if": "lo", "addr": "127.0.0.1"}, {"if": "lo", "addr": "127.0.0.1"}))


def tcp_send(peer: str, port: int, sizes: list[tuple[int, int]]) -> None:
    for _ in range(100):  # the receiver may still be starting
        try:
            conn = socket.create_connection((peer, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay between header and payload
        for size, count in sizes:
            payload = os.urandom(size)
            start = time.perf_counter()
            for _ in range(count):
                conn.sendall(LEN.pack(size))
                conn.sendall(payload)
            _recv_exact(conn, 1, bytearray(1))
            seconds = time.perf_counter() - start
            if bytes(_recv_exact(conn, 32, bytearray(32))) != hashlib.sha256(payload * count).digest():
                raise SystemExit(f"size {size}: the receiver got other bytes than were sent")
            print(json.dumps({"size": size, "count": count, "seconds": seconds,
                              "goodput_MBps": size * count / seconds / 1e6}), flush=True)


def _recv_exact(conn: socket.socket, n: int, buf: bytearray | memoryview) -> memoryview:
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        r = conn.recv_into(view[got:])
        if r == 0:
            raise SystemExit("connection closed early")
        got += r
    return view


def tcp_recv(bind: str, port: int, sizes: list[tuple[int, int]]) -> None:
    with socket.create_server((bind, port), reuse_port=True) as srv:
        conn, _ = srv.accept()
        with conn:
            # Every message of a batch is kept until it is hashed, in a buffer allocated before timing starts.
            batch = memoryview(bytearray(max(size * count for size, count in sizes)))
            for size, count in sizes:
                at = 0
                for _ in range(count):
                    (n,) = LEN.unpack(_recv_exact(conn, 8, bytearray(8)))
                    _recv_exact(conn, n, batch[at:])
                    at += n
                conn.sendall(b"\1")  # all in: the timed window ends here
                conn.sendall(hashlib.sha256(batch[:at]).digest())


def run_pair(s: BenchRun, label: str, recv_cmd: list[str], send_cmd: list[str]) -> list[dict]:
    """A receiver and a sender started together (logs results/bench/logs/<name>-<label>-{recv,send}.log);
    the sender's result lines."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
    out = s.run({"recv": recv_cmd, "send": send_cmd}, f"bench/logs/{s.args.name}-{slug}", timeout_s=900).check()
    return [json.loads(line) for line in out.child("send").output().splitlines() if line.startswith("{")]


def on_shaped_link(s: BenchRun, net: int, measure: Callable[[Prefixes, Sides], list[dict]]) -> list[dict]:
    """``measure`` between two network namespaces joined by a 10 Mbit/s tbf veth pair (root);
    without them no rows and one line saying why."""
    try:
        with veth_pair(net, rate="10mbit") as (sa, sb):
            return measure((sa.exec_prefix(), sb.exec_prefix()),
                           ({"if": sa.interface, "addr": sa.address}, {"if": sb.interface, "addr": sb.address}))
    except NetnsUnavailable as e:
        s.progress.log(f"shaped link skipped: {e}")
        return []


def measure(s: BenchRun, label: str, prefixes: Prefixes, sides: Sides, sizes: str, domain: int, mtu: bool,
            repeat: int, port: int) -> list[dict]:
    """Sender on the first side, receiver on the second; DDS and TCP alternate `repeat` times (the
    machine is shared and noisy) and the median goodput of each is compared."""
    (a_prefix, b_prefix), (a, b) = prefixes, sides
    py = [sys.executable]
    dds = ["-m", "commlab.dds.probe"]
    flags = ["--domain", str(domain), "--sizes", sizes] + (["--mtu"] if mtu else [])
    d_runs, t_runs = [], []
    for k in range(repeat):
        d_runs.append(run_pair(s, f"{label} {k} dds",
                               b_prefix + py + dds + ["recv", "--interface", b["if"], "--peer", a["addr"]] + flags,
                               a_prefix + py + dds + ["send", "--interface", a["if"], "--peer", b["addr"]] + flags))
        t_runs.append(run_pair(s, f"{label} {k} tcp",
                               b_prefix + py + [str(HERE), "tcp-recv", "--addr", b["addr"], "--port", str(port), "--sizes", sizes],
                               a_prefix + py + [str(HERE), "tcp-send", "--addr", b["addr"], "--port", str(port), "--sizes", sizes]))
        s.step(f"{label} repetition {k + 1}/{repeat}")
    rows = []
    for i, dr in enumerate(d_runs[0]):
        dds_mbps = statistics.median(run[i]["goodput_MBps"] for run in d_runs)
        tcp_mbps = statistics.median(run[i]["goodput_MBps"] for run in t_runs)
        rows.append({"link": label, "size": dr["size"], "count": dr["count"], "repeat": repeat,
                     "dds_MBps": dds_mbps, "tcp_MBps": tcp_mbps, "ratio": dds_mbps / tcp_mbps,
                     "dds_wire_bytes_est": dr["bytes_sent"], "payload_bytes": dr["size"] * dr["count"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "transport", {"repeat": 1})
    p.add_argument("role", nargs="?", default="bench", choices=["bench", "tcp-send", "tcp-recv"])
    p.add_argument("--addr", default="127.0.0.1")
    p.add_argument("--sizes", default=None)
    p.add_argument("--port", type=int, help="TCP port (default: a claimed one, commlab.runs.claims)")
    p.add_argument("--repeat", type=int, default=3, help="loopback repetitions (the shaped link runs once)")
    a = p.parse_args(argv)
    if a.role == "tcp-send":
        tcp_send(a.addr, a.port, parse_sizes(a.sizes))
        return 0
    if a.role == "tcp-recv":
        tcp_recv(a.addr, a.port, parse_sizes(a.sizes))
        return 0
    # Loopback is shared with every other run and test on the machine: a claimed domain and port.
    domain, port = hold("domain"), a.port or hold("port")
    with BenchRun(a, a.repeat + 1, "repetition") as s:
        rows = measure(s, "loopback", *LOOPBACK, a.sizes or LOOPBACK_SIZES, domain=domain, mtu=False,
                       repeat=a.repeat, port=port)
        rows += on_shaped_link(s, 202, lambda prefixes, sides: measure(
            s, "10mbit-tbf", prefixes, sides, a.sizes or SHAPED_SIZES, domain=189, mtu=True, repeat=1, port=port))
        s.write(pd.DataFrame(rows), None, "DDS against TCP goodput between the same two endpoints",
                notes=["median goodput over alternating repetitions; DDS wire bytes: the transport's estimate"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
