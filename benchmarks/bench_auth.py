"""What protecting messages costs: DDS goodput of plain, authenticated only (MAC) and encrypted
(AEAD: AES-256-GCM) messages side by side (commlab.dds.seal, opener), in one run. Two key setups:
two holders of the run key (DDP ranks, trusted nodes), and a trusted sender to an untrusted
receiver (the FL controller to a client: Ed25519 signatures and a BLAKE3 digest too).

Loopback: the three alternate `--repeat` times and the median goodput of each is compared (the
machine is shared and noisy), with the CPU seconds per MB of both processes (all their threads),
which load on the machine disturbs less than wall time. 10 Mbit/s tbf between two network
namespaces (root): the same, twice. Writes the costs to results/bench/auth.{csv,md}.

    python benchmarks/bench_auth.py            # make bench-auth
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from bench_transport import LOOPBACK, Prefixes, Sides, on_shaped_link, run_pair
from commlab.bench import BenchParser, BenchRun
from commlab.dds.auth import make_keyrings, write_keyring
from commlab.runs.claims import hold

LOOPBACK_SIZES = "1700000x20,10000000x5"
SHAPED_SIZES = "1700000x2"
MODES = ("plain", "mac", "aead")  # no keys; authenticated only; encrypted and authenticated


def probe(prefix: list[str], role: str, side: dict, peer: dict, sizes: str, domain: int, mtu: bool,
          key: Path | None, mode: str) -> list[str]:
    return [*prefix, sys.executable, "-m", "commlab.dds.probe", role, "--interface", side["if"], "--peer", peer["addr"],
            "--domain", str(domain), "--sizes", sizes, *(["--mtu"] if mtu else []),
            *(["--key-file", str(key), "--protect", mode] if mode != "plain" else [])]


def write_keys(folder: Path, trusted: set[str]) -> dict[str, Path]:
    keys = {}
    for name, ring in make_keyrings("bench-auth", ["send", "recv"], trusted=trusted).items():
        keys[name] = folder / f"{name}-{len(trusted)}.key"
        write_keyring(keys[name], ring)
    return keys


def measure(s: BenchRun, label: str, prefixes: Prefixes, sides: Sides, sizes: str, domain: int, mtu: bool, repeat: int,
            keys: dict[str, Path]) -> list[dict]:
    runs: dict[str, list[list[dict]]] = {mode: [] for mode in MODES}
    for k in range(repeat):
        for mode in MODES:
            step = f"{label} {mode}"
            runs[mode].append(run_pair(
                s, f"{step} {k}",
                probe(prefixes[1], "recv", sides[1], sides[0], sizes, domain, mtu, keys["recv"], mode),
                probe(prefixes[0], "send", sides[0], sides[1], sizes, domain, mtu, keys["send"], mode)))
            s.step(step)
    rows = []
    for i, first in enumerate(runs["plain"][0]):
        mb = first["size"] * first["count"] / 1e6
        row: dict = {"link": label, "size": first["size"], "count": first["count"], "repeat": repeat}
        for mode in MODES:
            row[f"{mode}_MBps"] = statistics.median(r[i]["goodput_MBps"] for r in runs[mode])
        for mode in MODES[1:]:
            row[f"{mode}_cost"] = 1 - row[f"{mode}_MBps"] / row["plain_MBps"]
        for mode in MODES:
            row[f"{mode}_cpu_ms_per_MB"] = statistics.median(
                (r[i]["send_cpu_s"] + r[i]["recv_cpu_s"]) * 1e3 / mb for r in runs[mode])
        for mode in MODES[1:]:
            row[f"{mode}_cpu_cost"] = row[f"{mode}_cpu_ms_per_MB"] / row["plain_cpu_ms_per_MB"] - 1
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "auth", {"repeat": 3})
    p.add_argument("--repeat", type=int, default=7, help="loopback repetitions (the shaped link runs twice)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="commlab-keys-") as folder, BenchRun(a, 6 * a.repeat + 6) as s:
        keys = write_keys(Path(folder), {"send", "recv"})
        signed = write_keys(Path(folder), {"send"})
        domain = hold("domain")  # loopback is shared with every other run and test on the machine
        rows = measure(s, "loopback", *LOOPBACK, LOOPBACK_SIZES, domain, False, a.repeat, keys)
        rows += measure(s, "loopback, signed", *LOOPBACK, LOOPBACK_SIZES, domain, False, a.repeat, signed)
        rows += on_shaped_link(s, 203, lambda prefixes, sides: measure(
            s, "10mbit-tbf", prefixes, sides, SHAPED_SIZES, 187, True, 2, keys))
        s.write(pd.DataFrame(rows), None, "DDS goodput of plain, authenticated (MAC) and encrypted (AEAD) messages",
                notes=["median over alternating repetitions; signed: a trusted sender to an untrusted receiver; "
                       "cpu: both processes, all threads, per MB of payload"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
