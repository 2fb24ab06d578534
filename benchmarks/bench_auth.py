"""What authentication costs: DDS goodput with and without authenticated messages
(commlab.dds.auth: HMAC-SHA256 tags over the header, a GMAC or BLAKE3 over the payload), in one run.
Two key setups: two holders of the run key (DDP ranks, trusted nodes), and a trusted sender to an
untrusted receiver (the FL controller to a client: Ed25519 signatures and a BLAKE3 digest too).

Loopback: the two alternate `--repeat` times and the median goodput of each is compared (the
machine is shared and noisy). 10 Mbit/s tbf between two network namespaces (root): the
communication time of each. Writes the ratios to results/bench/auth.{csv,md}.

    python benchmarks/bench_auth.py            # make bench-auth
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from bench_transport import LOOPBACK, Prefixes, Sides, on_shaped_link, run_pair
from commlab.bench import BenchParser, Session
from commlab.dds.auth import make_keyrings, write_keyring
from commlab.runs.claims import hold

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


def measure(s: Session, label: str, prefixes: Prefixes, sides: Sides, sizes: str, domain: int, mtu: bool, repeat: int,
            keys: dict[str, Path]) -> list[dict]:
    runs: dict[bool, list[list[dict]]] = {False: [], True: []}
    for k in range(repeat):
        for auth in (False, True):
            step = f"{label} auth {'on' if auth else 'off'}"
            runs[auth].append(run_pair(
                s, f"{step} {k}",
                probe(prefixes[1], "recv", sides[1], sides[0], sizes, domain, mtu, keys["recv"] if auth else None),
                probe(prefixes[0], "send", sides[0], sides[1], sizes, domain, mtu, keys["send"] if auth else None)))
            s.step(step)
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


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "auth", {"repeat": 3})
    p.add_argument("--repeat", type=int, default=7, help="loopback repetitions (the shaped link runs twice)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="commlab-keys-") as folder, Session(a, 4 * a.repeat + 4) as s:
        keys = write_keys(Path(folder), {"send", "recv"})
        signed = write_keys(Path(folder), {"send"})
        domain = hold("domain")  # loopback is shared with every other run and test on the machine
        rows = measure(s, "loopback", *LOOPBACK, LOOPBACK_SIZES, domain, False, a.repeat, keys)
        rows += measure(s, "loopback, signed", *LOOPBACK, LOOPBACK_SIZES, domain, False, a.repeat, signed)
        rows += on_shaped_link(s, 203, lambda prefixes, sides: measure(
            s, "10mbit-tbf", prefixes, sides, SHAPED_SIZES, 187, True, 2, keys))
        s.write(pd.DataFrame(rows), None, "DDS goodput with and without authenticated messages",
                notes=["median over alternating repetitions; signed: a trusted sender to an untrusted receiver"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
