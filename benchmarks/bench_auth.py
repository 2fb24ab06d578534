"""What authentication costs: DDS goodput with and without authenticated messages
(commlab.dds.auth: HMAC-SHA256 tags over the header, a GMAC or BLAKE3 over the payload), in one run.
Two key setups: two holders of the run key (DDP ranks, trusted nodes), and a trusted sender to an
untrusted receiver (the FL controller to a client: Ed25519 signatures and a BLAKE3 digest too).

Loopback: the two alternate `--repeat` times and the median goodput of each is compared (the
machine is shared and noisy). 10 Mbit/s tbf between two network namespaces (root): the
communication time of each. Prints the ratios and writes results/bench/auth.csv.

    python benchmarks/bench_auth.py            # make bench-auth
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from bench_transport import run_pair
from commlab.claims import hold
from commlab.dds.auth import make_keyrings, write_keyring
from commlab.dds.netns import NetnsUnavailable, veth_pair
from commlab.progress import Progress
from commlab.report.markdown import table as markdown_table

LOOPBACK_SIZES = "1700000x20,10000000x5"
SHAPED_SIZES = "1700000x2"


def probe(prefix: list[str], role: str, side: dict, peer: dict, sizes: str, domain: int, mtu: bool,
          key: Path | None) -> list[str]:
    return [*prefix, sys.executable, "-m", "commlab.dds.probe", role, "--interface", side["if"], "--peer", peer["addr"],
            "--domain", str(domain), "--sizes", sizes, *(["--mtu"] if mtu else []),
            *(["--key-file", str(key)] if key else [])]


def write_keys(folder: Path, trusted: set[str]) -> dict[str, Path]:
    keys = {}
    for name, ring in make_keyrings("bench-auth", ["send", "recv"], trusted=trusted).items():
        keys[name] = folder / f"{name}-{len(trusted)}.key"
        write_keyring(keys[name], ring)
    return keys


def measure(label: str, prefixes: tuple[list[str], list[str]], sides: tuple[dict, dict], sizes: str, domain: int,
            mtu: bool, repeat: int, keys: dict[str, Path], progress: Progress) -> list[dict]:
    runs: dict[bool, list[list[dict]]] = {False: [], True: []}
    for _ in range(repeat):
        for auth in (False, True):
            runs[auth].append(run_pair(
                probe(prefixes[1], "recv", sides[1], sides[0], sizes, domain, mtu, keys["recv"] if auth else None),
                probe(prefixes[0], "send", sides[0], sides[1], sizes, domain, mtu, keys["send"] if auth else None)))
            progress.update(progress.done + 1, f"{label} auth {'on' if auth else 'off'}")
    rows = []
    for i, first in enumerate(runs[False][0]):
        plain = statistics.median(r[i]["goodput_MBps"] for r in runs[False])
        signed = statistics.median(r[i]["goodput_MBps"] for r in runs[True])
        rows.append({"link": label, "size": first["size"], "count": first["count"], "repeat": repeat,
                     "plain_MBps": plain, "auth_MBps": signed, "goodput_cost": 1 - signed / plain,
                     "plain_s": statistics.median(r[i]["seconds"] for r in runs[False]),
                     "auth_s": statistics.median(r[i]["seconds"] for r in runs[True])})
        rows[-1]["time_cost"] = rows[-1]["auth_s"] / rows[-1]["plain_s"] - 1
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="loopback repetitions (the shaped link runs twice)")
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="commlab-keys-") as folder:
        keys = write_keys(Path(folder), {"send", "recv"})
        signed = write_keys(Path(folder), {"send"})
        lo = {"if": "lo", "addr": "127.0.0.1"}
        domain = hold("domain")  # loopback is shared with every other run and test on the machine
        with Progress(4 * a.repeat + 4, "run", in_place=False) as progress:
            rows = measure("loopback", ([], []), (lo, lo), LOOPBACK_SIZES, domain, False, a.repeat, keys, progress)
            rows += measure("loopback, signed", ([], []), (lo, lo), LOOPBACK_SIZES, domain, False, a.repeat, signed,
                            progress)
            try:
                with veth_pair(203, rate="10mbit") as (sa, sb):
                    rows += measure("10mbit-tbf", (sa.exec_prefix(), sb.exec_prefix()),
                                    ({"if": sa.interface, "addr": sa.address}, {"if": sb.interface, "addr": sb.address}),
                                    SHAPED_SIZES, 187, True, 2, keys, progress)
            except NetnsUnavailable as e:
                progress.log(f"shaped link skipped: {e}")
    df = pd.DataFrame(rows)
    out = a.results_dir / "bench" / "auth.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(markdown_table(df, {c: c for c in df.columns}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
