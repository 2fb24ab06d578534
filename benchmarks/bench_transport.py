"""DDS vs a plain TCP socket between the same two endpoints, with the same payloads.

    python benchmarks/bench_transport.py            # loopback, then a 10 Mbit/s tbf link between namespaces

Each measurement: the sender writes `count` messages of one size; the receiver hashes everything
and acknowledges the batch with the SHA-256; goodput = payload bytes / (first write -> ack).
DDS ends are `python -m commlab.dds.probe`; TCP ends are this script's tcp-send/tcp-recv.
Prints the median goodput of both over alternating repetitions and the DDS/TCP ratio
(targets: >= 0.5 loopback, >= 0.9 shaped).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from commlab.claims import hold
from commlab.dds.netns import NetnsUnavailable, veth_pair
from commlab.dds.probe import parse_sizes
from commlab.progress import Progress

HERE = Path(__file__).resolve()
LOOPBACK_SIZES = "65536x100,1700000x20,10000000x5"
SHAPED_SIZES = "65536x20,1700000x2,10000000x1"
LEN = struct.Struct("!Q")


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
            ack = _recv_exact(conn, 32, bytearray(32))
            seconds = time.perf_counter() - start
            if bytes(ack) != hashlib.sha256(payload * count).digest():
                raise SystemExit(f"size {size}: wrong acknowledgement")
            print(json.dumps({"size": size, "count": count, "seconds": seconds,
                              "goodput_MBps": size * count / seconds / 1e6}), flush=True)


def _recv_exact(conn: socket.socket, n: int, buf: bytearray) -> memoryview:
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
            buf = bytearray(max(s for s, _ in sizes))
            for size, count in sizes:
                h = hashlib.sha256()
                for _ in range(count):
                    (n,) = LEN.unpack(_recv_exact(conn, 8, bytearray(8)))
                    h.update(_recv_exact(conn, n, buf))
                conn.sendall(h.digest())


def run_pair(recv_cmd: list[str], send_cmd: list[str]) -> list[dict]:
    receiver = subprocess.Popen(recv_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sender = subprocess.run(send_cmd, capture_output=True, text=True, timeout=900)
        if sender.returncode != 0:
            raise SystemExit(f"sender failed: {sender.stderr[-3000:]}")
        receiver.wait(timeout=60)
        return [json.loads(line) for line in sender.stdout.splitlines() if line.startswith("{")]
    finally:
        if receiver.poll() is None:
            receiver.terminate()
            receiver.wait(10)


def measure(label: str, a_prefix: list[str], b_prefix: list[str], a: dict, b: dict, sizes: str,
            domain: int, port: int, mtu: bool, repeat: int) -> list[dict]:
    """Sender on side a, receiver on side b; DDS and TCP alternate `repeat` times (the machine is
    shared and noisy) and the median goodput of each is compared."""
    py = [sys.executable]
    dds = ["-m", "commlab.dds.probe"]
    flags = ["--domain", str(domain), "--sizes", sizes] + (["--mtu"] if mtu else [])
    d_runs, t_runs = [], []
    with Progress(repeat, "repetition") as progress:
        progress.update(0, label)
        for _ in range(repeat):
            d_runs.append(run_pair(b_prefix + py + dds + ["recv", "--interface", b["if"], "--peer", a["addr"]] + flags,
                                   a_prefix + py + dds + ["send", "--interface", a["if"], "--peer", b["addr"]] + flags))
            tcp = ["--addr", b["addr"], "--port", str(port), "--sizes", sizes]
            t_runs.append(run_pair(b_prefix + py + [str(HERE), "tcp-recv", *tcp], a_prefix + py + [str(HERE), "tcp-send", *tcp]))
            progress.update(len(t_runs), label)
    rows = []
    for i, dr in enumerate(d_runs[0]):
        dds_mbps = statistics.median(run[i]["goodput_MBps"] for run in d_runs)
        tcp_mbps = statistics.median(run[i]["goodput_MBps"] for run in t_runs)
        rows.append({"link": label, "size": dr["size"], "count": dr["count"], "repeat": repeat,
                     "dds_MBps": dds_mbps, "tcp_MBps": tcp_mbps, "ratio": dds_mbps / tcp_mbps,
                     "dds_wire_bytes_est": dr["bytes_sent"], "payload_bytes": dr["size"] * dr["count"]})
        r = rows[-1]
        print(f"{label:10s} {r['size']:>10,d} B x{r['count']:<4d} DDS {r['dds_MBps']:8.2f} MB/s   "
              f"TCP {r['tcp_MBps']:8.2f} MB/s   DDS/TCP {r['ratio']:.2f}   "
              f"DDS wire/payload {r['dds_wire_bytes_est'] / r['payload_bytes']:.3f}", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", nargs="?", default="bench", choices=["bench", "tcp-send", "tcp-recv"])
    p.add_argument("--addr", default="127.0.0.1")
    p.add_argument("--port", type=int, help="tcp-send/tcp-recv: the receiver's port")
    p.add_argument("--sizes", default=None)
    p.add_argument("--repeat", type=int, default=3, help="loopback repetitions (the shaped link runs once)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = p.parse_args()
    if a.role == "tcp-send":
        return tcp_send(a.addr, a.port, parse_sizes(a.sizes))
    if a.role == "tcp-recv":
        return tcp_recv(a.addr, a.port, parse_sizes(a.sizes))
    lo = {"if": "lo", "addr": "127.0.0.1"}
    port = hold("port")  # loopback is shared with every other run and test on the machine: claimed ones
    rows = measure("loopback", [], [], lo, lo, a.sizes or LOOPBACK_SIZES, domain=hold("domain"), port=port,
                   mtu=False, repeat=a.repeat)
    try:
        with veth_pair(202, rate="10mbit") as (sa, sb):
            rows += measure("10mbit-tbf", sa.exec_prefix(), sb.exec_prefix(),
                            {"if": sa.interface, "addr": sa.address}, {"if": sb.interface, "addr": sb.address},
                            a.sizes or SHAPED_SIZES, domain=189, port=port, mtu=True, repeat=1)
    except NetnsUnavailable as e:
        print(f"shaped link skipped: {e}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
