"""The same FL experiment on compose and on a single-node Docker Swarm: bytes (DDS's count and
the interfaces' counters) and accuracy must match (docs/scale.md). One run each, same seeds and flags; DDS multicast off on both, because
an overlay network carries none. Prints the table and the swarm/compose ratios and writes
results/bench/stack.csv.

    python benchmarks/bench_stack.py [--rounds 5 --samples 6000]     # make bench-stack (root)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from commlab.metrics import new_run_id
from commlab.progress import Progress
from commlab.report.markdown import table as markdown_table

BACKENDS = ("docker", "swarm")


def run(a: argparse.Namespace, backend: str) -> dict:
    run_id = new_run_id("fl", f"stack-{backend}")
    cmd = [sys.executable, "-m", "commlab.fl.run", "--backend", backend, "--multicast", "off", "--run-id", run_id,
           "--codec", a.codec, "--clients", str(a.clients), "--rounds", str(a.rounds),
           "--samples-per-round", str(a.samples), "--profile", a.profile, "--results-dir", str(a.results_dir)]
    log = a.results_dir / "bench" / f"stack-{backend}.log"
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"{backend} run failed (exit {code}); log: {log}")
    rounds = pd.read_csv(a.results_dir / run_id / "rounds.csv")
    return {"backend": backend, "run_id": run_id, "rounds": len(rounds), "bytes_up": int(rounds["bytes_up"].sum()),
            "bytes_down": int(rounds["bytes_down"].sum()), "iface_bytes_up": int(rounds["iface_bytes_up"].sum()),
            "iface_bytes_down": int(rounds["iface_bytes_down"].sum()), "test_accuracy": float(rounds["test_accuracy"].iloc[-1]),
            "median_round_s": float(rounds["round_time_s"].median())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--codec", default="int8_sparse")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=6000, help="per client and round")
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    a = p.parse_args()
    (a.results_dir / "bench").mkdir(parents=True, exist_ok=True)
    rows = []
    with Progress(len(BACKENDS), "run", in_place=False) as progress:
        for i, backend in enumerate(BACKENDS):
            progress.update(i, backend)
            rows.append(run(a, backend))
        progress.update(len(BACKENDS), "done")
    df = pd.DataFrame(rows)
    df.to_csv(a.results_dir / "bench" / "stack.csv", index=False)
    print(markdown_table(df, {c: c for c in df.columns}))
    compose, swarm = rows
    for key in ("bytes_up", "bytes_down", "iface_bytes_up", "iface_bytes_down"):
        print(f"{key}: swarm {swarm[key] / compose[key]:.4f} x of compose")
    print(f"accuracy: swarm - compose {100 * (swarm['test_accuracy'] - compose['test_accuracy']):+.2f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
