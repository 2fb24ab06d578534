"""Make the shipped bandwidth traces (PROFILE=trace:netem/traces/<name>.csv), seeded, so a rerun
writes the same files:

    python netem/traces/make_traces.py [--seed 0] [--out netem/traces]

diurnal.csv: a day compressed into 240 s (10 s an hour). Clients and workers 0-3 each follow a
cosine between 2 and 20 Mbit/s with its trough at 4 am of its own time zone (zones 3 h apart) and
5 % noise, one row a simulated hour; every other node (the controller) 100 Mbit/s.

cellular.csv: 300 s of a mobile uplink per client and worker 0-3, one row a second. The rate is a
log-normal random walk around 8 Mbit/s (AR(1), coefficient 0.9, 0.35 in log per step) between 0.5
and 40 Mbit/s, with fades (3 % of seconds: 1-4 s at 0.2 Mbit/s) and handovers (1 %: one second at
16 kbit/s, near zero); every other node 100 Mbit/s.
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

NODES = [f"{role}-{i}" for role in ("client", "worker") for i in range(4)]
SERVER_BPS = 100e6


def diurnal(rng: np.random.Generator) -> list[tuple[float, str, int]]:
    rows = [(0.0, "*", int(SERVER_BPS))]
    seconds_per_hour = 10.0
    for hour in range(25):
        for k, node in enumerate(NODES):
            local = (hour + 3 * (k % 4)) % 24
            shape = 0.5 - 0.5 * math.cos(2 * math.pi * (local - 4) / 24)  # 0 at 4 am, 1 at 4 pm
            mbit = (2 + 18 * shape) * (1 + 0.05 * rng.standard_normal())
            rows.append((hour * seconds_per_hour, node, int(max(mbit, 1.0) * 1e6)))
    return rows


def cellular(rng: np.random.Generator, seconds: int = 300) -> list[tuple[float, str, int]]:
    rows = [(0.0, "*", int(SERVER_BPS))]
    per_node = {node: np.random.default_rng(rng.integers(2**63)) for node in NODES}
    for node, r in per_node.items():
        log_rate, fade_left = 0.0, 0
        for t in range(seconds):
            log_rate = 0.9 * log_rate + 0.35 * r.standard_normal()
            bps = float(np.clip(8e6 * math.exp(log_rate), 0.5e6, 40e6))
            if fade_left == 0 and r.random() < 0.03:
                fade_left = int(r.integers(1, 5))
            if fade_left:
                bps, fade_left = 0.2e6, fade_left - 1
            elif r.random() < 0.01:
                bps = 16e3
            rows.append((float(t), node, int(bps)))
    return sorted(rows, key=lambda row: row[0])


def write(path: Path, rows: list[tuple[float, str, int]]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time_s", "node", "rate"])
        out.writerows((f"{t:g}", node, rate) for t, node, rate in rows)
    print(f"{path}: {len(rows)} rows")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    a = p.parse_args()
    diurnal_seed, cellular_seed = np.random.SeedSequence(a.seed).spawn(2)
    write(a.out / "diurnal.csv", diurnal(np.random.default_rng(diurnal_seed)))
    write(a.out / "cellular.csv", cellular(np.random.default_rng(cellular_seed)))


if __name__ == "__main__":
    main()
