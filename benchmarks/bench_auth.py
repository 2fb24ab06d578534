"""What protecting messages costs: DDS goodput of plain, authenticated only (MAC) and encrypted
(AEAD: AEGIS-128X4, the default) messages side by side (commlab.dds.seal, opener), in one run. Two key setups:
two holders of the run key (DDP ranks, trusted nodes), and a trusted sender to an untrusted
receiver (the FL controller to a client: Ed25519 signatures and a BLAKE3 digest too).

Loopback: one sender and one receiver process hold a node per mode and run the three modes'
batches in turn, `--repeat` rounds (commlab.dds.probe --modes), so the load of the shared machine
falls on all of them alike; each round's goodput of a mode is compared with
the plain batch beside it and the median of those costs reported, with the middle half of them
(how much the rounds disagree); the CPU seconds per MB of both processes (all their threads), which
load disturbs less than wall time, compared round by round the same way; and the machine's load average when the row was measured: on a
machine whose cores are all busy, goodput follows CPU time, so the goodput cost tends to the CPU
cost; only cores left idle can take the sealing done beside the writes for free. 10 Mbit/s tbf between
two network namespaces (root): the same, two rounds. Writes the costs to results/bench/auth.{csv,md}.

    python benchmarks/bench_auth.py            # make bench-auth
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench_transport import LOOPBACK, Prefixes, Sides, on_shaped_link, run_pair
from commlab.bench import BenchParser, BenchRun
from commlab.dds.auth import Keyring, make_keyrings, write_keyring
from commlab.dds.cdr import address_of, copy_into, unfilled_bytes
from commlab.dds.opener import Opener
from commlab.dds.probe import MODES, parse_sizes
from commlab.dds.seal import Sealer
from commlab.dds.settings import LOOPBACK_CHUNK
from commlab.runs.claims import hold

# Batches of 20 ms or more: one scheduling hiccup of the loaded machine moves a round's ratio less.
LOOPBACK_SIZES = "1700000x24,10000000x4"
SHAPED_SIZES = "1700000x2"


def probe(prefix: list[str], role: str, side: dict, peer: dict, sizes: str, domains: list[int], mtu: bool,
          key: Path, rounds: int) -> list[str]:
    return [*prefix, sys.executable, "-m", "commlab.dds.probe", role, "--interface", side["if"], "--peer", peer["addr"],
            "--domain", ",".join(map(str, domains)), "--sizes", sizes, *(["--mtu"] if mtu else []),
            "--key-file", str(key), "--modes", ",".join(MODES), "--rounds", str(rounds)]


def write_keys(folder: Path, rings: dict[str, Keyring], setup: str) -> dict[str, Path]:
    keys = {}
    for name, ring in rings.items():
        keys[name] = folder / f"{name}-{setup}.key"
        write_keyring(keys[name], ring)
    return keys


def sealing_cpu_ms_per_mb(rings: dict[str, Keyring], mode: str, size: int, messages: int) -> float:
    """CPU per MB (this process, all its threads) of `messages` messages of `size` bytes in
    LOOPBACK_CHUNK chunks through the path of `mode` without DDS: each chunk into the sample (plain:
    copied, as write_iov does; sealed: sealed into it, as a ChunkWriter does) and the receiver's one
    pass from the sample into the message's buffer (plain: a copy; sealed: opened into place).
    The least of three tries: interference from the rest of the machine only ever adds."""
    # Two samples: a signing sender's worker seals the next chunk while the one before is read.
    payload, samples = os.urandom(size), [bytearray(LOOPBACK_CHUNK), bytearray(LOOPBACK_CHUNK)]
    sealer = Sealer(rings["send"], 1, encrypt=mode == "aead") if mode != "plain" else None
    opener = Opener(rings["recv"]) if mode != "plain" else None
    pieces = [memoryview(payload)[i:i + LOOPBACK_CHUNK] for i in range(0, size, LOOPBACK_CHUNK)]
    tries = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(messages):
            buffer = unfilled_bytes(size)
            if sealer is None:
                for i, piece in enumerate(pieces):
                    copy_into(address_of(samples[0]), piece)
                    copy_into(address_of(buffer) + i * LOOPBACK_CHUNK, memoryview(samples[0])[:len(piece)])
                continue
            sealing = sealer.begin("ProbeData", "{}", size)
            opened = opener.open("ProbeData", "send", 1, size, sealing.envelope)
            def place(i: int) -> int:
                return address_of(samples[i % 2])
            for i in sealing.sealed(pieces, place):
                opened.update(memoryview(samples[i % 2])[:len(pieces[i])], buffer, i * LOOPBACK_CHUNK)
            opened.finish(sealing.last_meta(first=False))
        tries.append((time.process_time() - start) * 1e3 / (size * messages / 1e6))
    for end in (sealer, opener):
        if end is not None:
            end.close()
    return min(tries)


def cpu_ms_per_mb(batch: dict, mb: float) -> float:
    return (batch["send_cpu_s"] + batch["recv_cpu_s"]) * 1e3 / mb


def median_and_middle_half(costs: list[float]) -> tuple[float, str]:
    low, _, high = statistics.quantiles(costs, n=4) if len(costs) > 1 else costs * 3
    return statistics.median(costs), f"{low:.1%} to {high:.1%}"


def measure(s: BenchRun, label: str, prefixes: Prefixes, sides: Sides, sizes: str, domains: list[int], mtu: bool,
            repeat: int, keys: dict[str, Path], in_process: dict[str, Keyring] | None = None) -> list[dict]:
    """One sender and one receiver process running every mode `repeat` times, interleaved; with
    `in_process` (the keyrings), also each mode's sealing and opening CPU without DDS."""
    lines = run_pair(s, label, probe(prefixes[1], "recv", sides[1], sides[0], sizes, domains, mtu, keys["recv"], repeat),
                     probe(prefixes[0], "send", sides[0], sides[1], sizes, domains, mtu, keys["send"], repeat))
    s.step(label)
    load = os.getloadavg()[0]  # runnable threads, averaged over the last minute: the run's own included
    rows = []
    for size, count in parse_sizes(sizes):
        runs = {mode: {r["round"]: r for r in lines if r["mode"] == mode and r["size"] == size} for mode in MODES}
        mb = size * count / 1e6
        row: dict = {"link": label, "size": size, "count": count, "repeat": repeat}
        for mode in MODES:
            row[f"{mode}_MBps"] = statistics.median(r["goodput_MBps"] for r in runs[mode].values())
            row[f"{mode}_cpu_ms_per_MB"] = statistics.median(cpu_ms_per_mb(r, mb) for r in runs[mode].values())
        for mode in MODES[1:]:  # each round's ratios, to the plain batch run beside it
            plain = runs["plain"]
            row[f"{mode}_cost"], row[f"{mode}_cost_middle_half"] = median_and_middle_half(
                [1 - r["goodput_MBps"] / plain[k]["goodput_MBps"] for k, r in runs[mode].items()])
            row[f"{mode}_cpu_cost"], row[f"{mode}_cpu_cost_middle_half"] = median_and_middle_half(
                [cpu_ms_per_mb(r, mb) / cpu_ms_per_mb(plain[k], mb) - 1 for k, r in runs[mode].items()])
        if in_process is not None:
            costs = {mode: sealing_cpu_ms_per_mb(in_process, mode, size, count) for mode in MODES}
            for mode in MODES[1:]:
                row[f"{mode}_in_process_cost"] = (costs[mode] - costs["plain"]) / row["plain_cpu_ms_per_MB"]
        row["load"] = load
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "auth", {"repeat": 21})
    # One round's cost scatters by about +-15 % on a shared 2-core machine (the table's middle
    # half): 121 rounds put the median within a few percent, at about 15 s per loopback setup.
    p.add_argument("--repeat", type=int, default=121, help="loopback rounds (the shaped link runs two)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="commlab-keys-") as folder, BenchRun(a, 3) as s:
        peers = make_keyrings("bench-auth", ["send", "recv"], trusted={"send", "recv"})
        signing = make_keyrings("bench-auth", ["send", "recv"], trusted={"send"})
        keys, signed = write_keys(Path(folder), peers, "peers"), write_keys(Path(folder), signing, "signing")
        domains = [hold("domain") for _ in MODES]  # loopback is shared with every other run and test on the machine
        rows = measure(s, "loopback", *LOOPBACK, LOOPBACK_SIZES, domains, False, a.repeat, keys, peers)
        rows += measure(s, "loopback, signed", *LOOPBACK, LOOPBACK_SIZES, domains, False, a.repeat, signed, signing)
        rows += on_shaped_link(s, 203, lambda prefixes, sides: measure(
            s, "10mbit-tbf", prefixes, sides, SHAPED_SIZES, [187, 188, 189], True, 2, keys))
        s.write(pd.DataFrame(rows), None, "DDS goodput of plain, authenticated (MAC) and encrypted (AEAD) messages",
                notes=["goodput: median over the rounds; cost: median over the rounds of 1 - goodput / plain goodput "
                       "of the same round (middle half: its quartiles); cpu cost: the same of CPU per MB; signed: a "
                       "trusted sender to an untrusted receiver; cpu: both processes, all threads, per MB of payload; "
                       "in process: CPU per MB of sealing and opening in one process (Sealer, Opener), over the "
                       "two copies the plain path makes, as a share of plain's CPU per MB over DDS; load: the "
                       f"machine's 1-minute load average when the row was measured ({os.cpu_count()} cores)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
