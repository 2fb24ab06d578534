"""Dense allreduce over DDS, naive (allgather + sum) vs ring, on loopback and on shaped links.

    python benchmarks/bench_allreduce.py [--world 3] [--numel 1663370] [--reps 3] [--profile 10mbit]
                                         [--multicast off|data] [--chunk-bytes N] [--no-netns]
                                         [--datagram-frames K] [--send-window BYTES] [--codecs raw,fp32,fp16,bf16]

Runs WORLD processes on loopback twice, the ring's blocks through shared memory (dds.shm, the
default between processes of one host) and over UDP (dds.shared_memory false), and (as root) once
in network namespaces on a private bridge, every uplink shaped by the link profile
(commlab.links.netns, commlab.links.profiles), and in each does `reps` allreduces of a numel-float vector (default: the MNIST CNN's gradient) with each
schedule. Prints, per schedule: bytes each rank sent per allreduce over the payload (CommStats
wire estimate, IP level; on the shaped links also the interface's counters, Ethernet headers and
acknowledgements included; ideal ring 2(W-1)/W, naive W-1), seconds per allreduce (slowest rank, median of
the reps), the naive/ring time ratio, the ring's time over UDP against through shared memory, and
whether every rank ended with the same bytes, to
results/bench/allreduce.{csv,md}.
With --multicast data the naive schedule sends each vector once (what collective "auto" uses).
--codecs: the values' wire, raw float32 (the default) or a codec's frames (fp16 and bf16 halve the
bytes; DDP's allreduce exchange uses the method's codec); each row then also gives its bytes and
time as x of the first codec's on the same link and schedule, measured in the same run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

import numpy as np
import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.runs.claims import hold

COLLECTIVES = ("naive", "ring")
RAW = "raw"  # the allreduce's own wire: float32 without a frame header
UDP_LOOPBACK = "loopback, dds.shared_memory false"  # ring blocks over loopback UDP, as between hosts


def codec_list(text: str) -> list[str]:
    """--codecs: raw or registered codec names, comma-separated; an unknown name is one line."""
    from commlab.codecs import CodecError, get_codec
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("at least one codec name")
    for name in names:
        try:
            if name != RAW:
                get_codec(name)
        except CodecError as e:
            raise argparse.ArgumentTypeError(f"{name}: {e}") from None
    return names


def worker(spec: dict) -> dict:
    """One rank: `reps` allreduces per schedule and codec, each after a barrier; its own times and bytes."""
    from commlab.codecs import get_codec
    from commlab.dds import DdsNode, DdsSettings, Group
    rank, world = spec["rank"], spec["world"]
    vec = np.random.default_rng(rank).standard_normal(spec["numel"]).astype(np.float32)
    out: dict = {"rank": rank}
    with DdsNode(f"worker-{rank}", DdsSettings(**spec["settings"])) as node:
        g = Group(node, "bench", rank, world, timeout_s=300.0)
        g.barrier(120)
        for collective, name in ((c, n) for c in COLLECTIVES for n in spec["codecs"]):
            codec = None if name == RAW else get_codec(name)
            runs, digest = [], ""
            for i in range(spec["reps"]):
                g.barrier(120)
                before, t = node.stats.snapshot(), time.perf_counter()
                result = g.allreduce(f"{collective}/{name}/{i}", vec, "sum", collective, codec)
                sent = node.stats.since(before)
                runs.append((time.perf_counter() - t, sent["bytes_sent"], sent.get("iface_bytes_sent")))
                digest = hashlib.sha256(result.tobytes()).hexdigest()
            out[f"{collective} {name}"] = {"runs": runs, "digest": digest}
        g.barrier(120)
    return out


def run_ranks(s: BenchRun, label: str, spec: dict, prefixes: list[list[str]], settings: list[dict]) -> list[dict]:
    """Every rank started together (logs results/bench/logs/<name>-<label>-rank<r>.log); their results."""
    out = s.run({f"rank{r}": [*prefixes[r], sys.executable, os.path.abspath(__file__), "--worker",
                              json.dumps({**spec, "rank": r, "settings": settings[r]})] for r in range(spec["world"])},
                f"bench/logs/{s.args.name}-{label}", timeout_s=1800).check()
    return [json.loads(c.output().strip().splitlines()[-1]) for c in out.children]


def loopback(s: BenchRun, spec: dict, domain: int, shared_memory: bool = True) -> list[dict]:
    """The ranks as local processes; `shared_memory` false: ring blocks over UDP too (dds.shm)."""
    label = "loopback" if shared_memory else "loopback-udp"
    return run_ranks(s, label, spec, [[]] * spec["world"], [{"domain_id": domain, "shared_memory": shared_memory}] * spec["world"])


def shaped(s: BenchRun, spec: dict, profile: str, net: int, transport: dict) -> list[dict]:
    from commlab.links.netns import NetnsLab
    from commlab.links.profiles import link_for
    from commlab.testbed.compose_file import node_send_window_bytes
    names = [f"worker-{r}" for r in range(spec["world"])]
    with NetnsLab(names, net=net) as lab:
        for n in names:
            lab.shape(n, link_for(profile, n))
        settings = []
        for n in names:
            window = node_send_window_bytes(profile, n)  # None: a trace, the smallest window
            settings.append({"domain_id": 0, "interface": "eth0", "loopback_tuned": False, "write_timeout_s": 120.0,
                             **({"send_window_bytes": window} if window else {}), **transport,
                             "peers": [a for m, a in lab.addresses.items() if m != n]})
        return run_ranks(s, "shaped", spec, [lab.prefix(n) for n in names], settings)


def rows(link: str, ranks: list[dict], world: int, numel: int, codecs: list[str]) -> list[dict]:
    """Per schedule and codec: bytes a rank sent per allreduce over the float32 payload, the
    slowest rank's time (median over the reps), both as x of the schedule's first codec, and
    whether every rank ended with the same vector."""
    payload, out = 4 * numel, []
    for c in COLLECTIVES:
        first: dict = {}
        for name in codecs:
            runs = [r[f"{c} {name}"]["runs"] for r in ranks]
            per_rep = [max(rank_runs[i][0] for rank_runs in runs) for i in range(len(runs[0]))]
            sent = statistics.mean(b for rank_runs in runs for _, b, _ in rank_runs)
            iface = [i for rank_runs in runs for _, _, i in rank_runs if i is not None]
            seconds = statistics.median(per_rep)
            first = first or {"sent": sent, "seconds": seconds}
            out.append({"link": link, "world": world, "collective": c, "codec": name, "payload_bytes": payload,
                        "sent_per_rank": sent, "sent_x_payload": sent / payload,
                        "ideal_x_payload": 2 * (world - 1) / world if c == "ring" else world - 1,
                        "iface_x_payload": statistics.mean(iface) / payload if iface else None,
                        "seconds": seconds, "reps": ", ".join(f"{t:.2f}" for t in per_rep),
                        f"bytes_x_{codecs[0]}": sent / first["sent"], f"time_x_{codecs[0]}": seconds / first["seconds"],
                        "identical_on_all_ranks": len({r[f"{c} {name}"]["digest"] for r in ranks}) == 1})
    return out


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "allreduce", {"reps": 1}, profile="10mbit")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--numel", type=int, default=1_663_370)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--domain", type=int, help="loopback DDS domain (default: a claimed one, commlab.runs.claims)")
    p.add_argument("--net", type=int, default=247, help="namespace bridge 198.19.<net>.0/24")
    p.add_argument("--no-netns", action="store_true", help="loopback only")
    p.add_argument("--chunk-bytes", type=int, help="dds.chunk_bytes (and ring block) on the shaped links (default: "
                   "a run's on the profile, commlab.testbed.compose_file.profile_chunk_bytes, profile_ring_block_bytes)")
    p.add_argument("--multicast", choices=("off", "discovery", "data"),
                   help="dds.multicast on the shaped links (default off: unicast peers)")
    p.add_argument("--datagram-frames", type=int, help="dds.datagram_frames on the shaped links (default 6)")
    p.add_argument("--send-window", type=int, help="dds.send_window_bytes on the shaped links (default: a run's "
                   "on the profile, commlab.testbed.compose_file.node_send_window_bytes)")
    p.add_argument("--codecs", type=codec_list, default=[RAW], metavar="NAMES",
                   help=f"comma-separated: {RAW} (float32 without a frame) or codec names, e.g. raw,fp32,fp16,bf16")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    spec = {"world": a.world, "numel": a.numel, "reps": a.reps, "codecs": a.codecs}
    shaped_too = not a.no_netns and os.geteuid() == 0
    with BenchRun(a, 2 + shaped_too, "link") as s:
        domain = hold("domain") if a.domain is None else a.domain
        table = rows("loopback", loopback(s, spec, domain), a.world, a.numel, a.codecs)
        s.step("loopback")
        table += rows(UDP_LOOPBACK, loopback(s, spec, domain, shared_memory=False), a.world, a.numel, a.codecs)
        s.step(UDP_LOOPBACK)
        notes = [] if shaped_too or a.no_netns else ["shaped links skipped: network namespaces need root"]
        if shaped_too:
            from commlab.testbed.compose_file import profile_chunk_bytes, profile_ring_block_bytes
            ranks = [f"worker-{r}" for r in range(a.world)]
            chunk = a.chunk_bytes or profile_chunk_bytes(a.profile, ranks)
            block = None if a.chunk_bytes else profile_ring_block_bytes(a.profile, ranks)  # None: a chunk
            chosen = {"chunk_bytes": chunk, "ring_block_bytes": block, "multicast": a.multicast,
                      "datagram_frames": a.datagram_frames, "send_window_bytes": a.send_window}
            transport = {k: v for k, v in chosen.items() if v is not None}
            link = (f"namespaces, every uplink {a.profile}, "
                    + (", ".join(f"{k} {v}" for k, v in transport.items()) or "transport defaults"))
            table += rows(link, shaped(s, spec, a.profile, a.net, transport), a.world, a.numel, a.codecs)
            s.step("shaped")
        df = pd.DataFrame(table)
        seconds = df.pivot(index=["link", "codec"], columns="collective", values="seconds")
        ratios = [f"{link}, {codec}: time naive / ring {row['naive'] / row['ring']:.2f}x"
                  for (link, codec), row in seconds.iterrows()]
        ratios += [f"loopback, {codec}: ring time over UDP / through shared memory "
                   f"{seconds.loc[(UDP_LOOPBACK, codec), 'ring'] / seconds.loc[('loopback', codec), 'ring']:.2f}x"
                   for codec in a.codecs]
        s.write(df, None, f"Dense allreduce over DDS, naive against ring (WORLD={a.world}, {a.numel:,} floats)",
                notes=notes, after=["\n".join(ratios)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
