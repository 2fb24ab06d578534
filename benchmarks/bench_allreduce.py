"""Dense allreduce over DDS, naive (allgather + sum) vs ring, on loopback and on shaped links.

    python benchmarks/bench_allreduce.py [--world 3] [--numel 1663370] [--reps 3] [--profile 10mbit]
                                         [--multicast off|data] [--chunk-bytes N] [--no-netns]
                                         [--datagram-frames K] [--send-window BYTES] [--codecs raw,fp32,fp16,bf16]

Runs WORLD processes once on loopback and (as root) once in network namespaces on a private
bridge, every uplink shaped by the link profile (commlab.testbed.netns, commlab.netem), and in
each does `reps` allreduces of a numel-float vector (default: the MNIST CNN's gradient) with each
schedule. Prints, per schedule: bytes each rank sent per allreduce over the payload (CommStats
wire estimate, IP level; on the shaped links also the interface's counters, Ethernet headers and
acknowledgements included; ideal ring 2(W-1)/W, naive W-1), seconds per allreduce (slowest rank, median of
the reps), the naive/ring time ratio, and whether every rank ended with the same bytes.
With --multicast data the naive schedule sends each vector once (what collective "auto" uses).
--codecs: the values' wire, raw float32 (the default) or a codec's frames (fp16 and bf16 halve the
bytes; DDP's allreduce exchange uses the method's codec); each row then also gives its bytes and
time as x of the first codec's.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

COLLECTIVES = ("naive", "ring")
RAW = "raw"  # the allreduce's own wire: float32 without a frame header


def worker(spec: dict) -> dict:
    """One rank: `reps` allreduces per schedule, each after a barrier; its own times and bytes."""
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


def run_ranks(world: int, spec: dict, prefixes: list[list[str]], settings: list[dict]) -> list[dict]:
    procs = [subprocess.Popen([*prefixes[r], sys.executable, os.path.abspath(__file__), "--worker",
                               json.dumps({**spec, "rank": r, "settings": settings[r]})],
                              stdout=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def loopback(world: int, spec: dict, domain: int) -> list[dict]:
    return run_ranks(world, spec, [[]] * world, [{"domain_id": domain}] * world)


def shaped(world: int, spec: dict, profile: str, net: int, transport: dict) -> list[dict]:
    from commlab.netem import link_for
    from commlab.testbed.netns import NetnsLab
    names = [f"worker-{r}" for r in range(world)]
    with NetnsLab(names, net=net) as lab:
        for n in names:
            lab.shape(n, link_for(profile, n))
        settings = [{"domain_id": 0, "interface": "eth0", "loopback_tuned": False, "write_timeout_s": 120.0,
                     **transport,
                     "peers": [a for m, a in lab.addresses.items() if m != n]} for n in names]
        return run_ranks(world, spec, [lab.prefix(n) for n in names], settings)


def report(title: str, ranks: list[dict], world: int, numel: int, codecs: list[str]) -> None:
    payload = 4 * numel
    print(f"\n{title}: WORLD={world}, payload {payload:,} B (float32)")
    secs, sent = {}, {}
    for c, name in ((c, n) for c in COLLECTIVES for n in codecs):
        key = f"{c} {name}"
        per_rep = [max(r[key]["runs"][i][0] for r in ranks) for i in range(len(ranks[0][key]["runs"]))]
        sent[key] = statistics.mean(b for r in ranks for _, b, _ in r[key]["runs"])
        iface = [i for r in ranks for _, _, i in r[key]["runs"] if i is not None]
        secs[key] = statistics.median(per_rep)
        same = len({r[key]["digest"] for r in ranks}) == 1
        on_iface = f" (interface: {statistics.mean(iface) / payload:.3f} x)" if iface else ""
        first = f"{c} {codecs[0]}"
        versus = (f"   vs {codecs[0]}: bytes {sent[key] / sent[first]:.3f} x, time {secs[key] / secs[first]:.2f} x"
                  if name != codecs[0] else "")
        print(f"  {key:12s} sent/rank/allreduce {sent[key]:13,.0f} B = {sent[key] / payload:.3f} x payload{on_iface}   "
              f"time {secs[key]:7.3f} s (reps: {', '.join(f'{s:.2f}' for s in per_rep)})   "
              f"identical on all ranks: {same}{versus}")
    print(f"  ideal: ring {2 * (world - 1) / world:.3f} x, naive {world - 1:.3f} x;  time naive / ring: "
          + ", ".join(f"{n} {secs[f'naive {n}'] / secs[f'ring {n}']:.2f}x" for n in codecs))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--numel", type=int, default=1_663_370)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--domain", type=int, default=197, help="loopback DDS domain")
    p.add_argument("--net", type=int, default=247, help="namespace bridge 198.19.<net>.0/24")
    p.add_argument("--no-netns", action="store_true", help="loopback only")
    p.add_argument("--chunk-bytes", type=int, help="dds.chunk_bytes on the shaped links (default 64 KiB)")
    p.add_argument("--multicast", choices=("off", "discovery", "data"),
                   help="dds.multicast on the shaped links (default off: unicast peers)")
    p.add_argument("--datagram-frames", type=int, help="dds.datagram_frames on the shaped links (default 6)")
    p.add_argument("--send-window", type=int, help="dds.send_window_bytes on the shaped links (default 32 KiB)")
    p.add_argument("--codecs", default=RAW, help=f"comma-separated: {RAW} (float32 without a frame) or codec names")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    codecs = a.codecs.split(",")
    spec = {"world": a.world, "numel": a.numel, "reps": a.reps, "codecs": codecs}
    report("loopback", loopback(a.world, spec, a.domain), a.world, a.numel, codecs)
    if not a.no_netns:
        if os.geteuid() != 0:
            print("\nshaped links skipped: network namespaces need root")
        else:
            chosen = {"chunk_bytes": a.chunk_bytes, "multicast": a.multicast, "datagram_frames": a.datagram_frames,
                      "send_window_bytes": a.send_window}
            transport = {k: v for k, v in chosen.items() if v is not None}
            report(f"network namespaces, every uplink {a.profile}, "
                   + (", ".join(f"{k} {v}" for k, v in transport.items()) or "transport defaults"),
                   shaped(a.world, spec, a.profile, a.net, transport),
                   a.world, a.numel, codecs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
